//! The orchestrator's dispatch cost (docs/ORCHESTRATOR.md): 1,000 tasks
//! over 100 idle agents, as the daemon runs it. Each round asks
//! `Dispatcher::plan` for the assignments, claims each on its agent's
//! behalf (`TaskQueue::dispatch`), and the agents acknowledge and finish
//! them, which frees them for the next round: ten rounds of 100.
//! Reported per task. Before timing, one run checks that every task is
//! given exactly once and none is lost.
//!
//! Also timed: a plan's journal record (`PlanRecord`, built and encoded as
//! the daemon writes it), and `colibri fold`'s replay of the whole run's
//! journal (`replay_journal`), after checking every plan replays the same.
//!
//! Run: `cargo bench -p colibri-benches --bench dispatch`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use colibri::core::dispatch::{Dispatcher, IdleAgent};
use colibri::core::dispatch_replay::{replay_journal, PlanLine, PlanRecord};
use colibri::core::tasks::{Actor, NewTask, Priority, TaskQueue, TaskStatus, ACK_TIMEOUT};
use colibri::core::time::Timestamp;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const TASKS: usize = 1000;
const AGENTS: usize = 100;
const ROLES: [Option<&str>; 4] = [None, Some("dev"), Some("qa"), Some("ops")];

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(1_800_000_000_000 + ms)
}

fn queue() -> TaskQueue {
    queue_and_journal().0
}

/// The 1,000 tasks added to a fresh queue, and the journal lines of
/// their `added` events.
fn queue_and_journal() -> (TaskQueue, Vec<Vec<u8>>) {
    let mut q = TaskQueue::new();
    let mut lines = Vec::with_capacity(TASKS);
    for n in 0..TASKS {
        let task = NewTask {
            title: format!("task {n}"),
            priority: [Priority::Low, Priority::Medium, Priority::High][n % 3],
            role: ROLES[n % ROLES.len()].map(str::to_string),
            ..NewTask::default()
        };
        let ev = q
            .add(task, at(0))
            .unwrap_or_else(|_| unreachable!("a valid task"));
        lines.push(serde_json::to_vec(&ev).unwrap_or_default());
    }
    (q, lines)
}

/// Dispatches every task of `q` to `panes` round after round; returns who
/// got each task.
fn run(q: &mut TaskQueue, panes: &[String]) -> BTreeMap<u64, Vec<String>> {
    let mut d = Dispatcher::default();
    let mut given: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut now = 1;
    loop {
        let idle = idle(panes);
        let plan = d.plan(q, &idle, at(now));
        if plan.is_empty() {
            return given;
        }
        for a in &plan {
            let ok = q.dispatch(a.task, &a.pane, at(now), ACK_TIMEOUT).is_ok()
                && q.ack(a.task, Actor::Agent(&a.pane), at(now)).is_ok()
                && q.finish(a.task, Actor::Agent(&a.pane), true, None, at(now))
                    .is_ok();
            assert!(ok, "task {} to {}", a.task, a.pane);
            given.entry(a.task).or_default().push(a.pane.clone());
        }
        now += 1;
    }
}

/// The task journal of a full run, as the daemon writes it: each plan's
/// record before the task events that carry it out.
fn journal(panes: &[String]) -> Vec<Vec<u8>> {
    let (mut q, mut lines) = queue_and_journal();
    let mut d = Dispatcher::default();
    for now in 1.. {
        let idle = idle(panes);
        let plan = d.plan(&q, &idle, at(now));
        if plan.is_empty() {
            return lines;
        }
        let record = PlanLine::Planned(PlanRecord::new(at(now), &idle, &d, &plan));
        lines.push(serde_json::to_vec(&record).unwrap_or_default());
        for a in &plan {
            let evs = [
                q.dispatch(a.task, &a.pane, at(now), ACK_TIMEOUT),
                q.ack(a.task, Actor::Agent(&a.pane), at(now)),
                q.finish(a.task, Actor::Agent(&a.pane), true, None, at(now)),
            ];
            for ev in evs.into_iter().flatten() {
                lines.push(serde_json::to_vec(&ev).unwrap_or_default());
            }
        }
    }
    lines
}

fn idle(panes: &[String]) -> Vec<IdleAgent<'_>> {
    panes
        .iter()
        .enumerate()
        .map(|(i, p)| IdleAgent {
            pane: p,
            role: ROLES[i % ROLES.len()],
            jail: None,
            since: at(i as u64),
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let panes: Vec<String> = (0..AGENTS).map(|i| format!("pane-{i:03}")).collect();
    // No task lost or given twice.
    let mut q = queue();
    let given = run(&mut q, &panes);
    assert_eq!(given.len(), TASKS, "every task given");
    assert!(given.values().all(|p| p.len() == 1), "none twice");
    assert!(q.iter().all(|t| t.status == TaskStatus::Done));

    let mut g = c.benchmark_group("dispatch");
    g.measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Elements(TASKS as u64));
    g.bench_function("1000_tasks_100_agents", |b| {
        b.iter_batched(
            queue,
            |mut q| black_box(run(&mut q, &panes)),
            criterion::BatchSize::LargeInput,
        )
    });
    // One plan over the full queue: the cost of a single dispatch round.
    let full = queue();
    g.throughput(Throughput::Elements(AGENTS as u64));
    g.bench_function("one_plan_1000_pending_100_idle", |b| {
        let idle = idle(&panes);
        let mut d = Dispatcher::default();
        b.iter(|| black_box(d.plan(&full, &idle, at(1))))
    });
    // The record the daemon journals for that plan: built and encoded.
    g.bench_function("plan_record_100_idle", |b| {
        let idle = idle(&panes);
        let mut d = Dispatcher::default();
        let plan = d.plan(&full, &idle, at(1));
        b.iter(|| {
            let record = PlanLine::Planned(PlanRecord::new(at(1), &idle, &d, &plan));
            black_box(serde_json::to_vec(&record).unwrap_or_default())
        })
    });
    // Fold's replay of the whole run's journal: every plan the same.
    let lines = journal(&panes);
    let replay = replay_journal(lines.iter().map(Vec::as_slice));
    assert_eq!(replay.plans.len(), TASKS / AGENTS, "a plan a round");
    assert!(replay.all_same(), "every plan replays the same");
    assert_eq!(replay.unplanned, 0);
    g.throughput(Throughput::Elements(TASKS as u64));
    g.bench_function("fold_replay_1000_tasks_journal", |b| {
        b.iter(|| black_box(replay_journal(lines.iter().map(Vec::as_slice))))
    });
    g.finish();
}

criterion_group!(dispatch, benches);
criterion_main!(dispatch);
