//! `colibri budget`: the daemon's budget ledgers, and an operator's answer
//! to a budget pause (`raise NAME CAP`, `resume NAME`).

use std::io::Write;
use std::path::Path;

use crate::cli::remote::connect;
use crate::cli::{print, CliError, REQUEST_TIMEOUT};
use crate::protocol::{BudgetArgs, BudgetReply, Command};

#[derive(Clone, Debug, PartialEq, clap::Subcommand)]
pub enum BudgetAction {
    /// Set a budget's cap (its paused agents resume if now under it) until
    /// colibrid restarts; colibri.toml's cap applies again after a restart.
    Raise {
        /// The budget's name (`[budgets.NAME]`, or `output`).
        name: String,
        /// The new cap, a plain number in the budget's unit: tokens, US
        /// dollars, or bytes (`output`: 4294967296, not 4GiB).
        cap: f64,
    },
    /// Let a budget's paused agents spend on until its period rolls.
    Resume {
        /// The budget's name (`[budgets.NAME]`).
        name: String,
    },
}

/// The `budget` request for an action (none: show).
pub fn request(action: Option<&BudgetAction>) -> Command {
    let args = match action {
        None => BudgetArgs::default(),
        Some(BudgetAction::Raise { name, cap }) => BudgetArgs {
            action: Some("raise".into()),
            budget: Some(name.clone()),
            cap: Some(*cap),
        },
        Some(BudgetAction::Resume { name }) => BudgetArgs {
            action: Some("resume".into()),
            budget: Some(name.clone()),
            cap: None,
        },
    };
    Command::Budget(args)
}

pub fn run(
    socket: Option<&Path>,
    action: Option<&BudgetAction>,
    json: bool,
    out: &mut impl Write,
) -> Result<u8, CliError> {
    let data = connect(socket, REQUEST_TIMEOUT)?.call(&request(action))?;
    if json {
        let text = crate::terminal_text::json_for_terminal(&data.to_string()).into_owned();
        return print(out, &format!("{text}\n")).map(|()| 0);
    }
    let reply: BudgetReply = serde_json::from_value(data)
        .map_err(|e| CliError::Runtime(format!("unexpected budget reply: {e} (try --json)")))?;
    print(out, &render(&reply)).map(|()| 0)
}

fn render(r: &BudgetReply) -> String {
    let mut text = String::new();
    if r.budgets.is_empty() {
        // Budgets in force that counted nothing yet (the default output
        // budget, say) have no ledger; the effective config lists them.
        text.push_str(
            "no budget has counted any spend yet (`colibrid --check-config` lists the budgets in force)\n",
        );
    }
    for b in &r.budgets {
        let key = if b.key.is_empty() { "all" } else { &b.key };
        let paused = if b.paused { "  PAUSED" } else { "" };
        let spend = match b.unit.as_str() {
            "tokens" => format!("{:.0} of {:.0} tokens", b.spent, b.cap),
            "usd" => format!("${:.4} of ${:.4}", b.spent, b.cap),
            "bytes" => format!(
                "{:.1} of {:.1} MiB of output",
                b.spent / 1_048_576.0,
                b.cap / 1_048_576.0
            ),
            _ => format!("{:.4} of {:.4}", b.spent, b.cap),
        };
        text.push_str(&format!("{}  {}  {spend}{paused}\n", b.budget, key));
    }
    if r.resumed > 0 {
        text.push_str(&format!("resumed {} ledger(s)\n", r.resumed));
    }
    crate::cli::render::escape_lines(&text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Request;

    #[test]
    fn requests_parse_as_the_daemon_reads_them() {
        for action in [
            None,
            Some(BudgetAction::Raise {
                name: "t".into(),
                cap: 5.0,
            }),
            Some(BudgetAction::Resume { name: "t".into() }),
        ] {
            let req = request(action.as_ref());
            let parsed = Request::parse(&req.to_line().expect("encodes")).expect("parses");
            assert_eq!(parsed.command, req);
        }
    }
}
