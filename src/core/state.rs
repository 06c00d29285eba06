//! The pane state machine: one pure function from (state, signal) to state.
//!
//! Every harness adapter normalises its lines into [`Signal`]s first, so this
//! table is the only place that decides what an agent is doing. It matches
//! exhaustively; adding a signal fails to compile until this table says what
//! it means.

use crate::core::signal::Signal;

/// What an agent is doing, as the snapshot contract names it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AgentState {
    /// Alive and waiting for a prompt.
    Idle,
    /// Producing output, running tools, compacting or retrying.
    Working,
    /// Waiting for a human (a permission dialog, a question).
    Blocked,
    /// Finished cleanly. Stays until a new session header.
    Done,
    /// Failed. Stays until a new session header.
    Error,
}

impl AgentState {
    pub const ALL: [AgentState; 5] = [
        AgentState::Idle,
        AgentState::Working,
        AgentState::Blocked,
        AgentState::Done,
        AgentState::Error,
    ];

    /// The lowercase wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            AgentState::Idle => "idle",
            AgentState::Working => "working",
            AgentState::Blocked => "blocked",
            AgentState::Done => "done",
            AgentState::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Option<AgentState> {
        AgentState::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Done and error are reached once per session; only a new session
    /// header (or an explicit failure, for done) moves a pane out of them.
    pub const fn is_final(self) -> bool {
        matches!(self, AgentState::Done | AgentState::Error)
    }

    /// Only panes that are expected to make progress can be stalled.
    pub const fn can_stall(self) -> bool {
        matches!(self, AgentState::Working | AgentState::Blocked)
    }
}

impl std::fmt::Display for AgentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The transition table.
pub fn apply(state: AgentState, signal: &Signal<'_>) -> AgentState {
    use AgentState::*;
    match signal {
        // A session header starts over, whatever came before.
        Signal::Session(h) if !h.running => Idle,
        Signal::Session(_) => Working,
        Signal::Working => keep_final_or(state, Working),
        Signal::Blocked => keep_final_or(state, Blocked),
        Signal::Idle => keep_final_or(state, Idle),
        // A clean finish never hides an earlier failure.
        Signal::Finished => match state {
            Error => Error,
            _ => Done,
        },
        // A failure wins even over done: zot reports `done` then `error`
        // when it hits its step limit.
        Signal::Failed => Error,
        Signal::Exited { success: true } => match state {
            Error => Error,
            _ => Done,
        },
        Signal::Exited { success: false } => Error,
        Signal::Meta | Signal::Unknown => state,
    }
}

fn keep_final_or(state: AgentState, next: AgentState) -> AgentState {
    if state.is_final() {
        state
    } else {
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::signal::SessionHeader;
    use AgentState::*;

    fn session(running: bool) -> Signal<'static> {
        Signal::session(SessionHeader {
            running,
            ..SessionHeader::default()
        })
    }

    #[test]
    fn session_resets_final_states() {
        for st in AgentState::ALL {
            assert_eq!(apply(st, &session(false)), Idle);
            assert_eq!(apply(st, &session(true)), Working);
        }
    }

    #[test]
    fn final_states_are_sticky_against_progress() {
        for st in [Done, Error] {
            for sig in [
                Signal::Working,
                Signal::Blocked,
                Signal::Idle,
                Signal::Meta,
                Signal::Unknown,
            ] {
                assert_eq!(apply(st, &sig), st, "{st:?} + {sig:?}");
            }
        }
    }

    #[test]
    fn unknown_never_changes_state() {
        for st in AgentState::ALL {
            assert_eq!(apply(st, &Signal::Unknown), st);
            assert_eq!(apply(st, &Signal::Meta), st);
        }
    }

    #[test]
    fn finish_and_exit() {
        assert_eq!(apply(Working, &Signal::Finished), Done);
        assert_eq!(apply(Error, &Signal::Finished), Error);
        assert_eq!(apply(Done, &Signal::Failed), Error);
        assert_eq!(apply(Working, &Signal::Exited { success: true }), Done);
        assert_eq!(apply(Error, &Signal::Exited { success: true }), Error);
        assert_eq!(apply(Done, &Signal::Exited { success: false }), Error);
        assert_eq!(apply(Blocked, &Signal::Working), Working);
        assert_eq!(apply(Working, &Signal::Blocked), Blocked);
    }

    #[test]
    fn wire_names_round_trip() {
        for st in AgentState::ALL {
            assert_eq!(AgentState::parse(st.as_str()), Some(st));
        }
        assert_eq!(AgentState::parse("stalled"), None);
    }
}
