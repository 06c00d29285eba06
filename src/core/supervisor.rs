//! A container of panes for offline folds and the contract's
//! `attach_pane_at`/`ingest_line_at` shape, addressed by key or id.
//!
//! The daemon does not use it: its panes live in `daemon::panes::PaneTable`
//! (one slot per pane with its process, generational keys, removal).
//! Panes here are kept in attach order and never removed.

use std::collections::HashMap;
use std::time::Duration;

use crate::core::ingest::DEFAULT_MAX_LINE;
use crate::core::pane::{ExitStatus, Pane, PaneId, Transition};
use crate::core::taxonomy::Runtime;
use crate::core::time::Timestamp;

/// The contract's stall threshold was 4 hours; an operator learns nothing
/// useful that late, so colibri defaults to 10 minutes.
pub const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(10 * 60);

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PaneKey(pub u32);

#[derive(Debug)]
pub struct Supervisor {
    panes: Vec<Pane>,
    index: HashMap<PaneId, PaneKey>,
    max_line: usize,
}

impl Default for Supervisor {
    fn default() -> Self {
        Supervisor::new(DEFAULT_MAX_LINE)
    }
}

impl Supervisor {
    pub fn new(max_line: usize) -> Supervisor {
        Supervisor {
            panes: Vec::new(),
            index: HashMap::new(),
            max_line,
        }
    }

    pub fn max_line(&self) -> usize {
        self.max_line
    }

    /// Registers a pane in state `idle`. An id that exists already keeps its
    /// pane and returns its key.
    pub fn attach_pane_at(
        &mut self,
        id: PaneId,
        agent: &str,
        runtime: Option<Runtime>,
        now: Timestamp,
    ) -> PaneKey {
        if let Some(k) = self.index.get(&id) {
            return *k;
        }
        let key = PaneKey(self.panes.len() as u32);
        self.index.insert(id.clone(), key);
        self.panes.push(Pane::new(
            id,
            agent.to_string(),
            runtime,
            self.max_line,
            now,
        ));
        key
    }

    /// Replaces the pane behind `key` with a fresh one (a restarted agent keeps
    /// its id); returns the old pane.
    pub fn reattach(
        &mut self,
        key: PaneKey,
        runtime: Option<Runtime>,
        now: Timestamp,
    ) -> Option<Pane> {
        let old = self.panes.get(key.0 as usize)?;
        let mut fresh = Pane::new(
            old.id.clone(),
            old.agent.clone(),
            runtime,
            self.max_line,
            now,
        );
        fresh.name = old.name.clone();
        fresh.stall_after = old.stall_after;
        fresh.set_cwd(old.cwd().map(str::to_string));
        Some(std::mem::replace(&mut self.panes[key.0 as usize], fresh))
    }

    pub fn key(&self, id: &str) -> Option<PaneKey> {
        self.index.get(&PaneId(id.to_string())).copied()
    }

    pub fn get(&self, key: PaneKey) -> Option<&Pane> {
        self.panes.get(key.0 as usize)
    }

    pub fn get_mut(&mut self, key: PaneKey) -> Option<&mut Pane> {
        self.panes.get_mut(key.0 as usize)
    }

    pub fn len(&self) -> usize {
        self.panes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.panes.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (PaneKey, &Pane)> {
        self.panes
            .iter()
            .enumerate()
            .map(|(i, p)| (PaneKey(i as u32), p))
    }

    /// Feeds a chunk of a pane's output; transitions are appended to `out`.
    pub fn ingest_at(
        &mut self,
        key: PaneKey,
        chunk: &[u8],
        now: Timestamp,
        out: &mut Vec<Transition>,
    ) {
        if let Some(p) = self.get_mut(key) {
            p.ingest(chunk, now, out);
        }
    }

    /// Feeds one line, as the contract's `ingest_line_at`.
    pub fn ingest_line_at(
        &mut self,
        key: PaneKey,
        line: &str,
        now: Timestamp,
        out: &mut Vec<Transition>,
    ) {
        if let Some(p) = self.get_mut(key) {
            let _ = p.ingest_line(line.as_bytes(), now, out);
        }
    }

    pub fn exit_at(
        &mut self,
        key: PaneKey,
        status: ExitStatus,
        now: Timestamp,
        out: &mut Vec<Transition>,
    ) {
        if let Some(p) = self.get_mut(key) {
            p.exited(status, now, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::state::AgentState;

    #[test]
    fn attach_is_idempotent_and_ordered() {
        let mut s = Supervisor::default();
        let t = Timestamp::from_millis(1);
        let a = s.attach_pane_at(PaneId("a".into()), "pi", None, t);
        let b = s.attach_pane_at(PaneId("b".into()), "pi", None, t);
        assert_eq!(s.attach_pane_at(PaneId("a".into()), "pi", None, t), a);
        assert_ne!(a, b);
        assert_eq!(s.len(), 2);
        assert_eq!(s.get(a).map(|p| p.state()), Some(AgentState::Idle));
    }

    #[test]
    fn contract_smoke_sequence() {
        // The seed's smoke agent: session, turn_start, queue_update,
        // turn_start, turn_end, then a clean exit. See docs/TAXONOMY.md.
        let mut s = Supervisor::default();
        let mut out = Vec::new();
        let k = s.attach_pane_at(
            PaneId("p".into()),
            "colibri-smoke-agent",
            Some(Runtime::Pi),
            Timestamp::from_millis(0),
        );
        let lines = [
            r#"{"type":"session","id":"pi-1","cwd":"/repo"}"#,
            r#"{"type":"turn_start"}"#,
            r#"{"type":"queue_update"}"#,
            r#"{"type":"turn_start"}"#,
            r#"{"type":"turn_end"}"#,
        ];
        for (i, l) in lines.iter().enumerate() {
            s.ingest_line_at(k, l, Timestamp::from_millis(i as u64 + 1), &mut out);
        }
        let seq: Vec<_> = out.iter().map(|t| t.to).collect();
        assert_eq!(seq, vec![AgentState::Working]);
        s.exit_at(k, ExitStatus::Code(0), Timestamp::from_millis(10), &mut out);
        assert_eq!(s.get(k).map(|p| p.state()), Some(AgentState::Done));
        assert_eq!(s.get(k).and_then(|p| p.session_id()), Some("pi-1"));
    }
}
