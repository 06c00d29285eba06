//! The orchestrator's dispatch cost (docs/ORCHESTRATOR.md): 1,000 tasks
//! over 100 idle agents, as the daemon runs it. Each round asks
//! `Dispatcher::plan` for the assignments, claims each on its agent's
//! behalf (`TaskQueue::dispatch`), and the agents acknowledge and finish
//! them, which frees them for the next round: ten rounds of 100.
//! Reported per task. Before timing, one run checks that every task is
//! given exactly once and none is lost.
//!
//! Run: `cargo bench -p colibri-benches --bench dispatch`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use colibri::core::dispatch::{Dispatcher, IdleAgent};
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
    let mut q = TaskQueue::new();
    for n in 0..TASKS {
        let priority = [Priority::Low, Priority::Medium, Priority::High][n % 3];
        let task = NewTask {
            title: format!("task {n}"),
            priority,
            role: ROLES[n % ROLES.len()].map(str::to_string),
            ..NewTask::default()
        };
        if q.add(task, at(0)).is_err() {
            unreachable!("a valid task");
        }
    }
    q
}

/// Dispatches every task of `q` to `panes` round after round; returns who
/// got each task.
fn run(q: &mut TaskQueue, panes: &[String]) -> BTreeMap<u64, Vec<String>> {
    let mut d = Dispatcher::default();
    let mut given: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut now = 1;
    loop {
        let idle: Vec<IdleAgent<'_>> = panes
            .iter()
            .enumerate()
            .map(|(i, p)| IdleAgent {
                pane: p,
                role: ROLES[i % ROLES.len()],
                jail: None,
                since: at(i as u64),
            })
            .collect();
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
        let idle: Vec<IdleAgent<'_>> = panes
            .iter()
            .enumerate()
            .map(|(i, p)| IdleAgent {
                pane: p,
                role: ROLES[i % ROLES.len()],
                jail: None,
                since: at(i as u64),
            })
            .collect();
        let mut d = Dispatcher::default();
        b.iter(|| black_box(d.plan(&full, &idle, at(1))))
    });
    g.finish();
}

criterion_group!(dispatch, benches);
criterion_main!(dispatch);
