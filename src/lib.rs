//! colibri: supervise AI coding agents from one single-threaded event loop.
//!
//! The crate has three layers that depend only downward:
//! - [`core`] is pure: it turns agent JSONL bytes into per-pane state. No I/O,
//!   no OS calls, no clock reads (every time is passed in).
//! - [`protocol`] holds every type that crosses the socket or is printed as
//!   JSON, so wire compatibility is decided in one file.
//! - [`daemon`] and [`platform`] do the I/O; `platform` is the only module
//!   with `cfg(target_os)` code.

pub mod cli;
pub mod client;
pub mod config;
pub mod core;
pub mod daemon;
pub mod fold;
pub mod platform;
pub mod protocol;
pub mod syslog;
pub mod terminal_text;
pub mod web;
