//! Read models: the snapshots (v1, v2), status and the session list, built
//! from the pane table and the store for one caller's scope.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::core::taxonomy::Runtime;
use crate::core::time::Timestamp;
use crate::daemon::agent::Hold;
use crate::daemon::agent::RestartPolicy;
use crate::daemon::approvals::desk::ApprovalDesk;
use crate::daemon::conn::{BodySources, Scope};
use crate::daemon::event_loop::Daemon;
use crate::daemon::pane_text::{PaneText, Schema, Stall};
use crate::daemon::panes::{PaneKey, PaneTable, Slot};
use crate::protocol::{
    AlertHealth, LogHealth, PaneV1View, PaneV2View, RestartView, SessionSummary, StatusData,
    WireExit,
};

/// The host's name as `scope` may see it: a jail socket is reachable by
/// every user of the jail (on Linux, of the host), so it is told nothing of
/// where the daemon runs (`status`, the snapshots).
fn host_shown_to<'a>(host: &'a str, scope: &Scope) -> &'a str {
    match scope {
        Scope::Operator => host,
        _ => "",
    }
}

/// Whether `scope` may see pane `key`: the operator sees every pane, a jail
/// its own, an agent itself.
pub(crate) fn pane_visible(panes: &PaneTable, scope: &Scope, key: PaneKey) -> bool {
    match scope {
        Scope::Operator => true,
        Scope::Jail(j) => panes.agent(key).and_then(|a| a.jail.as_deref()) == Some(j.as_str()),
        Scope::Agent { pane, .. } => panes.pane(key).is_some_and(|p| p.id.0 == *pane),
    }
}

impl Daemon {
    pub(crate) fn host_shown_to(&self, scope: &Scope) -> &str {
        host_shown_to(&self.settings.daemon.host, scope)
    }

    pub(crate) fn status_data(&self, scope: &Scope, t: Timestamp) -> StatusData {
        let mut states: BTreeMap<String, usize> = BTreeMap::new();
        let mut stalled = 0;
        let mut paused = 0;
        let mut agents = 0;
        let mut running = 0;
        let mut own_sessions: Vec<&str> = Vec::new();
        for (_, s) in self.panes.iter().filter(|(k, _)| self.visible(scope, *k)) {
            agents += 1;
            // The contract's states, as the v1 snapshot shows them: a pane a
            // planned stop ended counts `done`, not the `error` its
            // SIGTERM's exit left on the pane.
            let actual = s.agent.actual();
            let state = crate::core::spec::v1_state(actual, s.pane.state());
            *states.entry(state.as_str().to_string()).or_default() += 1;
            if s.pane.is_stalled(t, self.settings.daemon.stall_after) {
                stalled += 1;
            }
            if s.agent.running_pid().is_some() {
                running += 1;
                paused += usize::from(s.pane.paused);
            }
            own_sessions.push(s.agent.session.as_str());
        }
        let reload = self.settings.reload.shown_to(scope);
        // A jail socket is reachable by every user of the jail (on Linux, of
        // the host): it answers what an agent needs (its panes, their states,
        // the stall threshold, the version), not where and how the daemon runs.
        let operator = *scope == Scope::Operator;
        StatusData {
            host: self.host_shown_to(scope).to_string(),
            os: if operator {
                self.os.clone()
            } else {
                String::new()
            },
            version: env!("CARGO_PKG_VERSION").to_string(),
            pid: if operator { std::process::id() } else { 0 },
            started_at: if operator {
                self.started_at.to_rfc3339()
            } else {
                String::new()
            },
            agents,
            running,
            // Daemon-wide counts are the operator's business only.
            sessions: match scope {
                Scope::Operator => self.store.list().len(),
                Scope::Jail(_) | Scope::Agent { .. } => {
                    own_sessions.sort_unstable();
                    own_sessions.dedup();
                    own_sessions.len()
                }
            },
            connections: if *scope == Scope::Operator {
                self.conns.len()
            } else {
                0
            },
            watchers: if *scope == Scope::Operator {
                self.bus.watchers()
            } else {
                0
            },
            states,
            stalled,
            paused,
            stall_after_ms: self.settings.daemon.stall_after.as_millis() as u64,
            scope: scope.name(),
            logs: if !operator {
                LogHealth::default()
            } else {
                let h = self.store.health();
                LogHealth {
                    pending_bytes: h.pending_bytes as u64,
                    failed_writes: h.failed_writes,
                    lost_bytes: h.lost_bytes,
                    replaced_logs: h.replaced_logs,
                    retired_sessions: h.retired_sessions,
                    last_error: h.last_error,
                }
            },
            reloads: reload.reloads,
            reload_errors: reload.reload_errors,
            restart_needed: reload.restart_needed,
            alerts: match scope {
                Scope::Operator => {
                    let a = self.alerter.stats();
                    AlertHealth {
                        sent: a.sent,
                        rate_limited: a.rate_limited,
                        dropped: a.dropped,
                        truncated: a.truncated,
                    }
                }
                Scope::Jail(_) | Scope::Agent { .. } => AlertHealth::default(),
            },
            signals: match scope {
                Scope::Operator => self
                    .signals_received
                    .iter()
                    .map(|(name, n)| (name.to_string(), *n))
                    .collect(),
                Scope::Jail(_) | Scope::Agent { .. } => BTreeMap::new(),
            },
            alerts_unreachable: match scope {
                Scope::Operator => self.alerter.unreachable().map(str::to_owned),
                Scope::Jail(_) | Scope::Agent { .. } => None,
            },
        }
    }

    pub(crate) fn sessions(&self) -> Vec<SessionSummary> {
        self.store
            .list()
            .into_iter()
            .map(|m| SessionSummary {
                id: m.id.clone(),
                turn_count: m.turn_count,
                bytes: m.bytes,
                panes: m.panes.clone(),
                runtime: m.runtime.as_deref().and_then(Runtime::parse),
                cwd: m.cwd.clone(),
                created_at: m.created_at.to_rfc3339(),
                state: m
                    .final_state
                    .as_deref()
                    .and_then(crate::core::state::AgentState::parse),
                exit: if m.exit_code.is_some() || m.exit_signal.is_some() {
                    Some(WireExit {
                        code: m.exit_code,
                        signal: m.exit_signal,
                    })
                } else {
                    None
                },
            })
            .collect()
    }
}

/// One pane as the contract's v1 snapshot shows it (its five states: see
/// docs/PROTOCOL.md).
pub(crate) fn pane_v1(s: &Slot, t: Timestamp, stall_after: Duration) -> PaneV1View<'_> {
    let mut v = PaneV1View::from_pane(&s.pane, t, stall_after);
    let actual = s.agent.actual();
    v.state = crate::core::spec::v1_state(actual, s.pane.state());
    v
}

/// One pane as the v2 snapshot shows it: the core's view plus what only
/// the daemon knows (pid, jail, supervision, restarts, escalation). Made
/// from the parts it reads, not from the daemon, for `BodySources::write_pane`,
/// which holds the pane table mutably.
pub(crate) fn pane_v2<'a>(
    s: &'a Slot,
    t: Timestamp,
    stall_after: Duration,
    approvals: &ApprovalDesk,
) -> PaneV2View<'a> {
    let mut v = PaneV2View::from_pane(&s.pane, t, stall_after);
    let a = &s.agent;
    v.daemon_session = Some(&a.session);
    v.jail = a.jail.as_deref();
    v.pid = a.running_pid();
    v.generation = a.generation;
    v.supervision = Some(a.supervision.wire(a.actual()));
    if a.usage_earlier != crate::core::usage::Usage::default() {
        let mut total = a.usage_earlier;
        total.add(s.pane.usage());
        v.usage_total = Some(crate::protocol::WireUsage::from(&total));
    }
    // Holds outlive nothing: an exited process is not stopped.
    if s.pane.paused {
        v.holds = a.holds.iter().map(Hold::wire).collect();
    }
    for w in &mut v.approvals {
        w.escalated = approvals.escalated(&w.id);
    }
    if a.restart.policy != RestartPolicy::Never {
        v.restart = Some(RestartView {
            policy: a.restart.policy.as_str(),
            attempts: a.restart.attempts,
            next_at: a.next_restart_at(),
        });
    }
    v
}

impl BodySources<'_> {
    /// Whether `scope` may see pane `key` (as `Daemon::visible`).
    pub(crate) fn visible(&self, scope: &Scope, key: PaneKey) -> bool {
        pane_visible(self.panes, scope, key)
    }

    pub(crate) fn host_shown_to(&self, scope: &Scope) -> &str {
        host_shown_to(self.host, scope)
    }

    /// Appends pane `key`'s snapshot object to `out`, at time `t`: from its
    /// kept text if it has not changed since, otherwise made afresh and
    /// kept. An error (serde_json refusing a float) leaves `out` cut
    /// short: the reply must not be finished.
    pub(crate) fn write_pane(
        &mut self,
        key: PaneKey,
        schema: Schema,
        t: Timestamp,
        out: &mut Vec<u8>,
    ) -> serde_json::Result<()> {
        let stall_after = self.stall_after;
        let kept = self.panes.kept_text(key, schema);
        if let Some(text) = kept.filter(|k| k.stall.after == stall_after) {
            let start = out.len();
            text.write(out, text.stalled(t));
            if cfg!(debug_assertions) {
                self.check_kept_text(key, schema, t, &out[start..]);
            }
            return Ok(());
        }
        let approvals = self.approvals;
        let Some((slot, kept)) = self.panes.with_text(key, schema) else {
            return Ok(());
        };
        let stall = Stall {
            after: stall_after,
            deadline: slot.pane.stall_deadline(stall_after),
        };
        *kept = match schema {
            Schema::V1 => {
                let mut view = pane_v1(slot, t, stall_after);
                Some(PaneText::make_v1(&mut view, stall, out))
            }
            Schema::V2 => {
                let mut view = pane_v2(slot, t, stall_after, approvals);
                PaneText::make_v2(&mut view, stall, out)?
            }
        };
        Ok(())
    }

    /// Debug builds: a kept text must be what a fresh view of its pane
    /// writes, or a change went past `PaneTable::get_mut`.
    fn check_kept_text(&self, key: PaneKey, schema: Schema, t: Timestamp, written: &[u8]) {
        let Some(slot) = self.panes.get(key) else {
            return;
        };
        let mut fresh = Vec::new();
        let _ = write_fresh(
            slot,
            schema,
            t,
            self.stall_after,
            self.approvals,
            &mut fresh,
        );
        assert_eq!(
            String::from_utf8_lossy(written),
            String::from_utf8_lossy(&fresh),
            "a kept {schema:?} snapshot text differs from its pane: a change went past PaneTable::get_mut"
        );
    }
}

/// Appends pane `s`'s object as a fresh view writes it, kept text or not.
pub(crate) fn write_fresh(
    s: &Slot,
    schema: Schema,
    t: Timestamp,
    stall_after: Duration,
    approvals: &ApprovalDesk,
    out: &mut Vec<u8>,
) -> serde_json::Result<()> {
    match schema {
        Schema::V1 => {
            pane_v1(s, t, stall_after).write_json(out);
            Ok(())
        }
        Schema::V2 => pane_v2(s, t, stall_after, approvals).write_json(out),
    }
}
