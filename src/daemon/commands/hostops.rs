//! `hostop`: an operator-declared host operation, asked for by an agent of
//! a jail (or role) the op allows, or by the operator. Everything is
//! checked before anything runs: the op exists (`unknown_op`), the caller
//! may run it (`forbidden`), each parameter fits its pattern (`bad_param`),
//! and there is room (`busy`: 8 runs at once, one per agent or jail). The
//! reply follows the process's end (`daemon::hostops`).

use crate::config::HostOp;
use crate::daemon::conn::Scope;
use crate::daemon::diag::log_warn;
use crate::daemon::event_loop::Daemon;
use crate::daemon::hostops::runs::{Asker, MAX_RUNNING};
use crate::daemon::hostops::HostopStart;
use crate::protocol::{CommandError, ErrorCode, HostopArgs, Reply};

use super::Call;

pub(super) fn hostop(d: &mut Daemon, call: &Call, a: HostopArgs) -> Result<Reply, CommandError> {
    let by = call.scope.name();
    let refused = |code: ErrorCode, msg: String| {
        log_warn!("hostop {:?} refused to {by}: {msg}", a.op);
        CommandError::new(code, msg)
    };
    let Some(op) = d.settings.hostops.get(&a.op).cloned() else {
        return Err(refused(
            ErrorCode::UnknownOp,
            format!("no host operation {:?} is declared ([hostops.NAME])", a.op),
        ));
    };
    let role = call.scope.agent().and_then(|pane| caller_role(d, pane));
    let Some(pane) = grant(&op, &call.scope, role) else {
        return Err(refused(ErrorCode::Forbidden, not_allowed(&a.op, &by)));
    };
    let argv = op
        .argv_for(&a.params)
        .map_err(|e| refused(ErrorCode::BadParam, format!("hostop {}: {e}", a.op)))?;
    if d.is_stopping() {
        return Err(CommandError::new(
            ErrorCode::Stopping,
            "colibrid is stopping; no host operation starts",
        ));
    }
    if d.hostops.len() >= MAX_RUNNING {
        return Err(refused(
            ErrorCode::Busy,
            format!("{MAX_RUNNING} host operations are running; try again later"),
        ));
    }
    if d.hostops.busy_for(&by) {
        return Err(refused(
            ErrorCode::Busy,
            format!("{by} has a host operation running; one at a time"),
        ));
    }
    let start = HostopStart {
        name: &a.op,
        op: &op,
        argv,
        params: a.params.clone(),
        asker: Asker { by, pane },
        conn: call.conn,
        rid: call.rid.clone(),
    };
    d.start_hostop(start, call.t)?;
    Ok(Reply::Deferred)
}

/// Whether `scope` may run `op`: `Some` with the asking agent's pane (none
/// for the operator and a jail socket), or `None`. The operator runs every
/// declared op; a jail socket's peer and an agent in a jail those the op's
/// `jails` list; an agent whose `role` its `roles` list; a stray (a
/// process colibrid took in that names no pane) none.
fn grant(op: &HostOp, scope: &Scope, role: Option<&str>) -> Option<Option<String>> {
    match scope {
        Scope::Operator => Some(None),
        Scope::Jail(jail) => op.allows(Some(jail), None).then_some(None),
        Scope::Agent { pane, .. } if pane.is_empty() => None,
        Scope::Agent { pane, jail } => op.allows(jail.as_deref(), role).then(|| Some(pane.clone())),
    }
}

fn not_allowed(op: &str, by: &str) -> String {
    format!(
        "hostop {op} is not allowed for {by} (its [hostops.{op}] jails and roles do not name it)"
    )
}

/// The role of the agent of pane `pane` (`role` on `spawn-agent` or
/// `[agents.NAME]`), for `[hostops.NAME] roles`.
fn caller_role<'d>(d: &'d Daemon, pane: &str) -> Option<&'d str> {
    let key = d.panes.key(pane)?;
    d.panes.pane(key)?.role.as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(jails: &str, roles: &str) -> HostOp {
        let text =
            format!("[hostops.x]\nargv = [\"/bin/echo\"]\njails = [{jails}]\nroles = [{roles}]\n");
        let layer =
            crate::config::parse_file(std::path::Path::new("t.toml"), &text).expect("valid");
        layer.hostops["x"].clone()
    }

    fn agent(pane: &str, jail: Option<&str>) -> Scope {
        Scope::Agent {
            pane: pane.to_string(),
            jail: jail.map(str::to_string),
        }
    }

    /// Jailed agents cannot be started on Linux: the jail check of an
    /// agent's own scope is held here.
    #[test]
    fn an_agent_runs_an_op_by_its_jail_or_its_role_and_a_stray_never() {
        let snap = op("\"agents1\"", "\"sysadmin\"");
        assert_eq!(
            grant(&snap, &agent("p1", Some("agents1")), None),
            Some(Some("p1".to_string()))
        );
        assert_eq!(grant(&snap, &agent("p1", Some("db")), None), None);
        assert_eq!(grant(&snap, &agent("p1", None), None), None, "a host agent");
        assert_eq!(
            grant(&snap, &agent("p1", None), Some("sysadmin")),
            Some(Some("p1".to_string()))
        );
        assert_eq!(grant(&snap, &agent("p1", None), Some("dba")), None);
        assert_eq!(
            grant(&snap, &agent("", Some("agents1")), None),
            None,
            "a stray"
        );
        assert_eq!(
            grant(&snap, &Scope::Jail("agents1".into()), None),
            Some(None)
        );
        assert_eq!(grant(&snap, &Scope::Jail("db".into()), None), None);
        assert_eq!(grant(&op("", ""), &Scope::Operator, None), Some(None));
        assert_eq!(
            grant(&op("", ""), &agent("p1", Some("agents1")), None),
            None
        );
    }
}
