//! `colibri approval-request`: an agent asks the operator to approve an
//! operation and, by default, waits for the decision, which its exit status
//! carries so a script can branch on it:
//!
//! - 0: approved;
//! - 4: denied;
//! - 5: no decision: the wait ran out, or the request ended unanswered
//!   (its agent stopped);
//! - 6: `--wait 0`: opened and left pending (its id is printed; the agent
//!   polls `approvals`, whose `approved` history shows the end);
//! - 1 and 3 as every subcommand (refused, or no daemon).
//!
//! Every status but 0 means "do not go on".

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use clap::Args;

use crate::cli::remote::connect;
use crate::cli::render::{escape_controls, json_for_terminal};
use crate::cli::{print, CliError, REQUEST_TIMEOUT};
use crate::client::ClientError;
use crate::protocol::{ApprovalRequestArgs, Command as Wire, WireApprovalStatus};

pub const APPROVED: u8 = 0;
pub const DENIED: u8 = 4;
pub const UNDECIDED: u8 = 5;
pub const PENDING: u8 = 6;

/// Time on top of the wait for the daemon's own timeout reply to arrive.
const REPLY_GRACE: Duration = Duration::from_secs(3);

#[derive(Debug, Args)]
pub struct ApprovalRequestCmd {
    /// What the agent wants to do.
    pub operation: String,
    /// Why (shown to the operator under the operation).
    #[arg(long, short = 'r')]
    pub reason: Option<String>,
    /// The control plane's task it is about.
    #[arg(long, value_name = "TASK_ID")]
    pub task: Option<u64>,
    /// What the operation is expected to cost, in tokens.
    #[arg(long, value_name = "N")]
    pub tokens: Option<u64>,
    /// How long to wait for the decision (0: do not wait; at most a day).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub wait: Duration,
    /// The asking agent's pane (default: $COLIBRI_PANE_ID; from an agent's
    /// own process tree it may be left out).
    #[arg(long, env = "COLIBRI_PANE_ID")]
    pub pane: Option<String>,
    /// Print the reply as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The request the subcommand sends (pure).
pub fn request(cmd: &ApprovalRequestCmd) -> Wire {
    let wait_ms = u64::try_from(cmd.wait.as_millis()).unwrap_or(u64::MAX);
    Wire::ApprovalRequest(ApprovalRequestArgs {
        pane: cmd.pane.clone().filter(|p| !p.is_empty()),
        operation: cmd.operation.clone(),
        reasoning: cmd.reason.clone(),
        task_id: cmd.task,
        estimated_tokens: cmd.tokens,
        wait_ms: (wait_ms > 0).then_some(wait_ms),
    })
}

/// The exit status and the line (without its newline) a reply makes.
pub fn outcome(r: &WireApprovalStatus) -> (u8, String) {
    let by = r.by.as_deref().unwrap_or("policy");
    let (code, what) = match r.status.as_str() {
        "approved" => (APPROVED, format!("approved by {by}")),
        "denied" => match &r.message {
            Some(m) => (DENIED, format!("denied by {by}: {m}")),
            None => (DENIED, format!("denied by {by}")),
        },
        "pending" => (PENDING, "pending".to_string()),
        _ => (
            UNDECIDED,
            format!("no decision ({})", r.reason.as_deref().unwrap_or(&r.status)),
        ),
    };
    (code, format!("{}: {what}", r.approval_id))
}

pub fn run(
    socket: Option<&Path>,
    cmd: &ApprovalRequestCmd,
    out: &mut impl Write,
) -> Result<u8, CliError> {
    let mut client = connect(socket, REQUEST_TIMEOUT.max(cmd.wait + REPLY_GRACE))?;
    let data = match client.call(&request(cmd)) {
        Ok(data) => data,
        // The daemon took the request and never answered in time.
        Err(ClientError::Timeout(_)) => {
            print(out, "no decision (the wait ran out)\n")?;
            return Ok(UNDECIDED);
        }
        Err(e) => return Err(e.into()),
    };
    let reply: WireApprovalStatus = serde_json::from_value(data.clone()).map_err(|e| {
        CliError::Client(ClientError::Protocol(format!(
            "unexpected approval-request reply: {e}"
        )))
    })?;
    let (code, line) = outcome(&reply);
    let text = match cmd.json {
        true => format!("{}\n", json_for_terminal(&data.to_string())),
        false => format!("{}\n", escape_controls(&line)),
    };
    print(out, &text)?;
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: &str) -> WireApprovalStatus {
        WireApprovalStatus {
            approval_id: "3f2a9c1d-4".into(),
            pane: "3f2a9c1d-0000".into(),
            name: None,
            operation: "merge".into(),
            task_id: None,
            estimated_tokens: None,
            channel: "reply".into(),
            status: status.into(),
            operator_approved: status == "approved",
            message: None,
            text: None,
            reason: None,
            by: Some("operator via board".into()),
            asked_at: "2026-11-21T10:00:00.000Z".into(),
            approved_at: None,
        }
    }

    #[test]
    fn only_an_approval_exits_zero() {
        assert_eq!(
            outcome(&status("approved")),
            (
                APPROVED,
                "3f2a9c1d-4: approved by operator via board".into()
            )
        );
        let mut denied = status("denied");
        denied.message = Some("not today".into());
        assert_eq!(
            outcome(&denied),
            (
                DENIED,
                "3f2a9c1d-4: denied by operator via board: not today".into()
            )
        );
        let mut expired = status("expired");
        expired.reason = Some("timed_out".into());
        assert_eq!(
            outcome(&expired),
            (UNDECIDED, "3f2a9c1d-4: no decision (timed_out)".into())
        );
        assert_eq!(outcome(&status("pending")).0, PENDING);
        // A status this client does not know is no approval either.
        assert_eq!(outcome(&status("answered")).0, UNDECIDED);
    }

    #[test]
    fn no_wait_asks_for_none_and_an_empty_pane_is_left_out() {
        let cmd = ApprovalRequestCmd {
            operation: "merge".into(),
            reason: Some("why".into()),
            task: Some(2),
            tokens: Some(8500),
            wait: Duration::ZERO,
            pane: Some(String::new()),
            json: false,
        };
        let Wire::ApprovalRequest(a) = request(&cmd) else {
            panic!("not an approval-request");
        };
        assert_eq!(a.wait_ms, None);
        assert_eq!(a.pane, None);
        assert_eq!(a.estimated_tokens, Some(8500));
    }
}
