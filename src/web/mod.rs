//! `colibri web`: the web board, a satellite process of colibrid.
//!
//! It is a socket client of the daemon like any other: one thread keeps a
//! `watch` connection (state changes arrive as they happen), another
//! refreshes the v2 snapshot and the pending approvals every
//! [`REFRESH`] (usage and cost are not on the watch stream). Both feed a
//! [`board::Board`], which every browser follows over Server-Sent Events.
//!
//! The HTTP server (`server`) is blocking, a thread per connection, one
//! request each, every part bounded: that suits a board for a handful of
//! operators that any local user can reach, and builds in a fraction of
//! axum + tokio's time. Every data path needs the token or a
//! session a login opened (`Authorization: Bearer`; no cookie: see
//! `auth`); see docs/WEB.md.

// The action URLs are signed by `colibri notify` and checked by the board.
#[cfg(any(feature = "web", feature = "notify-http"))]
pub mod action;
pub mod auth;
#[cfg(feature = "web")]
pub mod board;
#[cfg(feature = "web")]
mod http;
#[cfg(feature = "web")]
mod serve;
#[cfg(feature = "web")]
pub mod server;

#[cfg(feature = "web")]
pub use serve::*;
