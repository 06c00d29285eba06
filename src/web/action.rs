//! Phone actions: approve or deny one approval from a push notification.
//!
//! ntfy's `http` action calls a URL with nothing but what the message
//! carries, so the URL is the credential, and it must never be the board's
//! login token (which would then sit on a third party's push server). Each
//! URL is a capability for one decision on one approval: it names the pane
//! and the time the approval was asked (the daemon stamps both on the
//! `state` and `approval_opened` events notify sees), the decision and an
//! expiry, signed with HMAC-SHA-256 under a key only `colibri notify` and
//! `colibri web` read (a file of its own, 0600, beside the board's token).
//! The board answers a URL only while its signature holds, its time has not
//! passed, and the approval it names is still pending; once answered, the
//! same URL finds nothing to answer. See docs/WEB.md for the threat model.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

pub use crate::config::{action_key_path as default_path, DEFAULT_ACTION_TTL as DEFAULT_TTL};
/// The route the board serves them on.
pub const ROUTE: &str = "/act";

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read the action key {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot create the action key {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("the action key {0} is not 64 hex digits; remove it to generate a new one")]
    Bad(PathBuf),
    #[error("no random bytes from the OS for the action key")]
    Random,
}

/// The key that signs and checks action URLs.
#[derive(Clone)]
pub struct ActionKey(hmac::Key);

impl std::fmt::Debug for ActionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ActionKey(…)")
    }
}

impl ActionKey {
    /// The key in `path`, creating it (0600, 32 random bytes) when absent.
    pub fn load_or_create(path: &Path) -> Result<ActionKey, KeyError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => create(path)?,
            Err(source) => {
                return Err(KeyError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let bytes = decode_hex(text.trim()).ok_or_else(|| KeyError::Bad(path.to_path_buf()))?;
        if bytes.len() != 32 {
            return Err(KeyError::Bad(path.to_path_buf()));
        }
        Ok(ActionKey(hmac::Key::new(hmac::HMAC_SHA256, &bytes)))
    }

    /// A key from bytes (tests).
    pub fn from_bytes(bytes: &[u8]) -> ActionKey {
        ActionKey(hmac::Key::new(hmac::HMAC_SHA256, bytes))
    }

    /// The signature of `action`, as hex.
    pub fn sign(&self, action: &Action) -> String {
        encode_hex(hmac::sign(&self.0, action.signed_text().as_bytes()).as_ref())
    }

    /// Whether `sig` is `action`'s signature (compared in constant time).
    pub fn verify(&self, action: &Action, sig: &str) -> bool {
        decode_hex(sig)
            .is_some_and(|tag| hmac::verify(&self.0, action.signed_text().as_bytes(), &tag).is_ok())
    }

    /// The URL ntfy calls: `<board>/act?…&sig=…`.
    pub fn url(&self, board: &str, action: &Action) -> String {
        format!(
            "{}{ROUTE}?{}&sig={}",
            board.trim_end_matches('/'),
            action.query(),
            self.sign(action)
        )
    }
}

fn create(path: &Path) -> Result<String, KeyError> {
    let err = |source| KeyError::Create {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut bytes = [0u8; 32];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| KeyError::Random)?;
    let text = encode_hex(&bytes);
    // `create_new`: two satellites starting at once must not each write a
    // key of their own; the loser reads the winner's.
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut f) => {
            f.write_all(format!("{text}\n").as_bytes()).map_err(err)?;
            Ok(text)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => std::fs::read_to_string(path)
            .map_err(|source| KeyError::Read {
                path: path.to_path_buf(),
                source,
            }),
        Err(e) => Err(err(e)),
    }
}

/// The decision an action URL carries.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Deny,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Deny => "deny",
        }
    }

    fn parse(s: &str) -> Option<Decision> {
        match s {
            "approve" => Some(Decision::Approve),
            "deny" => Some(Decision::Deny),
            _ => None,
        }
    }
}

/// One decision on the approval `pane` asked at `asked_ms`, usable until
/// `expires` (Unix seconds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Action {
    pub pane: String,
    pub asked_ms: u64,
    pub decision: Decision,
    pub expires: u64,
}

impl Action {
    /// Every field, in one fixed order and separated by a byte no field
    /// holds (a pane id is a UUID), so no two actions sign the same text.
    fn signed_text(&self) -> String {
        format!(
            "colibri-action-v1\n{}\n{}\n{}\n{}",
            self.pane,
            self.asked_ms,
            self.decision.as_str(),
            self.expires
        )
    }

    fn query(&self) -> String {
        format!(
            "pane={}&at={}&d={}&exp={}",
            self.pane,
            self.asked_ms,
            self.decision.as_str(),
            self.expires
        )
    }

    /// The action and signature of a query string; `None` when a field is
    /// missing or malformed (pane ids are UUIDs: hex digits and dashes).
    pub fn parse_query(query: &str) -> Option<(Action, String)> {
        let field = |name: &str| query_field(query, name);
        let pane = field("pane")?;
        if pane.is_empty()
            || pane.len() > 64
            || !pane.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
        {
            return None;
        }
        let action = Action {
            pane: pane.to_string(),
            asked_ms: field("at")?.parse().ok()?,
            decision: Decision::parse(field("d")?)?,
            expires: field("exp")?.parse().ok()?,
        };
        Some((action, field("sig")?.to_string()))
    }
}

/// The value of `key` in a URL's query string (the first, as written:
/// nothing is percent-decoded, so an encoded value matches nothing).
pub fn query_field<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

fn encode_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action() -> Action {
        Action {
            pane: "7541795e-0a1b-4c2d-8e3f-001122334455".into(),
            asked_ms: 1_779_883_200_123,
            decision: Decision::Approve,
            expires: 1_779_886_800,
        }
    }

    #[test]
    fn a_url_reads_back_and_any_change_breaks_its_signature() {
        let key = ActionKey::from_bytes(&[7; 32]);
        let url = key.url("https://board.example/", &action());
        let query = url.split_once('?').map(|(_, q)| q).unwrap_or_default();
        assert!(url.starts_with("https://board.example/act?pane=7541795e-"));
        let (parsed, sig) = Action::parse_query(query).expect("parses");
        assert_eq!(parsed, action());
        assert!(key.verify(&parsed, &sig));
        let mut deny = parsed.clone();
        deny.decision = Decision::Deny;
        assert!(!key.verify(&deny, &sig), "the decision is signed");
        let mut later = parsed.clone();
        later.expires += 1;
        assert!(!key.verify(&later, &sig), "the expiry is signed");
        let mut other = parsed;
        other.asked_ms += 1;
        assert!(!key.verify(&other, &sig), "the approval is signed");
        let wrong_key = ActionKey::from_bytes(&[8; 32]);
        assert!(!wrong_key.verify(&action(), &sig));
        assert!(!key.verify(&action(), "zz"));
    }

    #[test]
    fn a_malformed_query_is_no_action() {
        for q in [
            "pane=../x&at=1&d=approve&exp=2&sig=aa",
            "pane=ab&at=x&d=approve&exp=2&sig=aa",
            "pane=ab&at=1&d=maybe&exp=2&sig=aa",
            "pane=ab&at=1&d=approve&exp=2",
        ] {
            assert!(Action::parse_query(q).is_none(), "{q}");
        }
    }

    #[test]
    fn the_key_file_is_created_once_private_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/web-action-key");
        let a = ActionKey::load_or_create(&path).expect("created");
        let b = ActionKey::load_or_create(&path).expect("read");
        assert_eq!(a.sign(&action()), b.sign(&action()));
        let mode = std::fs::metadata(&path)
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777);
        assert_eq!(mode.ok(), Some(0o600));
        std::fs::write(&path, "short\n").expect("spoil");
        assert!(matches!(
            ActionKey::load_or_create(&path),
            Err(KeyError::Bad(_))
        ));
    }
}
