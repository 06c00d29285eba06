//! The destructive-command guard: rules on tool calls.
//!
//! [`check`] reads a tool call (a shell command, an SQL statement, a git
//! invocation) and says whether it matches a destructive rule: `rm -r -f`
//! outside the working directory, `git push --force`, `DROP TABLE` /
//! `DATABASE` / `SCHEMA`, `mkfs`/`newfs`/`wipefs`, `dd of=/dev/…`. It is a
//! pure function so the approvals side can call it before a tool runs
//! (Claude's `PreToolUse`/`can_use_tool`, Pi's RPC dialogs) and the policy
//! engine after the call appears in the stream.
//!
//! The shell reading is deliberately small: quotes and escapes are undone,
//! `;`, `&&`, `||`, `|`, `&` and newlines split commands, `$(…)` and
//! backticks are checked as commands of their own, `sh -c`/`bash -c`/`eval`
//! scripts are read recursively, wrappers (`sudo`, `doas`, `env`, `xargs`,
//! `nohup`, …) are skipped, and variables assigned in the same command are
//! substituted. What it cannot see (a script file that deletes, a Python
//! `shutil.rmtree`, a variable set elsewhere) is listed in docs/GOVERNANCE.md.

use std::collections::HashMap;

/// Which rule a tool call matched.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardRule {
    /// A recursive, forced `rm` of a path outside the working directory
    /// (or a path the guard cannot resolve: a variable, `~`, a substitution).
    RmOutsideCwd,
    /// `git push --force` / `-f` / a `+refspec`.
    GitForcePush,
    /// `DROP TABLE`, `DROP DATABASE` or `DROP SCHEMA`.
    SqlDrop,
    /// `mkfs*`, `newfs*`, `wipefs`: builds a file system over a device.
    Mkfs,
    /// `dd` writing to a device under `/dev`.
    DdToDevice,
}

impl GuardRule {
    pub fn as_str(self) -> &'static str {
        match self {
            GuardRule::RmOutsideCwd => "rm_outside_cwd",
            GuardRule::GitForcePush => "git_force_push",
            GuardRule::SqlDrop => "sql_drop",
            GuardRule::Mkfs => "mkfs",
            GuardRule::DdToDevice => "dd_to_device",
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

/// How deep `sh -c`, `eval` and `$(…)` nest before the guard gives up
/// reading (and flags nothing more).
const MAX_DEPTH: usize = 6;

/// SQL clients whose arguments are read as SQL.
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
/// resolved from `here`, and must lie strictly below `root`. They differ
/// when the harness says where the call runs (a Claude Code hook's `cwd`)
/// and the agent has left the directory it was started in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dirs<'a> {
    /// The agent's working directory: what `rm` may empty.
    pub root: Option<&'a str>,
    /// Where the call runs.
    pub here: Option<&'a str>,
}

impl<'a> Dirs<'a> {
    /// One directory for both (the stream guard knows only the agent's).
    pub fn same(cwd: Option<&'a str>) -> Self {
        Dirs {
            root: cwd,
            here: cwd,
        }
    }
}

/// [`check`] with the call's own directory besides the agent's.
pub fn check_in(tool: &str, args: &str, dirs: Dirs<'_>) -> Option<GuardHit> {
    let text = match serde_json::from_str::<serde_json::Value>(args) {
        Ok(value) => command_text(&value),
        // Not JSON: a bare command line.
        Err(_) => Some(args.to_string()),
    };
    if is_sql_tool(tool) {
        if let Some(hit) = sql_drop(text.as_deref().unwrap_or(args)) {
            return Some(hit);
        }
    }
    check_script(text.as_deref()?, dirs, 0)
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
    let words: Vec<String> = argv
        .iter()
        .filter_map(|v| v.as_str())
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect();
    words.join(" ")
}

fn is_sql_tool(tool: &str) -> bool {
    let t = tool.to_ascii_lowercase();
    t.contains("sql") || t.contains("query") || t.contains("database")
}

fn check_script(script: &str, dirs: Dirs<'_>, depth: usize) -> Option<GuardHit> {
    if depth > MAX_DEPTH {
        return None;
    }
    let parsed = parse(script);
    for inner in &parsed.substitutions {
        if let Some(hit) = check_script(inner, dirs, depth + 1) {
            return Some(hit);
        }
    }
    let mut vars: HashMap<String, String> = HashMap::new();
    for words in &parsed.commands {
        if let Some(hit) = check_command(words, &mut vars, dirs, depth) {
            return Some(hit);
        }
    }
    None
}

fn check_command(
    raw_words: &[String],
    vars: &mut HashMap<String, String>,
    dirs: Dirs<'_>,
    depth: usize,
) -> Option<GuardHit> {
    // Leading `NAME=value` words assign (for this command, or for the rest
    // of the script when nothing follows them): remember both alike.
    let mut start = 0;
    while let Some((name, value)) = raw_words.get(start).and_then(|w| assignment(w)) {
        let value = expand(value, vars);
        vars.insert(name.to_string(), value);
        start += 1;
    }
    let words: Vec<String> = raw_words[start..].iter().map(|w| expand(w, vars)).collect();
    let words = strip_wrappers(&words);
    let (program, rest) = words.split_first()?;
    let program = program_name(program);
    let line = words.join(" ");
    match program.as_str() {
        "sh" | "bash" | "zsh" | "dash" | "ksh" | "mksh" | "csh" | "tcsh" | "fish" => {
            let script = shell_script_arg(rest)?;
            check_script(&script, dirs, depth + 1)
        }
        "eval" => check_script(&rest.join(" "), dirs, depth + 1),
        "rm" | "unlink" => rm(rest, dirs, &line),
        "git" => git_force_push(rest, &line),
        "dd" => dd_to_device(rest, &line),
        p if p.starts_with("mkfs") || p.starts_with("newfs") || p == "wipefs" => Some(GuardHit {
            rule: GuardRule::Mkfs,
            command: line,
        }),
        p if SQL_CLIENTS.contains(&p) => sql_drop(&rest.join(" ")),
        p if p.starts_with('$') || p.starts_with('`') => {
            // An unresolved program name: judge it by its arguments as if
            // it were `rm`, the usual reason to hide a program's name.
            rm(rest, dirs, &line)
        }
        _ => None,
    }
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

/// Replaces `$NAME` and `${NAME}` assigned earlier; others stay as written
/// so an unresolved variable stays visible.
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
    }
    out.push_str(rest);
    out
}

/// Drops wrappers that run the command after them (`sudo rm …` is `rm …`).
fn strip_wrappers(words: &[String]) -> Vec<String> {
    let mut i = 0;
    while let Some(w) = words.get(i) {
        let name = program_name(w);
        match name.as_str() {
            "sudo" | "doas" | "nohup" | "time" | "nice" | "command" | "exec" | "builtin"
            | "env" | "xargs" | "stdbuf" | "timeout" | "ionice" | "chroot" => {
                i += 1;
                // Their own options (and `env`'s assignments, `timeout`'s
                // duration) come before the command.
                while let Some(opt) = words.get(i) {
                    let is_duration =
                        name == "timeout" && opt.chars().next().is_some_and(|c| c.is_ascii_digit());
                    if opt.starts_with('-') || assignment(opt).is_some() || is_duration {
                        i += 1;
                    } else {
                        break;
                    }
                }
            }
            _ => break,
        }
    }
    words[i.min(words.len())..].to_vec()
}

/// The program's bare name: `/bin/rm`, `\rm` and `"rm"` are all `rm`;
/// `$(which rm)` and `` `command -v rm` `` are `rm` too.
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

/// The script of `sh -c SCRIPT` (options may be clustered: `-lc`, `-ec`).
fn shell_script_arg(args: &[String]) -> Option<String> {
    let mut iter = args.iter();
    while let Some(a) = iter.next() {
        if a == "--" {
            return None;
        }
        if a.starts_with('-') && !a.starts_with("--") && a.contains('c') {
            return iter.next().cloned();
        }
        if !a.starts_with('-') && !a.starts_with('+') {
            // `sh script.sh`: a file the guard cannot read.
            return None;
        }
    }
    None
}

fn rm(args: &[String], dirs: Dirs<'_>, line: &str) -> Option<GuardHit> {
    let mut recursive = false;
    let mut force = false;
    let mut targets: Vec<&str> = Vec::new();
    let mut options_done = false;
    for a in args {
        if options_done || !a.starts_with('-') || a == "-" {
            targets.push(a);
            continue;
        }
        match a.as_str() {
            "--" => options_done = true,
            "--recursive" => recursive = true,
            "--force" => force = true,
            "--no-preserve-root" => {
                recursive = true;
                force = true;
            }
            long if long.starts_with("--") => {}
            short => {
                recursive |= short.contains('r') || short.contains('R');
                force |= short.contains('f');
            }
        }
    }
    if !(recursive && force) {
        return None;
    }
    targets
        .iter()
        .any(|t| !inside_cwd(t, dirs))
        .then(|| GuardHit {
            rule: GuardRule::RmOutsideCwd,
            command: line.to_string(),
        })
}

/// Whether `target`, resolved from `dirs.here`, names something strictly
/// below `dirs.root`. Anything the guard cannot resolve (a variable, `~`,
/// a substitution, a glob at the top) is not.
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
        (true, None, _) => return false,
        (false, None, Some(here)) => components(here),
        (false, None, None) => {
            // No working directory known: a relative path that never climbs
            // above its start is below it.
            return !resolved.is_empty();
        }
    };
    let Some(root) = root else { return false };
    if root.is_empty() {
        // A working directory of `/`: nothing is safely inside it.
        return false;
    }
    resolved.len() > root.len() && resolved[..root.len()] == root[..]
}

fn git_force_push(args: &[String], line: &str) -> Option<GuardHit> {
    // Skip git's own options (`-C dir`, `-c k=v`) up to the subcommand.
    let mut i = 0;
    while let Some(a) = args.get(i) {
        if a == "-C" || a == "-c" || a == "--git-dir" || a == "--work-tree" {
            i += 2;
        } else if a.starts_with('-') {
            i += 1;
        } else {
            break;
        }
    }
    if args.get(i).map(String::as_str) != Some("push") {
        return None;
    }
    let forced = args[i + 1..].iter().any(|a| {
        a == "--force"
            || (a.starts_with('-') && !a.starts_with("--") && a.contains('f'))
            || (a.starts_with('+') && a.len() > 1)
    });
    forced.then(|| GuardHit {
        rule: GuardRule::GitForcePush,
        command: line.to_string(),
    })
}

fn dd_to_device(args: &[String], line: &str) -> Option<GuardHit> {
    let harmless = [
        "/dev/null",
        "/dev/zero",
        "/dev/stdout",
        "/dev/stderr",
        "/dev/tty",
    ];
    args.iter()
        .filter_map(|a| a.strip_prefix("of="))
        .any(|dest| {
            dest.starts_with("/dev/") && !harmless.contains(&dest) && !dest.starts_with("/dev/fd/")
        })
        .then(|| GuardHit {
            rule: GuardRule::DdToDevice,
            command: line.to_string(),
        })
}

/// `DROP TABLE|DATABASE|SCHEMA` anywhere in SQL text, any case, any
/// spacing or comments between the words (`DROP/**/TABLE`).
fn sql_drop(text: &str) -> Option<GuardHit> {
    let words: Vec<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(|w| w.to_ascii_uppercase())
        .collect();
    let hit = words.windows(2).any(|pair| {
        pair[0] == "DROP" && matches!(pair[1].as_str(), "TABLE" | "DATABASE" | "SCHEMA")
    });
    hit.then(|| GuardHit {
        rule: GuardRule::SqlDrop,
        command: super::clip(text),
    })
}

/// A script read into commands of words, plus the scripts of its `$(…)`
/// and backtick substitutions.
#[derive(Debug, Default)]
struct Parsed {
    commands: Vec<Vec<String>>,
    substitutions: Vec<String>,
}

/// Splits a script into commands and words, undoing quotes and escapes.
/// A substitution stays in its word as written (so `$(echo rm)` can name a
/// program) and is also collected to be checked on its own.
fn parse(script: &str) -> Parsed {
    let mut out = Parsed::default();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let chars: Vec<char> = script.chars().collect();
    let mut i = 0;
    let end_word = |words: &mut Vec<String>, word: &mut String, in_word: &mut bool| {
        if *in_word {
            words.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' => {
                in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    word.push(chars[i]);
                    i += 1;
                }
            }
            '"' => {
                in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        i += 1;
                    } else if chars[i] == '$' && chars.get(i + 1) == Some(&'(') {
                        let (inner, next) = balanced(&chars, i + 2);
                        word.push_str("$(");
                        word.push_str(&inner);
                        word.push(')');
                        out.substitutions.push(inner);
                        i = next;
                        continue;
                    }
                    word.push(chars[i]);
                    i += 1;
                }
            }
            '\\' => {
                in_word = true;
                if let Some(&next) = chars.get(i + 1) {
                    if next != '\n' {
                        word.push(next);
                    }
                    i += 1;
                }
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                in_word = true;
                let (inner, next) = balanced(&chars, i + 2);
                word.push_str("$(");
                word.push_str(&inner);
                word.push(')');
                out.substitutions.push(inner);
                i = next;
                continue;
            }
            '`' => {
                in_word = true;
                let mut inner = String::new();
                i += 1;
                while i < chars.len() && chars[i] != '`' {
                    inner.push(chars[i]);
                    i += 1;
                }
                word.push('`');
                word.push_str(&inner);
                word.push('`');
                out.substitutions.push(inner);
            }
            ';' | '&' | '|' | '\n' | '(' | ')' | '{' | '}' if !in_word || c != '{' && c != '}' => {
                end_word(&mut words, &mut word, &mut in_word);
                if !words.is_empty() {
                    out.commands.push(std::mem::take(&mut words));
                }
            }
            '#' if !in_word => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            c if c.is_whitespace() => end_word(&mut words, &mut word, &mut in_word),
            '>' | '<' => {
                // A redirection ends the word; its target is dropped so it
                // is not read as an argument.
                end_word(&mut words, &mut word, &mut in_word);
                i += 1;
                while i < chars.len() && matches!(chars[i], '>' | '&' | '|') {
                    i += 1;
                }
                while i < chars.len() && chars[i].is_whitespace() {
                    i += 1;
                }
                while i < chars.len() && !chars[i].is_whitespace() && !";&|".contains(chars[i]) {
                    i += 1;
                }
                continue;
            }
            other => {
                in_word = true;
                word.push(other);
            }
        }
        i += 1;
    }
    end_word(&mut words, &mut word, &mut in_word);
    if !words.is_empty() {
        out.commands.push(words);
    }
    out
}

/// The text up to the `)` matching an opening `(` just before `start`, and
/// the index after it.
fn balanced(chars: &[char], start: usize) -> (String, usize) {
    let mut depth = 1;
    let mut i = start;
    let mut inner = String::new();
    while i < chars.len() {
        match chars[i] {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return (inner, i + 1);
                }
            }
            _ => {}
        }
        inner.push(chars[i]);
        i += 1;
    }
    (inner, i)
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
            "rm -r /tmp/dir",
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
            check_in("bash", &args, Dirs { root, here }).map(|h| h.rule)
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
