//! The board's token: generated at first start, kept 0600, compared in
//! constant time.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The cookie `/?token=…` sets.
pub const COOKIE: &str = "colibri_web";

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read the web token {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot create the web token {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error("the web token {0} is empty or too short; remove it to generate a new one")]
    Short(PathBuf),
}

/// `$XDG_CONFIG_HOME/colibri/web-token`, else `~/.config/colibri/web-token`.
pub fn default_path() -> PathBuf {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("colibri").join("web-token")
}

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

/// Whether the request's `Cookie` or `Authorization` header carries `token`.
pub fn authorized(cookie: Option<&str>, authorization: Option<&str>, token: &str) -> bool {
    if let Some(bearer) = authorization.and_then(|h| h.strip_prefix("Bearer ")) {
        if same(bearer.trim(), token) {
            return true;
        }
    }
    cookie.is_some_and(|c| {
        c.split(';')
            .filter_map(|kv| kv.trim().split_once('='))
            .any(|(k, v)| k == COOKIE && same(v, token))
    })
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
    fn cookie_or_bearer_must_match_exactly() {
        let t = "0123456789abcdef0123";
        assert!(authorized(
            Some("a=b; colibri_web=0123456789abcdef0123"),
            None,
            t
        ));
        assert!(authorized(None, Some("Bearer 0123456789abcdef0123"), t));
        assert!(!authorized(
            Some("colibri_web=0123456789abcdef012"),
            None,
            t
        ));
        assert!(!authorized(None, Some("Bearer 0123456789abcdef01234"), t));
        assert!(!authorized(None, None, t));
    }
}
