//! `[hostops.NAME]`: the host operations an operator lets jail agents ask
//! colibrid for (the seed's `hostd`), each an argv template checked here
//! once, at load, so a request can only fill in its parameters.
//!
//! ```toml
//! [hostops.zfs-snapshot]
//! argv = ["/sbin/zfs", "snapshot", "zroot/jails/{jail}@{name}"]
//! params.jail = "[a-z0-9-]{1,32}"
//! params.name = "[a-z0-9-]{1,32}"
//! jails = ["agents1"]
//! timeout = "30s"
//! ```
//!
//! A `{param}` stands in one argv element (alone or inside it) and is
//! replaced there by the request's value, never through a shell: a value
//! is one argument, whatever it holds. Every value must match its
//! parameter's pattern entirely (anchored at both ends); every declared
//! parameter must be given and no other. `{{` and `}}` are literal braces.
//! The program (`argv[0]`) is an absolute path and takes no placeholder.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};
use toml::Spanned;

use super::file::Validator;
use super::{check_jail_name, parse_positive_duration};

/// How long an op runs before its process group is killed, unless its
/// table says otherwise.
pub const DEFAULT_HOSTOP_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest `timeout` an op may have (`colibri hostop` waits this long).
pub const MAX_HOSTOP_TIMEOUT: Duration = Duration::from_secs(3600);
/// Output (stdout and stderr together) kept for the reply by default; the
/// rest is read and discarded.
pub const DEFAULT_HOSTOP_OUTPUT: usize = 64 << 10;
/// The most `output_max` may be: a reply is held whole in memory.
pub const MAX_HOSTOP_OUTPUT: usize = 1 << 20;
/// The longest parameter value a request may give, in bytes.
pub const MAX_PARAM_BYTES: usize = 1024;
/// The compiled size a pattern may reach (the `regex` crate's limit): a
/// pattern is the operator's, but `{1000}{1000}` should fail at load, not
/// take the daemon's memory.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// One declared host operation, checked.
#[derive(Debug, Clone, Serialize)]
pub struct HostOp {
    /// As written, for `--check-config`.
    pub argv: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, ParamPattern>,
    /// Jails whose agents may run it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub jails: Vec<String>,
    /// Roles whose agents may run it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    #[serde(serialize_with = "super::render::duration")]
    pub timeout: Duration,
    pub output_max: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// `argv`, each element cut into text and placeholders.
    #[serde(skip)]
    template: Vec<Vec<Piece>>,
}

/// A piece of an argv element.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Param(String),
}

/// A parameter's pattern: the operator's text, and the regex that holds a
/// value to all of it.
#[derive(Debug, Clone)]
pub struct ParamPattern {
    source: String,
    anchored: regex::Regex,
}

impl ParamPattern {
    pub fn new(source: &str) -> Result<ParamPattern, String> {
        // `\A(?:…)\z`: the whole value, whatever flags or alternations the
        // pattern has (`a|b.*` must not match "bxyz" only at its start).
        let anchored = regex::RegexBuilder::new(&format!(r"\A(?:{source})\z"))
            .size_limit(PATTERN_SIZE_LIMIT)
            .build()
            .map_err(|e| format!("invalid pattern {source:?}: {e}"))?;
        Ok(ParamPattern {
            source: source.to_string(),
            anchored,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn matches(&self, value: &str) -> bool {
        self.anchored.is_match(value)
    }
}

impl Serialize for ParamPattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.source)
    }
}

/// Why a request's parameters do not fit an op (`bad_param`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    #[error("unknown parameter {0:?} (this op takes {1})")]
    Unknown(String, String),
    #[error("missing parameter {0:?}")]
    Missing(String),
    #[error("parameter {0:?} is longer than {MAX_PARAM_BYTES} bytes")]
    TooLong(String),
    #[error("parameter {0:?} holds a NUL byte")]
    Nul(String),
    #[error("parameter {0:?} does not match its pattern {1:?}")]
    Mismatch(String, String),
}

impl HostOp {
    /// The argv to run for `given`: each placeholder replaced by its
    /// value, once (a value that holds `{x}` stays as it is). Every value
    /// is checked before anything is built.
    pub fn argv_for(&self, given: &BTreeMap<String, String>) -> Result<Vec<String>, ParamError> {
        for (name, value) in given {
            let Some(pattern) = self.params.get(name) else {
                return Err(ParamError::Unknown(name.clone(), self.param_list()));
            };
            if value.len() > MAX_PARAM_BYTES {
                return Err(ParamError::TooLong(name.clone()));
            }
            if value.contains('\0') {
                return Err(ParamError::Nul(name.clone()));
            }
            if !pattern.matches(value) {
                return Err(ParamError::Mismatch(
                    name.clone(),
                    pattern.as_str().to_string(),
                ));
            }
        }
        if let Some(missing) = self.params.keys().find(|p| !given.contains_key(*p)) {
            return Err(ParamError::Missing(missing.clone()));
        }
        let argv = self
            .template
            .iter()
            .map(|pieces| {
                pieces
                    .iter()
                    .map(|piece| match piece {
                        Piece::Text(t) => t.as_str(),
                        // Present: every declared parameter was checked above.
                        Piece::Param(p) => given.get(p).map_or("", String::as_str),
                    })
                    .collect()
            })
            .collect();
        Ok(argv)
    }

    /// Whether an agent of `jail` (or with `role`) may run this op.
    pub fn allows(&self, jail: Option<&str>, role: Option<&str>) -> bool {
        jail.is_some_and(|j| self.jails.iter().any(|x| x == j))
            || role.is_some_and(|r| self.roles.iter().any(|x| x == r))
    }

    fn param_list(&self) -> String {
        if self.params.is_empty() {
            return "none".to_string();
        }
        self.params.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

/// An op name, a parameter name or a role: a plain word (they appear in
/// logs, events and `colibri hostop NAME key=value`).
fn check_word(what: &str, name: &str) -> Result<(), String> {
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if name.is_empty() || name.len() > 64 || !plain || name.starts_with('-') {
        Err(format!(
            "invalid {what} {name:?} (1 to 64 letters, digits, '_', '-', '.'; not starting with '-')"
        ))
    } else {
        Ok(())
    }
}

/// One argv element cut into text and `{param}` placeholders.
fn parse_element(element: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = element.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => name.push(c),
                        None => return Err(format!("{element:?}: a '{{' is never closed")),
                    }
                }
                check_word("parameter name", &name).map_err(|e| format!("{element:?}: {e}"))?;
                if !text.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                }
                pieces.push(Piece::Param(name));
            }
            '}' => {
                return Err(format!(
                    "{element:?}: a lone '}}' (write '}}}}' for a brace)"
                ))
            }
            c => text.push(c),
        }
    }
    if !text.is_empty() || pieces.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

/// The template of `argv`, checked against the declared parameters: the
/// program is absolute and fixed, every placeholder is declared and every
/// declared parameter used.
fn template(
    argv: &[String],
    params: &BTreeMap<String, ParamPattern>,
) -> Result<Vec<Vec<Piece>>, String> {
    let Some(program) = argv.first() else {
        return Err("must name a program".to_string());
    };
    if !program.starts_with('/') {
        return Err(format!(
            "{program:?}: the program must be an absolute path (no PATH search on the host)"
        ));
    }
    if program.contains(['{', '}']) {
        return Err(format!("{program:?}: the program takes no parameter"));
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err("holds a NUL byte".to_string());
    }
    let template: Vec<Vec<Piece>> = argv
        .iter()
        .map(|a| parse_element(a))
        .collect::<Result<_, _>>()?;
    let used: Vec<&str> = template
        .iter()
        .flatten()
        .filter_map(|p| match p {
            Piece::Param(name) => Some(name.as_str()),
            Piece::Text(_) => None,
        })
        .collect();
    if let Some(undeclared) = used.iter().find(|p| !params.contains_key(**p)) {
        return Err(format!(
            "{{{undeclared}}} has no pattern (add params.{undeclared} = \"...\")"
        ));
    }
    if let Some(unused) = params.keys().find(|p| !used.contains(&p.as_str())) {
        return Err(format!(
            "params.{unused} is declared but argv never uses it"
        ));
    }
    Ok(template)
}

// The file as serde sees it.

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawHostOp {
    argv: Spanned<Vec<String>>,
    #[serde(default)]
    params: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    jails: Vec<Spanned<String>>,
    #[serde(default)]
    roles: Vec<Spanned<String>>,
    timeout: Option<Spanned<String>>,
    output_max: Option<Spanned<u64>>,
    cwd: Option<Spanned<String>>,
}

impl Validator<'_> {
    /// Every `[hostops.NAME]`, each value checked where it stands; an op
    /// with any bad value is left out (and the load fails).
    pub(super) fn hostops(
        &mut self,
        raw: BTreeMap<String, Spanned<RawHostOp>>,
    ) -> BTreeMap<String, HostOp> {
        let mut ops = BTreeMap::new();
        for (name, table) in raw {
            let span = table.span();
            let key = format!("hostops.{name}");
            if let Err(msg) = check_word("op name", &name) {
                self.invalid(span, &key, msg);
                continue;
            }
            let errors_before = self.error_count();
            let op = self.hostop(&key, table.into_inner());
            if let (Some(op), true) = (op, self.error_count() == errors_before) {
                ops.insert(name, op);
            }
        }
        ops
    }

    fn hostop(&mut self, key: &str, raw: RawHostOp) -> Option<HostOp> {
        let errors_before = self.error_count();
        let mut params = BTreeMap::new();
        for (name, pattern) in raw.params {
            let pkey = format!("{key}.params.{name}");
            let checked = self.one(pattern, &pkey, |p| {
                check_word("parameter name", &name)?;
                ParamPattern::new(&p)
            });
            if let Some(p) = checked {
                params.insert(name, p);
            }
        }
        let argv_span = raw.argv.span();
        let argv = raw.argv.into_inner();
        if self.error_count() > errors_before {
            // A bad pattern would read as an undeclared placeholder too.
            return None;
        }
        let template = match template(&argv, &params) {
            Ok(t) => t,
            Err(msg) => {
                self.invalid(argv_span, &format!("{key}.argv"), msg);
                return None;
            }
        };
        let jails = raw
            .jails
            .into_iter()
            .filter_map(|j| {
                self.one(j, &format!("{key}.jails"), |j| {
                    check_jail_name(&j).map(|()| j)
                })
            })
            .collect();
        let roles = raw
            .roles
            .into_iter()
            .filter_map(|r| {
                self.one(r, &format!("{key}.roles"), |r| {
                    check_word("role", &r).map(|()| r)
                })
            })
            .collect();
        let timeout = self
            .opt(raw.timeout, &format!("{key}.timeout"), |v| {
                let d = parse_positive_duration(&v)?;
                if d > MAX_HOSTOP_TIMEOUT {
                    return Err(format!(
                        "{v:?} is longer than {}",
                        humantime::format_duration(MAX_HOSTOP_TIMEOUT)
                    ));
                }
                Ok(d)
            })
            .unwrap_or(DEFAULT_HOSTOP_TIMEOUT);
        let output_max = self
            .opt(raw.output_max, &format!("{key}.output_max"), |v| {
                usize::try_from(v)
                    .ok()
                    .filter(|v| (1..=MAX_HOSTOP_OUTPUT).contains(v))
                    .ok_or_else(|| format!("{v} is out of range (1..={MAX_HOSTOP_OUTPUT})"))
            })
            .unwrap_or(DEFAULT_HOSTOP_OUTPUT);
        let cwd = self.opt(raw.cwd, &format!("{key}.cwd"), |v| {
            if v.starts_with('/') {
                Ok(PathBuf::from(v))
            } else {
                Err(format!("{v:?} is not an absolute directory"))
            }
        });
        Some(HostOp {
            argv,
            params,
            jails,
            roles,
            timeout,
            output_max,
            cwd,
            template,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(argv: &[&str], params: &[(&str, &str)]) -> Result<HostOp, String> {
        let params: BTreeMap<String, ParamPattern> = params
            .iter()
            .map(|(n, p)| Ok(((*n).to_string(), ParamPattern::new(p)?)))
            .collect::<Result<_, String>>()?;
        let argv: Vec<String> = argv.iter().map(|s| (*s).to_string()).collect();
        let template = template(&argv, &params)?;
        Ok(HostOp {
            argv,
            params,
            jails: vec!["agents1".into()],
            roles: vec!["sysadmin".into()],
            timeout: DEFAULT_HOSTOP_TIMEOUT,
            output_max: DEFAULT_HOSTOP_OUTPUT,
            cwd: None,
            template,
        })
    }

    fn given(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn a_value_fills_its_placeholder_as_one_argument_never_through_a_shell() {
        let snap = op(
            &["/sbin/zfs", "snapshot", "zroot/{jail}@{name}", "{name}"],
            &[("jail", "[a-z0-9-]+"), ("name", "[a-z ;$()-]+")],
        )
        .expect("valid");
        let argv = snap
            .argv_for(&given(&[("jail", "db"), ("name", "a b; $(x)")]))
            .expect("fits");
        assert_eq!(
            argv,
            ["/sbin/zfs", "snapshot", "zroot/db@a b; $(x)", "a b; $(x)"]
        );
    }

    #[test]
    fn a_value_must_match_its_whole_pattern() {
        let snap = op(&["/bin/echo", "{name}"], &[("name", "[a-z]+|x")]).expect("valid");
        for bad in ["abc1", "1abc", "", "abc\n", "X", "ab c"] {
            assert!(
                matches!(
                    snap.argv_for(&given(&[("name", bad)])),
                    Err(ParamError::Mismatch(..))
                ),
                "{bad:?} passed"
            );
        }
        assert!(snap.argv_for(&given(&[("name", "abc")])).is_ok());
        assert!(snap.argv_for(&given(&[("name", "x")])).is_ok());
    }

    #[test]
    fn every_declared_parameter_must_be_given_and_no_other() {
        let snap = op(&["/bin/echo", "{a}", "{b}"], &[("a", ".*"), ("b", ".*")]).expect("valid");
        assert_eq!(
            snap.argv_for(&given(&[("a", "1")])),
            Err(ParamError::Missing("b".into()))
        );
        assert!(matches!(
            snap.argv_for(&given(&[("a", "1"), ("b", "2"), ("c", "3")])),
            Err(ParamError::Unknown(..))
        ));
        let long = "x".repeat(MAX_PARAM_BYTES + 1);
        assert_eq!(
            snap.argv_for(&given(&[("a", &long), ("b", "2")])),
            Err(ParamError::TooLong("a".into()))
        );
        assert_eq!(
            snap.argv_for(&given(&[("a", "1\0"), ("b", "2")])),
            Err(ParamError::Nul("a".into()))
        );
    }

    #[test]
    fn a_value_that_looks_like_a_placeholder_is_not_expanded_again() {
        let echo = op(&["/bin/echo", "{a}-{b}"], &[("a", ".*"), ("b", ".*")]).expect("valid");
        let argv = echo
            .argv_for(&given(&[("a", "{b}"), ("b", "2")]))
            .expect("fits");
        assert_eq!(argv, ["/bin/echo", "{b}-2"]);
        let braces = op(&["/bin/echo", "{{literal}}"], &[]).expect("valid");
        assert_eq!(
            braces.argv_for(&BTreeMap::new()).expect("fits"),
            ["/bin/echo", "{literal}"]
        );
    }

    #[test]
    fn a_template_is_refused_at_load_for_what_a_request_could_not_fix() {
        for (argv, params, why) in [
            (vec!["echo", "x"], vec![], "absolute"),
            (vec!["/bin/{p}"], vec![("p", "x")], "program"),
            (vec!["/bin/echo", "{p}"], vec![], "no pattern"),
            (vec!["/bin/echo"], vec![("p", "x")], "never uses"),
            (vec!["/bin/echo", "{p"], vec![("p", "x")], "never closed"),
            (vec!["/bin/echo", "p}"], vec![], "lone"),
            (vec!["/bin/echo", "{a b}"], vec![], "parameter name"),
            (vec![], vec![], "program"),
        ] {
            let err = op(&argv, &params).expect_err(why);
            assert!(err.contains(why), "{argv:?}: {err}");
        }
        assert!(ParamPattern::new("(").is_err());
        assert!(
            ParamPattern::new("a{1000}{1000}{1000}").is_err(),
            "too large"
        );
    }

    #[test]
    fn only_a_listed_jail_or_role_may_run_an_op() {
        let echo = op(&["/bin/echo"], &[]).expect("valid");
        assert!(echo.allows(Some("agents1"), None));
        assert!(echo.allows(None, Some("sysadmin")));
        assert!(echo.allows(Some("other"), Some("sysadmin")));
        assert!(!echo.allows(Some("other"), None));
        assert!(!echo.allows(None, Some("dba")));
        assert!(!echo.allows(None, None), "a host agent without a role");
    }
}
