//! Wire types of `hostop`: an operator-declared host operation a jail
//! agent asks colibrid to run (the seed's "Proxy hostd Operation":
//! `{op, params}` in, `{ok, output, exitCode}` out).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `hostop`: run the declared op `op` with these parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostopArgs {
    /// A `[hostops.NAME]` of colibrid's configuration.
    pub op: String,
    /// One string per declared parameter, each matching its pattern.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
}

/// What the op's process did, once it ended (a timeout is an error reply,
/// `timeout`, instead).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostopReply {
    /// The op exited 0.
    pub ok: bool,
    /// Its stdout and stderr together, in the order written, up to the
    /// op's `output_max` bytes (bytes that are not UTF-8 are replaced).
    pub output: String,
    /// Its exit status; 128 + N when signal N ended it.
    #[serde(rename = "exitCode")]
    pub exit_code: i32,
    /// The signal that ended it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// More output came than `output_max`: the rest was read and dropped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}
