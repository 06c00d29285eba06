//! `budget`: the governor's budget ledgers, and an operator's answer to a
//! budget pause (raise the cap, or resume once).

use crate::daemon::event_loop::Daemon;
use crate::protocol::BudgetArgs;
use crate::protocol::{BudgetReply, CommandError, Reply, WireBudget};

use super::Call;

pub(super) fn budget(d: &mut Daemon, call: &Call, a: BudgetArgs) -> Result<Reply, CommandError> {
    let t = call.t;
    let name = || {
        a.budget
            .clone()
            .ok_or_else(|| CommandError::invalid("budget: name the budget".to_string()))
    };
    let mut resumed = Vec::new();
    match a.action.as_deref().unwrap_or("show") {
        "show" => {}
        "raise" => {
            let cap = a.cap.ok_or_else(|| {
                CommandError::invalid("budget raise: give the new cap".to_string())
            })?;
            d.governor
                .budgets_mut()
                .raise(&name()?, cap)
                .map_err(|e| CommandError::invalid(e.to_string()))?;
            resumed = d.governor.tick(t);
        }
        "resume" => {
            resumed = d
                .governor
                .budgets_mut()
                .resume_once(&name()?, t)
                .map_err(|e| CommandError::invalid(e.to_string()))?;
        }
        other => {
            return Err(CommandError::invalid(format!(
                "budget: unknown action {other:?} (show, raise or resume)"
            )))
        }
    }
    let count = resumed.len();
    d.carry_out(resumed, t);
    let budgets = d
        .governor
        .budgets()
        .usage(t)
        .into_iter()
        .map(|u| WireBudget {
            budget: u.rule,
            unit: u.unit.as_str().to_string(),
            key: u.key,
            spent: u.spent,
            cap: u.cap,
            paused: u.paused,
        })
        .collect();
    Ok(Reply::Budget(BudgetReply {
        budgets,
        resumed: count,
    }))
}
