//! Integration tests: the real `colibrid` on a temporary socket, real
//! agents (shell scripts and `colibri replay`) on real PTYs, driven as a
//! client would drive them.

/// A scripted model provider on loopback for the real harnesses.
mod provider;
mod support;

/// Approvals: asked by scripted agents, answered by the operator and hooks.
mod approvals;
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
/// Governance: budgets, loop detection and the guard, carried out.
mod govern;
/// The real harnesses (Claude Code, Pi) under colibrid, against a scripted provider.
mod harness;
/// Hostile local clients: caps, idle close, jail status, the soak.
mod hostile;
/// Host operations: declared commands a jail's agents run on the host.
mod hostops;
/// Identity from the kernel: agents speak as themselves on any socket.
mod identity;
/// Process lifecycle: exits, kills, stalls, pause, restarts, shutdown.
mod lifecycle;
/// The loop under load: bursts, floods, watchers of state changes.
mod load;
/// The resumable watch and `colibri notify`.
mod notify;
/// The orchestrator: pending tasks dispatched to idle agents, the handshake.
mod orchestrator;
/// The reshaped top layer: per-pane resources, lifecycle events, the bus.
mod reshape;
/// Bad input, slow clients, floods, scale.
mod robustness;
/// Roles and role budgets, `state`'s seed shape, heartbeats, system prompts.
mod roles;
/// `get-session` streamed: bounded memory per client, replies in order.
mod session_stream;
/// The supervisor: declared agents, lifecycle commands, resume, ids.
mod snapshot_stream;
mod supervise;
/// `colibri top` and `colibri attach` under tmux; the attach protocol.
mod views;
/// `colibri web`: its token, its event stream, the page in headless chromium.
mod web;
