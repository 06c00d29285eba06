//! `colibri task`: the control plane's task queue from the command line.
//!
//! Operators add, list, show and cancel tasks; an agent (any process with
//! `COLIBRI_PANE_ID` in its environment, jail agents included) claims,
//! acknowledges, completes or fails them.

use std::io::Write;
use std::path::Path;

use clap::{Subcommand, ValueEnum};
use serde_json::Value;

use crate::cli::remote::connect;
use crate::cli::render::{escape_controls, json_for_terminal};
use crate::cli::{print, CliError, REQUEST_TIMEOUT};
use crate::client::ClientError;
use crate::core::tasks::{Place, Priority};
use crate::protocol::control_plane::{TaskReply, TasksReply, WireTask};
use crate::protocol::{
    Command as Wire, TaskActArgs, TaskAddArgs, TaskClaimArgs, TaskMoveArgs, TasksArgs,
};

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum PriorityArg {
    Low,
    Medium,
    High,
    Urgent,
}

impl PriorityArg {
    fn level(self) -> Priority {
        match self {
            PriorityArg::Low => Priority::Low,
            PriorityArg::Medium => Priority::Medium,
            PriorityArg::High => Priority::High,
            PriorityArg::Urgent => Priority::Urgent,
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum PlaceArg {
    Top,
    Bottom,
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
    /// Move a task to the top or the bottom of the queue.
    Move {
        task_id: u64,
        #[arg(value_enum)]
        to: PlaceArg,
    },
    /// Take a task's line out of the plan file it came from (and cancel
    /// the task if it is open).
    Remove { task_id: u64 },
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
pub fn request(cmd: &TaskCommand) -> Result<Wire, CliError> {
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
            Wire::TaskAdd(Box::new(TaskAddArgs {
                title: title.clone(),
                description: description.clone(),
                priority: Some(priority.level()),
                role: role.clone(),
                context,
                jail: jail.clone(),
            }))
        }
        TaskCommand::Ls { .. } => Wire::Tasks(TasksArgs::default()),
        TaskCommand::Show { task_id } => Wire::Tasks(TasksArgs {
            task_id: Some(*task_id),
            ..TasksArgs::default()
        }),
        TaskCommand::Cancel { task_id } => Wire::TaskCancel(act(*task_id, &None, &None)),
        TaskCommand::Move { task_id, to } => Wire::TaskMove(TaskMoveArgs {
            task_id: *task_id,
            to: match to {
                PlaceArg::Top => Place::Top,
                PlaceArg::Bottom => Place::Bottom,
            },
        }),
        TaskCommand::Remove { task_id } => Wire::TaskRemove(act(*task_id, &None, &None)),
        TaskCommand::Claim { role, pane } => Wire::TaskClaim(TaskClaimArgs {
            pane: pane.clone(),
            role: role.clone(),
        }),
        TaskCommand::Ack { task_id, pane } => Wire::TaskAck(act(*task_id, pane, &None)),
        TaskCommand::Done {
            task_id,
            result,
            pane,
        } => Wire::TaskDone(act(*task_id, pane, result)),
        TaskCommand::Fail {
            task_id,
            reason,
            pane,
        } => Wire::TaskFail(act(*task_id, pane, reason)),
    })
}

fn act(task_id: u64, pane: &Option<String>, note: &Option<String>) -> TaskActArgs {
    TaskActArgs {
        task_id,
        pane: pane.clone(),
        note: note.clone(),
    }
}

fn decode<T: serde::de::DeserializeOwned>(data: Value) -> Result<T, CliError> {
    serde_json::from_value(data)
        .map_err(|e| CliError::Client(ClientError::Protocol(format!("unexpected task reply: {e}"))))
}

/// Every task, page after page (a page holds at most
/// `protocol::PAGE_ITEMS`, and less when agents made the tasks large).
fn all_tasks(socket: Option<&Path>) -> Result<TasksReply, CliError> {
    let mut client = connect(socket, REQUEST_TIMEOUT)?;
    let mut all: Option<TasksReply> = None;
    let mut after = None;
    loop {
        let req = Wire::Tasks(TasksArgs {
            after,
            ..TasksArgs::default()
        });
        let page: TasksReply = decode(client.call(&req)?)?;
        after = page.next;
        match &mut all {
            None => all = Some(page),
            Some(all) => all.tasks.extend(page.tasks),
        }
        if after.is_none() {
            break;
        }
    }
    let mut all = all.unwrap_or(TasksReply {
        tasks: Vec::new(),
        pending: 0,
        next: None,
    });
    all.next = None;
    Ok(all)
}

pub fn run(socket: Option<&Path>, cmd: &TaskCommand, out: &mut impl Write) -> Result<u8, CliError> {
    if let TaskCommand::Ls { json } = cmd {
        let all = all_tasks(socket)?;
        let text = match json {
            true => {
                let data = serde_json::to_string(&all).unwrap_or_default();
                format!("{}\n", json_for_terminal(&data))
            }
            false => table(&all.tasks),
        };
        print(out, &text)?;
        return Ok(0);
    }
    let req = request(cmd)?;
    let data = connect(socket, REQUEST_TIMEOUT)?.call(&req)?;
    match cmd {
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
            print(
                out,
                &format!(
                    "{}\n",
                    json_for_terminal(&serde_json::json!(reply.task).to_string())
                ),
            )?;
        }
        TaskCommand::Ls { .. }
        | TaskCommand::Cancel { .. }
        | TaskCommand::Move { .. }
        | TaskCommand::Remove { .. }
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
        let line = request(&cmd)
            .expect("a request")
            .to_line()
            .expect("encodes");
        let sent: Value = serde_json::from_slice(&line).expect("JSON");
        assert_eq!(
            sent,
            serde_json::json!({"cmd":"task-add","title":"check db","priority":"high","role":"sysadmin","context":{"jail":"db"},"jail":"db"})
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
    fn move_and_remove_send_the_protocols_requests() {
        let line = |cmd: &TaskCommand| -> Value {
            let bytes = request(cmd).expect("a request").to_line().expect("encodes");
            serde_json::from_slice(&bytes).expect("JSON")
        };
        let moved = line(&TaskCommand::Move {
            task_id: 4,
            to: PlaceArg::Bottom,
        });
        assert_eq!(
            moved,
            serde_json::json!({"cmd":"task-move","task_id":4,"to":"bottom"})
        );
        let removed = line(&TaskCommand::Remove { task_id: 5 });
        assert_eq!(
            removed,
            serde_json::json!({"cmd":"task-remove","task_id":5})
        );
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
            rank: 0,
        };
        let out = table(&[t]);
        assert!(!out.contains('\x1b'), "{out}");
        assert!(out.contains("7     pending"), "{out}");
    }
}
