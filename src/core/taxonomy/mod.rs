//! One taxonomy, many harnesses.
//!
//! Each submodule is the adapter for one agent's JSONL dialect. An adapter
//! parses only the fields it needs (borrowing from the line, skipping the
//! rest), keeps the little per-pane memory its dialect requires (the last
//! stop reason, usage already counted), and returns an [`Observation`].
//! The state machine in `core::state` never sees a harness-specific name.

use crate::core::signal::{Observation, Signal};

pub mod claude;
pub mod codex;
pub mod detect;
pub mod gemini;
pub mod opencode;
pub mod pi;
pub mod zot;

/// The agent harnesses colibri understands, by their wire names.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Runtime {
    Pi,
    Zot,
    Claude,
    Codex,
    Gemini,
    OpenCode,
}

impl Runtime {
    pub const ALL: [Runtime; 6] = [
        Runtime::Pi,
        Runtime::Zot,
        Runtime::Claude,
        Runtime::Codex,
        Runtime::Gemini,
        Runtime::OpenCode,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Runtime::Pi => "pi",
            Runtime::Zot => "zot",
            Runtime::Claude => "claude",
            Runtime::Codex => "codex",
            Runtime::Gemini => "gemini",
            Runtime::OpenCode => "opencode",
        }
    }

    pub fn parse(s: &str) -> Option<Runtime> {
        Runtime::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl std::fmt::Display for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The line is not a JSON object (invalid UTF-8, invalid JSON, or a
/// scalar/array at top level, or an object without a usable `type`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Malformed;

/// A harness adapter with its per-pane memory.
#[derive(Debug)]
pub enum Adapter {
    Pi(pi::PiState),
    Zot(zot::ZotState),
    Claude(claude::ClaudeState),
    Codex(codex::CodexState),
    Gemini(gemini::GeminiState),
    OpenCode(opencode::OpenCodeState),
}

impl Adapter {
    pub fn new(runtime: Runtime) -> Adapter {
        match runtime {
            Runtime::Pi => Adapter::Pi(Default::default()),
            Runtime::Zot => Adapter::Zot(Default::default()),
            Runtime::Claude => Adapter::Claude(Default::default()),
            Runtime::Codex => Adapter::Codex(Default::default()),
            Runtime::Gemini => Adapter::Gemini(Default::default()),
            Runtime::OpenCode => Adapter::OpenCode(Default::default()),
        }
    }

    pub fn runtime(&self) -> Runtime {
        match self {
            Adapter::Pi(_) => Runtime::Pi,
            Adapter::Zot(_) => Runtime::Zot,
            Adapter::Claude(_) => Runtime::Claude,
            Adapter::Codex(_) => Runtime::Codex,
            Adapter::Gemini(_) => Runtime::Gemini,
            Adapter::OpenCode(_) => Runtime::OpenCode,
        }
    }

    /// Interprets one complete, non-blank line.
    pub fn observe<'a>(&mut self, line: &'a [u8]) -> Result<Observation<'a>, Malformed> {
        match self {
            Adapter::Pi(s) => s.observe(line),
            Adapter::Zot(s) => s.observe(line),
            Adapter::Claude(s) => s.observe(line),
            Adapter::Codex(s) => s.observe(line),
            Adapter::Gemini(s) => s.observe(line),
            Adapter::OpenCode(s) => s.observe(line),
        }
    }

    /// The signal for the agent's process exit. Most harnesses leave this
    /// to the exit status; Pi in JSON mode exits 0 even when its last
    /// message failed, so its adapter turns that exit into a failure.
    pub fn on_exit(&mut self, success: bool) -> Signal<'static> {
        match self {
            Adapter::Pi(s) => s.on_exit(success),
            _ => Signal::Exited { success },
        }
    }

    /// A new session header starts the dialect's memory over.
    pub fn reset(&mut self) {
        *self = Adapter::new(self.runtime());
    }
}
