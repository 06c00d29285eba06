//! The board's token: generated at first start, kept 0600, compared in
//! constant time; and the sessions a login opens.
//!
//! A browser never holds the token, and no credential of the board's is a
//! cookie: browsers send a host's cookies to every port of it, so a cookie
//! set by the board reached every other server on 127.0.0.1 the browser
//! visited (an agent's dev server among them). A login turns the token into
//! a session id that the page keeps in its tab (`sessionStorage`) and sends
//! itself, as `Authorization: Bearer` (or in the `/events` URL, which an
//! `EventSource` cannot give a header), so nothing is sent that the page
//! did not send.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a session lasts from its login.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Sessions kept at most; a login past it ends the oldest.
pub const MAX_SESSIONS: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read the web token {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot create the web token {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("the web token {0} is empty or too short; remove it to generate a new one")]
    Short(PathBuf),
}

pub use crate::config::web_token_path as default_path;

/// The token in `path`, creating it (0600) when absent; `true` when created.
pub fn load_or_create(path: &Path) -> Result<(String, bool), TokenError> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let token = text.trim().to_string();
            if token.len() < 16 {
                return Err(TokenError::Short(path.to_path_buf()));
            }
            Ok((token, false))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => create(path).map(|t| (t, true)),
        Err(source) => Err(TokenError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn create(path: &Path) -> Result<String, TokenError> {
    let err = |source| TokenError::Create {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    // Two v4 UUIDs: 244 random bits from the OS generator.
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    f.write_all(format!("{token}\n").as_bytes()).map_err(err)?;
    Ok(token)
}

/// Equal without an early exit, so timing does not reveal a prefix.
pub fn same(given: &str, token: &str) -> bool {
    let (a, b) = (given.as_bytes(), token.as_bytes());
    let diff = a
        .iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    diff == 0 && a.len() == b.len()
}

/// The sessions logins opened: ids of 256 random bits, each valid for
/// [`SESSION_TTL`], at most [`MAX_SESSIONS`].
#[derive(Debug, Default)]
pub struct Sessions {
    until: Mutex<HashMap<String, Instant>>,
}

impl Sessions {
    /// A new session's id.
    pub fn open(&self) -> String {
        let id = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let now = Instant::now();
        let mut until = self
            .until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        until.retain(|_, t| *t > now);
        while until.len() >= MAX_SESSIONS {
            let Some(oldest) = until
                .iter()
                .min_by_key(|(_, t)| **t)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            until.remove(&oldest);
        }
        until.insert(id.clone(), now + SESSION_TTL);
        id
    }

    /// Whether `id` is a session that has not expired.
    pub fn valid(&self, id: &str) -> bool {
        let now = Instant::now();
        let until = self
            .until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Compared in constant time, as the token is.
        until.iter().any(|(k, t)| same(id, k) && *t > now)
    }
}

/// Whether `credential` (a bearer value, or the `/events` URL's session)
/// is the token or an open session.
pub fn authorized(credential: Option<&str>, token: &str, sessions: &Sessions) -> bool {
    credential
        .map(str::trim)
        .is_some_and(|c| !c.is_empty() && (same(c, token) || sessions.valid(c)))
}

/// The bearer value of an `Authorization` header.
pub fn bearer(authorization: Option<&str>) -> Option<&str> {
    authorization.and_then(|h| h.strip_prefix("Bearer "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_token_is_created_once_with_mode_0600() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub").join("web-token");
        let (t1, created) = load_or_create(&path).expect("create");
        assert!(created);
        assert_eq!(t1.len(), 64);
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let (t2, created) = load_or_create(&path).expect("load");
        assert!(!created);
        assert_eq!(t1, t2);
    }

    #[test]
    fn the_token_or_an_open_session_must_match_exactly() {
        let t = "0123456789abcdef0123";
        let sessions = Sessions::default();
        let auth = |c: Option<&str>| authorized(c, t, &sessions);
        assert!(auth(bearer(Some("Bearer 0123456789abcdef0123"))));
        assert!(!auth(bearer(Some("Bearer 0123456789abcdef012"))));
        assert!(!auth(bearer(Some("Bearer 0123456789abcdef01234"))));
        assert!(!auth(bearer(Some("colibri_web=0123456789abcdef0123"))));
        assert!(!auth(None));
        assert!(!auth(Some("")));
        let id = sessions.open();
        assert_eq!(id.len(), 64);
        assert!(auth(Some(&id)));
        assert!(!auth(Some(&id[..63])));
    }

    #[test]
    fn sessions_are_bounded_and_the_oldest_goes_first() {
        let sessions = Sessions::default();
        let first = sessions.open();
        let rest: Vec<String> = (0..MAX_SESSIONS).map(|_| sessions.open()).collect();
        assert!(!sessions.valid(&first), "the oldest was ended");
        assert!(rest.iter().all(|id| sessions.valid(id)));
    }
}
