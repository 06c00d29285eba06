//! The pane table: the one owner of every pane's state in the daemon.
//!
//! A [`Slot`] holds what the core knows of a pane (its [`Pane`]) and what
//! the daemon keeps beside it (its [`Agent`]: process, fds, timers). Both
//! live and die together, so no hand-written code keeps two vectors in step.
//!
//! A [`PaneKey`] is an index plus the generation of the slot it was issued
//! for. Removing a pane bumps its slot's generation, so every token still
//! naming the old key (PTY, exit watch, timer) misses on lookup and is
//! ignored like any other stale token, even once the slot is reused.
//!
//! Iteration is in attach order, as snapshots show panes.
//!
//! Beside each slot the table keeps the pane's snapshot texts
//! ([`PaneText`], v1 and v2) from the last snapshot that made them. Every mutable
//! borrow of a slot ([`PaneTable::get_mut`], through which `pane_mut`,
//! `agent_mut` and `reattach` go) drops it, so a kept text is always that
//! of the slot as it is: no code that changes a pane has to remember to say
//! so.

use std::collections::HashMap;

use crate::core::pane::{Pane, PaneId};
use crate::core::taxonomy::Runtime;
use crate::core::time::Timestamp;
use crate::daemon::agent::Agent;
use crate::daemon::pane_text::{KeptTexts, PaneText, Schema};
use crate::platform::Pid;

pub use crate::daemon::source::PaneKey;

/// One pane: the core's view and the daemon's process state.
#[derive(Debug)]
pub struct Slot {
    pub pane: Pane,
    pub agent: Agent,
}

#[derive(Debug)]
struct Entry {
    generation: u32,
    slot: Option<Slot>,
    /// The slot's snapshot texts, while the slot is unchanged since.
    texts: KeptTexts,
}

#[derive(Debug, Default)]
pub struct PaneTable {
    entries: Vec<Entry>,
    free: Vec<u32>,
    /// Live keys in attach order.
    order: Vec<PaneKey>,
    by_id: HashMap<PaneId, PaneKey>,
}

impl PaneTable {
    /// Adds a pane; an id that exists already keeps its slot and key.
    pub fn insert(&mut self, pane: Pane, agent: Agent) -> PaneKey {
        if let Some(k) = self.by_id.get(&pane.id) {
            return *k;
        }
        let id = pane.id.clone();
        let slot = Some(Slot { pane, agent });
        let key = match self.free.pop() {
            Some(index) => {
                let e = &mut self.entries[index as usize];
                e.slot = slot;
                e.texts = KeptTexts::default();
                PaneKey::new(index, e.generation)
            }
            None => {
                let index = u32::try_from(self.entries.len()).unwrap_or(u32::MAX);
                self.entries.push(Entry {
                    generation: 0,
                    slot,
                    texts: KeptTexts::default(),
                });
                PaneKey::new(index, 0)
            }
        };
        self.by_id.insert(id, key);
        self.order.push(key);
        key
    }

    /// Takes a pane out. Its key, and every token carrying it, is stale from
    /// now on, even after the slot is reused.
    pub fn remove(&mut self, key: PaneKey) -> Option<Slot> {
        let e = self.entries.get_mut(key.index() as usize)?;
        if e.generation != key.generation() {
            return None;
        }
        let slot = e.slot.take()?;
        e.texts = KeptTexts::default();
        e.generation = e.generation.wrapping_add(1);
        self.free.push(key.index());
        self.order.retain(|k| *k != key);
        self.by_id.remove(&slot.pane.id);
        Some(slot)
    }

    pub fn get(&self, key: PaneKey) -> Option<&Slot> {
        let e = self.entries.get(key.index() as usize)?;
        if e.generation != key.generation() {
            return None;
        }
        e.slot.as_ref()
    }

    /// The slot, to change: its kept snapshot texts go, whatever the
    /// caller then changes.
    pub fn get_mut(&mut self, key: PaneKey) -> Option<&mut Slot> {
        let e = self.entries.get_mut(key.index() as usize)?;
        if e.generation != key.generation() {
            return None;
        }
        e.texts = KeptTexts::default();
        e.slot.as_mut()
    }

    /// The slot's kept snapshot text, reading nothing of the slot itself.
    pub fn kept_text(&self, key: PaneKey, schema: Schema) -> Option<&PaneText> {
        let e = self.entries.get(key.index() as usize)?;
        if e.generation != key.generation() {
            return None;
        }
        e.texts.get(schema)
    }

    /// The slot, to read, and its kept snapshot text, to use or replace:
    /// the one borrow that does not count as a change.
    pub fn with_text(
        &mut self,
        key: PaneKey,
        schema: Schema,
    ) -> Option<(&Slot, &mut Option<PaneText>)> {
        let e = self.entries.get_mut(key.index() as usize)?;
        if e.generation != key.generation() {
            return None;
        }
        Some((e.slot.as_ref()?, e.texts.get_mut(schema)))
    }

    pub fn pane(&self, key: PaneKey) -> Option<&Pane> {
        self.get(key).map(|s| &s.pane)
    }

    pub fn pane_mut(&mut self, key: PaneKey) -> Option<&mut Pane> {
        self.get_mut(key).map(|s| &mut s.pane)
    }

    pub fn agent(&self, key: PaneKey) -> Option<&Agent> {
        self.get(key).map(|s| &s.agent)
    }

    pub fn agent_mut(&mut self, key: PaneKey) -> Option<&mut Agent> {
        self.get_mut(key).map(|s| &mut s.agent)
    }

    pub fn key(&self, id: &str) -> Option<PaneKey> {
        self.by_id.get(id).copied()
    }

    /// The pane whose running process has `pid`.
    pub fn by_pid(&self, pid: Pid) -> Option<PaneKey> {
        self.iter()
            .find(|(_, s)| s.agent.running_pid() == Some(pid))
            .map(|(k, _)| k)
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Live keys in attach order (a copy: callers mutate while walking).
    pub fn keys(&self) -> Vec<PaneKey> {
        self.order.clone()
    }

    pub fn iter(&self) -> impl Iterator<Item = (PaneKey, &Slot)> {
        self.order
            .iter()
            .filter_map(|k| self.get(*k).map(|s| (*k, s)))
    }

    pub fn agents(&self) -> impl Iterator<Item = &Agent> {
        self.iter().map(|(_, s)| &s.agent)
    }

    /// Replaces the pane behind `key` with a fresh one (a restarted agent
    /// keeps its id, name, stall threshold and cwd).
    pub fn reattach(
        &mut self,
        key: PaneKey,
        runtime: Option<Runtime>,
        max_line: usize,
        now: Timestamp,
    ) {
        let Some(slot) = self.get_mut(key) else {
            return;
        };
        let old = &slot.pane;
        slot.agent.usage_earlier.add(old.usage());
        slot.agent.bytes_earlier = slot
            .agent
            .bytes_earlier
            .saturating_add(old.counters().bytes);
        let mut fresh = Pane::new(old.id.clone(), old.agent.clone(), runtime, max_line, now);
        fresh.name = old.name.clone();
        fresh.role = old.role.clone();
        fresh.stall_after = old.stall_after;
        fresh.set_cwd(old.cwd().map(str::to_string));
        fresh.carry_over(old);
        slot.pane = fresh;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::agent::{RestartPolicy, RestartState};

    fn slot(id: &str) -> (Pane, Agent) {
        let t = Timestamp::from_millis(1);
        let pane = Pane::new(PaneId(id.into()), "pi".into(), None, 1024, t);
        let agent = Agent::new(
            id.into(),
            "s".into(),
            None,
            None,
            RestartState {
                policy: RestartPolicy::Never,
                max: 0,
                attempts: 0,
            },
        );
        (pane, agent)
    }

    #[test]
    fn insert_is_idempotent_and_keeps_attach_order() {
        let mut t = PaneTable::default();
        let (p, a) = slot("a");
        let ka = t.insert(p, a);
        let (p, a) = slot("b");
        let kb = t.insert(p, a);
        let (p, a) = slot("a");
        assert_eq!(t.insert(p, a), ka);
        assert_eq!(t.keys(), vec![ka, kb]);
        assert_eq!(t.key("b"), Some(kb));
    }

    #[test]
    fn a_removed_panes_key_stays_stale_after_its_slot_is_reused() {
        let mut t = PaneTable::default();
        let (p, a) = slot("a");
        let ka = t.insert(p, a);
        let (p, a) = slot("b");
        let kb = t.insert(p, a);
        let gone = t.remove(ka).map(|s| s.pane.id.0);
        assert_eq!(gone.as_deref(), Some("a"));
        assert!(t.get(ka).is_none());
        assert!(t.remove(ka).is_none());
        assert_eq!(t.key("a"), None);
        let (p, a) = slot("c");
        let kc = t.insert(p, a);
        // Same slot, new generation: the old key must not reach the new pane.
        assert_ne!(kc, ka);
        assert!(t.get(ka).is_none());
        assert_eq!(t.pane(kc).map(|p| p.id.0.as_str()), Some("c"));
        assert_eq!(t.keys(), vec![kb, kc]);
        assert_eq!(t.len(), 2);
    }
}
