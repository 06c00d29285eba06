//! The orchestrator's decisions kept in the task journal, and their replay.
//!
//! [`Dispatcher::plan`] is a pure function of the queue, the idle agents,
//! the hold-offs and the time. The queue is the journal's own (its task
//! events rebuild it through `TaskQueue::apply`); the rest is what the
//! daemon saw of its panes at that moment, which no task event holds. So
//! each run of the plan that gives anything is journalled as a `planned`
//! line carrying those inputs and what it gave ([`PlanRecord`]), just
//! before the `dispatched` events that carry it out. [`replay_journal`]
//! reads a journal back, rebuilds the queue as it stood before each plan,
//! runs the plan again on the recorded inputs and compares: `colibri fold
//! tasks.jsonl` shows the decisions and whether the code gives them again.
//! The runners' plan (`core::runners::plan`) is kept and replayed the same
//! way, as a `runners` line ([`RunnersRecord`]). The escalation ladder's
//! inputs are all events, so they are journalled as such (`stuck`,
//! `productive`, `ladder_resumed`) and the replay climbs each agent's
//! [`Ladder`] again from them, comparing each rung with the one recorded.

use serde::{Deserialize, Serialize};

use std::time::Duration;

use std::collections::BTreeMap;

use crate::core::dispatch::{Assignment, Dispatcher, HeldOff, IdleAgent};
use crate::core::escalation::{Ladder, Rung};
use crate::core::runners::{Ready, RoleAgent, Runner, RunnerStep};
use crate::core::tasks::{TaskEvent, TaskQueue};
use crate::core::time::Timestamp;

/// An idle agent as a plan saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedIdle {
    pub pane: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jail: Option<String>,
    /// When it turned idle, milliseconds since the epoch.
    pub since: u64,
}

/// One run of the plan: its inputs beside the queue, and what it gave.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanRecord {
    /// When it ran, milliseconds since the epoch.
    pub at: u64,
    pub idle: Vec<RecordedIdle>,
    /// The hold-offs in force for the idle agents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_off: Vec<HeldOff>,
    pub given: Vec<Assignment>,
}

impl PlanRecord {
    /// The record of a plan run at `now` over `idle` that gave `given`,
    /// with the hold-offs of `dispatcher` that concern those agents.
    pub fn new(
        now: Timestamp,
        idle: &[IdleAgent<'_>],
        dispatcher: &Dispatcher,
        given: &[Assignment],
    ) -> PlanRecord {
        let held_off = dispatcher
            .held_off_at(now)
            .filter(|h| idle.iter().any(|a| a.pane == h.pane))
            .collect();
        PlanRecord {
            at: now.as_millis(),
            idle: idle
                .iter()
                .map(|a| RecordedIdle {
                    pane: a.pane.to_string(),
                    role: a.role.map(str::to_string),
                    jail: a.jail.map(str::to_string),
                    since: a.since.as_millis(),
                })
                .collect(),
            held_off,
            given: given.to_vec(),
        }
    }

    /// The plan run again on this record's inputs and `queue`.
    pub fn replan(&self, queue: &TaskQueue) -> Vec<Assignment> {
        let idle: Vec<IdleAgent<'_>> = self
            .idle
            .iter()
            .map(|a| IdleAgent {
                pane: &a.pane,
                role: a.role.as_deref(),
                jail: a.jail.as_deref(),
                since: Timestamp::from_millis(a.since),
            })
            .collect();
        let mut dispatcher = Dispatcher::with_held_off(&self.held_off);
        dispatcher.plan(queue, &idle, Timestamp::from_millis(self.at))
    }
}

/// A role's runner as a runners plan saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedRunner {
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jail: Option<String>,
    pub max: usize,
    pub idle_stop_ms: u64,
}

/// What an agent of a role was doing (`runners::Ready`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordedReady {
    /// Idle and holding nothing since then (milliseconds since the epoch).
    Idle(u64),
    Busy,
    Down,
}

/// An agent with a role as a runners plan saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedRoleAgent {
    pub pane: String,
    pub role: String,
    pub runner: bool,
    pub alive: bool,
    pub ready: RecordedReady,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jail: Option<String>,
}

/// One run of the runners' plan: the runners and agents it saw, the
/// dispatcher's hold-offs, and the steps it gave.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnersRecord {
    pub at: u64,
    pub runners: Vec<RecordedRunner>,
    pub agents: Vec<RecordedRoleAgent>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_off: Vec<HeldOff>,
    pub steps: Vec<RunnerStep>,
}

impl RunnersRecord {
    pub fn new(
        now: Timestamp,
        runners: &[Runner<'_>],
        agents: &[RoleAgent<'_>],
        dispatcher: &Dispatcher,
        steps: &[RunnerStep],
    ) -> RunnersRecord {
        let held_off = dispatcher
            .held_off_at(now)
            .filter(|h| agents.iter().any(|a| a.pane == h.pane))
            .collect();
        RunnersRecord {
            at: now.as_millis(),
            runners: runners
                .iter()
                .map(|r| RecordedRunner {
                    role: r.role.to_string(),
                    jail: r.jail.map(str::to_string),
                    max: r.max,
                    idle_stop_ms: u64::try_from(r.idle_stop.as_millis()).unwrap_or(u64::MAX),
                })
                .collect(),
            agents: agents
                .iter()
                .map(|a| RecordedRoleAgent {
                    pane: a.pane.to_string(),
                    role: a.role.to_string(),
                    runner: a.runner,
                    alive: a.alive,
                    ready: match a.ready {
                        Ready::Idle { since } => RecordedReady::Idle(since.as_millis()),
                        Ready::Busy => RecordedReady::Busy,
                        Ready::Down => RecordedReady::Down,
                    },
                    jail: a.jail.map(str::to_string),
                })
                .collect(),
            held_off,
            steps: steps.to_vec(),
        }
    }

    /// The runners' plan run again on this record's inputs and `queue`.
    pub fn replan(&self, queue: &TaskQueue) -> Vec<RunnerStep> {
        let runners: Vec<Runner<'_>> = self
            .runners
            .iter()
            .map(|r| Runner {
                role: &r.role,
                jail: r.jail.as_deref(),
                max: r.max,
                idle_stop: Duration::from_millis(r.idle_stop_ms),
            })
            .collect();
        let agents: Vec<RoleAgent<'_>> = self
            .agents
            .iter()
            .map(|a| RoleAgent {
                pane: &a.pane,
                role: &a.role,
                runner: a.runner,
                alive: a.alive,
                ready: match a.ready {
                    RecordedReady::Idle(since) => Ready::Idle {
                        since: Timestamp::from_millis(since),
                    },
                    RecordedReady::Busy => Ready::Busy,
                    RecordedReady::Down => Ready::Down,
                },
                jail: a.jail.as_deref(),
            })
            .collect();
        let dispatcher = Dispatcher::with_held_off(&self.held_off);
        crate::core::runners::plan(
            &runners,
            queue,
            &agents,
            &dispatcher,
            Timestamp::from_millis(self.at),
        )
    }
}

/// A task journal's line: a task event, or a plan's record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum JournalLine {
    Task(TaskEvent),
    Plan(PlanLine),
}

/// A [`PlanRecord`] as the journal writes it: `{"ev":"planned",…}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum PlanLine {
    Planned(PlanRecord),
    Runners(RunnersRecord),
    /// `pane` was caught stuck (`cause`) and climbed to `rung`.
    Stuck {
        pane: String,
        at: u64,
        cause: String,
        rung: Rung,
    },
    /// `pane` did productive work: back to the ladder's bottom.
    Productive {
        pane: String,
        at: u64,
    },
    /// colibrid started with `pane` at rung `next` (its agent records).
    LadderResumed {
        pane: String,
        at: u64,
        next: u8,
    },
    /// colibrid started: every ladder starts empty, but those its agent
    /// records bring back (`ladder_resumed` lines after it).
    Started {
        at: u64,
    },
    /// The operator answered `pane`'s decide item: let it go on (back to
    /// the ladder's bottom) or stop it.
    Decided {
        pane: String,
        at: u64,
        go_on: bool,
    },
}

/// Whether `line` reads as a line of a task journal.
pub fn is_journal_line(line: &[u8]) -> bool {
    serde_json::from_slice::<JournalLine>(line).is_ok()
}

/// One recorded plan and the plan run again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayedPlan {
    /// The journal line of the record (1-based).
    pub line: u64,
    pub at: u64,
    /// How many agents were idle.
    pub idle: usize,
    pub given: Vec<Assignment>,
    pub replayed: Vec<Assignment>,
    /// Of `given`, those a `dispatched` event carried out.
    pub handed_over: Vec<Assignment>,
}

impl ReplayedPlan {
    pub fn same(&self) -> bool {
        self.given == self.replayed
    }
}

/// One recorded runners plan and the plan run again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayedRunners {
    pub line: u64,
    pub at: u64,
    pub steps: Vec<RunnerStep>,
    pub replayed: Vec<RunnerStep>,
}

impl ReplayedRunners {
    pub fn same(&self) -> bool {
        self.steps == self.replayed
    }
}

/// One recorded climb of the ladder and the climb replayed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayedRung {
    pub line: u64,
    pub at: u64,
    pub pane: String,
    pub cause: String,
    pub rung: Rung,
    pub replayed: Rung,
}

/// What a journal's replay found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalReplay {
    pub plans: Vec<ReplayedPlan>,
    pub runners: Vec<ReplayedRunners>,
    pub rungs: Vec<ReplayedRung>,
    /// Task events applied.
    pub events: usize,
    /// Lines that read as neither (a torn or hand-edited line).
    pub skipped: usize,
    /// `dispatched` events no recorded plan gave: from a journal written
    /// before plans were recorded, or a record that was lost.
    pub unplanned: usize,
}

impl JournalReplay {
    /// The dispatch plans whose replay differs from what was recorded.
    pub fn differing(&self) -> impl Iterator<Item = &ReplayedPlan> {
        self.plans.iter().filter(|p| !p.same())
    }

    /// Whether every recorded decision, dispatch and runners, replays the same.
    pub fn all_same(&self) -> bool {
        self.differing().next().is_none()
            && self.runners.iter().all(ReplayedRunners::same)
            && self.rungs.iter().all(|r| r.rung == r.replayed)
    }
}

/// Replays a task journal's lines in order: the queue is rebuilt event by
/// event, and each plan record is run again against the queue as it stood
/// when the record was written.
pub fn replay_journal<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> JournalReplay {
    let mut queue = TaskQueue::new();
    let mut ladders: BTreeMap<String, Ladder> = BTreeMap::new();
    let mut out = JournalReplay::default();
    for (n, line) in lines.into_iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<JournalLine>(line) {
            Ok(JournalLine::Task(ev)) => {
                if let TaskEvent::Dispatched { id, by, .. } = &ev {
                    handed_over(&mut out, *id, by);
                }
                queue.apply(&ev);
                out.events += 1;
            }
            Ok(JournalLine::Plan(PlanLine::Planned(record))) => {
                out.plans.push(ReplayedPlan {
                    line: n as u64 + 1,
                    at: record.at,
                    idle: record.idle.len(),
                    replayed: record.replan(&queue),
                    given: record.given,
                    handed_over: Vec::new(),
                });
            }
            Ok(JournalLine::Plan(PlanLine::Runners(record))) => {
                out.runners.push(ReplayedRunners {
                    line: n as u64 + 1,
                    at: record.at,
                    replayed: record.replan(&queue),
                    steps: record.steps,
                });
            }
            Ok(JournalLine::Plan(PlanLine::Stuck {
                pane,
                at,
                cause,
                rung,
            })) => {
                let replayed = ladders
                    .entry(pane.clone())
                    .or_default()
                    .stuck(Timestamp::from_millis(at));
                out.rungs.push(ReplayedRung {
                    line: n as u64 + 1,
                    at,
                    pane,
                    cause,
                    rung,
                    replayed,
                });
            }
            Ok(JournalLine::Plan(PlanLine::Productive { pane, .. })) => {
                ladders.remove(&pane);
            }
            Ok(JournalLine::Plan(PlanLine::Started { .. })) => ladders.clear(),
            Ok(JournalLine::Plan(PlanLine::Decided { pane, go_on, .. })) => {
                if go_on {
                    ladders.remove(&pane);
                }
            }
            Ok(JournalLine::Plan(PlanLine::LadderResumed { pane, at, next })) => {
                ladders.insert(pane, Ladder::resumed(next, Timestamp::from_millis(at)));
            }
            Err(_) => out.skipped += 1,
        }
    }
    out
}

/// A `dispatched` event: the hand-over of the latest plan's assignment,
/// or one no plan recorded.
fn handed_over(out: &mut JournalReplay, task: u64, pane: &str) {
    let Some(plan) = out.plans.last_mut() else {
        out.unplanned += 1;
        return;
    };
    let planned = plan
        .given
        .iter()
        .find(|a| a.task == task && a.pane == pane)
        .filter(|a| !plan.handed_over.contains(a))
        .cloned();
    match planned {
        Some(a) => plan.handed_over.push(a),
        None => out.unplanned += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::tasks::{NewTask, Priority};
    use std::time::Duration;

    fn at(s: u64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + s * 1000)
    }

    fn line(v: &impl Serialize) -> Vec<u8> {
        serde_json::to_vec(v).unwrap_or_default()
    }

    /// Runs a small orchestrator the daemon's way (plan, record, hand
    /// over) and returns its journal.
    fn journal() -> Vec<Vec<u8>> {
        let mut q = TaskQueue::new();
        let mut d = Dispatcher::default();
        let mut lines = Vec::new();
        let add = |q: &mut TaskQueue, title: &str, priority, lines: &mut Vec<Vec<u8>>| {
            let task = NewTask {
                title: title.into(),
                priority,
                ..NewTask::default()
            };
            if let Ok(ev) = q.add(task, at(0)) {
                lines.push(line(&ev));
            }
        };
        add(&mut q, "low", Priority::Low, &mut lines);
        add(&mut q, "high", Priority::High, &mut lines);
        add(&mut q, "medium", Priority::Medium, &mut lines);
        // `b` let task 2's claim lapse: it is held off it.
        d.released(2, "b", at(1), Duration::from_secs(600));
        let idle = [
            IdleAgent {
                pane: "a",
                role: None,
                jail: None,
                since: at(5),
            },
            IdleAgent {
                pane: "b",
                role: None,
                jail: None,
                since: at(2),
            },
        ];
        let given = d.plan(&q, &idle, at(10));
        let record = PlanRecord::new(at(10), &idle, &d, &given);
        lines.push(line(&PlanLine::Planned(record)));
        for a in &given {
            if let Ok(ev) = q.dispatch(a.task, &a.pane, at(10), Duration::from_secs(60)) {
                lines.push(line(&ev));
            }
        }
        lines
    }

    #[test]
    fn a_recorded_plan_replays_to_the_same_assignments() {
        let lines = journal();
        let r = replay_journal(lines.iter().map(Vec::as_slice));
        assert_eq!(r.plans.len(), 1);
        let p = &r.plans[0];
        // High goes to `a` (b, idle longer, is held off it); medium to b.
        let pairs: Vec<(u64, &str)> = p.given.iter().map(|a| (a.task, a.pane.as_str())).collect();
        assert_eq!(pairs, [(2, "a"), (3, "b")]);
        assert!(p.same(), "{p:?}");
        assert_eq!(p.handed_over, p.given);
        assert_eq!((r.events, r.skipped, r.unplanned), (5, 0, 0));
        assert_eq!(r.differing().count(), 0);
    }

    #[test]
    fn a_record_the_code_would_not_give_again_is_reported() {
        let mut lines = journal();
        // Drop the hold-off from the record: the replayed plan gives the
        // high task to `b`, idle longest, unlike what was recorded.
        let plan = lines
            .iter_mut()
            .find(|l| l.starts_with(br#"{"ev":"planned""#))
            .expect("a plan record");
        let mut v: serde_json::Value = serde_json::from_slice(plan).expect("json");
        v["held_off"] = serde_json::json!([]);
        *plan = line(&v);
        let r = replay_journal(lines.iter().map(Vec::as_slice));
        let p = &r.plans[0];
        assert!(!p.same());
        let replayed: Vec<(u64, &str)> = p
            .replayed
            .iter()
            .map(|a| (a.task, a.pane.as_str()))
            .collect();
        assert_eq!(replayed, [(2, "b"), (3, "a")]);
        assert_eq!(r.differing().count(), 1);
    }

    #[test]
    fn a_runners_record_replays_to_the_same_steps_and_a_changed_one_differs() {
        let mut q = TaskQueue::new();
        let mut lines = Vec::new();
        for title in ["one", "two"] {
            let task = NewTask {
                title: title.into(),
                role: Some("build".into()),
                ..NewTask::default()
            };
            if let Ok(ev) = q.add(task, at(0)) {
                lines.push(line(&ev));
            }
        }
        let runners = [Runner {
            role: "build",
            jail: None,
            max: 3,
            idle_stop: Duration::from_secs(60),
        }];
        // One idle agent of the role: one more is started for two tasks.
        let agents = [RoleAgent {
            pane: "a",
            role: "build",
            runner: true,
            alive: true,
            ready: Ready::Idle { since: at(1) },
            jail: None,
        }];
        let d = Dispatcher::default();
        let steps = crate::core::runners::plan(&runners, &q, &agents, &d, at(5));
        assert_eq!(steps.len(), 1);
        let record = RunnersRecord::new(at(5), &runners, &agents, &d, &steps);
        lines.push(line(&PlanLine::Runners(record.clone())));
        let r = replay_journal(lines.iter().map(Vec::as_slice));
        assert_eq!(r.runners.len(), 1);
        assert!(r.all_same(), "{r:?}");
        // Recorded as busy, the agent is no supply: the replay starts two.
        let mut busy = record;
        busy.agents[0].ready = RecordedReady::Busy;
        lines.push(line(&PlanLine::Runners(busy)));
        let r = replay_journal(lines.iter().map(Vec::as_slice));
        assert!(!r.all_same());
        assert_eq!(r.runners[1].replayed.len(), 2);
    }

    #[test]
    fn the_ladder_is_climbed_again_from_its_journalled_events() {
        let stuck = |pane: &str, s: u64, rung: Rung| {
            line(&PlanLine::Stuck {
                pane: pane.into(),
                at: at(s).as_millis(),
                cause: "caught looping".into(),
                rung,
            })
        };
        let mut lines = vec![
            line(&PlanLine::LadderResumed {
                pane: "b".into(),
                at: at(0).as_millis(),
                next: 2,
            }),
            stuck("a", 1, Rung::Interrupt),
            stuck("a", 2, Rung::Compact),
            stuck("b", 3, Rung::Respawn),
            line(&PlanLine::Productive {
                pane: "a".into(),
                at: at(4).as_millis(),
            }),
            stuck("a", 5, Rung::Interrupt),
            // An hour and more after its last climb: the bottom again.
            stuck("b", 3 + 3600, Rung::Interrupt),
            stuck("b", 3 + 3601, Rung::Compact),
            // The operator let it go on from a decide item: the bottom.
            line(&PlanLine::Decided {
                pane: "b".into(),
                at: at(3 + 3602).as_millis(),
                go_on: true,
            }),
            stuck("b", 3 + 3603, Rung::Interrupt),
        ];
        let r = replay_journal(lines.iter().map(Vec::as_slice));
        assert_eq!(r.rungs.len(), 7);
        assert!(r.all_same(), "{r:?}");
        // A start of colibrid that brings no ladder back: the bottom.
        let mut restarted = lines.clone();
        restarted.push(line(&PlanLine::Started {
            at: at(3 + 3604).as_millis(),
        }));
        restarted.push(stuck("b", 3 + 3605, Rung::Interrupt));
        let r = replay_journal(restarted.iter().map(Vec::as_slice));
        assert!(r.all_same(), "{r:?}");
        // Without the productive reset, a's third catch is its third rung.
        lines.remove(4);
        let r = replay_journal(lines.iter().map(Vec::as_slice));
        let a: Vec<Rung> = r
            .rungs
            .iter()
            .filter(|x| x.pane == "a")
            .map(|x| x.replayed)
            .collect();
        assert_eq!(a, [Rung::Interrupt, Rung::Compact, Rung::Respawn]);
        assert!(!r.all_same());
    }

    #[test]
    fn a_journal_without_records_counts_its_handovers_as_unplanned() {
        let lines: Vec<Vec<u8>> = journal()
            .into_iter()
            .filter(|l| !l.starts_with(br#"{"ev":"planned""#))
            .chain([b"{torn".to_vec()])
            .collect();
        let r = replay_journal(lines.iter().map(Vec::as_slice));
        assert!(r.plans.is_empty());
        assert_eq!((r.events, r.skipped, r.unplanned), (5, 1, 2));
        assert!(is_journal_line(&lines[0]));
        assert!(!is_journal_line(br#"{"type":"agent_start"}"#));
    }
}
