//! `colibri task`: the control plane's task queue from the command line.
//!
//! Operators add, list, show and cancel tasks; an agent (any process with
//! `COLIBRI_PANE_ID` in its environment, jail agents included) claims,
//! acknowledges, completes or fails them.

use std::io::Write;
use std::path::Path;

use clap::{Subcommand, ValueEnum};
use serde_json::{json, Value};

use crate::cli::remote::connect;
use crate::cli::render::escape_controls;
use crate::cli::{print, CliError, REQUEST_TIMEOUT};
use crate::client::ClientError;
use crate::protocol::control_plane::{TaskReply, TasksReply, WireTask};

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum PriorityArg {
    Low,
    Medium,
    High,
    Urgent,
}

impl PriorityArg {
    fn as_str(self) -> &'static str {
        match self {
            PriorityArg::Low => "low",
            PriorityArg::Medium => "medium",
            PriorityArg::High => "high",
            PriorityArg::Urgent => "urgent",
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Queue a task for the agents; prints its id.
    Add {
        title: String,
        #[arg(long, short = 'd')]
        description: Option<String>,
        #[arg(long, short = 'p', value_enum, default_value_t = PriorityArg::Medium)]
        priority: PriorityArg,
        /// Only agents claiming for this role (or for none) get it.
        #[arg(long, short = 'r')]
        role: Option<String>,
        /// Context for the agent, a JSON value.
        #[arg(long, short = 'c')]
        context: Option<String>,
        /// Only the agents of this jail may claim it.
        #[arg(long, short = 'j')]
        jail: Option<String>,
    },
    /// Every task, as a table.
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// One task in full, as JSON.
    Show { task_id: u64 },
    /// Cancel a task that has not finished.
    Cancel { task_id: u64 },
    /// (agent) Claim the most urgent pending task; prints it as JSON.
    Claim {
        #[arg(long, short = 'r')]
        role: Option<String>,
        /// The agent's pane (default: $COLIBRI_PANE_ID).
        #[arg(long, env = "COLIBRI_PANE_ID")]
        pane: String,
    },
    /// (agent) Acknowledge a claimed task within the 3-minute window.
    Ack {
        task_id: u64,
        #[arg(long, env = "COLIBRI_PANE_ID")]
        pane: Option<String>,
    },
    /// (agent) Complete a task, with an optional result.
    Done {
        task_id: u64,
        result: Option<String>,
        #[arg(long, env = "COLIBRI_PANE_ID")]
        pane: Option<String>,
    },
    /// (agent) Fail a task, with an optional reason.
    Fail {
        task_id: u64,
        reason: Option<String>,
        #[arg(long, env = "COLIBRI_PANE_ID")]
        pane: Option<String>,
    },
}

/// The request each subcommand sends (pure, tested).
pub fn request(cmd: &TaskCommand) -> Result<Value, CliError> {
    Ok(match cmd {
        TaskCommand::Add {
            title,
            description,
            priority,
            role,
            context,
            jail,
        } => {
            let context: Option<Value> = match context {
                None => None,
                Some(text) => Some(
                    serde_json::from_str(text)
                        .map_err(|e| CliError::Runtime(format!("--context is not JSON: {e}")))?,
                ),
            };
            let mut req = json!({"cmd": "task-add", "title": title, "priority": priority.as_str()});
            if let Some(d) = description {
                req["description"] = json!(d);
            }
            if let Some(r) = role {
                req["role"] = json!(r);
            }
            if let Some(c) = context {
                req["context"] = c;
            }
            if let Some(j) = jail {
                req["jail"] = json!(j);
            }
            req
        }
        TaskCommand::Ls { .. } => json!({"cmd": "tasks"}),
        TaskCommand::Show { task_id } => json!({"cmd": "tasks", "task_id": task_id}),
        TaskCommand::Cancel { task_id } => json!({"cmd": "task-cancel", "task_id": task_id}),
        TaskCommand::Claim { role, pane } => {
            let mut req = json!({"cmd": "task-claim", "pane": pane});
            if let Some(r) = role {
                req["role"] = json!(r);
            }
            req
        }
        TaskCommand::Ack { task_id, pane } => act("task-ack", *task_id, pane, &None),
        TaskCommand::Done {
            task_id,
            result,
            pane,
        } => act("task-done", *task_id, pane, result),
        TaskCommand::Fail {
            task_id,
            reason,
            pane,
        } => act("task-fail", *task_id, pane, reason),
    })
}

fn act(cmd: &str, task_id: u64, pane: &Option<String>, note: &Option<String>) -> Value {
    let mut req = json!({"cmd": cmd, "task_id": task_id});
    if let Some(p) = pane {
        req["pane"] = json!(p);
    }
    if let Some(n) = note {
        req["note"] = json!(n);
    }
    req
}

fn decode<T: serde::de::DeserializeOwned>(data: Value) -> Result<T, CliError> {
    serde_json::from_value(data)
        .map_err(|e| CliError::Client(ClientError::Protocol(format!("unexpected task reply: {e}"))))
}

pub fn run(socket: Option<&Path>, cmd: &TaskCommand, out: &mut impl Write) -> Result<u8, CliError> {
    let req = request(cmd)?;
    let data = connect(socket, REQUEST_TIMEOUT)?.call(&req)?;
    match cmd {
        TaskCommand::Ls { json: false } => {
            let reply: TasksReply = decode(data)?;
            print(out, &table(&reply.tasks))?;
        }
        TaskCommand::Add { .. } => {
            let reply: TaskReply = decode(data)?;
            if let Some(t) = reply.task {
                print(out, &format!("{}\n", t.task_id))?;
            }
        }
        TaskCommand::Show { .. } => {
            let reply: TasksReply = decode(data)?;
            let task = reply.tasks.first();
            let text = serde_json::to_string_pretty(&task).unwrap_or_default();
            print(out, &format!("{text}\n"))?;
        }
        TaskCommand::Claim { .. } => {
            let reply: TaskReply = decode(data)?;
            // `null` when no task fits.
            print(out, &format!("{}\n", json!(reply.task)))?;
        }
        TaskCommand::Ls { json: true } => print(out, &format!("{data}\n"))?,
        TaskCommand::Cancel { .. }
        | TaskCommand::Ack { .. }
        | TaskCommand::Done { .. }
        | TaskCommand::Fail { .. } => {}
    }
    Ok(0)
}

/// The task table: id, status, priority, role, holder, title.
pub fn table(tasks: &[WireTask]) -> String {
    let mut s = format!(
        "{:<5} {:<9} {:<7} {:<12} {:<10} {}\n",
        "ID", "STATUS", "PRIO", "ROLE", "HOLDER", "TITLE"
    );
    for t in tasks {
        let holder = t.assigned_to.as_deref().unwrap_or("-");
        s.push_str(&format!(
            "{:<5} {:<9} {:<7} {:<12} {:<10} {}\n",
            t.task_id,
            t.status.as_str(),
            t.priority.as_str(),
            escape_controls(t.role.as_deref().unwrap_or("-")),
            escape_controls(holder.get(..8).unwrap_or(holder)),
            escape_controls(&t.title),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_sends_the_context_as_json_and_rejects_bad_json() {
        let cmd = TaskCommand::Add {
            title: "check db".into(),
            description: None,
            priority: PriorityArg::High,
            role: Some("sysadmin".into()),
            context: Some(r#"{"jail":"db"}"#.into()),
            jail: Some("db".into()),
        };
        let req = request(&cmd).unwrap();
        assert_eq!(
            req,
            json!({"cmd":"task-add","title":"check db","priority":"high","role":"sysadmin","context":{"jail":"db"},"jail":"db"})
        );
        let bad = TaskCommand::Add {
            title: "x".into(),
            description: None,
            priority: PriorityArg::Low,
            role: None,
            context: Some("{nope".into()),
            jail: None,
        };
        assert!(request(&bad).is_err());
    }

    #[test]
    fn the_table_escapes_agent_text() {
        let t = WireTask {
            task_id: 7,
            title: "evil\x1b[2J".into(),
            description: String::new(),
            priority: crate::core::tasks::Priority::Low,
            role: None,
            context: None,
            jail: None,
            status: crate::core::tasks::TaskStatus::Pending,
            created_at: String::new(),
            assigned_to: None,
            claimed_at: None,
            ack_due: None,
            finished_at: None,
            outcome: None,
            releases: 0,
        };
        let out = table(&[t]);
        assert!(!out.contains('\x1b'), "{out}");
        assert!(out.contains("7     pending"), "{out}");
    }
}
