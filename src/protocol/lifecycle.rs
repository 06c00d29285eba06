//! Wire types of the supervisor: `start-agent`, `stop-agent`,
//! `restart-agent`, `remove-agent`, and the wanted and actual state a v2
//! snapshot shows beside each pane's own.

use serde::{Deserialize, Serialize};

/// The reply of every lifecycle command.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LifecycleReply {
    pub agent_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `started`, `stopping`, `stopped`, `restarting` or `removed`.
    pub status: String,
}

/// What a supervisor keeps beside a pane's own state (v2 snapshots).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireSupervision {
    /// `up` or `down`.
    pub wanted: String,
    /// `running`, `backoff`, `exited`, `stopped` or `given-up`.
    pub actual: String,
    /// Who or what stopped it on purpose: `shutdown`, `operator`,
    /// `removed`, `no-autostart`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Declared in `[agents.NAME]` (else spawned by hand).
    pub declared: bool,
}
