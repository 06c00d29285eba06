//! Loop detection: the seed's four loop types, per pane.
//!
//! - `action_repeat`: the same tool with the same arguments N times in a
//!   row (no other tool call in between);
//! - `error_loop`: the same error N times in a row (no other error between);
//! - `token_burn`: N messages and at least T tokens with no tool call;
//! - `thrashing`: edits of one file that keep undoing each other (the
//!   arguments of an edit equal those of the edit before last, A B A B …).
//!
//! A detection resets the detectors, so the next one needs a fresh run of
//! the same behaviour. The count of consecutive loops picks the backoff and
//! resets after productive work: a number of new tool calls (not among the
//! recent ones) or a finished task.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::{LineFacts, LoopKind};

/// The seed's message, sent through the harness's input channel.
pub const RECOVERY_MESSAGE: &str = "You appear stuck. Compact your session and reassess.";

/// The seed's backoff schedule: 1, 5, 15, 30, 60 minutes.
pub const DEFAULT_BACKOFF: [Duration; 5] = [
    Duration::from_secs(60),
    Duration::from_secs(5 * 60),
    Duration::from_secs(15 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(60 * 60),
];

/// Thresholds; the defaults are far above what a working agent does (the
/// shipped samples, fixtures and real streams trip none: see
/// `tests/governance_defaults.rs`).
#[derive(Clone, Debug, PartialEq)]
pub struct LoopSettings {
    pub enabled: bool,
    /// Identical tool calls in a row.
    pub action_repeat: u32,
    /// Identical errors in a row.
    pub error_repeat: u32,
    /// Messages (turns) without a tool call …
    pub burn_messages: u32,
    /// … that together spent at least this many tokens.
    pub burn_tokens: u64,
    /// Edits of one file that undo the edit before (A B A B: 2).
    pub thrash_alternations: u32,
    /// New tool calls after which the consecutive-loop count resets.
    pub productive_reset: u32,
    pub backoff: Vec<Duration>,
    pub message: String,
}

impl Default for LoopSettings {
    fn default() -> Self {
        LoopSettings {
            enabled: true,
            action_repeat: 5,
            error_repeat: 5,
            burn_messages: 40,
            burn_tokens: 400_000,
            thrash_alternations: 4,
            productive_reset: 3,
            backoff: DEFAULT_BACKOFF.to_vec(),
            message: RECOVERY_MESSAGE.to_string(),
        }
    }
}

/// A detected loop.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopHit {
    pub kind: LoopKind,
    /// Loops caught in a row on this pane, this one included (1-based).
    pub consecutive: u32,
    pub backoff: Duration,
    pub detail: String,
}

/// How many recent tool calls count as "seen" when judging novelty.
const RECENT_ACTIONS: usize = 16;
/// Files tracked for thrashing; beyond this the oldest tracking is dropped.
const TRACKED_FILES: usize = 64;

/// One pane's detectors.
#[derive(Clone, Debug, Default)]
pub struct LoopState {
    last_action: Option<(String, u64)>,
    action_count: u32,
    last_error: Option<String>,
    error_count: u32,
    burn_messages: u32,
    burn_tokens: u64,
    /// Per file: the last two edit hashes and the alternations seen.
    edits: BTreeMap<String, EditTrack>,
    edit_order: VecDeque<String>,
    recent: VecDeque<(String, u64)>,
    novel_since_loop: u32,
    consecutive: u32,
}

#[derive(Clone, Debug, Default)]
struct EditTrack {
    before_last: Option<u64>,
    last: Option<u64>,
    alternations: u32,
}

impl LoopState {
    /// Loops caught in a row so far.
    pub fn consecutive(&self) -> u32 {
        self.consecutive
    }

    pub fn observe(&mut self, s: &LoopSettings, facts: &LineFacts) -> Option<LoopHit> {
        if !s.enabled {
            return None;
        }
        if facts.finished {
            self.consecutive = 0;
            self.novel_since_loop = 0;
            self.last_error = None;
            self.error_count = 0;
        }
        self.burn_tokens = self.burn_tokens.saturating_add(facts.tokens());
        if facts.turn {
            self.burn_messages += 1;
        }
        let mut hit = None;
        if let Some(tool) = &facts.tool {
            self.burn_messages = 0;
            self.burn_tokens = 0;
            let key = (tool.name.clone(), tool.args_hash);
            self.note_novelty(s, &key);
            if self.last_action.as_ref() == Some(&key) {
                self.action_count += 1;
            } else {
                self.last_action = Some(key);
                self.action_count = 1;
            }
            if s.action_repeat > 0 && self.action_count >= s.action_repeat {
                hit = Some((
                    LoopKind::ActionRepeat,
                    format!(
                        "{} called {} times with the same arguments",
                        tool.name, self.action_count
                    ),
                ));
            }
            if hit.is_none() && is_edit(&tool.name) {
                if let Some(path) = &tool.path {
                    let alternations = self.track_edit(path, tool.args_hash);
                    if s.thrash_alternations > 0 && alternations >= s.thrash_alternations {
                        hit = Some((
                            LoopKind::Thrashing,
                            format!("{path} edited back and forth {alternations} times"),
                        ));
                    }
                }
            }
        }
        if hit.is_none() {
            if let Some(err) = &facts.error {
                if self.last_error.as_deref() == Some(err.as_str()) {
                    self.error_count += 1;
                } else {
                    self.last_error = Some(err.clone());
                    self.error_count = 1;
                }
                if s.error_repeat > 0 && self.error_count >= s.error_repeat {
                    hit = Some((
                        LoopKind::ErrorLoop,
                        format!(
                            "the same error {} times: {}",
                            self.error_count,
                            super::clip(err)
                        ),
                    ));
                }
            }
        }
        if hit.is_none()
            && s.burn_messages > 0
            && self.burn_messages >= s.burn_messages
            && self.burn_tokens >= s.burn_tokens
        {
            hit = Some((
                LoopKind::TokenBurn,
                format!(
                    "{} tokens over {} messages without a tool call",
                    self.burn_tokens, self.burn_messages
                ),
            ));
        }
        let (kind, detail) = hit?;
        Some(self.caught(s, kind, detail))
    }

    fn caught(&mut self, s: &LoopSettings, kind: LoopKind, detail: String) -> LoopHit {
        self.consecutive = self.consecutive.saturating_add(1);
        self.novel_since_loop = 0;
        self.action_count = 0;
        self.last_action = None;
        self.error_count = 0;
        self.last_error = None;
        self.burn_messages = 0;
        self.burn_tokens = 0;
        self.edits.clear();
        self.edit_order.clear();
        let idx = (self.consecutive as usize).saturating_sub(1);
        let backoff = s
            .backoff
            .get(idx)
            .or(s.backoff.last())
            .copied()
            .unwrap_or(Duration::ZERO);
        LoopHit {
            kind,
            consecutive: self.consecutive,
            backoff,
            detail,
        }
    }

    fn note_novelty(&mut self, s: &LoopSettings, key: &(String, u64)) {
        if !self.recent.contains(key) {
            self.novel_since_loop += 1;
            if s.productive_reset > 0 && self.novel_since_loop >= s.productive_reset {
                self.consecutive = 0;
            }
        }
        self.recent.push_back(key.clone());
        if self.recent.len() > RECENT_ACTIONS {
            self.recent.pop_front();
        }
    }

    /// Records an edit of `path`; returns the alternations seen on it.
    fn track_edit(&mut self, path: &str, hash: u64) -> u32 {
        if !self.edits.contains_key(path) {
            if self.edit_order.len() >= TRACKED_FILES {
                if let Some(old) = self.edit_order.pop_front() {
                    self.edits.remove(&old);
                }
            }
            self.edit_order.push_back(path.to_string());
        }
        let t = self.edits.entry(path.to_string()).or_default();
        if t.before_last == Some(hash) && t.last != Some(hash) {
            t.alternations += 1;
        } else if t.last != Some(hash) {
            t.alternations = 0;
        }
        t.before_last = t.last;
        t.last = Some(hash);
        t.alternations
    }
}

/// Tools that change a file in place.
fn is_edit(tool: &str) -> bool {
    let t = tool.to_ascii_lowercase();
    ["edit", "write", "patch", "replace"]
        .iter()
        .any(|w| t.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::ToolFacts;

    fn tool(name: &str, args: &str) -> LineFacts {
        LineFacts {
            tool: Some(ToolFacts::new(name, args)),
            ..LineFacts::default()
        }
    }

    fn run(state: &mut LoopState, s: &LoopSettings, lines: &[LineFacts]) -> Vec<(usize, LoopKind)> {
        lines
            .iter()
            .enumerate()
            .filter_map(|(i, f)| state.observe(s, f).map(|h| (i, h.kind)))
            .collect()
    }

    #[test]
    fn action_repeat_fires_at_the_nth_identical_call() {
        let s = LoopSettings::default();
        let mut st = LoopState::default();
        let calls: Vec<LineFacts> = (0..5)
            .map(|_| tool("bash", r#"{"command":"ls"}"#))
            .collect();
        assert_eq!(run(&mut st, &s, &calls), [(4, LoopKind::ActionRepeat)]);
    }

    #[test]
    fn different_calls_between_do_not_count_as_repeats() {
        let s = LoopSettings::default();
        let mut st = LoopState::default();
        let mut calls = Vec::new();
        for i in 0..20 {
            calls.push(tool("bash", r#"{"command":"cargo test"}"#));
            calls.push(tool("edit", &format!(r#"{{"path":"a.rs","new":"{i}"}}"#)));
        }
        assert_eq!(run(&mut st, &s, &calls), []);
    }

    #[test]
    fn error_loop_needs_the_same_error_in_a_row() {
        let s = LoopSettings::default();
        let mut st = LoopState::default();
        let err = |e: &str| LineFacts {
            error: Some(e.to_string()),
            ..LineFacts::default()
        };
        let mut lines: Vec<LineFacts> = (0..4).map(|_| err("E1")).collect();
        lines.push(err("E2"));
        lines.extend((0..5).map(|_| err("E1")));
        assert_eq!(run(&mut st, &s, &lines), [(9, LoopKind::ErrorLoop)]);
    }

    #[test]
    fn token_burn_needs_messages_and_tokens_without_tools() {
        let s = LoopSettings {
            burn_messages: 3,
            burn_tokens: 300,
            ..LoopSettings::default()
        };
        let msg = |t: u64| {
            let mut f = LineFacts {
                turn: true,
                ..LineFacts::default()
            };
            f.usage.output_tokens = t;
            f
        };
        let mut st = LoopState::default();
        // Three messages, too few tokens; a tool call; then three heavy ones.
        let lines = [
            msg(10),
            msg(10),
            msg(10),
            tool("read", r#"{"path":"x"}"#),
            msg(100),
            msg(100),
            msg(100),
        ];
        assert_eq!(run(&mut st, &s, &lines), [(6, LoopKind::TokenBurn)]);
    }

    #[test]
    fn thrashing_is_edits_undoing_each_other() {
        let s = LoopSettings::default();
        let mut st = LoopState::default();
        let a = r#"{"file_path":"src/x.rs","old_string":"a","new_string":"b"}"#;
        let b = r#"{"file_path":"src/x.rs","old_string":"b","new_string":"a"}"#;
        let lines: Vec<LineFacts> = [a, b, a, b, a, b]
            .iter()
            .map(|args| tool("Edit", args))
            .collect();
        assert_eq!(run(&mut st, &s, &lines), [(5, LoopKind::Thrashing)]);
        // Forward progress on one file is not thrashing.
        let mut st = LoopState::default();
        let lines: Vec<LineFacts> = (0..10)
            .map(|i| {
                tool(
                    "Edit",
                    &format!(r#"{{"file_path":"src/x.rs","new_string":"{i}"}}"#),
                )
            })
            .collect();
        assert_eq!(run(&mut st, &s, &lines), []);
    }

    #[test]
    fn backoff_escalates_and_resets_after_productive_work() {
        let s = LoopSettings {
            action_repeat: 2,
            ..LoopSettings::default()
        };
        let mut st = LoopState::default();
        let same = tool("bash", r#"{"command":"ls"}"#);
        let mut backoffs = Vec::new();
        for _ in 0..6 {
            st.observe(&s, &same);
            if let Some(hit) = st.observe(&s, &same) {
                backoffs.push(hit.backoff.as_secs() / 60);
            }
        }
        assert_eq!(backoffs, [1, 5, 15, 30, 60, 60]);
        for i in 0..3 {
            st.observe(&s, &tool("read", &format!(r#"{{"path":"{i}"}}"#)));
        }
        assert_eq!(st.consecutive(), 0);
        st.observe(&s, &same);
        let hit = st.observe(&s, &same).expect("a loop again");
        assert_eq!((hit.consecutive, hit.backoff.as_secs()), (1, 60));
    }

    #[test]
    fn disabled_detects_nothing() {
        let s = LoopSettings {
            enabled: false,
            ..LoopSettings::default()
        };
        let mut st = LoopState::default();
        let calls: Vec<LineFacts> = (0..50)
            .map(|_| tool("bash", r#"{"command":"ls"}"#))
            .collect();
        assert_eq!(run(&mut st, &s, &calls), []);
    }
}
