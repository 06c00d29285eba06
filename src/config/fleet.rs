//! `[fleet]`: this host in a fleet over NATS JetStream (docs/FLEET.md).
//! When the table is there, colibrid supervises the bridge
//! (`colibri-bridge run`) as the satellite pane `colibri-bridge`; NATS
//! itself never enters colibrid.
//!
//! ```toml
//! [fleet]
//! url = "tls://hub.example:4222"
//! host_id = "db1"
//! creds = "/usr/local/etc/colibri/db1.creds"
//! tls_ca = "/usr/local/etc/colibri/hub-ca.pem"
//! heartbeat = "10s"
//! ```

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::file::Validator;
use super::parse_positive_duration;

/// How often the bridge rewrites `colibri_hosts.<host>` unless the table
/// says otherwise; a view calls a host unreachable after three.
pub const DEFAULT_FLEET_HEARTBEAT: Duration = Duration::from_secs(10);
/// The pane colibrid runs the bridge in.
pub const BRIDGE_PANE: &str = "colibri-bridge";

/// `[fleet]`, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FleetConfig {
    /// The NATS server(s): `nats://`, `tls://`, `ws://` or `wss://` URLs,
    /// comma-separated.
    pub url: String,
    /// This host's subject token in `colibri.evt.<host>.>` and
    /// `colibri.cmd.<host>`.
    pub host_id: String,
    /// A NATS credentials file (JWT and nkey seed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creds: Option<PathBuf>,
    /// The CA that signs the server's TLS certificate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<PathBuf>,
    #[serde(serialize_with = "super::render::duration")]
    pub heartbeat: Duration,
}

/// `[fleet]` as one file gives it; `host_id` may wait for `daemon.host`.
#[derive(Debug, Clone, Default)]
pub struct FleetLayer {
    pub url: Option<String>,
    pub host_id: Option<String>,
    pub creds: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
    pub heartbeat: Option<Duration>,
}

impl FleetLayer {
    /// Over the defaults; the host id defaults to `host` made a token.
    pub fn resolve(self, host: &str) -> Result<FleetConfig, (String, String)> {
        let url = self
            .url
            .ok_or(("fleet.url".to_owned(), "[fleet] needs url".to_owned()))?;
        let host_id = match self.host_id {
            Some(id) => id,
            None => {
                let id = host_token(host);
                if !valid_host_id(&id) {
                    return Err((
                        "fleet.host_id".to_owned(),
                        format!(
                            "the host name {host:?} does not make a host id \
                             (1 to 63 of a-z, 0-9, _ and -): set host_id"
                        ),
                    ));
                }
                id
            }
        };
        Ok(FleetConfig {
            url,
            host_id,
            creds: self.creds,
            tls_ca: self.tls_ca,
            heartbeat: self.heartbeat.unwrap_or(DEFAULT_FLEET_HEARTBEAT),
        })
    }
}

/// A host name as a subject token: lower case, dots become dashes.
pub fn host_token(host: &str) -> String {
    host.to_ascii_lowercase().replace('.', "-")
}

/// One NATS subject token, the NATS Agent Protocol's rule: dots would
/// split the subject, wildcards widen it.
pub fn valid_host_id(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn check_url(v: String) -> Result<String, String> {
    let urls: Vec<&str> = v.split(',').map(str::trim).collect();
    for u in &urls {
        let scheme_ok = ["nats://", "tls://", "ws://", "wss://"]
            .iter()
            .any(|s| u.strip_prefix(s).is_some_and(|rest| !rest.is_empty()));
        if !scheme_ok {
            return Err(format!(
                "{u:?} is not a NATS URL (nats://, tls://, ws:// or wss:// and a host)"
            ));
        }
    }
    Ok(urls.join(","))
}

fn absolute_file(v: String) -> Result<PathBuf, String> {
    let p = PathBuf::from(&v);
    if p.is_absolute() {
        Ok(p)
    } else {
        Err(format!("{v:?} must be an absolute path"))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawFleet {
    url: Option<Spanned<String>>,
    host_id: Option<Spanned<String>>,
    creds: Option<Spanned<String>>,
    tls_ca: Option<Spanned<String>>,
    heartbeat: Option<Spanned<String>>,
}

impl Validator<'_> {
    pub(super) fn fleet(&mut self, raw: Option<Spanned<RawFleet>>) -> Option<FleetLayer> {
        let raw = raw?;
        let span = raw.span();
        let f = raw.into_inner();
        if f.url.is_none() {
            self.invalid(
                span.clone(),
                "fleet.url",
                "[fleet] needs url (the NATS server, e.g. \"nats://hub:4222\")".to_owned(),
            );
        }
        Some(FleetLayer {
            url: self.opt(f.url, "fleet.url", check_url),
            host_id: self.opt(f.host_id, "fleet.host_id", |v| {
                if valid_host_id(&v) {
                    Ok(v)
                } else {
                    Err(format!(
                        "{v:?} is not a host id: 1 to 63 of a-z, 0-9, _ and - \
                         (dots would split the NATS subject)"
                    ))
                }
            }),
            creds: self.opt(f.creds, "fleet.creds", absolute_file),
            tls_ca: self.opt(f.tls_ca, "fleet.tls_ca", absolute_file),
            heartbeat: self.opt(f.heartbeat, "fleet.heartbeat", |v| {
                parse_positive_duration(&v)
            }),
        })
    }
}
