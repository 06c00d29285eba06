//! An agent process's life as one state × event table, in s6's form
//! (`actions[state][event]`): [`step`] takes the current [`Life`] and a
//! [`LifeEvent`] and returns the next `Life` with the [`Effect`]s the daemon
//! must perform. Restart backoff is decided here too ([`plan_restart`]).
//!
//! Pure: time comes in as arguments, effects go out as values. The daemon
//! owns the process, its fds and its timers, and only applies effects.
//!
//! An agent ends when both its process has been reaped and its PTY has
//! reached end of file (the last lines are read); whichever comes second
//! finishes it. A PTY that outlives its process (a grandchild holds it) is
//! drained until a deadline the daemon chooses ([`Effect::ArmDrain`]).

use std::time::Duration;

use crate::core::state::AgentState;
use crate::core::time::Timestamp;

pub use crate::core::spec::RestartPolicy;

/// Where an agent's process is in its life.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Life {
    /// No process: not started yet, or recovered from the logs.
    Idle,
    /// The process runs; `pty_eof` once its terminal closed (it may live on).
    Running { pty_eof: bool },
    /// The process was reaped; the PTY still has output (a grandchild may
    /// hold it). Ends at end of file or at the drain deadline.
    Draining,
    /// Waiting to start attempt `attempt` at `until`.
    Backoff { attempt: u32, until: Timestamp },
    /// Ended for good (no restart wanted, stopped, or restarts used up).
    Stopped,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LifeEvent {
    /// A process was started on a fresh PTY.
    Spawned,
    /// The process was reaped.
    Exited,
    /// The PTY reached end of file.
    PtyEof,
    /// The drain deadline passed with the PTY still open.
    DrainTimeout,
    /// The daemon finished the pane (folded the exit, logged it); decide on
    /// a restart. `restart` is [`plan_restart`]'s answer.
    Ended { restart: RestartPlan },
    /// A spawn or restart failed: the same decision as `Ended`.
    SpawnFailed { restart: RestartPlan },
    /// The backoff deadline passed.
    BackoffDue,
    /// The operator or the daemon stopped the agent: no restart.
    Stop,
}

/// What the daemon must do after a step.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Arm the pane's drain deadline.
    ArmDrain,
    /// End the process group still holding the PTY.
    KillGroup,
    /// Fold the exit, log it, release the process's fds; then feed `Ended`.
    Finish,
    /// Arm the backoff deadline and announce the restart.
    ScheduleRestart { attempt: u32, at: Timestamp },
    /// Start the process again.
    Start,
    /// Forget a scheduled restart.
    CancelRestart,
    /// The restart budget is spent: tell the operator.
    RestartsExhausted { attempts: u32 },
    /// The pane is over: release every per-pane OS resource (timers too).
    Release,
}

/// The restart decision for one ended run.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RestartPlan {
    /// Policy says no (or the daemon is stopping, or there is no recipe).
    No,
    /// Restart as attempt `attempt` at `at`.
    After { attempt: u32, at: Timestamp },
    /// The policy wants a restart but `attempts` restarts are used up.
    Exhausted { attempts: u32 },
}

/// The restart rule of one agent.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RestartRule {
    pub policy: RestartPolicy,
    pub max: u32,
}

/// Decides whether and when a run that ended in `state` after `ran_for`
/// restarts, given `attempts` consecutive restarts so far. A run that
/// outlived the longest backoff step was healthy: the count starts over.
pub fn plan_restart(
    rule: RestartRule,
    attempts: u32,
    state: AgentState,
    ran_for: Duration,
    backoff: &[Duration],
    now: Timestamp,
) -> RestartPlan {
    if !rule.policy.restarts_after(state) {
        return RestartPlan::No;
    }
    let attempts = match backoff.last() {
        Some(last) if ran_for >= *last => 0,
        _ => attempts,
    };
    if attempts >= rule.max || backoff.is_empty() {
        return RestartPlan::Exhausted { attempts };
    }
    let i = (attempts as usize).min(backoff.len() - 1);
    RestartPlan::After {
        attempt: attempts + 1,
        at: now.plus(backoff[i]),
    }
}

/// The table. Pairs not listed change nothing: a late or duplicate event
/// (an exit after a stop, a second end of file) is harmless by design.
pub fn step(life: Life, ev: LifeEvent) -> (Life, Vec<Effect>) {
    use Effect as E;
    use Life as L;
    use LifeEvent as V;
    match (life, ev) {
        (L::Idle | L::Backoff { .. } | L::Stopped, V::Spawned) => {
            (L::Running { pty_eof: false }, vec![])
        }
        (L::Running { pty_eof: false }, V::Exited) => (L::Draining, vec![E::ArmDrain]),
        (L::Running { pty_eof: true }, V::Exited) => {
            (L::Running { pty_eof: true }, vec![E::Finish])
        }
        (L::Running { pty_eof: false }, V::PtyEof) => (L::Running { pty_eof: true }, vec![]),
        (L::Draining, V::PtyEof) => (L::Draining, vec![E::Finish]),
        (L::Draining, V::DrainTimeout) => (L::Draining, vec![E::KillGroup, E::Finish]),
        (_, V::Ended { restart } | V::SpawnFailed { restart }) => decide(restart),
        // Stays in backoff until the new process reports `Spawned`.
        (L::Backoff { .. }, V::BackoffDue) => (life, vec![E::Start]),
        (L::Backoff { .. }, V::Stop) => (L::Stopped, vec![E::CancelRestart, E::Release]),
        (l, _) => (l, vec![]),
    }
}

fn decide(restart: RestartPlan) -> (Life, Vec<Effect>) {
    match restart {
        RestartPlan::No => (Life::Stopped, vec![Effect::Release]),
        RestartPlan::Exhausted { attempts } => (
            Life::Stopped,
            vec![Effect::RestartsExhausted { attempts }, Effect::Release],
        ),
        RestartPlan::After { attempt, at } => (
            Life::Backoff { attempt, until: at },
            vec![Effect::ScheduleRestart { attempt, at }],
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BACKOFF: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(10)];

    fn t(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn rule(policy: RestartPolicy, max: u32) -> RestartRule {
        RestartRule { policy, max }
    }

    #[test]
    fn exit_and_eof_finish_whichever_comes_second() {
        let run = Life::Running { pty_eof: false };
        let (l, fx) = step(run, LifeEvent::Exited);
        assert_eq!((l, fx), (Life::Draining, vec![Effect::ArmDrain]));
        assert_eq!(step(l, LifeEvent::PtyEof).1, vec![Effect::Finish]);

        let (l, fx) = step(run, LifeEvent::PtyEof);
        assert_eq!((l, fx.len()), (Life::Running { pty_eof: true }, 0));
        assert_eq!(step(l, LifeEvent::Exited).1, vec![Effect::Finish]);
    }

    #[test]
    fn a_drain_timeout_kills_the_group_then_finishes() {
        let (_, fx) = step(Life::Draining, LifeEvent::DrainTimeout);
        assert_eq!(fx, vec![Effect::KillGroup, Effect::Finish]);
        // Late: the pane finished already.
        assert!(step(Life::Stopped, LifeEvent::DrainTimeout).1.is_empty());
    }

    #[test]
    fn ended_runs_restart_back_off_or_stop_for_good() {
        let after = RestartPlan::After {
            attempt: 1,
            at: t(1000),
        };
        let (l, fx) = step(Life::Draining, LifeEvent::Ended { restart: after });
        assert_eq!(
            l,
            Life::Backoff {
                attempt: 1,
                until: t(1000)
            }
        );
        assert_eq!(
            fx,
            vec![Effect::ScheduleRestart {
                attempt: 1,
                at: t(1000)
            }]
        );
        assert_eq!(step(l, LifeEvent::BackoffDue), (l, vec![Effect::Start]));
        assert_eq!(
            step(l, LifeEvent::Spawned).0,
            Life::Running { pty_eof: false }
        );
        assert_eq!(
            step(l, LifeEvent::Stop),
            (Life::Stopped, vec![Effect::CancelRestart, Effect::Release])
        );
        let gone = RestartPlan::Exhausted { attempts: 3 };
        assert_eq!(
            step(Life::Draining, LifeEvent::Ended { restart: gone }),
            (
                Life::Stopped,
                vec![Effect::RestartsExhausted { attempts: 3 }, Effect::Release]
            )
        );
        let no = RestartPlan::No;
        assert_eq!(
            step(
                Life::Running { pty_eof: false },
                LifeEvent::SpawnFailed { restart: no }
            ),
            (Life::Stopped, vec![Effect::Release])
        );
    }

    #[test]
    fn restart_policy_decides_by_final_state() {
        let plan = |p, s| plan_restart(rule(p, 5), 0, s, Duration::ZERO, &BACKOFF, t(0));
        assert_eq!(
            plan(RestartPolicy::Never, AgentState::Error),
            RestartPlan::No
        );
        assert_eq!(
            plan(RestartPolicy::OnFailure, AgentState::Done),
            RestartPlan::No
        );
        let first = RestartPlan::After {
            attempt: 1,
            at: t(1000),
        };
        assert_eq!(plan(RestartPolicy::OnFailure, AgentState::Error), first);
        assert_eq!(plan(RestartPolicy::Always, AgentState::Done), first);
    }

    #[test]
    fn backoff_climbs_holds_at_its_last_step_and_runs_out() {
        let r = rule(RestartPolicy::Always, 3);
        let s = AgentState::Error;
        let at = |n| plan_restart(r, n, s, Duration::ZERO, &BACKOFF, t(0));
        assert_eq!(
            at(1),
            RestartPlan::After {
                attempt: 2,
                at: t(10_000)
            }
        );
        assert_eq!(
            at(2),
            RestartPlan::After {
                attempt: 3,
                at: t(10_000)
            }
        );
        assert_eq!(at(3), RestartPlan::Exhausted { attempts: 3 });
        // A run longer than the last step was healthy: the count resets.
        let healthy = plan_restart(r, 3, s, Duration::from_secs(10), &BACKOFF, t(0));
        assert_eq!(
            healthy,
            RestartPlan::After {
                attempt: 1,
                at: t(1000)
            }
        );
        assert_eq!(
            plan_restart(r, 0, s, Duration::ZERO, &[], t(0)),
            RestartPlan::Exhausted { attempts: 0 }
        );
    }
}
