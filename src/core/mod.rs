//! The pure core: agent JSONL in, pane state out.
//!
//! **Invariant:** nothing under `core` performs I/O, calls the OS or reads a
//! clock. Time arrives as a [`time::Timestamp`] argument, bytes arrive as
//! slices. That is what lets `colibri fold` replay a recording offline and
//! get exactly the states the daemon saw live.

pub mod approval;
pub mod dispatch;
pub mod dispatch_replay;
pub mod escalation;
pub mod health;
pub mod heartbeat;
pub mod ingest;
pub mod lifecycle;
pub mod pane;
pub mod plan_source;
pub mod policy;
pub mod reconcile;
pub mod resolve;
pub mod runners;
pub mod signal;
pub mod spec;
pub mod state;
pub mod tasks;
pub mod taxonomy;
pub mod time;
pub mod tool;
pub mod usage;
