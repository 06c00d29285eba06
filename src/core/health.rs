//! The seed's health words for an agent: what an operator reads at a
//! glance (`state` reports them). A pure function of what the pane and the
//! orchestrator know.

use serde::{Deserialize, Serialize};

use crate::core::state::AgentState;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// Running, and has said nothing yet.
    Starting,
    /// Working, and not quiet past its stall threshold.
    Productive,
    Idle,
    /// Blocked on a question to a human (a permission, a dialog).
    WaitingPermission,
    /// Paused by the loop policy, or on the escalation ladder.
    Looping,
    /// Working, but quiet past its stall threshold.
    Silent,
    Error,
}

impl Health {
    /// The word as the seed and the wire spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Health::Starting => "starting",
            Health::Productive => "productive",
            Health::Idle => "idle",
            Health::WaitingPermission => "waiting_permission",
            Health::Looping => "looping",
            Health::Silent => "silent",
            Health::Error => "error",
        }
    }
}

/// What the health word is read from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HealthFacts {
    pub running: bool,
    /// It has written at least one event.
    pub spoke: bool,
    pub state: AgentState,
    pub stalled: bool,
    /// Paused by the loop policy, or climbed the escalation ladder since it
    /// last worked.
    pub looping: bool,
}

/// The health word of a running agent (`None` once it is not running).
/// Looping comes first: a looping agent may look productive.
pub fn health(f: HealthFacts) -> Option<Health> {
    if !f.running {
        return None;
    }
    Some(match f.state {
        _ if f.looping => Health::Looping,
        AgentState::Blocked => Health::WaitingPermission,
        AgentState::Error => Health::Error,
        _ if !f.spoke => Health::Starting,
        AgentState::Working if f.stalled => Health::Silent,
        AgentState::Working => Health::Productive,
        AgentState::Idle | AgentState::Done => Health::Idle,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(state: AgentState) -> HealthFacts {
        HealthFacts {
            running: true,
            spoke: true,
            state,
            stalled: false,
            looping: false,
        }
    }

    #[test]
    fn each_word_where_it_applies() {
        let word = |f| health(f);
        assert_eq!(word(facts(AgentState::Working)), Some(Health::Productive));
        assert_eq!(word(facts(AgentState::Idle)), Some(Health::Idle));
        assert_eq!(word(facts(AgentState::Done)), Some(Health::Idle));
        assert_eq!(
            word(facts(AgentState::Blocked)),
            Some(Health::WaitingPermission)
        );
        assert_eq!(word(facts(AgentState::Error)), Some(Health::Error));
        let quiet = HealthFacts {
            stalled: true,
            ..facts(AgentState::Working)
        };
        assert_eq!(word(quiet), Some(Health::Silent));
        let new = HealthFacts {
            spoke: false,
            ..facts(AgentState::Idle)
        };
        assert_eq!(word(new), Some(Health::Starting));
        let looping = HealthFacts {
            looping: true,
            ..facts(AgentState::Working)
        };
        assert_eq!(word(looping), Some(Health::Looping));
        let gone = HealthFacts {
            running: false,
            ..facts(AgentState::Working)
        };
        assert_eq!(word(gone), None);
    }

    #[test]
    fn the_words_are_the_seeds() {
        let words: Vec<String> = [
            Health::Productive,
            Health::Idle,
            Health::WaitingPermission,
            Health::Looping,
            Health::Silent,
            Health::Error,
            Health::Starting,
        ]
        .iter()
        .map(|h| serde_json::to_string(h).unwrap_or_default())
        .collect();
        assert_eq!(
            words,
            [
                "\"productive\"",
                "\"idle\"",
                "\"waiting_permission\"",
                "\"looping\"",
                "\"silent\"",
                "\"error\"",
                "\"starting\""
            ]
        );
    }

    #[test]
    fn each_word_is_spelled_as_serde_spells_it() {
        for h in [
            Health::Starting,
            Health::Productive,
            Health::Idle,
            Health::WaitingPermission,
            Health::Looping,
            Health::Silent,
            Health::Error,
        ] {
            assert_eq!(serde_json::to_value(h).ok(), Some(h.as_str().into()));
        }
    }
}
