//! The orchestrator's dispatch: which pending task goes to which idle agent.
//!
//! Coleo's brain assigns queued work to idle arms; here that choice is one
//! pure function of the queue, the idle agents and the time
//! ([`Dispatcher::plan`]), so it is unit-tested and gives the same answer
//! for the same inputs. The daemon (`daemon::dispatch`) gathers the idle
//! agents, claims each chosen task on the agent's behalf
//! (`TaskQueue::dispatch`, journalled as `TaskEvent::Dispatched`) and
//! writes the task to the agent's input in its own protocol
//! (`taxonomy::input`), with the text of [`render`].
//!
//! The rules: the pending task an operator moved up first, then the most
//! urgent, then the oldest (`Task::queue_order`, the order `task-claim`
//! takes); each goes to the agent idle longest among those it
//! fits: its role (a task with a role to agents of that role; one without
//! to anyone), its jail (`Task::open_to`), and not an agent that let the
//! same task's claim lapse within `retry_after` ([`Dispatcher::released`]).
//! One task per agent.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::tasks::{Task, TaskQueue, TaskStatus};
use crate::core::time::Timestamp;

/// The text an agent is given with its task when the configuration names
/// none. `{id}`, `{title}` and `{description}` are the task's.
pub const DEFAULT_PROMPT: &str = "colibri dispatch: task {id} is yours: {title}\n\
{description}\n\
Acknowledge it now with `colibri task ack {id}` (within the acknowledgement window, \
or it goes to another agent), do it, then report with `colibri task done {id} RESULT` \
or `colibri task fail {id} REASON`.";

/// How long an agent that let a dispatched task's claim lapse is not
/// offered that task again.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(600);

/// An agent that could take a task now: running, idle, not paused,
/// holding none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdleAgent<'a> {
    pub pane: &'a str,
    pub role: Option<&'a str>,
    /// `None`: on the host.
    pub jail: Option<&'a str>,
    /// When it turned idle: the longest idle is served first.
    pub since: Timestamp,
}

/// One decision: task `task` goes to pane `pane`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    pub task: u64,
    pub pane: String,
}

/// Whether an agent of `agent_role` may be given a task of `task_role`:
/// a task with a role is that role's alone; one without is anyone's.
pub fn role_fits(task_role: Option<&str>, agent_role: Option<&str>) -> bool {
    match task_role {
        None => true,
        Some(want) => agent_role == Some(want),
    }
}

/// `pane` is not offered `task` before `until` (milliseconds since the
/// epoch): the dispatcher's memory as a plan record keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldOff {
    pub task: u64,
    pub pane: String,
    pub until: u64,
}

/// The dispatcher's memory: which agent let which task's claim lapse, and
/// until when it is not offered that task again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dispatcher {
    held_off: BTreeMap<(u64, String), Timestamp>,
}

impl Dispatcher {
    /// `pane`'s claim of `task` lapsed (no acknowledgement) at `now`: it is
    /// not offered that task again before `now + retry_after`.
    pub fn released(&mut self, task: u64, pane: &str, now: Timestamp, retry_after: Duration) {
        self.held_off
            .insert((task, pane.to_string()), now.plus(retry_after));
    }

    /// A dispatcher remembering `held` (a plan record's hold-offs).
    pub fn with_held_off(held: &[HeldOff]) -> Dispatcher {
        Dispatcher {
            held_off: held
                .iter()
                .map(|h| ((h.task, h.pane.clone()), Timestamp::from_millis(h.until)))
                .collect(),
        }
    }

    /// The hold-offs still in force at `now`.
    pub fn held_off_at(&self, now: Timestamp) -> impl Iterator<Item = HeldOff> + '_ {
        self.held_off
            .iter()
            .filter(move |(_, until)| **until > now)
            .map(|((task, pane), until)| HeldOff {
                task: *task,
                pane: pane.clone(),
                until: until.as_millis(),
            })
    }

    /// Whether `pane` is held off `task` at `now`.
    pub fn held_off(&self, task: u64, pane: &str, now: Timestamp) -> bool {
        self.held_off
            .get(&(task, pane.to_string()))
            .is_some_and(|until| *until > now)
    }

    /// Entries held (bounded by the tasks released and forgotten by
    /// [`Dispatcher::plan`] once past).
    pub fn len(&self) -> usize {
        self.held_off.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held_off.is_empty()
    }

    /// The assignments to make at `now`: each pending task, most urgent
    /// then oldest first, to the longest-idle agent it fits; each agent at
    /// most once. Forgets the hold-offs that have passed.
    pub fn plan(
        &mut self,
        queue: &TaskQueue,
        idle: &[IdleAgent<'_>],
        now: Timestamp,
    ) -> Vec<Assignment> {
        self.held_off.retain(|_, until| *until > now);
        if idle.is_empty() {
            return Vec::new();
        }
        let mut agents: Vec<&IdleAgent<'_>> = idle.iter().collect();
        agents.sort_by(|a, b| (a.since, a.pane).cmp(&(b.since, b.pane)));
        let mut free = vec![true; agents.len()];
        let mut pending: Vec<&Task> = queue
            .iter()
            .filter(|t| t.status == TaskStatus::Pending)
            .collect();
        pending.sort_by_key(|t| t.queue_order());
        let mut out = Vec::new();
        let mut left = agents.len();
        for task in pending {
            if left == 0 {
                break;
            }
            let chosen = agents.iter().enumerate().position(|(i, a)| {
                free[i]
                    && role_fits(task.spec.role.as_deref(), a.role)
                    && task.open_to(a.jail)
                    && !self.held_off(task.id, a.pane, now)
            });
            if let Some(i) = chosen {
                free[i] = false;
                left -= 1;
                out.push(Assignment {
                    task: task.id,
                    pane: agents[i].pane.to_string(),
                });
            }
        }
        out
    }
}

/// The dispatch text for `task` from `template`: `{id}`, `{title}` and
/// `{description}` replaced by the task's (each once through, so a title
/// that contains `{id}` stays as written).
pub fn render(template: &str, task: &Task) -> String {
    let mut out = String::with_capacity(template.len() + task.spec.title.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open..];
        let field = ["{id}", "{title}", "{description}"]
            .into_iter()
            .find(|f| after.starts_with(f));
        match field {
            Some("{id}") => out.push_str(&task.id.to_string()),
            Some("{title}") => out.push_str(&task.spec.title),
            Some(_) => out.push_str(&task.spec.description),
            None => {
                out.push('{');
                rest = &after[1..];
                continue;
            }
        }
        rest = &after[field.map_or(1, str::len)..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::tasks::{NewTask, Priority, ACK_TIMEOUT};

    fn at(s: u64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + s * 1000)
    }

    fn add(q: &mut TaskQueue, title: &str, priority: Priority, role: Option<&str>) -> u64 {
        let task = NewTask {
            title: title.into(),
            priority,
            role: role.map(str::to_string),
            ..NewTask::default()
        };
        q.add(task, at(0)).map(|e| e.id()).unwrap_or(0)
    }

    fn agent<'a>(pane: &'a str, role: Option<&'a str>, since: u64) -> IdleAgent<'a> {
        IdleAgent {
            pane,
            role,
            jail: None,
            since: at(since),
        }
    }

    fn pairs(plan: &[Assignment]) -> Vec<(u64, &str)> {
        plan.iter().map(|a| (a.task, a.pane.as_str())).collect()
    }

    #[test]
    fn the_most_urgent_task_goes_to_the_agent_idle_longest() {
        let mut q = TaskQueue::new();
        let low = add(&mut q, "low", Priority::Low, None);
        let urgent = add(&mut q, "urgent", Priority::Urgent, None);
        let mut d = Dispatcher::default();
        let idle = [agent("new", None, 50), agent("old", None, 10)];
        let plan = d.plan(&q, &idle, at(60));
        assert_eq!(pairs(&plan), [(urgent, "old"), (low, "new")]);
    }

    #[test]
    fn a_role_task_waits_for_its_role_and_an_agent_takes_one_task() {
        let mut q = TaskQueue::new();
        let db = add(&mut q, "db", Priority::Urgent, Some("db"));
        let any = add(&mut q, "any", Priority::Low, None);
        let other = add(&mut q, "other", Priority::Low, None);
        let mut d = Dispatcher::default();
        // The only agent has another role: it takes a task for anyone.
        let plan = d.plan(&q, &[agent("web", Some("web"), 0)], at(1));
        assert_eq!(pairs(&plan), [(any, "web")]);
        // A db agent idle longest gets the db task; the other agent the next.
        let idle = [agent("web", Some("web"), 5), agent("dba", Some("db"), 0)];
        let plan = d.plan(&q, &idle, at(6));
        assert_eq!(pairs(&plan), [(db, "dba"), (any, "web")]);
        assert!(plan.iter().all(|a| a.task != other), "one task per agent");
    }

    #[test]
    fn a_jail_task_goes_only_to_that_jails_agents() {
        let mut q = TaskQueue::new();
        let task = NewTask {
            title: "in db".into(),
            jail: Some("db".into()),
            ..NewTask::default()
        };
        let id = q.add(task, at(0)).map(|e| e.id()).unwrap_or(0);
        let mut d = Dispatcher::default();
        let host = agent("host", None, 0);
        let web = IdleAgent {
            jail: Some("web"),
            ..agent("web", None, 0)
        };
        assert!(d.plan(&q, &[host.clone(), web], at(1)).is_empty());
        let db = IdleAgent {
            jail: Some("db"),
            ..agent("db", None, 9)
        };
        assert_eq!(pairs(&d.plan(&q, &[host, db], at(10))), [(id, "db")]);
    }

    #[test]
    fn an_agent_that_let_a_claim_lapse_is_not_offered_it_again_for_a_while() {
        let mut q = TaskQueue::new();
        let id = add(&mut q, "t", Priority::Medium, None);
        let mut d = Dispatcher::default();
        let plan = d.plan(&q, &[agent("a", None, 0)], at(1));
        assert_eq!(pairs(&plan), [(id, "a")]);
        q.dispatch(id, "a", at(1), ACK_TIMEOUT).unwrap();
        assert!(
            d.plan(&q, &[agent("b", None, 0)], at(2)).is_empty(),
            "claimed"
        );
        for ev in q.expire(at(1 + 180)) {
            d.released(ev.id(), "a", at(181), Duration::from_secs(60));
        }
        assert_eq!(q.get(id).map(|t| t.releases), Some(1));
        // Within the minute: not to a, though a is idle longest.
        let both = [agent("a", None, 0), agent("b", None, 100)];
        assert!(d.plan(&q, &both[..1], at(200)).is_empty());
        assert_eq!(pairs(&d.plan(&q, &both, at(200))), [(id, "b")]);
        // After it: a again, and the hold-off is forgotten.
        assert_eq!(pairs(&d.plan(&q, &both, at(241))), [(id, "a")]);
        assert!(d.is_empty());
    }

    #[test]
    fn the_plan_is_the_same_for_the_same_inputs_whatever_the_agents_order() {
        let mut q = TaskQueue::new();
        for n in 0..5 {
            add(&mut q, &format!("t{n}"), Priority::Medium, None);
        }
        let mut d = Dispatcher::default();
        let a = [
            agent("x", None, 3),
            agent("y", None, 3),
            agent("z", None, 1),
        ];
        let b = [a[2].clone(), a[1].clone(), a[0].clone()];
        assert_eq!(d.plan(&q, &a, at(9)), d.plan(&q, &b, at(9)));
        assert_eq!(
            pairs(&d.plan(&q, &a, at(9))),
            [(1, "z"), (2, "x"), (3, "y")]
        );
    }

    #[test]
    fn the_text_names_the_task() {
        let mut q = TaskQueue::new();
        let task = NewTask {
            title: "fix {id}".into(),
            description: "the {braces} stay".into(),
            ..NewTask::default()
        };
        q.add(task, at(0)).unwrap();
        let t = q.get(1).unwrap();
        assert_eq!(
            render("T{id} {title}: {description} {", t),
            "T1 fix {id}: the {braces} stay {"
        );
        assert!(render(DEFAULT_PROMPT, t).contains("colibri task ack 1"));
    }
}
