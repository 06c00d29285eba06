//! Recovery: rebuilds the pane table from the session logs a previous
//! daemon left (`store::Recovery`).

use crate::core::pane::{ExitStatus, Pane, PaneId};
use crate::core::taxonomy::Runtime;
use crate::core::time::Timestamp;
use crate::daemon::agent::{Agent, RestartPolicy, RestartState};
use crate::daemon::event_loop::Daemon;
use crate::daemon::store::{ExitRecord, Recovery};

impl Daemon {
    /// Rebuilds panes from the logs a previous daemon left. Agents that were
    /// running died with it (their PTY closed): they are failed with a reason.
    pub(crate) fn recover(&mut self, rec: Recovery, t: Timestamp) {
        let mut out = Vec::new();
        let n = rec.panes.len();
        for rp in rec.panes {
            let runtime = rp.runtime.as_deref().and_then(Runtime::parse);
            let max_line = self.settings.daemon.max_line;
            let key = match self.panes.key(&rp.pane) {
                Some(key) => {
                    self.panes.reattach(key, runtime, max_line, rp.attached_at);
                    if let Some(a) = self.panes.agent_mut(key) {
                        a.generation = rp.generation;
                        a.session = rp.session.clone();
                    }
                    key
                }
                None => {
                    let mut agent = Agent::new(
                        rp.pane.clone(),
                        rp.session.clone(),
                        rp.jail.clone(),
                        None,
                        RestartState {
                            policy: RestartPolicy::Never,
                            max: 0,
                            attempts: 0,
                        },
                    );
                    agent.generation = rp.generation;
                    agent.runtime_indexed = true;
                    let pane = Pane::new(
                        PaneId(rp.pane.clone()),
                        rp.agent.clone(),
                        runtime,
                        max_line,
                        rp.attached_at,
                    );
                    self.panes.insert(pane, agent)
                }
            };
            let Some(pane) = self.panes.pane_mut(key) else {
                continue;
            };
            pane.name = rp.name.clone();
            pane.set_cwd(rp.cwd.clone());
            for (ts, line) in &rp.events {
                let _ = pane.ingest_line(line, *ts, &mut out);
            }
            match rp.exit {
                Some((_, code, signal)) => {
                    let status = match (code, signal) {
                        (Some(c), _) => ExitStatus::Code(c),
                        (None, Some(s)) => ExitStatus::Signal(s),
                        (None, None) => ExitStatus::Unknown,
                    };
                    pane.exited(
                        status,
                        rp.attached_at
                            .max(pane.last_event_at().unwrap_or(rp.attached_at)),
                        &mut out,
                    );
                }
                None => {
                    let reason =
                        "colibrid stopped while this agent ran; the agent was lost".to_string();
                    pane.fail(reason.clone(), t, &mut out);
                    self.store.exit(
                        &rp.session,
                        &ExitRecord {
                            pane: &rp.pane,
                            state: "error",
                            code: None,
                            signal: None,
                            reason: Some(&reason),
                        },
                        t,
                    );
                }
            }
            out.clear();
        }
        if n > 0 {
            crate::daemon::diag::log_info!("recovered {n} pane(s) from the session logs");
        }
    }
}
