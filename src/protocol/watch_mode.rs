//! What a `watch` stream carries.

use serde::{Deserialize, Serialize};

/// `watch`'s `mode`: every event as it happens (the default), or state
/// changes only.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WatchMode {
    /// Every event, one `state` event per state-changing line.
    #[default]
    All,
    /// `state` events coalesced per pane and loop pass into the net change
    /// (none when a pane ends the pass where it began), so an agent whose
    /// every line changes its state cannot flood the watcher; every other
    /// event as in `all`, in order.
    Changes,
}

impl WatchMode {
    /// The default, left out of a request.
    pub fn is_all(&self) -> bool {
        *self == WatchMode::All
    }
}
