//! The guard's scope rule: the files a tool call writes, judged against
//! the pane's scope.
//!
//! A pane's scope is its working directory and the paths it was given
//! (`scope = [...]` on a declared agent, `scope` on `spawn-agent`, and
//! `[guard] scope_paths` for every pane). A write or edit outside it (a
//! harness's write/edit/patch tool, or a shell command's redirection,
//! `tee`, `cp`/`mv`/`install`/`ln` destination, `sed -i`, `dd of=`) warns
//! first and pauses the pane at the Nth (the seed's WARN, then PAUSE).
//!
//! Paths are data here: `.`, `..` and relative paths are resolved as text
//! against the pane's directory, never through the file system, so a fold
//! of the log judges a path as the daemon did. Symbolic links are
//! therefore not followed: a link inside the scope that points outside it
//! is inside, and a directory reached by another name (FreeBSD's `/home`
//! for `/usr/home`) is outside unless that name is in the scope too.

use serde::Deserialize;

/// How the scope rule answers a write outside the pane's scope.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ScopeMode {
    /// Warn, then pause at the [`ScopeSettings::pause_after`]th (the default).
    #[default]
    Pause,
    /// Warn at every one; never pause.
    Warn,
    Off,
}

impl ScopeMode {
    pub fn parse(text: &str) -> Option<ScopeMode> {
        match text {
            "pause" => Some(ScopeMode::Pause),
            "warn" => Some(ScopeMode::Warn),
            "off" => Some(ScopeMode::Off),
            _ => None,
        }
    }
}

/// The seed's WARN, then PAUSE: the second write outside scope pauses.
pub const PAUSE_AFTER: u32 = 2;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeSettings {
    pub mode: ScopeMode,
    /// Which write outside scope pauses the pane (1: the first); the ones
    /// before it warn.
    pub pause_after: u32,
    /// Paths in every pane's scope (absolute, or relative to the pane's
    /// working directory).
    pub paths: Vec<String>,
}

impl Default for ScopeSettings {
    fn default() -> Self {
        ScopeSettings {
            mode: ScopeMode::Pause,
            pause_after: PAUSE_AFTER,
            paths: Vec::new(),
        }
    }
}

/// A pane's scope with every path made absolute and its `.` and `..`
/// resolved as text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Roots {
    /// The working directory.
    cwd: Option<String>,
    /// The declared paths and the ones every pane has.
    others: Vec<String>,
}

impl Roots {
    /// `cwd` and the paths, each resolved against `cwd` (a relative path
    /// without a `cwd` is left out: where it points is not known).
    pub fn resolve(cwd: Option<&str>, declared: &[String], extra: &[String]) -> Roots {
        let cwd = cwd.and_then(|c| resolve(c, None));
        let mut others: Vec<String> = Vec::new();
        for p in declared.iter().chain(extra) {
            if let Some(r) = resolve(p, cwd.as_deref()) {
                if !others.contains(&r) {
                    others.push(r);
                }
            }
        }
        Roots { cwd, others }
    }

    /// Nothing is known to judge by: no working directory, no path.
    pub fn is_empty(&self) -> bool {
        self.cwd.is_none() && self.others.is_empty()
    }

    /// The scope's paths besides the working directory (absolute,
    /// resolved), for the destructive rules that honour the scope.
    pub fn others(&self) -> &[String] {
        &self.others
    }

    /// Whether `target`, resolved from `here`, lies at or below one of the
    /// scope's paths. What cannot be resolved (a variable, `~`, a
    /// substitution) is outside; a relative path with no directory known
    /// is inside unless it climbs above its start.
    pub fn holds(&self, target: &str, here: Option<&str>) -> bool {
        if unresolvable(target) {
            return false;
        }
        let here = here.or(self.cwd.as_deref());
        if here.is_none() && !target.starts_with('/') {
            return !climbs(target);
        }
        let Some(path) = resolve(target, here) else {
            return false;
        };
        self.cwd
            .iter()
            .chain(&self.others)
            .any(|r| at_or_below(&path, r))
    }
}

/// Whether `path` names `root` or something below it (both resolved).
pub fn at_or_below(path: &str, root: &str) -> bool {
    root == "/"
        || path == root
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// A word the guard cannot turn into a path.
pub fn unresolvable(target: &str) -> bool {
    target.is_empty() || target.contains(['$', '`']) || target.starts_with('~')
}

/// Whether a relative path climbs above where it starts (`../x`, `a/../..`).
pub fn climbs(target: &str) -> bool {
    let mut depth: i64 = 0;
    for p in target.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    false
}

/// `path` made absolute (relative ones from `here`) with `.`, `..` and
/// repeated `/` resolved as text (`/..` is `/`, as the kernel has it).
/// `None` when it cannot be known.
pub fn resolve(path: &str, here: Option<&str>) -> Option<String> {
    if unresolvable(path) {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    let base = if path.starts_with('/') {
        None
    } else {
        Some(here?)
    };
    for p in base.into_iter().chain([path]).flat_map(|s| s.split('/')) {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            _ => parts.push(p),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// A device is the destructive rules' (`dd_to_device`), not a file of the
/// scope's: `> /dev/null` writes no file.
pub fn is_device(path: &str, here: Option<&str>) -> bool {
    resolve(path, here).is_some_and(|p| at_or_below(&p, "/dev"))
}

/// The most paths read from one call: a patch of a thousand files needs
/// only the first one outside scope.
pub const MAX_WRITES: usize = 64;

/// The files a harness's own write, edit or patch tool writes, as its
/// arguments name them (relative ones unresolved): Claude's `Write`,
/// `Edit`, `MultiEdit`, `NotebookEdit`; Pi's and zot's `write`, `edit`;
/// Gemini's `write_file`, `replace`; OpenCode's `write`, `edit`,
/// `multiedit`, `patch`; Codex's `apply_patch` and the `file_change` its
/// `exec` stream reports. Shell commands are the guard's reading
/// (`guard::read`); other tools write nothing the rule knows of.
pub fn tool_writes(tool: &str, args: &str) -> Vec<String> {
    let name = tool.to_ascii_lowercase();
    match name.as_str() {
        "write" | "edit" | "multiedit" | "multi_edit" | "notebookedit" | "notebook_edit"
        | "write_file" | "edit_file" | "replace" | "create_file" => {
            file_path(args).into_iter().collect()
        }
        "apply_patch" | "patch" => patch_text(args)
            .map(|t| patch_paths(&t))
            .unwrap_or_default(),
        "file_change" => changed_paths(args),
        _ => Vec::new(),
    }
}

/// The file a write or edit tool names.
fn file_path(args: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Paths {
        #[serde(default)]
        file_path: Option<String>,
        #[serde(default, rename = "filePath")]
        file_path_camel: Option<String>,
        #[serde(default)]
        notebook_path: Option<String>,
        #[serde(default)]
        absolute_path: Option<String>,
        #[serde(default)]
        path: Option<String>,
    }
    let p: Paths = serde_json::from_str(args).ok()?;
    p.file_path
        .or(p.file_path_camel)
        .or(p.notebook_path)
        .or(p.absolute_path)
        .or(p.path)
}

/// A patch tool's text: `patchText` (OpenCode), `input` or `patch`, or the
/// arguments themselves when they are the patch.
fn patch_text(args: &str) -> Option<String> {
    match serde_json::from_str::<serde_json::Value>(args) {
        Ok(serde_json::Value::Object(obj)) => ["patchText", "patch", "input"]
            .iter()
            .find_map(|k| obj.get(*k).and_then(|v| v.as_str()).map(str::to_string)),
        Ok(serde_json::Value::String(s)) => Some(s),
        _ => Some(args.to_string()),
    }
}

/// The files a patch in Codex's format adds, updates, deletes or moves to
/// (`*** Add File: PATH`, `*** Update File: PATH`, `*** Delete File:
/// PATH`, `*** Move to: PATH`).
pub fn patch_paths(patch: &str) -> Vec<String> {
    const MARKERS: [&str; 4] = [
        "*** Add File:",
        "*** Update File:",
        "*** Delete File:",
        "*** Move to:",
    ];
    patch
        .lines()
        .filter_map(|l| {
            let l = l.trim_end_matches('\r');
            MARKERS
                .iter()
                .find_map(|m| l.strip_prefix(m))
                .map(|p| p.trim().to_string())
        })
        .filter(|p| !p.is_empty())
        .take(MAX_WRITES)
        .collect()
}

/// The paths of Codex's `file_change` item (`changes[].path`).
fn changed_paths(args: &str) -> Vec<String> {
    #[derive(Deserialize)]
    struct Change {
        #[serde(default)]
        path: Option<String>,
    }
    serde_json::from_str::<Vec<Change>>(args)
        .map(|cs| {
            cs.into_iter()
                .filter_map(|c| c.path)
                .take(MAX_WRITES)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots(cwd: Option<&str>, declared: &[&str]) -> Roots {
        let declared: Vec<String> = declared.iter().map(|s| s.to_string()).collect();
        Roots::resolve(cwd, &declared, &[])
    }

    #[test]
    fn paths_are_resolved_as_text_against_the_working_directory() {
        let r = roots(Some("/home/dev/x/../p"), &["../shared", "/srv/data/", "./"]);
        assert_eq!(r.cwd.as_deref(), Some("/home/dev/p"));
        assert_eq!(r.others(), ["/home/dev/shared", "/srv/data", "/home/dev/p"]);
        // Without a directory a relative path means nothing and is dropped.
        assert_eq!(roots(None, &["rel", "/abs"]).others(), ["/abs"]);
        assert!(roots(None, &[]).is_empty());
    }

    #[test]
    fn a_path_is_held_at_or_below_a_root_and_nowhere_else() {
        let r = roots(Some("/home/dev/p"), &["/srv/data"]);
        let here = Some("/home/dev/p");
        for inside in [
            "src/lib.rs",
            "./a/../b",
            "/home/dev/p",
            "/home/dev/p/x",
            "/srv/data/out.csv",
            "/srv/data",
            "../p/y",
        ] {
            assert!(r.holds(inside, here), "{inside} is in scope");
        }
        for outside in [
            "/etc/hosts",
            "../other/x",
            "/home/dev/p2/x",
            "/srv/database",
            "/home/dev/p/../../../etc/passwd",
            "~/.bashrc",
            "$HOME/x",
            "$(mktemp)",
            "",
        ] {
            assert!(!r.holds(outside, here), "{outside:?} is outside");
        }
        // A call that runs elsewhere resolves from there.
        assert!(!r.holds("x", Some("/tmp")));
        // A scope of `/` holds everything.
        assert!(roots(Some("/"), &[]).holds("/etc/x", None));
        // No directory known: relative paths stay where they start.
        let none = roots(None, &["/srv"]);
        assert!(none.holds("a/b", None));
        assert!(!none.holds("../b", None));
        assert!(none.holds("/srv/x", None));
        assert!(!none.holds("/etc/x", None));
    }

    #[test]
    fn each_harness_names_the_files_its_tools_write() {
        let cases: &[(&str, &str, &[&str])] = &[
            (
                "Write",
                r#"{"file_path":"/a/x.rs","content":"y"}"#,
                &["/a/x.rs"],
            ),
            (
                "Edit",
                r#"{"file_path":"x.rs","old_string":"a","new_string":"b"}"#,
                &["x.rs"],
            ),
            ("MultiEdit", r#"{"file_path":"m.rs","edits":[]}"#, &["m.rs"]),
            (
                "NotebookEdit",
                r#"{"notebook_path":"/n.ipynb","new_source":""}"#,
                &["/n.ipynb"],
            ),
            ("write", r#"{"path":"p.txt","content":""}"#, &["p.txt"]),
            ("edit", r#"{"path":"e.txt","edits":[]}"#, &["e.txt"]),
            (
                "write_file",
                r#"{"file_path":"/g/w","content":""}"#,
                &["/g/w"],
            ),
            (
                "replace",
                r#"{"file_path":"/g/r","old_string":"","new_string":""}"#,
                &["/g/r"],
            ),
            (
                "edit",
                r#"{"filePath":"/o/e.ts","oldString":"","newString":""}"#,
                &["/o/e.ts"],
            ),
            (
                "patch",
                r#"{"patchText":"*** Begin Patch\n*** Update File: src/a.rs\n@@\n-a\n+b\n*** Delete File: /etc/old\n*** End Patch"}"#,
                &["src/a.rs", "/etc/old"],
            ),
            (
                "apply_patch",
                r#"{"input":"*** Begin Patch\n*** Update File: a.rs\n*** Move to: /tmp/b.rs\n*** Add File: c.rs\n+x\n*** End Patch"}"#,
                &["a.rs", "/tmp/b.rs", "c.rs"],
            ),
            (
                "file_change",
                r#"[{"path":"/r/src/lib.rs","kind":"update"},{"path":"/etc/x","kind":"add"}]"#,
                &["/r/src/lib.rs", "/etc/x"],
            ),
            ("Read", r#"{"file_path":"/etc/passwd"}"#, &[]),
            ("Bash", r#"{"command":"echo > /etc/x"}"#, &[]),
        ];
        for (tool, args, want) in cases {
            assert_eq!(tool_writes(tool, args), *want, "{tool} {args}");
        }
    }

    #[test]
    fn devices_are_not_files_of_the_scope() {
        assert!(is_device("/dev/null", None));
        assert!(is_device("//dev/./stderr", None));
        assert!(is_device("../../dev/null", Some("/a/b")));
        assert!(!is_device("/devices/x", None));
        assert!(!is_device("dev/null", Some("/p")));
    }
}
