//! The destructive-command guard: rules on tool calls.
//!
//! [`check`] reads a tool call (a shell command, an SQL statement, a git
//! invocation) and says whether it matches a destructive rule: a recursive
//! `rm` outside the working directory, a force push, `git reset --hard`,
//! `DROP TABLE`, a file system built or destroyed over a device, a write to
//! a device or to system configuration. It is a pure function so the
//! approvals side can call it before a tool runs (Claude's
//! `PreToolUse`/`can_use_tool`, Pi's RPC dialogs) and the policy engine
//! after the call appears in the stream.
//!
//! It reads the command as a shell would ([`shell`]: quotes, keywords,
//! braces, redirections, here-documents, `$(…)`), then unwraps what runs
//! another program (wrappers with the options that take a value, `xargs`,
//! `find -exec`, `sh -c`, `eval`, git aliases) before the rules look at
//! the program's options (short clusters, long ones by unambiguous prefix)
//! and paths (with `.`, `..` and `//` resolved). Nesting it cannot read to
//! its end is flagged, not passed. What it cannot see (a script file, a
//! Python `shutil.rmtree`, a variable set elsewhere) is listed in
//! docs/GOVERNANCE.md.

mod shell;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use super::scope;

/// Which rule a tool call matched.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardRule {
    /// A recursive `rm` (or `find -delete`, `find -exec rm -r`) of a path
    /// not strictly below the working directory or a path of the pane's
    /// scope (or a path the guard cannot resolve: a variable, `~`, a
    /// substitution, what `xargs` reads).
    RmOutsideCwd,
    /// A recursive `chmod`, `chown` or `chgrp` (`-R`) of a path not at or
    /// below the working directory or a path of the pane's scope.
    ChmodOutsideScope,
    /// `git push --force` / `-f` / a `+refspec`, or one that deletes
    /// remote branches (`--delete`, `:branch`, `--mirror`, `--prune`).
    GitForcePush,
    /// `git reset --hard`, `git clean -f`: uncommitted work discarded.
    GitDiscard,
    /// `DROP TABLE`, `DATABASE`, `SCHEMA`, `USER` or `ROLE`; `dropdb`,
    /// `dropuser`.
    SqlDrop,
    /// A file system or pool built or destroyed over a device: `mkfs*`,
    /// `newfs*`, `mke2fs`, `mkswap`, `wipefs`, `zfs`/`zpool destroy`,
    /// `gpart destroy`.
    Mkfs,
    /// Bytes written over a device under `/dev` (`dd of=`, `shred`, a
    /// redirection, `tee`, `cp`).
    DdToDevice,
    /// A write to `/etc` or `/usr/local/etc` (a redirection, `tee`,
    /// `sed -i`, `cp`/`mv`/`install`/`ln`).
    SystemConfig,
    /// A command the guard could not read to its end: nested deeper than
    /// it reads, or longer than it reads.
    Unreadable,
    /// A file written or edited outside the pane's scope: the scope rule
    /// (`policy::scope`), which warns before it pauses. [`check`] never
    /// gives it; it is a rule here so `disable` and the verdicts name it
    /// as they name the others.
    WriteOutsideScope,
}

impl GuardRule {
    /// Every rule, in the order the docs list them.
    pub const ALL: [GuardRule; 10] = [
        GuardRule::RmOutsideCwd,
        GuardRule::ChmodOutsideScope,
        GuardRule::GitForcePush,
        GuardRule::GitDiscard,
        GuardRule::SqlDrop,
        GuardRule::Mkfs,
        GuardRule::DdToDevice,
        GuardRule::SystemConfig,
        GuardRule::Unreadable,
        GuardRule::WriteOutsideScope,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            GuardRule::RmOutsideCwd => "rm_outside_cwd",
            GuardRule::ChmodOutsideScope => "chmod_outside_scope",
            GuardRule::GitForcePush => "git_force_push",
            GuardRule::GitDiscard => "git_discard",
            GuardRule::SqlDrop => "sql_drop",
            GuardRule::Mkfs => "mkfs",
            GuardRule::DdToDevice => "dd_to_device",
            GuardRule::SystemConfig => "system_config",
            GuardRule::Unreadable => "unreadable",
            GuardRule::WriteOutsideScope => "write_outside_scope",
        }
    }
}

/// A matched rule and the command (or statement) that matched it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardHit {
    pub rule: GuardRule,
    /// The offending command as the guard read it (after unwrapping).
    pub command: String,
}

impl GuardHit {
    /// What the harness is told when the guard denies the call before it
    /// runs: the rule and the command.
    pub fn refusal(&self) -> String {
        format!(
            "colibri's command guard refused this ({}): {}",
            self.rule.as_str(),
            self.command
        )
    }
}

fn hit(rule: GuardRule, command: &str) -> Option<GuardHit> {
    Some(GuardHit {
        rule,
        command: super::clip(command),
    })
}

/// How deep `sh -c`, `eval`, backticks, `find -exec` and git aliases nest
/// before the guard stops reading and flags the call ([`GuardRule::Unreadable`]):
/// a guard that passed what it had not read would be opened by nesting.
const MAX_DEPTH: usize = 6;

/// The longest command the guard reads (a shell takes longer ones, so a
/// longer one is flagged, not passed). Reading is linear in it.
const MAX_SCRIPT: usize = 1 << 20;

/// A variable's value is kept to this many bytes, and a word expanded to
/// this many, so `X=$X$X` repeated cannot grow them without bound.
const MAX_VALUE: usize = 64 * 1024;

/// How many bytes one call may make the guard read, nested scripts and
/// commands included: `sh -c`, `eval` and `find -exec` re-read text, and
/// without a budget nesting could multiply the work. Past it the call is
/// flagged ([`GuardRule::Unreadable`]).
const READ_BUDGET: usize = 4 * MAX_SCRIPT;

/// How many wrappers one command may stack (`sudo nice timeout … rm`)
/// before the guard stops unwrapping and flags it.
const MAX_WRAPPERS: usize = 32;

/// How many commands back a pipe's input is looked for (`echo … | tr … |
/// sh`).
const MAX_PIPE_FEED: usize = 4;

/// SQL clients whose arguments and input are read as SQL.
const SQL_CLIENTS: [&str; 8] = [
    "psql",
    "mysql",
    "mariadb",
    "sqlite3",
    "sqlite",
    "duckdb",
    "clickhouse-client",
    "cockroach",
];

/// Shells: `-c SCRIPT` is read, and so is their standard input.
const SHELLS: [&str; 9] = [
    "sh", "bash", "zsh", "dash", "ksh", "mksh", "csh", "tcsh", "fish",
];

/// What an unresolvable argument is written as (`xargs` appends what it
/// reads): a variable, so every rule treats it as unknown.
const UNKNOWN: &str = "$XARGS";

/// A program that runs the command after its own options: which of its
/// options take a value, and how many operands come before the command.
struct Wrapper {
    name: &'static str,
    /// Short options that take a value (`-u root`, or attached `-uroot`).
    short: &'static str,
    /// Long options that take a value (`--user root`, `--user=root`).
    long: &'static [&'static str],
    /// Operands before the command (`timeout 60`, `chroot /mnt`).
    operands: usize,
}

const WRAPPERS: &[Wrapper] = &[
    Wrapper {
        name: "sudo",
        short: "CDcgpRrTtUu",
        long: &[
            "chdir",
            "close-from",
            "group",
            "host",
            "login-class",
            "prompt",
            "chroot",
            "role",
            "type",
            "command-timeout",
            "other-user",
            "user",
        ],
        operands: 0,
    },
    Wrapper {
        name: "doas",
        short: "aCu",
        long: &[],
        operands: 0,
    },
    Wrapper {
        name: "env",
        short: "uCSPL",
        long: &["unset", "chdir", "split-string"],
        operands: 0,
    },
    Wrapper {
        name: "nice",
        short: "n",
        long: &["adjustment"],
        operands: 0,
    },
    Wrapper {
        name: "nohup",
        short: "",
        long: &[],
        operands: 0,
    },
    Wrapper {
        name: "time",
        short: "fo",
        long: &["format", "output"],
        operands: 0,
    },
    Wrapper {
        name: "timeout",
        short: "sk",
        long: &["signal", "kill-after"],
        operands: 1,
    },
    Wrapper {
        name: "ionice",
        short: "cnpPu",
        long: &["class", "classdata", "pid", "pgid", "uid"],
        operands: 0,
    },
    Wrapper {
        name: "stdbuf",
        short: "ioe",
        long: &["input", "output", "error"],
        operands: 0,
    },
    Wrapper {
        name: "chroot",
        short: "ugG",
        long: &["userspec", "groups"],
        operands: 1,
    },
    Wrapper {
        name: "command",
        short: "",
        long: &[],
        operands: 0,
    },
    Wrapper {
        name: "exec",
        short: "a",
        long: &[],
        operands: 0,
    },
    Wrapper {
        name: "builtin",
        short: "",
        long: &[],
        operands: 0,
    },
    Wrapper {
        name: "xargs",
        short: "adEIJLnPRSs",
        long: &[
            "arg-file",
            "delimiter",
            "max-args",
            "max-procs",
            "max-chars",
            "process-slot-var",
        ],
        operands: 0,
    },
    Wrapper {
        name: "busybox",
        short: "",
        long: &[],
        operands: 0,
    },
    Wrapper {
        name: "toybox",
        short: "",
        long: &[],
        operands: 0,
    },
    Wrapper {
        name: "setsid",
        short: "",
        long: &[],
        operands: 0,
    },
    Wrapper {
        name: "jexec",
        short: "uU",
        long: &[],
        operands: 1,
    },
    Wrapper {
        name: "rtprio",
        short: "",
        long: &[],
        operands: 1,
    },
    Wrapper {
        name: "idprio",
        short: "",
        long: &[],
        operands: 1,
    },
    Wrapper {
        name: "daemon",
        short: "pPotumRsTl",
        long: &[],
        operands: 0,
    },
];

/// Checks one tool call. `args` is the tool's arguments as the harness gave
/// them: a JSON object (its `command`/`cmd`/`script`/`sql`/`query`/
/// `statement` string, or a `command` array as Codex gives it), or a bare
/// command string. `cwd` is the agent's working directory when known;
/// without it only absolute, home and unresolvable `rm` targets count as
/// outside.
pub fn check(tool: &str, args: &str, cwd: Option<&str>) -> Option<GuardHit> {
    check_in(tool, args, Dirs::same(cwd))
}

/// The directories an `rm` target is judged by: relative targets are
/// resolved from `here`, and must lie strictly below `root` or a path of
/// `scope`. `root` and `here` differ when the harness says where the call
/// runs (a Claude Code hook's `cwd`) and the agent has left the directory
/// it was started in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dirs<'a> {
    /// The agent's working directory: what `rm` may empty.
    pub root: Option<&'a str>,
    /// Where the call runs.
    pub here: Option<&'a str>,
    /// The pane's scope besides its working directory, absolute and
    /// resolved (`scope::Roots::others`): what `rm` and `chmod -R` may
    /// also touch.
    pub scope: &'a [String],
}

impl<'a> Dirs<'a> {
    /// One directory for both (the stream guard knows only the agent's).
    pub fn same(cwd: Option<&'a str>) -> Self {
        Dirs {
            root: cwd,
            here: cwd,
            scope: &[],
        }
    }
}

/// [`check`] with the call's own directory besides the agent's.
pub fn check_in(tool: &str, args: &str, dirs: Dirs<'_>) -> Option<GuardHit> {
    read(tool, args, dirs).hit
}

/// What one reading of a tool call found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// The destructive rule it matched.
    pub hit: Option<GuardHit>,
    /// The files its shell command writes (redirections, `tee`, `sed -i`,
    /// the destination of `cp`/`mv`/`install`/`ln`, `dd of=`, the files
    /// an `apply_patch` patches), as written after the variables the
    /// command set are substituted, in reading order, at most
    /// [`scope::MAX_WRITES`](super::scope::MAX_WRITES). A reading cut
    /// short by a hit holds those seen before it.
    pub writes: Vec<String>,
}

/// [`check_in`], with the files the command writes (for the scope rule:
/// one reading serves both).
pub fn read(tool: &str, args: &str, dirs: Dirs<'_>) -> Reading {
    let text = match serde_json::from_str::<serde_json::Value>(args) {
        Ok(value) => command_text(&value),
        // Not JSON: a bare command line.
        Err(_) => Some(args.to_string()),
    };
    if is_sql_tool(tool) {
        if let Some(hit) = sql_drop(text.as_deref().unwrap_or(args)) {
            return Reading {
                hit: Some(hit),
                writes: Vec::new(),
            };
        }
    }
    let Some(text) = text else {
        return Reading::default();
    };
    if text.len() > MAX_SCRIPT {
        return Reading {
            hit: hit(GuardRule::Unreadable, &text),
            writes: Vec::new(),
        };
    }
    let reader = Reader {
        dirs,
        budget: Cell::new(READ_BUDGET),
        writes: RefCell::new(Vec::new()),
    };
    let hit = reader.script(&text, &[], 0);
    Reading {
        hit,
        writes: reader.writes.into_inner(),
    }
}

/// The command string inside a tool's JSON arguments, if it has one.
fn command_text(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => return Some(s.clone()),
        serde_json::Value::Array(a) => return Some(join_argv(a)),
        _ => {}
    }
    let obj = value.as_object()?;
    for key in ["command", "cmd", "script", "sql", "query", "statement"] {
        match obj.get(key) {
            Some(serde_json::Value::String(s)) => return Some(s.clone()),
            Some(serde_json::Value::Array(a)) => return Some(join_argv(a)),
            _ => {}
        }
    }
    None
}

/// An argv array as one shell line, each word quoted so `bash -lc SCRIPT`
/// keeps SCRIPT as one word.
fn join_argv(argv: &[serde_json::Value]) -> String {
    let words: Vec<String> = argv.iter().filter_map(|v| v.as_str()).map(quote).collect();
    words.join(" ")
}

/// `word` single-quoted for a shell.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

fn is_sql_tool(tool: &str) -> bool {
    let t = tool.to_ascii_lowercase();
    t.contains("sql") || t.contains("query") || t.contains("database")
}

/// One call's reading: where its paths are judged from, how much more it
/// may read, and the files it writes so far.
struct Reader<'a> {
    dirs: Dirs<'a>,
    budget: Cell<usize>,
    writes: RefCell<Vec<String>>,
}

impl Reader<'_> {
    /// Every command of `script`; `params` are its `$1`, `$2`, … (from
    /// `sh -c SCRIPT NAME ARG…`, `$0` being NAME).
    fn script(&self, script: &str, params: &[String], depth: usize) -> Option<GuardHit> {
        if depth > MAX_DEPTH || !self.spend(script.len()) {
            return hit(GuardRule::Unreadable, script);
        }
        let parsed = shell::parse(script);
        if parsed.too_deep {
            return hit(GuardRule::Unreadable, script);
        }
        for inner in &parsed.scripts {
            if let Some(hit) = self.script(inner, &[], depth + 1) {
                return Some(hit);
            }
        }
        let mut vars: HashMap<String, String> = params
            .iter()
            .enumerate()
            .map(|(i, p)| (i.to_string(), p.clone()))
            .collect();
        for (k, cmd) in parsed.commands.iter().enumerate() {
            let feed = feed(&parsed.commands, k);
            if let Some(hit) = self.command(cmd, &feed, &mut vars, depth) {
                return Some(hit);
            }
        }
        None
    }

    fn command(
        &self,
        cmd: &shell::Command,
        feed: &[String],
        vars: &mut HashMap<String, String>,
        depth: usize,
    ) -> Option<GuardHit> {
        // Leading `NAME=value` words assign (for this command, or for the
        // rest of the script when nothing follows them): remember both alike.
        let mut start = 0;
        while let Some((name, value)) = cmd.words.get(start).and_then(|w| assignment(w)) {
            let value = expand(value, vars);
            vars.insert(name.to_string(), value);
            start += 1;
        }
        let words: Vec<String> = cmd.words[start..].iter().map(|w| expand(w, vars)).collect();
        for target in &cmd.writes {
            let target = expand(target, vars);
            let line = format!("{} > {target}", words.join(" "));
            if let Some(hit) = self.written(&target, &line) {
                return Some(hit);
            }
        }
        self.argv(words, feed, depth)
    }

    /// Takes `bytes` from the budget; `false` when it is spent.
    fn spend(&self, bytes: usize) -> bool {
        let left = self.budget.get();
        self.budget.set(left.saturating_sub(bytes));
        bytes <= left
    }

    /// A command's words after expansion: unwrapped, then judged by its
    /// program.
    fn argv(&self, words: Vec<String>, feed: &[String], depth: usize) -> Option<GuardHit> {
        let Some(argv) = unwrap(words) else {
            return hit(GuardRule::Unreadable, "a command under too many wrappers");
        };
        let (program, rest) = argv.split_first()?;
        let program = program_name(program);
        let line = argv.join(" ");
        match program.as_str() {
            p if SHELLS.contains(&p) => self.shell(rest, feed, depth),
            "su" => self.su(rest, depth),
            "eval" => self.script(&rest.join(" "), &[], depth + 1),
            "rm" => self.rm(rest, &line),
            "find" => self.find(rest, &line, depth),
            "git" => self.git(rest, &line, depth),
            "dd" => self.dd(rest, &line),
            "shred" => self.devices(rest, &line),
            "tee" => self.tee(rest, &line),
            "sed" => self.sed(rest, &line),
            "cp" | "mv" | "install" | "ln" => self.copied(rest, &line),
            "chmod" | "chown" | "chgrp" => self.chmod(&program, rest, &line),
            "apply_patch" | "applypatch" => {
                self.patched(rest, feed);
                None
            }
            p if is_mkfs(p) => hit(GuardRule::Mkfs, &line),
            "zfs" | "zpool" | "gpart" => storage_destroy(&program, rest, &line),
            "dropdb" | "dropuser" => hit(GuardRule::SqlDrop, &line),
            p if SQL_CLIENTS.contains(&p) => {
                let mut sql = rest.join(" ");
                for text in feed {
                    sql.push('\n');
                    sql.push_str(text);
                }
                sql_drop(&sql)
            }
            p if p.starts_with('$') || p.starts_with('`') => {
                // An unresolved program name: judge it by its arguments as
                // if it were `rm`, the usual reason to hide a program's name.
                self.rm(rest, &line)
            }
            _ => None,
        }
    }

    /// `sh -c SCRIPT [NAME ARG…]`, or a shell reading its standard input.
    fn shell(&self, args: &[String], feed: &[String], depth: usize) -> Option<GuardHit> {
        match shell_run(args) {
            ShellRun::Script(script, params) => self.script(&script, &params, depth + 1),
            ShellRun::Stdin => feed
                .iter()
                .find_map(|text| self.script(text, &[], depth + 1)),
            ShellRun::File => None,
        }
    }

    /// `su [USER] -c SCRIPT`.
    fn su(&self, args: &[String], depth: usize) -> Option<GuardHit> {
        let mut iter = args.iter();
        while let Some(a) = iter.next() {
            if let Some(script) = a.strip_prefix("--command=") {
                return self.script(script, &[], depth + 1);
            }
            if a == "-c" || a == "--command" {
                return self.script(iter.next()?, &[], depth + 1);
            }
        }
        None
    }

    fn rm(&self, args: &[String], line: &str) -> Option<GuardHit> {
        const LONG: [&str; 10] = [
            "recursive",
            "force",
            "no-preserve-root",
            "preserve-root",
            "interactive",
            "one-file-system",
            "dir",
            "verbose",
            "help",
            "version",
        ];
        let mut recursive = false;
        let mut targets: Vec<&str> = Vec::new();
        let mut options_done = false;
        for a in args {
            if options_done || !a.starts_with('-') || a == "-" {
                targets.push(a);
            } else if a == "--" {
                options_done = true;
            } else if let Some(long) = a.strip_prefix("--") {
                // `--no-preserve-root` says what the command means to do.
                recursive |= matches!(
                    long_option(long, &LONG),
                    Some("recursive" | "no-preserve-root")
                );
            } else {
                // `-f` only silences: recursion is what deletes a tree.
                recursive |= a.contains(['r', 'R']);
            }
        }
        if !recursive {
            return None;
        }
        let outside = targets.iter().any(|t| !inside_cwd(t, self.dirs));
        outside.then(|| hit(GuardRule::RmOutsideCwd, line))?
    }

    /// `find ROOT… -delete` is a recursive `rm` of what lies below its
    /// roots; `-exec CMD {} ;|+` runs CMD on it.
    fn find(&self, args: &[String], line: &str, depth: usize) -> Option<GuardHit> {
        let mut i = 0;
        // Options before the roots (`-L`, `-H`, BSD's `-x`, `-f ROOT`).
        while let Some(a) = args.get(i) {
            match a.as_str() {
                "-H" | "-L" | "-P" | "-E" | "-X" | "-d" | "-s" | "-x" => i += 1,
                _ => break,
            }
        }
        let mut roots: Vec<String> = Vec::new();
        while let Some(a) = args.get(i) {
            if a == "-f" {
                if let Some(root) = args.get(i + 1) {
                    roots.push(root.clone());
                }
                i += 2;
                continue;
            }
            if a.starts_with('-') || a == "(" || a == "!" {
                break;
            }
            roots.push(a.clone());
            i += 1;
        }
        if roots.is_empty() {
            roots.push(".".to_string());
        }
        // What find hands on lies below a root, never the root itself.
        let below: Vec<String> = roots
            .iter()
            .map(|r| format!("{}/_", r.trim_end_matches('/')))
            .collect();
        let mut expr = args[i.min(args.len())..].iter();
        while let Some(a) = expr.next() {
            match a.as_str() {
                "-delete" if below.iter().any(|b| !inside_cwd(b, self.dirs)) => {
                    return hit(GuardRule::RmOutsideCwd, line);
                }
                "-exec" | "-execdir" | "-ok" | "-okdir" => {
                    let mut inner: Vec<&String> = Vec::new();
                    for w in expr.by_ref() {
                        if w == ";" || (w == "+" && inner.last().is_some_and(|l| *l == "{}")) {
                            break;
                        }
                        inner.push(w);
                    }
                    for b in &below {
                        let argv = inner.iter().map(|w| w.replace("{}", b)).collect();
                        if let Some(hit) = self.nested(argv, depth) {
                            return Some(hit);
                        }
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// A command another one runs (`find -exec`, a git alias), one level
    /// deeper.
    fn nested(&self, argv: Vec<String>, depth: usize) -> Option<GuardHit> {
        let bytes = argv.iter().map(|w| w.len() + 1).sum();
        if depth + 1 > MAX_DEPTH || !self.spend(bytes) {
            return hit(GuardRule::Unreadable, &argv.join(" "));
        }
        self.argv(argv, &[], depth + 1)
    }

    fn git(&self, args: &[String], line: &str, depth: usize) -> Option<GuardHit> {
        // Skip git's own options (`-C dir`, `-c k=v`) up to the subcommand,
        // keeping the aliases `-c alias.NAME=VALUE` defines.
        let mut aliases: Vec<(String, String)> = Vec::new();
        let mut i = 0;
        while let Some(a) = args.get(i) {
            match a.as_str() {
                "-C" | "--git-dir" | "--work-tree" | "--namespace" | "--config-env"
                | "--super-prefix" => i += 2,
                "-c" => {
                    if let Some((key, value)) = args.get(i + 1).and_then(|kv| kv.split_once('=')) {
                        if let Some(name) = key.to_ascii_lowercase().strip_prefix("alias.") {
                            aliases.push((name.to_string(), value.to_string()));
                        }
                    }
                    i += 2;
                }
                a if a.starts_with('-') => i += 1,
                _ => break,
            }
        }
        let sub = args.get(i)?;
        let rest = &args[i + 1..];
        let alias = aliases
            .iter()
            .rev()
            .find(|(name, _)| name.eq_ignore_ascii_case(sub));
        if let Some((_, value)) = alias {
            return self.git_alias(value, rest, depth);
        }
        match sub.as_str() {
            "push" => git_push(rest, line),
            "reset" => git_reset(rest, line),
            "clean" => git_clean(rest, line),
            _ => None,
        }
    }

    /// `git X ARG…` where `alias.X` is VALUE: `!CMD` runs CMD in a shell,
    /// anything else is git's own words.
    fn git_alias(&self, value: &str, args: &[String], depth: usize) -> Option<GuardHit> {
        if let Some(cmd) = value.strip_prefix('!') {
            let quoted: Vec<String> = args.iter().map(|a| quote(a)).collect();
            let script = format!("{cmd} {}", quoted.join(" "));
            return self.script(&script, &[], depth + 1);
        }
        let mut argv = vec!["git".to_string()];
        argv.extend(shell::words(value));
        argv.extend(args.iter().cloned());
        self.nested(argv, depth)
    }

    fn dd(&self, args: &[String], line: &str) -> Option<GuardHit> {
        let mut to_device = false;
        for dest in args.iter().filter_map(|a| a.strip_prefix("of=")) {
            self.note_write(dest);
            to_device |= self.is_device(dest);
        }
        to_device.then(|| hit(GuardRule::DdToDevice, line))?
    }

    /// `chmod|chown|chgrp -R` (`--recursive`) of a target not at or below
    /// the working directory or a path of the scope. The mode or owner is
    /// the first operand, unless `--reference` stands for it; `chmod -w`
    /// and `chmod -rwx` are modes, not options.
    fn chmod(&self, program: &str, args: &[String], line: &str) -> Option<GuardHit> {
        const LONG: [&str; 13] = [
            "recursive",
            "reference",
            "from",
            "changes",
            "silent",
            "quiet",
            "verbose",
            "dereference",
            "no-dereference",
            "preserve-root",
            "no-preserve-root",
            "help",
            "version",
        ];
        let (mut recursive, mut reference) = (false, false);
        let mut operands: Vec<&str> = Vec::new();
        let mut options_done = false;
        let mut iter = args.iter();
        while let Some(a) = iter.next() {
            if options_done || !a.starts_with('-') || a == "-" {
                operands.push(a);
            } else if a == "--" {
                options_done = true;
            } else if let Some(long) = a.strip_prefix("--") {
                let name = long_option(long, &LONG);
                recursive |= name == Some("recursive");
                reference |= name == Some("reference");
                // `--reference FILE`, `--from OWNER`: the value follows.
                if matches!(name, Some("reference" | "from")) && !long.contains('=') {
                    iter.next();
                }
            } else if program == "chmod" && !a[1..].chars().all(|c| "RHLPfvch".contains(c)) {
                operands.push(a);
            } else {
                recursive |= a.contains('R');
            }
        }
        if !recursive {
            return None;
        }
        let targets = if reference {
            &operands[..]
        } else {
            operands.get(1..).unwrap_or_default()
        };
        let outside = targets.iter().any(|t| !self.within_scope(t));
        outside.then(|| hit(GuardRule::ChmodOutsideScope, line))?
    }

    /// Whether `target` lies at or below the working directory or a path
    /// of the scope (a root of `/` holds nothing safely, as for `rm`).
    /// What cannot be resolved is outside; a relative path with no
    /// directory known is inside unless it climbs above its start.
    fn within_scope(&self, target: &str) -> bool {
        if scope::unresolvable(target) {
            return false;
        }
        let here = self.dirs.here.or(self.dirs.root);
        if here.is_none() && !target.starts_with('/') {
            return !scope::climbs(target);
        }
        let Some(path) = scope::resolve(target, here) else {
            return false;
        };
        let root = self.dirs.root.or(self.dirs.here);
        root.and_then(|r| scope::resolve(r, None))
            .iter()
            .chain(self.dirs.scope)
            .any(|r| r != "/" && scope::at_or_below(&path, r))
    }

    /// `apply_patch PATCH`, or a patch on its standard input (`apply_patch
    /// <<'EOF'`): the files it adds, updates, deletes or moves to.
    fn patched(&self, args: &[String], feed: &[String]) {
        let texts = args.iter().filter(|a| !a.starts_with('-')).chain(feed);
        for text in texts {
            for path in scope::patch_paths(text) {
                self.note_write(&path);
            }
        }
    }

    /// Remembers a file the command writes (up to [`scope::MAX_WRITES`]).
    fn note_write(&self, path: &str) {
        let mut writes = self.writes.borrow_mut();
        if writes.len() < scope::MAX_WRITES {
            writes.push(path.to_string());
        }
    }

    /// A program that writes over every file it names (`shred`).
    fn devices(&self, args: &[String], line: &str) -> Option<GuardHit> {
        let to_device = args
            .iter()
            .filter(|a| !a.starts_with('-'))
            .any(|a| self.is_device(a));
        to_device.then(|| hit(GuardRule::DdToDevice, line))?
    }

    fn tee(&self, args: &[String], line: &str) -> Option<GuardHit> {
        args.iter()
            .filter(|a| !a.starts_with('-'))
            .find_map(|a| self.written(a, line))
    }

    /// `sed -i` (GNU `--in-place`, BSD `-I`) writes the files it names.
    fn sed(&self, args: &[String], line: &str) -> Option<GuardHit> {
        let in_place = args.iter().any(|a| match a.strip_prefix("--") {
            Some(long) => long_option(long, &["in-place"]).is_some() && long.starts_with("in"),
            None => a.starts_with('-') && a[1..].contains(['i', 'I']),
        });
        if !in_place {
            return None;
        }
        // The files are the operands after the script (the first operand,
        // unless `-e`/`-f` gave it); BSD's `-i ''` names an empty suffix.
        let mut script_given = false;
        let mut operands: Vec<&String> = Vec::new();
        let mut iter = args.iter();
        while let Some(a) = iter.next() {
            match a.as_str() {
                "-e" | "-f" | "--expression" | "--file" => {
                    script_given = true;
                    iter.next();
                }
                "" | "--" => {}
                o if o.starts_with("--expression=") || o.starts_with("--file=") => {
                    script_given = true;
                }
                o if o.len() > 2 && (o.starts_with("-e") || o.starts_with("-f")) => {
                    script_given = true;
                }
                o if o.starts_with('-') => {}
                _ => operands.push(a),
            }
        }
        let files = if script_given {
            &operands[..]
        } else {
            operands.get(1..).unwrap_or_default()
        };
        files.iter().find_map(|a| self.written(a, line))
    }

    /// `cp`/`mv`/`install`/`ln`: the destination (`-t DIR`, or the last
    /// operand of two or more).
    fn copied(&self, args: &[String], line: &str) -> Option<GuardHit> {
        let mut operands: Vec<&String> = Vec::new();
        let mut iter = args.iter();
        while let Some(a) = iter.next() {
            if a == "-t" || a == "--target-directory" {
                return self.written(iter.next()?, line);
            }
            if let Some(dir) = a.strip_prefix("--target-directory=") {
                return self.written(dir, line);
            }
            if !a.starts_with('-') {
                operands.push(a);
            }
        }
        if operands.len() < 2 {
            return None;
        }
        self.written(operands.last()?, line)
    }

    /// A file written (by a redirection, `tee`, `sed -i`, `cp`): noted for
    /// the scope rule; a device or system configuration is a hit.
    fn written(&self, path: &str, line: &str) -> Option<GuardHit> {
        self.note_write(path);
        let path = normalise(path, self.dirs.here)?;
        if is_device_path(&path) {
            return hit(GuardRule::DdToDevice, line);
        }
        let config = ["/etc", "/usr/local/etc"]
            .iter()
            .any(|dir| path == *dir || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/')));
        config.then(|| hit(GuardRule::SystemConfig, line))?
    }

    fn is_device(&self, path: &str) -> bool {
        normalise(path, self.dirs.here).is_some_and(|p| is_device_path(&p))
    }
}

/// A device other than the harmless ones (`/dev/null`, `/dev/zero`, the
/// standard streams, terminals, `/dev/shm` files).
fn is_device_path(path: &str) -> bool {
    const HARMLESS: [&str; 9] = [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/stdin",
        "/dev/stdout",
        "/dev/stderr",
        "/dev/tty",
    ];
    let Some(rest) = path.strip_prefix("/dev/") else {
        return false;
    };
    !HARMLESS.contains(&path)
        && !["fd/", "shm/", "pts/", "tcp/", "udp/"]
            .iter()
            .any(|p| rest.starts_with(p))
}

/// `path` as an absolute path with `.`, `..` and repeated `/` resolved
/// (`//dev/./sda` is `/dev/sda`), relative ones from `here`. `None` when
/// it cannot be known (a variable, `~`, a relative path with no `here`).
fn normalise(path: &str, here: Option<&str>) -> Option<String> {
    if path.contains(['$', '`']) || path.starts_with('~') {
        return None;
    }
    let joined = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{}/{path}", here?)
    };
    let mut parts: Vec<&str> = Vec::new();
    for p in joined.split('/') {
        match p {
            "" | "." => {}
            // `/..` is `/`.
            ".." => {
                parts.pop();
            }
            _ => parts.push(p),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// The texts a command reads on standard input that the guard can see: its
/// here-documents and here-strings, and what the commands piped into it
/// were given (`echo TEXT |`, `printf TEXT |`, `cat <<EOF |`).
fn feed(commands: &[shell::Command], k: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut j = k;
    for _ in 0..=MAX_PIPE_FEED {
        let Some(cmd) = commands.get(j) else { break };
        out.extend(cmd.input.iter().cloned());
        if j != k {
            out.extend(cmd.words.iter().skip(1).cloned());
        }
        if !cmd.piped || j == 0 {
            break;
        }
        j -= 1;
    }
    out
}

/// How a shell is told what to run.
enum ShellRun {
    /// `-c SCRIPT`, with `$0`, `$1`, … after it.
    Script(String, Vec<String>),
    /// A script file the guard cannot read.
    File,
    /// Its standard input.
    Stdin,
}

fn shell_run(args: &[String]) -> ShellRun {
    let mut command = false;
    let mut iter = args.iter();
    while let Some(a) = iter.next() {
        if a == "--" || a == "-" {
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            if matches!(long, "rcfile" | "init-file") {
                iter.next();
            }
            continue;
        }
        let Some(cluster) = a.strip_prefix('-').or_else(|| a.strip_prefix('+')) else {
            let params = iter.cloned().collect();
            return match command {
                true => ShellRun::Script(a.clone(), params),
                false => ShellRun::File,
            };
        };
        command |= cluster.contains('c');
        // `-o pipefail`, `-O extglob`: the option's name follows.
        if cluster.contains(['o', 'O']) {
            iter.next();
        }
    }
    match (command, iter.next()) {
        (true, Some(script)) => ShellRun::Script(script.clone(), iter.cloned().collect()),
        (false, Some(_)) => ShellRun::File,
        _ => ShellRun::Stdin,
    }
}

/// Drops the programs that run the command after them (`sudo -u root rm
/// …` is `rm …`), their options and operands with them. `None` past
/// [`MAX_WRAPPERS`].
fn unwrap(mut argv: Vec<String>) -> Option<Vec<String>> {
    // Wrappers wrap wrappers (`sudo nice -n 5 timeout 9 rm`).
    for _ in 0..=MAX_WRAPPERS {
        let Some(first) = argv.first() else {
            return Some(argv);
        };
        let name = program_name(first);
        let Some(wrapper) = WRAPPERS.iter().find(|w| w.name == name) else {
            return Some(argv);
        };
        argv = unwrap_one(wrapper, &argv);
    }
    None
}

/// The command one wrapper runs: `argv` less the wrapper's name, its
/// options (and their values) and operands.
fn unwrap_one(wrapper: &Wrapper, argv: &[String]) -> Vec<String> {
    let mut values: Vec<(char, String)> = Vec::new();
    let mut i = 1;
    while let Some(a) = argv.get(i) {
        i += 1;
        if a == "--" {
            break;
        }
        if wrapper.name == "env" && (a == "-" || assignment(a).is_some()) {
            continue;
        }
        if let Some(long) = a.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let takes = !name.is_empty() && wrapper.long.iter().any(|o| o.starts_with(name));
            let value = match (takes, inline) {
                (_, Some(v)) => Some(v),
                (true, None) => argv.get(i).inspect(|_| i += 1).cloned(),
                (false, None) => None,
            };
            if let (Some(v), Some(first)) = (value, name.chars().next()) {
                // `--split-string`, `--replace`: keyed by the short twin.
                let key = if name.starts_with("split") {
                    'S'
                } else {
                    first
                };
                values.push((key, v));
            }
            continue;
        }
        let Some(cluster) = a.strip_prefix('-').filter(|c| !c.is_empty()) else {
            i -= 1;
            break;
        };
        for (pos, c) in cluster.char_indices() {
            if !wrapper.short.contains(c) {
                continue;
            }
            let attached = &cluster[pos + c.len_utf8()..];
            let value = if attached.is_empty() {
                argv.get(i).inspect(|_| i += 1).cloned()
            } else {
                Some(attached.to_string())
            };
            values.extend(value.map(|v| (c, v)));
            break;
        }
    }
    let start = (i + wrapper.operands).min(argv.len());
    let mut inner: Vec<String> = argv[start..].to_vec();
    match wrapper.name {
        "env" => {
            // `env -S 'rm -rf' /`: the string is split into words.
            for (_, s) in values.iter().filter(|(c, _)| *c == 'S').rev() {
                let mut split = shell::words(s);
                split.extend(inner);
                inner = split;
            }
        }
        "xargs" => {
            // What xargs reads is unknown: it replaces the placeholder
            // (`-I {}`, `-J %`) and is appended.
            let placeholders: Vec<&String> = values
                .iter()
                .filter(|(c, _)| matches!(c, 'I' | 'J'))
                .map(|(_, v)| v)
                .collect();
            for word in &mut inner {
                if placeholders
                    .iter()
                    .any(|p| !p.is_empty() && word.contains(p.as_str()))
                {
                    *word = UNKNOWN.to_string();
                }
            }
            if inner.is_empty() {
                inner.push("echo".to_string());
            }
            inner.push(UNKNOWN.to_string());
        }
        _ => {}
    }
    inner
}

/// The option a GNU-style long option names: itself, or the one option it
/// is an unambiguous prefix of (`--recurs` is `--recursive`); `None` when
/// unknown or ambiguous (the program refuses those).
fn long_option<'o>(given: &str, options: &[&'o str]) -> Option<&'o str> {
    let name = given.split('=').next().unwrap_or(given);
    if name.is_empty() {
        return None;
    }
    if let Some(exact) = options.iter().find(|o| **o == name) {
        return Some(exact);
    }
    let mut matches = options.iter().filter(|o| o.starts_with(name));
    let first = matches.next()?;
    matches.next().is_none().then_some(*first)
}

/// Whether a long option `given` may be a spelling of `option`: itself or
/// a prefix of it. For programs whose full option list the guard does not
/// carry (git), a prefix that is ambiguous there is refused by the program,
/// so counting it costs nothing.
fn may_be(given: &str, option: &str) -> bool {
    let name = given.split('=').next().unwrap_or(given);
    !name.is_empty() && option.starts_with(name)
}

/// A short option cluster (`-fu`, `-fdx`) that holds `flag` before any
/// option in `valued` (whose value the rest of the cluster is).
fn cluster_has(arg: &str, flag: char, valued: &str) -> bool {
    let Some(cluster) = arg.strip_prefix('-') else {
        return false;
    };
    if cluster.starts_with('-') {
        return false;
    }
    for c in cluster.chars() {
        if c == flag {
            return true;
        }
        if valued.contains(c) {
            return false;
        }
    }
    false
}

fn git_push(args: &[String], line: &str) -> Option<GuardHit> {
    let destructive = args.iter().any(|a| {
        if let Some(long) = a.strip_prefix("--") {
            return ["force", "mirror", "delete", "prune"]
                .iter()
                .any(|o| may_be(long, o));
        }
        // `-o OPTION` takes a value; `+ref` forces, `:ref` deletes.
        cluster_has(a, 'f', "o")
            || cluster_has(a, 'd', "o")
            || (a.len() > 1 && (a.starts_with('+') || a.starts_with(':')))
    });
    destructive.then(|| hit(GuardRule::GitForcePush, line))?
}

fn git_reset(args: &[String], line: &str) -> Option<GuardHit> {
    let hard = args
        .iter()
        .filter_map(|a| a.strip_prefix("--"))
        .any(|long| may_be(long, "hard"));
    hard.then(|| hit(GuardRule::GitDiscard, line))?
}

/// `git clean` forced and not a dry run (`-e PATTERN` takes a value).
fn git_clean(args: &[String], line: &str) -> Option<GuardHit> {
    let long = |o: &str| {
        args.iter()
            .filter_map(|a| a.strip_prefix("--"))
            .any(|l| may_be(l, o))
    };
    let short = |f: char| args.iter().any(|a| cluster_has(a, f, "e"));
    let forced = long("force") || short('f');
    let dry = long("dry-run") || short('n');
    (forced && !dry).then(|| hit(GuardRule::GitDiscard, line))?
}

fn is_mkfs(program: &str) -> bool {
    program.starts_with("mkfs")
        || program.starts_with("newfs")
        || matches!(
            program,
            "mke2fs" | "mkswap" | "mkdosfs" | "mkntfs" | "mkexfatfs" | "wipefs" | "blkdiscard"
        )
}

/// `zfs destroy`, `zpool destroy|labelclear`, `gpart destroy|delete`.
fn storage_destroy(program: &str, args: &[String], line: &str) -> Option<GuardHit> {
    let sub = args.iter().find(|a| !a.starts_with('-'))?;
    let destroys = match program {
        "zfs" => sub == "destroy",
        "zpool" => sub == "destroy" || sub == "labelclear",
        _ => sub == "destroy" || sub == "delete",
    };
    destroys.then(|| hit(GuardRule::Mkfs, line))?
}

/// `NAME=value` (a shell assignment word), split.
fn assignment(word: &str) -> Option<(&str, &str)> {
    let (name, value) = word.split_once('=')?;
    let mut chars = name.chars();
    let first = chars.next()?;
    if !(first.is_ascii_alphabetic() || first == '_') {
        return None;
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    Some((name, value))
}

/// Replaces `$NAME`, `${NAME}` and `$1` assigned earlier; others stay as
/// written so an unresolved variable stays visible. The result is kept to
/// [`MAX_VALUE`] bytes.
fn expand(word: &str, vars: &HashMap<String, String>) -> String {
    if !word.contains('$') {
        return word.to_string();
    }
    let mut out = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        let (name, consumed) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => (&inner[..end], end + 2),
                None => ("", 0),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        match vars.get(name) {
            Some(value) if !name.is_empty() => out.push_str(value),
            _ => {
                out.push('$');
                out.push_str(&after[..consumed]);
            }
        }
        rest = &after[consumed..];
        if out.len() > MAX_VALUE {
            let mut cut = MAX_VALUE;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
            return out;
        }
    }
    out.push_str(rest);
    out
}

/// The program's bare name: `/bin/rm` and `\rm` are `rm`; `$(which rm)`
/// and `` `command -v rm` `` are `rm` too.
fn program_name(word: &str) -> String {
    let w = word.trim_start_matches('\\');
    let w = substituted_program(w).unwrap_or(w);
    w.rsplit('/').next().unwrap_or(w).to_string()
}

/// What `$(echo rm)`, `$(which rm)`, `$(printf rm)`, `$(command -v rm)`
/// stand for.
fn substituted_program(word: &str) -> Option<&str> {
    let inner = word
        .strip_prefix("$(")
        .and_then(|s| s.strip_suffix(')'))
        .or_else(|| word.strip_prefix('`').and_then(|s| s.strip_suffix('`')))?;
    let mut parts = inner.split_whitespace();
    let head = parts.next()?;
    let last = match head {
        "echo" | "printf" | "which" | "type" | "whereis" => parts.last()?,
        "command" => parts.rfind(|p| !p.starts_with('-'))?,
        _ => return None,
    };
    Some(last.trim_matches(|c| c == '\'' || c == '"'))
}

/// Whether `target`, resolved from `dirs.here`, names something strictly
/// below `dirs.root` or a path of `dirs.scope`. Anything the guard cannot
/// resolve (a variable, `~`, a substitution, a glob at the top) is not.
fn inside_cwd(target: &str, dirs: Dirs<'_>) -> bool {
    if target.is_empty()
        || target.contains('$')
        || target.contains('`')
        || target.starts_with('~')
        || target.starts_with('*')
    {
        return false;
    }
    // A directory's components with its `.` and `..` resolved (a cwd given
    // as `/home/u/x/../proj` is `/home/u/proj`); `None` if it climbs above `/`.
    let components = |dir: &'_ str| -> Option<Vec<String>> {
        let mut out: Vec<String> = Vec::new();
        for p in dir.split('/') {
            match p {
                "" | "." => {}
                ".." => {
                    out.pop()?;
                }
                _ => out.push(p.to_string()),
            }
        }
        Some(out)
    };
    let absolute = target.starts_with('/');
    let mut parts: Vec<String> = match (absolute, dirs.here) {
        (false, Some(here)) => match components(here) {
            Some(c) => c,
            None => return false,
        },
        _ => Vec::new(),
    };
    // `..` in the call's own directory is resolved too.
    let mut resolved: Vec<String> = Vec::new();
    for p in parts.drain(..).chain(target.split('/').map(str::to_string)) {
        match p.as_str() {
            "" | "." => {}
            ".." => {
                if resolved.pop().is_none() {
                    return false;
                }
            }
            _ => resolved.push(p),
        }
    }
    let root = match (absolute, dirs.root, dirs.here) {
        (_, Some(root), _) => components(root),
        (false, None, Some(here)) => components(here),
        (false, None, None) => {
            // No working directory known: a relative path that never climbs
            // above its start is below it.
            return !resolved.is_empty();
        }
        (true, None, _) => None,
    };
    // A root of `/` (a working directory of `/`) holds nothing safely.
    let strictly_below = |root: &[String]| {
        !root.is_empty() && resolved.len() > root.len() && resolved[..root.len()] == root[..]
    };
    root.is_some_and(|r| strictly_below(&r))
        || dirs
            .scope
            .iter()
            .filter_map(|s| components(s))
            .any(|r| strictly_below(&r))
}

/// `DROP TABLE|DATABASE|SCHEMA|USER|ROLE` anywhere in SQL text, any case,
/// any spacing or comments between the words (`DROP/**/TABLE`,
/// `DROP -- x⏎TABLE`). Read twice, with comments and without, so a
/// comment marker inside a string literal hides nothing.
fn sql_drop(text: &str) -> Option<GuardHit> {
    let found = drops(text) || drops(&strip_sql_comments(text));
    found.then(|| hit(GuardRule::SqlDrop, text))?
}

fn drops(text: &str) -> bool {
    let mut previous_drop = false;
    for word in text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
    {
        let is = |k: &str| word.eq_ignore_ascii_case(k);
        if previous_drop
            && ["TABLE", "DATABASE", "SCHEMA", "USER", "ROLE"]
                .iter()
                .any(|k| is(k))
        {
            return true;
        }
        previous_drop = is("DROP");
    }
    false
}

/// SQL text with `/* … */`, `-- …` and `# …` comments made spaces.
fn strip_sql_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find(['/', '-', '#']) {
        out.push_str(&rest[..pos]);
        let at = &rest[pos..];
        let (end_marker, skip) = if at.starts_with("/*") {
            ("*/", 2)
        } else if at.starts_with("--") {
            ("\n", 2)
        } else if at.starts_with('#') {
            ("\n", 1)
        } else {
            out.push_str(&at[..1]);
            rest = &at[1..];
            continue;
        };
        out.push(' ');
        rest = match at[skip..].find(end_marker) {
            Some(end) => &at[skip + end + end_marker.len()..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CWD: Option<&str> = Some("/home/dev/project");

    fn shell(cmd: &str) -> Option<GuardRule> {
        let args = serde_json::json!({ "command": cmd }).to_string();
        check("bash", &args, CWD).map(|h| h.rule)
    }

    fn flagged(cmd: &str, rule: GuardRule) {
        assert_eq!(shell(cmd), Some(rule), "{cmd:?} must be flagged");
    }

    fn passes(cmd: &str) {
        assert_eq!(shell(cmd), None, "{cmd:?} must pass");
    }

    #[test]
    fn rm_outside_the_working_directory_and_its_obfuscations() {
        use GuardRule::RmOutsideCwd as R;
        for cmd in [
            "rm -rf /",
            "rm -rf /etc",
            "rm -fr /usr/local",
            "rm -r -f /var/db",
            "rm -Rf /",
            "rm --recursive --force /srv",
            "rm --force --recursive ../other",
            "rm -rf ~",
            "rm -rf ~/code",
            "rm -rf $HOME",
            "rm -rf \"$HOME\"/stuff",
            "rm -rf ${TARGET}",
            "rm -rf *",
            "rm -rf ..",
            "rm -rf ./../..",
            "rm -rf /home/dev/project",
            "sudo rm -rf /",
            "doas rm -rf /boot",
            "env FOO=1 rm -rf /",
            "/bin/rm -rf /",
            "\\rm -rf /",
            "r\"m\" -rf /",
            "'rm' -rf /",
            "echo hi; rm -rf /",
            "make && rm -rf /opt",
            "true || rm -rf /",
            "ls | xargs rm -rf /tmp/x",
            "sh -c 'rm -rf /'",
            "bash -c \"rm -rf /\"",
            "bash -lc 'cd /; rm -fr /home'",
            "sh -c \"bash -c 'rm -rf /'\"",
            "eval 'rm -rf /'",
            "X=rm; $X -rf /",
            "D=/; rm -rf $D",
            "$(echo rm) -rf /",
            "$(which rm) -rf /",
            "`echo rm` -rf /",
            "echo $(rm -rf /)",
            "echo `rm -rf /etc`",
            "rm -rf -- /",
            "rm -r --force /",
            "rm --no-preserve-root -rf /",
            "timeout 5 rm -rf /",
            // Recursion deletes the tree, forced or not.
            "rm -r /tmp/dir",
        ] {
            flagged(cmd, R);
        }
    }

    #[test]
    fn rm_inside_the_working_directory_passes() {
        for cmd in [
            "rm -rf ./build",
            "rm -rf build target/debug",
            "rm -rf /home/dev/project/node_modules",
            "rm -rf ./a/../b",
            "rm -f /tmp/x.lock",
            "rm file.txt",
            "rm -rf build && cargo build",
            "echo 'rm -rf /'",
            "grep -r 'rm -rf' docs",
            "git rm -rf --cached src/old",
            "cargo clean",
            "ls -la /",
        ] {
            passes(cmd);
        }
    }

    #[test]
    fn relative_targets_resolve_from_where_the_call_runs_and_stay_below_the_agents_directory() {
        let rm = |cmd: &str, root: Option<&str>, here: Option<&str>| {
            let args = serde_json::json!({ "command": cmd }).to_string();
            check_in(
                "bash",
                &args,
                Dirs {
                    root,
                    here,
                    scope: &[],
                },
            )
            .map(|h| h.rule)
        };
        let root = Some("/home/dev/project");
        let sub = Some("/home/dev/project/src");
        // From a subdirectory, `..` still lands inside the project...
        assert_eq!(rm("rm -rf ../build", root, sub), None);
        assert_eq!(rm("rm -rf old", root, sub), None);
        // ...and climbing out of it is caught.
        assert_eq!(rm("rm -rf ../..", root, sub), Some(GuardRule::RmOutsideCwd));
        // After a `cd /`, a relative target is outside, however harmless
        // it reads.
        assert_eq!(
            rm("rm -rf etc", root, Some("/")),
            Some(GuardRule::RmOutsideCwd)
        );
        assert_eq!(
            rm("rm -rf build", root, Some("/tmp")),
            Some(GuardRule::RmOutsideCwd)
        );
        // One directory known: it is both.
        assert_eq!(rm("rm -rf build", None, root), None);
        assert_eq!(rm("rm -rf ../x", None, root), Some(GuardRule::RmOutsideCwd));
        // A working directory spelled with `..` is the one it names.
        let dotted = Some("/home/dev/x/../project");
        assert_eq!(rm("rm -rf build", dotted, dotted), None);
        assert_eq!(
            rm("rm -rf ../x", dotted, dotted),
            Some(GuardRule::RmOutsideCwd)
        );
    }

    #[test]
    fn without_a_working_directory_relative_paths_pass_absolute_do_not() {
        let args = |c: &str| serde_json::json!({ "command": c }).to_string();
        assert_eq!(check("bash", &args("rm -rf build"), None), None);
        assert!(check("bash", &args("rm -rf /build"), None).is_some());
        assert!(check("bash", &args("rm -rf ../build"), None).is_some());
    }

    #[test]
    fn git_force_push() {
        use GuardRule::GitForcePush as G;
        for cmd in [
            "git push --force",
            "git push -f origin main",
            "git push origin +main",
            "git -C /repo push --force origin main",
            "git push origin main --force",
            "sh -c 'git push -uf origin x'",
        ] {
            flagged(cmd, G);
        }
        for cmd in [
            "git push",
            "git push origin main",
            "git push --force-with-lease",
            "git fetch --force",
            "git commit -m 'push --force later'",
        ] {
            passes(cmd);
        }
    }

    #[test]
    fn sql_drop_in_clients_and_sql_tools() {
        use GuardRule::SqlDrop as S;
        for cmd in [
            "psql -c 'DROP TABLE users'",
            "psql -c 'drop   database prod'",
            "mysql -e \"DROP/**/TABLE t\"",
            "sqlite3 app.db 'drop schema s'",
            "sh -c \"psql -c 'DROP TABLE x'\"",
        ] {
            flagged(cmd, S);
        }
        let args = serde_json::json!({"sql": "BEGIN; DROP TABLE accounts; COMMIT;"}).to_string();
        assert_eq!(check("execute_sql", &args, CWD).map(|h| h.rule), Some(S));
        passes("grep 'DROP TABLE' migrations/*.sql");
        passes("psql -c 'SELECT * FROM drop_table_log'");
        let select = serde_json::json!({"query": "SELECT 1"}).to_string();
        assert_eq!(check("run_query", &select, CWD), None);
    }

    #[test]
    fn mkfs_and_dd_to_a_device() {
        flagged("mkfs.ext4 /dev/sda1", GuardRule::Mkfs);
        flagged("sudo newfs -U /dev/ada0p2", GuardRule::Mkfs);
        flagged("wipefs -a /dev/sdb", GuardRule::Mkfs);
        flagged("dd if=/dev/zero of=/dev/sda bs=1M", GuardRule::DdToDevice);
        flagged("bash -c 'dd if=x.img of=/dev/da0'", GuardRule::DdToDevice);
        passes("dd if=/dev/urandom of=./random.bin count=1");
        passes("dd if=in of=/dev/null");
        passes("echo mkfs is dangerous");
    }

    #[test]
    fn codex_argv_arrays_and_bare_strings() {
        let argv = serde_json::json!({"command": ["bash", "-lc", "rm -rf /"]}).to_string();
        assert_eq!(
            check("shell", &argv, CWD).map(|h| h.rule),
            Some(GuardRule::RmOutsideCwd)
        );
        assert!(check("exec_command", "rm -rf /", CWD).is_some());
        let ok = serde_json::json!({"command": ["bash", "-lc", "rm -rf build"]}).to_string();
        assert_eq!(check("shell", &ok, CWD), None);
    }

    #[test]
    fn non_shell_tools_with_paths_pass() {
        let args =
            serde_json::json!({"file_path": "/etc/passwd", "content": "rm -rf /"}).to_string();
        // A file's content is not a command.
        let hit = check("write", &args, CWD);
        assert_eq!(hit, None);
    }
}

#[cfg(test)]
mod spellings;
