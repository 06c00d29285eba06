//! Integration tests: the real `colibrid` on a temporary socket, real
//! agents (shell scripts and `colibri replay`) on real PTYs, driven as a
//! client would drive them.

mod support;

/// Kills, stops and disk freezes while agents stream.
mod chaos;
/// The operator CLI against the real daemon, reload, hints, jail scope.
mod cli;
/// The glasspane contract's commands and example lines.
mod contract;
/// The control plane: tasks, the claim handshake, scope, restarts.
mod control_plane;
/// Session logs, recovery after a crash, syslog alerts, configuration.
mod durability;
/// Process lifecycle: exits, kills, stalls, pause, restarts, shutdown.
mod lifecycle;
/// The reshaped top layer: per-pane resources, lifecycle events, the bus.
mod reshape;
/// Bad input, slow clients, floods, scale.
mod robustness;
/// `colibri web`: its token, its event stream, the page in headless chromium.
mod web;
