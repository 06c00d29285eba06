//! Declared agents against the pane table: what to start, stop, restart.
//!
//! [`plan`] does what `supervisorctl update` does, as a pure function the
//! daemon calls at start-up and on SIGHUP: an agent newly declared starts,
//! one no longer declared stops, one whose launch recipe changed restarts,
//! one whose policy alone changed takes the new policy without losing its
//! process, and one that did not change is not touched. [`apply`] is the
//! table the daemon should hold once it has carried a plan out; the daemon
//! may use it to check itself, and the tests use it to prove the plan.

use crate::core::spec::{Actual, AgentSpec, Fingerprint, StopCause, Wanted};

/// Why the plan is made: at start-up no agent process exists yet, so every
/// declared agent with `autostart` starts and planned stops are forgotten
/// (s6 and supervisord do the same); a reload leaves running agents alone
/// unless their recipe changed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Occasion {
    Start,
    Reload,
}

/// Where a pane came from. Only declared panes are reconciled; a pane
/// spawned by hand is never stopped or restarted by a reload.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    Declared,
    Spawned,
}

/// One named pane of the table, as the plan needs to see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableEntry {
    pub name: String,
    /// Of the recipe the pane was last started or updated with.
    pub fingerprint: Fingerprint,
    pub origin: Origin,
    pub wanted: Wanted,
    pub actual: Actual,
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentChange {
    /// Start the agent with this recipe (newly declared, declared again, or
    /// colibrid starting). Any earlier pane of that name keeps its history.
    Start(AgentSpec),
    /// Record the recipe without starting it (`autostart = false`): wanted
    /// down, by [`StopCause::NoAutostart`].
    Declare(AgentSpec),
    /// Stop the agent, if running, and keep it down: its table left the
    /// config ([`StopCause::Removed`], a planned stop that raises no alert).
    Stop { name: String },
    /// Stop the running agent and start it with this recipe.
    Restart(AgentSpec),
    /// Take over this recipe without touching the process: only its policy
    /// changed, or it is wanted down and starts with it when next started.
    Update(AgentSpec),
    /// The name belongs to a pane spawned by hand; the declared agent is
    /// not started until that pane is removed.
    Clash { name: String },
}

impl AgentChange {
    /// The agent the change is about.
    pub fn name(&self) -> &str {
        match self {
            AgentChange::Start(spec)
            | AgentChange::Declare(spec)
            | AgentChange::Restart(spec)
            | AgentChange::Update(spec) => &spec.name,
            AgentChange::Stop { name } | AgentChange::Clash { name } => name,
        }
    }
}

/// What the daemon log says for each step of a reload: a sentence an
/// operator reads, not the recipe's debug dump (argv, env and all).
impl std::fmt::Display for AgentChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AgentChange::Start(spec) => write!(f, "start declared agent {}", spec.name),
            AgentChange::Declare(spec) => write!(
                f,
                "declare agent {} without starting it (autostart = false)",
                spec.name
            ),
            AgentChange::Stop { name } => write!(f, "stop agent {name} (no longer declared)"),
            AgentChange::Restart(spec) => {
                write!(f, "restart agent {} (its launch changed)", spec.name)
            }
            AgentChange::Update(spec) => write!(
                f,
                "update agent {} (new recipe taken, its process not touched)",
                spec.name
            ),
            AgentChange::Clash { name } => write!(
                f,
                "leave declared agent {name} unstarted (a spawned pane has the name)"
            ),
        }
    }
}

/// The changes that bring `table` to `declared`: stops of removed agents
/// first (in table order), then each declared agent in declaration order.
/// Names in `declared` are unique (they are TOML table keys).
pub fn plan(declared: &[AgentSpec], table: &[TableEntry], occasion: Occasion) -> Vec<AgentChange> {
    let mut changes: Vec<AgentChange> = table
        .iter()
        .filter(|entry| entry.origin == Origin::Declared)
        .filter(|entry| !declared.iter().any(|spec| spec.name == entry.name))
        // A removal already recorded needs no stop, unless its process
        // is somehow still alive.
        .filter(|entry| !is_removed(entry) || entry.actual.is_alive())
        .map(|entry| AgentChange::Stop {
            name: entry.name.clone(),
        })
        .collect();
    for spec in declared {
        let entry = table.iter().find(|entry| entry.name == spec.name);
        if let Some(change) = change_for(spec, entry, occasion) {
            changes.push(change);
        }
    }
    changes
}

fn change_for(
    spec: &AgentSpec,
    entry: Option<&TableEntry>,
    occasion: Occasion,
) -> Option<AgentChange> {
    let entry = match entry {
        Some(entry) if entry.origin == Origin::Spawned => {
            return Some(AgentChange::Clash {
                name: spec.name.clone(),
            })
        }
        Some(entry) if occasion == Occasion::Reload && !is_removed(entry) => entry,
        // New, declared again after a removal, or colibrid starting.
        _ => return Some(first_start(spec)),
    };
    let now = spec.fingerprint();
    if now == entry.fingerprint {
        return None;
    }
    if entry.wanted.is_up() && now.launch != entry.fingerprint.launch {
        Some(AgentChange::Restart(spec.clone()))
    } else {
        Some(AgentChange::Update(spec.clone()))
    }
}

fn first_start(spec: &AgentSpec) -> AgentChange {
    if spec.autostart {
        AgentChange::Start(spec.clone())
    } else {
        AgentChange::Declare(spec.clone())
    }
}

fn is_removed(entry: &TableEntry) -> bool {
    matches!(
        entry.wanted,
        Wanted::Down {
            by: StopCause::Removed,
            ..
        }
    )
}

/// The table once `changes` are carried out: what each change promises.
/// An agent started is running; one stopped for removal is wanted down and,
/// if its process was alive, stopped.
pub fn apply(table: &[TableEntry], changes: &[AgentChange]) -> Vec<TableEntry> {
    let mut table = table.to_vec();
    for change in changes {
        match change {
            AgentChange::Start(spec) => upsert(&mut table, spec, Wanted::Up, Actual::Running),
            AgentChange::Declare(spec) => {
                let down = Wanted::Down {
                    by: StopCause::NoAutostart,
                    reason: None,
                };
                upsert(&mut table, spec, down, Actual::Stopped);
            }
            AgentChange::Restart(spec) => {
                if let Some(entry) = find(&mut table, &spec.name) {
                    entry.fingerprint = spec.fingerprint();
                    entry.actual = Actual::Running;
                }
            }
            AgentChange::Update(spec) => {
                if let Some(entry) = find(&mut table, &spec.name) {
                    entry.fingerprint = spec.fingerprint();
                }
            }
            AgentChange::Stop { name } => {
                if let Some(entry) = find(&mut table, name) {
                    entry.wanted = Wanted::Down {
                        by: StopCause::Removed,
                        reason: None,
                    };
                    if entry.actual.is_alive() {
                        entry.actual = Actual::Stopped;
                    }
                }
            }
            AgentChange::Clash { .. } => {}
        }
    }
    table
}

fn find<'a>(table: &'a mut [TableEntry], name: &str) -> Option<&'a mut TableEntry> {
    table
        .iter_mut()
        .find(|entry| entry.name == name && entry.origin == Origin::Declared)
}

fn upsert(table: &mut Vec<TableEntry>, spec: &AgentSpec, wanted: Wanted, actual: Actual) {
    let fresh = TableEntry {
        name: spec.name.clone(),
        fingerprint: spec.fingerprint(),
        origin: Origin::Declared,
        wanted,
        actual,
    };
    match find(table, &spec.name) {
        Some(entry) => *entry = fresh,
        None => table.push(fresh),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::core::spec::RestartPolicy;

    #[test]
    fn changes_read_as_sentences_in_the_log() {
        let spec = AgentSpec::new("decl", vec!["pi".into(), "--mode".into(), "json".into()]);
        let said = |c: AgentChange| c.to_string();
        assert_eq!(
            said(AgentChange::Start(spec.clone())),
            "start declared agent decl"
        );
        assert_eq!(
            said(AgentChange::Stop { name: "old".into() }),
            "stop agent old (no longer declared)"
        );
        assert_eq!(
            said(AgentChange::Restart(spec.clone())),
            "restart agent decl (its launch changed)"
        );
        for c in [
            AgentChange::Declare(spec.clone()),
            AgentChange::Update(spec),
            AgentChange::Clash {
                name: "decl".into(),
            },
        ] {
            let s = said(c);
            assert!(s.contains("decl") && !s.contains("AgentSpec"), "{s}");
        }
    }

    fn spec(name: &str, argv: &[&str]) -> AgentSpec {
        AgentSpec::new(name, argv.iter().map(|s| (*s).to_owned()).collect())
    }

    fn running(spec: &AgentSpec) -> TableEntry {
        TableEntry {
            name: spec.name.clone(),
            fingerprint: spec.fingerprint(),
            origin: Origin::Declared,
            wanted: Wanted::Up,
            actual: Actual::Running,
        }
    }

    fn down(by: StopCause) -> Wanted {
        Wanted::Down { by, reason: None }
    }

    #[test]
    fn an_added_agent_starts() {
        let a = spec("alpha", &["pi"]);
        assert_eq!(
            plan(std::slice::from_ref(&a), &[], Occasion::Reload),
            vec![AgentChange::Start(a)]
        );
    }

    #[test]
    fn an_added_agent_without_autostart_is_only_declared() {
        let mut a = spec("alpha", &["pi"]);
        a.autostart = false;
        assert_eq!(
            plan(std::slice::from_ref(&a), &[], Occasion::Reload),
            vec![AgentChange::Declare(a)]
        );
    }

    #[test]
    fn a_removed_agent_stops_once() {
        let a = spec("alpha", &["pi"]);
        let table = vec![running(&a)];
        let changes = plan(&[], &table, Occasion::Reload);
        assert_eq!(
            changes,
            vec![AgentChange::Stop {
                name: "alpha".into()
            }]
        );
        let after = apply(&table, &changes);
        assert_eq!(after[0].wanted, down(StopCause::Removed));
        assert_eq!(after[0].actual, Actual::Stopped);
        assert_eq!(plan(&[], &after, Occasion::Reload), vec![]);
    }

    #[test]
    fn a_changed_launch_restarts() {
        let old = spec("alpha", &["pi"]);
        let new = spec("alpha", &["pi", "--mode", "rpc"]);
        assert_eq!(
            plan(
                std::slice::from_ref(&new),
                &[running(&old)],
                Occasion::Reload
            ),
            vec![AgentChange::Restart(new)]
        );
    }

    #[test]
    fn a_changed_policy_updates_without_a_restart() {
        let old = spec("alpha", &["pi"]);
        let mut new = old.clone();
        new.restart = RestartPolicy::Always;
        new.stall_after = Some(Duration::from_secs(60));
        assert_eq!(
            plan(
                std::slice::from_ref(&new),
                &[running(&old)],
                Occasion::Reload
            ),
            vec![AgentChange::Update(new)]
        );
    }

    #[test]
    fn an_unchanged_agent_is_not_touched_whatever_its_state() {
        let a = spec("alpha", &["pi"]);
        for actual in [
            Actual::Running,
            Actual::Backoff,
            Actual::Exited,
            Actual::GivenUp,
        ] {
            let mut entry = running(&a);
            entry.actual = actual;
            assert_eq!(
                plan(std::slice::from_ref(&a), &[entry], Occasion::Reload),
                vec![]
            );
        }
    }

    #[test]
    fn an_agent_stopped_by_the_operator_takes_a_new_launch_without_starting() {
        let old = spec("alpha", &["pi"]);
        let new = spec("alpha", &["zot"]);
        let mut entry = running(&old);
        entry.wanted = down(StopCause::Operator { who: "root".into() });
        entry.actual = Actual::Stopped;
        assert_eq!(
            plan(std::slice::from_ref(&new), &[entry], Occasion::Reload),
            vec![AgentChange::Update(new)]
        );
    }

    #[test]
    fn an_agent_declared_again_after_removal_starts() {
        let a = spec("alpha", &["pi"]);
        let mut entry = running(&a);
        entry.wanted = down(StopCause::Removed);
        entry.actual = Actual::Stopped;
        assert_eq!(
            plan(std::slice::from_ref(&a), &[entry], Occasion::Reload),
            vec![AgentChange::Start(a)]
        );
    }

    #[test]
    fn a_name_taken_by_a_spawned_pane_clashes_and_the_pane_is_left_alone() {
        let a = spec("alpha", &["pi"]);
        let mut entry = running(&a);
        entry.origin = Origin::Spawned;
        let table = vec![entry];
        assert_eq!(
            plan(&[a], &table, Occasion::Reload),
            vec![AgentChange::Clash {
                name: "alpha".into()
            }]
        );
        assert_eq!(plan(&[], &table, Occasion::Reload), vec![]);
    }

    #[test]
    fn at_start_every_autostart_agent_starts_and_planned_stops_are_forgotten() {
        let a = spec("alpha", &["pi"]);
        let mut b = spec("beta", &["pi"]);
        b.autostart = false;
        let mut stopped = running(&a);
        stopped.wanted = down(StopCause::Operator { who: "root".into() });
        stopped.actual = Actual::Stopped;
        let gone = running(&spec("gamma", &["pi"]));
        assert_eq!(
            plan(&[a.clone(), b.clone()], &[stopped, gone], Occasion::Start),
            vec![
                AgentChange::Stop {
                    name: "gamma".into()
                },
                AgentChange::Start(a),
                AgentChange::Declare(b),
            ]
        );
    }

    // -----------------------------------------------------------------------
    // Properties: applying a plan yields the declaration.

    const NAMES: [&str; 5] = ["ant", "bee", "cow", "dog", "eel"];

    fn arb_spec(name: &'static str) -> impl Strategy<Value = AgentSpec> {
        (0..3usize, 0..3usize, any::<bool>()).prop_map(move |(argv, policy, autostart)| {
            let mut s = spec(name, &[["pi", "zot", "claude"][argv]]);
            s.restart = [
                RestartPolicy::Never,
                RestartPolicy::OnFailure,
                RestartPolicy::Always,
            ][policy];
            s.autostart = autostart;
            s
        })
    }

    fn arb_declared() -> impl Strategy<Value = Vec<AgentSpec>> {
        proptest::sample::subsequence(NAMES.to_vec(), 0..=NAMES.len())
            .prop_flat_map(|names| names.into_iter().map(arb_spec).collect::<Vec<_>>())
    }

    fn arb_wanted() -> impl Strategy<Value = Wanted> {
        prop_oneof![
            Just(Wanted::Up),
            Just(down(StopCause::Shutdown)),
            Just(down(StopCause::Operator { who: "op".into() })),
            Just(down(StopCause::Removed)),
            Just(down(StopCause::NoAutostart)),
        ]
    }

    fn arb_actual() -> impl Strategy<Value = Actual> {
        prop_oneof![
            Just(Actual::Running),
            Just(Actual::Backoff),
            Just(Actual::Exited),
            Just(Actual::Stopped),
            Just(Actual::GivenUp),
        ]
    }

    fn arb_entry(name: &'static str) -> impl Strategy<Value = TableEntry> {
        (arb_spec(name), any::<bool>(), arb_wanted(), arb_actual()).prop_map(
            move |(spec, spawned, wanted, actual)| TableEntry {
                name: name.to_owned(),
                fingerprint: spec.fingerprint(),
                origin: if spawned {
                    Origin::Spawned
                } else {
                    Origin::Declared
                },
                wanted,
                actual,
            },
        )
    }

    fn arb_table() -> impl Strategy<Value = Vec<TableEntry>> {
        proptest::sample::subsequence(NAMES.to_vec(), 0..=NAMES.len())
            .prop_flat_map(|names| names.into_iter().map(arb_entry).collect::<Vec<_>>())
    }

    fn arb_occasion() -> impl Strategy<Value = Occasion> {
        prop_oneof![Just(Occasion::Start), Just(Occasion::Reload)]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Every declared agent not clashing with a spawned pane ends up in
        /// the table with its recipe; every declared pane no longer declared
        /// is down for removal with no process; spawned panes are untouched.
        #[test]
        fn applying_the_plan_yields_the_declaration(
            declared in arb_declared(),
            table in arb_table(),
            occasion in arb_occasion(),
        ) {
            let after = apply(&table, &plan(&declared, &table, occasion));
            for spec in &declared {
                let Some(entry) = after.iter().find(|e| e.name == spec.name) else {
                    return Err(TestCaseError::fail(format!("{} is missing", spec.name)));
                };
                if entry.origin == Origin::Spawned {
                    continue;
                }
                prop_assert_eq!(entry.fingerprint, spec.fingerprint());
                prop_assert!(!is_removed(entry), "{} is still removed", spec.name);
            }
            for entry in after.iter().filter(|e| e.origin == Origin::Declared) {
                if !declared.iter().any(|s| s.name == entry.name) {
                    prop_assert_eq!(&entry.wanted, &down(StopCause::Removed));
                    let before = table.iter().find(|e| e.name == entry.name);
                    if before.is_some_and(|b| b.actual.is_alive()) {
                        prop_assert_eq!(entry.actual, Actual::Stopped);
                    }
                }
            }
            for entry in table.iter().filter(|e| e.origin == Origin::Spawned) {
                prop_assert!(after.contains(entry));
            }
            prop_assert_eq!(
                after.len(),
                table.len() + declared.iter().filter(|s| !table.iter().any(|e| e.name == s.name)).count()
            );
        }

        /// A second reload right after the first changes nothing but the
        /// clashes it reports again.
        #[test]
        fn a_plan_applied_leaves_nothing_to_do(
            declared in arb_declared(),
            table in arb_table(),
            occasion in arb_occasion(),
        ) {
            let after = apply(&table, &plan(&declared, &table, occasion));
            let again = plan(&declared, &after, Occasion::Reload);
            prop_assert!(
                again.iter().all(|c| matches!(c, AgentChange::Clash { .. })),
                "{:?}", again
            );
        }

        /// On reload, an agent whose recipe did not change keeps its entry
        /// exactly as it was, whatever it is doing.
        #[test]
        fn a_reload_leaves_unchanged_agents_alone(
            declared in arb_declared(),
            table in arb_table(),
        ) {
            let changes = plan(&declared, &table, Occasion::Reload);
            for entry in &table {
                let same = declared
                    .iter()
                    .any(|s| s.name == entry.name && s.fingerprint() == entry.fingerprint);
                if same && !is_removed(entry) && entry.origin == Origin::Declared {
                    prop_assert!(changes.iter().all(|c| c.name() != entry.name), "{:?}", changes);
                }
            }
        }
    }
}
