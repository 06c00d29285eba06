//! An agent's recipe, and the wanted and actual states a supervisor keeps
//! beside it.
//!
//! [`AgentSpec`] is the one description of how to start an agent, whether it
//! comes from a `[agents.NAME]` table or, later, a `spawn-agent` request: the
//! daemon starts, restarts, persists and reconciles this value. Everything
//! here is pure: encoding is to a string, time is a [`Duration`] argument.
//!
//! The lifecycle vocabulary follows s6 and supervisord: a pane records what
//! should be true ([`Wanted`], s6's `wantedup`) apart from what is
//! ([`Actual`]), a stop the operator or an orderly shutdown asked for carries
//! its [`StopCause`] so it raises no alert, and a pane whose restarts are
//! exhausted is [`Actual::GivenUp`] (supervisord's FATAL), apart from one
//! waiting out its backoff (BACKOFF).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::state::AgentState;
use crate::core::taxonomy::Runtime;

/// The shortest id prefix that names a pane (see [`crate::core::resolve`]).
pub const MIN_ID_PREFIX: usize = 4;
/// The longest agent name: it appears in tables, alerts and file names.
pub const MAX_NAME_LEN: usize = 64;
/// The version written by [`AgentSpec::encode`]; [`AgentSpec::decode`]
/// refuses any other, so an older colibrid never misreads a newer recipe.
pub const SPEC_VERSION: u32 = 1;

/// When an agent's process ends, should it be started again?
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    #[default]
    Never,
    /// Only after an exit that is an error (not after `done`).
    OnFailure,
    Always,
}

impl RestartPolicy {
    pub fn parse(text: &str) -> Option<RestartPolicy> {
        match text {
            "never" | "no" => Some(RestartPolicy::Never),
            "on-failure" => Some(RestartPolicy::OnFailure),
            "always" => Some(RestartPolicy::Always),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RestartPolicy::Never => "never",
            RestartPolicy::OnFailure => "on-failure",
            RestartPolicy::Always => "always",
        }
    }

    /// Whether an exit that left the pane in `state` calls for a restart.
    pub fn restarts_after(self, state: AgentState) -> bool {
        match self {
            RestartPolicy::Never => false,
            RestartPolicy::OnFailure => state == AgentState::Error,
            RestartPolicy::Always => true,
        }
    }
}

/// How to start one agent, and what to do when it ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// The agent's identity across restarts of colibrid (see
    /// [`check_agent_name`]).
    pub name: String,
    /// The program and its arguments, placeholders already expanded.
    pub argv: Vec<String>,
    /// The harness, when known up front; otherwise detected from the stream.
    #[serde(default, with = "runtime_name")]
    pub runtime: Option<Runtime>,
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub jail: Option<String>,
    #[serde(default)]
    pub restart: RestartPolicy,
    /// `None` follows `[restart] backoff`, so changing that section reaches
    /// running agents without restarting them.
    #[serde(default, with = "opt_millis_list")]
    pub backoff: Option<Vec<Duration>>,
    /// `None` follows `[restart] max_restarts`.
    #[serde(default)]
    pub max_restarts: Option<u32>,
    /// `None` follows `[daemon] stall_after`.
    #[serde(default, with = "opt_millis")]
    pub stall_after: Option<Duration>,
    /// Started when colibrid starts (and when a reload declares it).
    #[serde(default = "yes")]
    pub autostart: bool,
    /// The argv template that resumes the harness's own session (see
    /// [`resume_argv`]); `None` when the harness cannot be resumed.
    #[serde(default)]
    pub resume: Option<Vec<String>>,
    /// The control plane's role (tasks claimed for it, budgets scoped
    /// `role:ROLE`). Left out of the encoding when absent, so a recipe
    /// without one reads as it did before roles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// How often an idle agent is given the heartbeat prompt
    /// ([`crate::core::heartbeat`]); `None`: never.
    #[serde(default, with = "opt_millis", skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<Duration>,
    /// The heartbeat's text; `None`: [`crate::core::heartbeat::DEFAULT_PROMPT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_prompt: Option<String>,
    /// The system prompt the agent was started with (already in its argv,
    /// the harness's way: [`crate::core::taxonomy::input::system_prompt_args`]);
    /// kept to be logged with each start, so `get-session` returns it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Paths in the agent's scope besides its working directory (the
    /// guard's scope rule, `core::policy::scope`): absolute, or relative
    /// to `cwd`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scope: Vec<String>,
}

fn yes() -> bool {
    true
}

/// The persisted form: versioned so a recipe written by one colibrid is
/// either read exactly or refused by another.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Persisted<S> {
    version: u32,
    spec: S,
}

/// Why a persisted recipe could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("not a recipe: {0}")]
    Syntax(#[from] serde_json::Error),
    #[error("recipe version {0} is not {SPEC_VERSION}")]
    Version(u32),
    #[error("invalid recipe: {0}")]
    Invalid(String),
}

impl AgentSpec {
    /// A spec with every optional field at its default.
    pub fn new(name: impl Into<String>, argv: Vec<String>) -> AgentSpec {
        AgentSpec {
            name: name.into(),
            argv,
            runtime: None,
            cwd: None,
            env: BTreeMap::new(),
            user: None,
            jail: None,
            restart: RestartPolicy::Never,
            backoff: None,
            max_restarts: None,
            stall_after: None,
            autostart: true,
            resume: None,
            role: None,
            heartbeat: None,
            heartbeat_prompt: None,
            system_prompt: None,
            scope: Vec::new(),
        }
    }

    /// The recipe as one line of JSON, for the daemon's state directory.
    pub fn encode(&self) -> String {
        // Serializing these field types cannot fail (string keys, no
        // non-finite floats); an empty string would be refused by `decode`.
        serde_json::to_string(&Persisted {
            version: SPEC_VERSION,
            spec: self,
        })
        .unwrap_or_default()
    }

    /// Reads back what [`AgentSpec::encode`] wrote, checking it as a
    /// declared recipe is checked.
    pub fn decode(text: &str) -> Result<AgentSpec, DecodeError> {
        let persisted: Persisted<AgentSpec> = serde_json::from_str(text)?;
        if persisted.version != SPEC_VERSION {
            return Err(DecodeError::Version(persisted.version));
        }
        let spec = persisted.spec;
        check_agent_name(&spec.name).map_err(DecodeError::Invalid)?;
        check_argv(&spec.argv).map_err(DecodeError::Invalid)?;
        for p in &spec.scope {
            check_scope_path(p).map_err(DecodeError::Invalid)?;
        }
        Ok(spec)
    }

    /// Digests of the recipe, stable across builds and versions of Rust, so
    /// a persisted fingerprint still compares equal after an upgrade.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint {
            launch: fnv1a(&serde_json::to_vec(&self.launch_part()).unwrap_or_default()),
            policy: fnv1a(&serde_json::to_vec(&self.policy_part()).unwrap_or_default()),
        }
    }

    fn launch_part(&self) -> LaunchPart<'_> {
        LaunchPart {
            argv: &self.argv,
            runtime: self.runtime.map(Runtime::as_str),
            cwd: self.cwd.as_ref(),
            env: &self.env,
            user: self.user.as_deref(),
            jail: self.jail.as_deref(),
            system_prompt: self.system_prompt.as_deref(),
            scope: &self.scope,
        }
    }

    fn policy_part(&self) -> PolicyPart<'_> {
        PolicyPart {
            restart: self.restart,
            backoff: self
                .backoff
                .as_ref()
                .map(|list| list.iter().map(Duration::as_millis).collect()),
            max_restarts: self.max_restarts,
            stall_after: self.stall_after.map(|d| d.as_millis()),
            autostart: self.autostart,
            resume: self.resume.as_deref(),
            role: self.role.as_deref(),
            heartbeat: self.heartbeat.map(|d| d.as_millis()),
            heartbeat_prompt: self.heartbeat_prompt.as_deref(),
        }
    }
}

/// What a process is started from: a change here needs a new process.
/// The scope is here, though the process does not read it, because a run
/// is judged by the scope its session log's `attach` record names (so a
/// fold of the log shows the daemon's verdicts); left out when empty, so
/// a recipe without one keeps the digest it had before scopes.
#[derive(Serialize)]
struct LaunchPart<'a> {
    argv: &'a [String],
    runtime: Option<&'static str>,
    cwd: Option<&'a PathBuf>,
    env: &'a BTreeMap<String, String>,
    user: Option<&'a str>,
    jail: Option<&'a str>,
    // Absent when unset: a recipe without one keeps its digest.
    #[serde(skip_serializing_if = "Option::is_none")]
    system_prompt: Option<&'a str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    scope: &'a [String],
}

/// What the supervisor does around the process: applied in place.
#[derive(Serialize)]
struct PolicyPart<'a> {
    restart: RestartPolicy,
    backoff: Option<Vec<u128>>,
    max_restarts: Option<u32>,
    stall_after: Option<u128>,
    autostart: bool,
    resume: Option<&'a [String]>,
    // Absent when unset: a recipe without them keeps its digest.
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    heartbeat: Option<u128>,
    #[serde(skip_serializing_if = "Option::is_none")]
    heartbeat_prompt: Option<&'a str>,
}

/// Two digests of an [`AgentSpec`]: what its process is started from, and
/// the policy around it. A reload restarts an agent whose `launch` changed
/// and only updates one whose `policy` alone changed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fingerprint {
    pub launch: u64,
    pub policy: u64,
}

/// 64-bit FNV-1a: tiny, and unlike `DefaultHasher` specified, so its value
/// may be persisted.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// An agent name: 1 to [`MAX_NAME_LEN`] of letters, digits, `_`, `-` and
/// `.`, starting with a letter, and not something that reads as a pane id.
///
/// Panes are also named by id or by an id prefix of at least
/// [`MIN_ID_PREFIX`] characters, and ids are lowercase hexadecimal UUIDs. A
/// name made only of hex digits and `-` (`cafe`, `dead-beef`) could be read
/// either way, so it is refused rather than resolved by a precedence rule
/// the operator has to remember.
pub fn check_agent_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("an agent needs a name".to_owned());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "agent name {name:?} is longer than {MAX_NAME_LEN} characters"
        ));
    }
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !plain || !name.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(format!(
            "invalid agent name {name:?} (a letter, then letters, digits, '_', '-', '.')"
        ));
    }
    if looks_like_id(name) {
        return Err(format!(
            "agent name {name:?} reads as a pane id prefix: use a letter beyond a-f"
        ));
    }
    Ok(())
}

/// The longest role.
pub const MAX_ROLE_LEN: usize = 64;

/// A role (`sysadmin`, `db-admin`): 1 to [`MAX_ROLE_LEN`] of letters,
/// digits, `_`, `-` and `.`. It names a budget's scope (`role:ROLE`) and
/// appears in the tables `state` fills, so no spaces, no colons.
pub fn check_role(role: &str) -> Result<(), String> {
    let plain = role
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if role.is_empty() || role.len() > MAX_ROLE_LEN || !plain {
        return Err(format!(
            "invalid role {role:?} (1 to {MAX_ROLE_LEN} letters, digits, '_', '-', '.')"
        ));
    }
    Ok(())
}

/// Whether `text` could be (a prefix of) a pane id.
pub fn looks_like_id(text: &str) -> bool {
    text.len() >= MIN_ID_PREFIX && text.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// The most paths one agent's scope lists.
pub const MAX_SCOPE_PATHS: usize = 64;

/// A path of a scope (an agent's `scope`, `[guard] scope_paths`):
/// absolute, or relative to the agent's working directory. The guard
/// compares paths as text and expands nothing, so `~`, a variable or a
/// substitution would never match: they are refused, as is an empty path.
pub fn check_scope_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path.contains('\0') {
        return Err("a scope path must be a non-empty path".to_owned());
    }
    if crate::core::policy::scope::unresolvable(path) {
        return Err(format!(
            "scope path {path:?}: give it absolute or relative to the agent's cwd (no ~, no $)"
        ));
    }
    Ok(())
}

/// An argv must name a program.
pub fn check_argv(argv: &[String]) -> Result<(), String> {
    match argv.first() {
        Some(program) if !program.is_empty() => Ok(()),
        _ => Err("argv must start with a program name".to_owned()),
    }
}

/// Expands a provider template (`["pi", "--model", "{model}"]`): each
/// `{name}` is replaced by its value, and a placeholder without a value
/// drops its argument and the flag just before it (`--model {model}`
/// without a model leaves both out).
pub fn expand_template(template: &[String], values: &[(&str, Option<&str>)]) -> Vec<String> {
    let mut argv: Vec<String> = Vec::with_capacity(template.len());
    'tokens: for token in template {
        let mut expanded = token.clone();
        for (placeholder, value) in values {
            if !expanded.contains(placeholder) {
                continue;
            }
            match value {
                Some(value) => expanded = expanded.replace(placeholder, value),
                None => {
                    if argv.last().is_some_and(|prev| prev.starts_with('-')) {
                        argv.pop();
                    }
                    continue 'tokens;
                }
            }
        }
        argv.push(expanded);
    }
    argv
}

// ---------------------------------------------------------------------------
// Resume

/// In a resume template, the harness's own session id.
pub const SESSION_PLACEHOLDER: &str = "{session}";
/// In a resume template, a token that is exactly this is replaced by the
/// agent's whole argv.
pub const ARGV_PLACEHOLDER: &str = "{argv}";
/// In a resume template, the agent's program (`argv[0]`).
pub const PROGRAM_PLACEHOLDER: &str = "{program}";

/// The resume template colibri uses for a harness when the config gives
/// none, each checked against the harness's documented CLI (see
/// docs/TAXONOMY.md, "Resuming a session"). `None` where no documented way
/// to resume a session by its id was found.
pub fn default_resume_template(runtime: Runtime) -> Option<&'static [&'static str]> {
    match runtime {
        // `claude --resume <id>` (also with -p and stream-json).
        Runtime::Claude => Some(&["{argv}", "--resume", "{session}"]),
        // `codex exec resume [--json] <SESSION_ID> [PROMPT]`: a subcommand,
        // so the original argv cannot simply be extended. Without a PROMPT
        // it reads one from stdin and, on a terminal, fails at once ("No
        // prompt provided", Codex 0.171.0); outside a git repository it
        // refuses to start without `--skip-git-repo-check`, as `exec` does.
        Runtime::Codex => Some(&[
            "{program}",
            "exec",
            "resume",
            "--json",
            "--skip-git-repo-check",
            "{session}",
            CODEX_RESUME_PROMPT,
        ]),
        // `gemini --resume <id>` (an index, `latest` or a session UUID).
        Runtime::Gemini => Some(&["{argv}", "--resume", "{session}"]),
        // `opencode run --session <id>`.
        Runtime::OpenCode => Some(&["{argv}", "--session", "{session}"]),
        // `pi --session <path|id>` ("use specific session file or partial
        // UUID"); not `--session-id`, which creates a missing session.
        Runtime::Pi => Some(&["{argv}", "--session", "{session}"]),
        // zot documents `--continue` and `--resume` (a picker, or `last`);
        // no resume by id was found.
        Runtime::Zot => None,
    }
}

/// The prompt the default Codex resume template sends: `codex exec resume`
/// needs one, and the original argv's prompt would start the task over.
pub const CODEX_RESUME_PROMPT: &str =
    "colibri restarted you in this session: go on with your task where you left off.";

/// The harness a spec is known to run: its `runtime`, else its program's
/// base name when that is a harness's (`/usr/local/bin/claude` → Claude).
pub fn known_runtime(spec: &AgentSpec) -> Option<Runtime> {
    argv_runtime(spec.runtime, &spec.argv)
}

/// `runtime` when given, else the harness `argv`'s program is by its base
/// name.
pub fn argv_runtime(runtime: Option<Runtime>, argv: &[String]) -> Option<Runtime> {
    runtime.or_else(|| {
        let program = argv.first()?;
        let base = program.rsplit('/').next().unwrap_or(program);
        Runtime::parse(base)
    })
}

// ---------------------------------------------------------------------------
// System prompts

/// In a provider template, the request's (or declaration's) system prompt.
pub const SYSTEM_PROMPT_PLACEHOLDER: &str = "{system_prompt}";

/// The longest system prompt taken: it goes on the agent's command line
/// and in its environment (`COLIBRI_SYSTEM_PROMPT`), and FreeBSD's
/// `kern.argmax` is 256 KiB for both together; Linux takes at most
/// 128 KiB in one argument.
pub const MAX_SYSTEM_PROMPT: usize = 64 * 1024;

/// A system prompt must fit [`MAX_SYSTEM_PROMPT`] and hold no NUL byte
/// (which ends a C string: the harness would see only what precedes it).
pub fn check_system_prompt(prompt: &str) -> Result<(), String> {
    if prompt.len() > MAX_SYSTEM_PROMPT {
        return Err(format!(
            "the system prompt has {} bytes; at most {MAX_SYSTEM_PROMPT} go on a command line",
            prompt.len()
        ));
    }
    if prompt.contains('\0') {
        return Err("the system prompt holds a NUL byte".to_owned());
    }
    Ok(())
}

/// Whether an argv template places the system prompt itself.
pub fn template_places_system_prompt(template: &[String]) -> bool {
    template
        .iter()
        .any(|t| t.contains(SYSTEM_PROMPT_PLACEHOLDER))
}

/// Appends `prompt` to `argv` the way its harness takes a system prompt
/// ([`crate::core::taxonomy::input::system_prompt_args`]); `false` (argv
/// untouched) when the harness is unknown or takes none on its command
/// line. An argv that gives the prompt already (as a flag's value, or as
/// the harness's own argument for it) is left as it is: a template placed
/// it, or a rendered recipe (`--check-config`) is read back.
pub fn add_system_prompt(argv: &mut Vec<String>, runtime: Option<Runtime>, prompt: &str) -> bool {
    let args = argv_runtime(runtime, argv)
        .and_then(|rt| crate::core::taxonomy::input::system_prompt_args(rt, prompt));
    let Some(args) = args else {
        return false;
    };
    let placed = argv
        .windows(2)
        .any(|w| (w[0].starts_with('-') && w[1] == prompt) || w[1] == args[1]);
    if !placed {
        argv.extend(args);
    }
    true
}

/// The argv that starts `spec`'s agent again inside its harness session
/// `session`, or `None` when its recipe has no resume template or the id
/// is not one that can be passed safely (empty, starting with `-` so it
/// would read as a flag, or holding whitespace or control characters). A
/// template that does not repeat the argv (Codex's `exec resume`) is given
/// the system prompt the argv held.
pub fn resume_argv(spec: &AgentSpec, session: &str) -> Option<Vec<String>> {
    let template = spec.resume.as_ref()?;
    if !is_passable_session_id(session) {
        return None;
    }
    let mut argv = Vec::with_capacity(template.len() + spec.argv.len());
    for token in template {
        if token == ARGV_PLACEHOLDER {
            argv.extend(spec.argv.iter().cloned());
        } else {
            let program = spec.argv.first().map(String::as_str).unwrap_or("");
            argv.push(
                token
                    .replace(PROGRAM_PLACEHOLDER, program)
                    .replace(SESSION_PLACEHOLDER, session),
            );
        }
    }
    check_argv(&argv).ok()?;
    if let Some(prompt) = &spec.system_prompt {
        if !template.iter().any(|t| t == ARGV_PLACEHOLDER) {
            add_system_prompt(&mut argv, spec.runtime, prompt);
        }
    }
    Some(argv)
}

fn is_passable_session_id(session: &str) -> bool {
    !session.is_empty()
        && !session.starts_with('-')
        && !session.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// A resume template must mention the session, or resuming would start a
/// fresh one while claiming otherwise.
pub fn check_resume_template(template: &[String]) -> Result<(), String> {
    if !template.iter().any(|t| t.contains(SESSION_PLACEHOLDER)) {
        return Err(format!("must contain {SESSION_PLACEHOLDER}"));
    }
    match template.first() {
        Some(first) if !first.is_empty() => Ok(()),
        _ => Err("must start with a program name or {argv}".to_owned()),
    }
}

// ---------------------------------------------------------------------------
// Wanted and actual state

/// Who or what stopped an agent on purpose. A planned stop is recorded,
/// raises no alert, and says whether the agent comes back by itself.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "kebab-case")]
pub enum StopCause {
    /// colibrid stopped in order (SIGTERM, `service colibri stop`): the
    /// agent comes back at the next start if its policy wants it.
    Shutdown,
    /// `stop-agent` (or `remove-agent`) by someone on the socket: down until
    /// `start-agent` or the next start of colibrid.
    Operator { who: String },
    /// Its `[agents.NAME]` table left the config: down until declared again.
    Removed,
    /// Declared with `autostart = false`: down until `start-agent`.
    NoAutostart,
}

impl StopCause {
    /// Whether the agent is started again when colibrid next starts.
    pub fn back_at_next_start(&self) -> bool {
        match self {
            StopCause::Shutdown | StopCause::Operator { .. } => true,
            StopCause::Removed | StopCause::NoAutostart => false,
        }
    }
}

/// Whether an agent should be running: s6's `wantedup`, kept apart from
/// whether it is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "wanted", rename_all = "kebab-case")]
pub enum Wanted {
    Up,
    Down {
        by: StopCause,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

impl Wanted {
    pub fn is_up(&self) -> bool {
        matches!(self, Wanted::Up)
    }

    /// What is wanted after colibrid restarts: planned stops by shutdown or
    /// by an operator are forgotten (the policy decides again), a removal
    /// stands.
    pub fn at_next_start(&self) -> Wanted {
        match self {
            Wanted::Down { by, .. } if by.back_at_next_start() => Wanted::Up,
            other => other.clone(),
        }
    }
}

/// What an agent's process is doing, as a supervisor sees it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Actual {
    /// A process is alive; the pane's own state says what it is doing.
    Running,
    /// It exited and waits out its backoff before the next start
    /// (supervisord's BACKOFF).
    Backoff,
    /// It exited and its policy does not start it again.
    Exited,
    /// It was stopped on purpose ([`Wanted::Down`]) and has ended.
    Stopped,
    /// Its restarts are exhausted (supervisord's FATAL): it stays down
    /// until started by hand or its recipe changes.
    GivenUp,
}

impl Actual {
    pub fn as_str(self) -> &'static str {
        match self {
            Actual::Running => "running",
            Actual::Backoff => "backoff",
            Actual::Exited => "exited",
            Actual::Stopped => "stopped",
            Actual::GivenUp => "given-up",
        }
    }

    /// Whether a process exists (or is about to, after its backoff).
    pub fn is_alive(self) -> bool {
        matches!(self, Actual::Running | Actual::Backoff)
    }
}

/// The contract's five states for a pane, from its supervisor state and
/// the state its stream last put it in (`pane`): what a v1 snapshot shows.
///
/// | actual     | v1 state                                   |
/// |------------|--------------------------------------------|
/// | running    | the pane's own (idle, working, blocked, …) |
/// | backoff    | done after a clean exit, else error        |
/// | exited     | the pane's own (done or error)             |
/// | stopped    | done: a planned stop is not a failure      |
/// | given-up   | error                                      |
pub fn v1_state(actual: Actual, pane: AgentState) -> AgentState {
    match actual {
        Actual::Running | Actual::Exited => pane,
        // A clean exit waiting to restart (`restart = always`) is no failure.
        Actual::Backoff if pane == AgentState::Done => AgentState::Done,
        Actual::Backoff | Actual::GivenUp => AgentState::Error,
        Actual::Stopped => AgentState::Done,
    }
}

/// Whether reaching `actual` calls for an alert: a crash, a restart loop
/// that gave up; never a planned stop.
pub fn alerts(actual: Actual, pane: AgentState) -> bool {
    match actual {
        Actual::GivenUp | Actual::Backoff => true,
        Actual::Exited => pane == AgentState::Error,
        Actual::Running | Actual::Stopped => false,
    }
}

/// What colibrid keeps of a declared or spawned agent across its own
/// restarts: the recipe, whether it should run, and the harness's session
/// to resume it in. One line of JSON, versioned like [`AgentSpec::encode`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentRecord {
    pub spec: AgentSpec,
    pub wanted: Wanted,
    /// The pane that last ran it, so its history stays attached.
    #[serde(default)]
    pub pane_id: Option<String>,
    /// The session id the harness itself reported (not colibri's).
    #[serde(default)]
    pub harness_session: Option<String>,
    /// The escalation ladder's rung its next catch climbs to
    /// (`core::escalation`): a restart of colibrid does not put a stuck
    /// agent back at the bottom. Absent (0) for an agent off the ladder.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub escalation: u8,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

impl AgentRecord {
    pub fn encode(&self) -> String {
        serde_json::to_string(&Persisted {
            version: SPEC_VERSION,
            spec: self,
        })
        .unwrap_or_default()
    }

    pub fn decode(text: &str) -> Result<AgentRecord, DecodeError> {
        let persisted: Persisted<AgentRecord> = serde_json::from_str(text)?;
        if persisted.version != SPEC_VERSION {
            return Err(DecodeError::Version(persisted.version));
        }
        let record = persisted.spec;
        check_agent_name(&record.spec.name).map_err(DecodeError::Invalid)?;
        check_argv(&record.spec.argv).map_err(DecodeError::Invalid)?;
        Ok(record)
    }

    /// Whether a pane spawned by hand (not declared) is started again when
    /// colibrid starts: it was wanted up, or stopped only by the shutdown
    /// or an operator, and its policy restarts it at all. Its process died
    /// with colibrid, which is not its own failure, so `on-failure` counts
    /// as well as `always`. Declared agents follow `autostart` instead
    /// ([`crate::core::reconcile::plan`]).
    pub fn comes_back_at_start(&self) -> bool {
        self.wanted.at_next_start().is_up() && self.spec.restart != RestartPolicy::Never
    }

    /// The argv to start it with when colibrid starts again: resumed in its
    /// harness session where it has one and its recipe can resume, else
    /// its own argv.
    pub fn start_argv(&self) -> Vec<String> {
        self.harness_session
            .as_deref()
            .and_then(|session| resume_argv(&self.spec, session))
            .unwrap_or_else(|| self.spec.argv.clone())
    }
}

// ---------------------------------------------------------------------------
// Serde helpers: durations persist as integer milliseconds, the runtime by
// its wire name.

mod opt_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_some(&u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

mod opt_millis_list {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        value: &Option<Vec<Duration>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(list) => s.collect_seq(
                list.iter()
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            ),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Duration>>, D::Error> {
        Ok(Option::<Vec<u64>>::deserialize(d)?
            .map(|list| list.into_iter().map(Duration::from_millis).collect()))
    }
}

mod runtime_name {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::core::taxonomy::Runtime;

    pub fn serialize<S: Serializer>(value: &Option<Runtime>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(runtime) => s.serialize_some(runtime.as_str()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Runtime>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(name) => Runtime::parse(&name)
                .map(Some)
                .ok_or_else(|| D::Error::custom(format!("unknown runtime {name:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn full_spec() -> AgentSpec {
        let mut spec = AgentSpec::new("fixer", strings(&["claude", "-p", "--verbose"]));
        spec.runtime = Some(Runtime::Claude);
        spec.cwd = Some(PathBuf::from("/src/repo"));
        spec.env.insert("TERM".into(), "xterm".into());
        spec.user = Some("agent".into());
        spec.jail = Some("build".into());
        spec.restart = RestartPolicy::OnFailure;
        spec.backoff = Some(vec![Duration::from_secs(5), Duration::from_millis(1500)]);
        spec.max_restarts = Some(3);
        spec.stall_after = Some(Duration::from_secs(600));
        spec.autostart = false;
        spec.resume = Some(strings(&["{argv}", "--resume", "{session}"]));
        spec
    }

    #[test]
    fn a_spec_survives_encode_and_decode() {
        for spec in [full_spec(), AgentSpec::new("bare", strings(&["x"]))] {
            let text = spec.encode();
            assert!(!text.contains('\n'), "one line: {text}");
            assert_eq!(AgentSpec::decode(&text).ok(), Some(spec));
        }
    }

    #[test]
    fn decode_refuses_other_versions_bad_names_and_unknown_fields() {
        let good = AgentSpec::new("fixer", strings(&["x"])).encode();
        let newer = good.replace("\"version\":1", "\"version\":2");
        assert!(matches!(
            AgentSpec::decode(&newer),
            Err(DecodeError::Version(2))
        ));
        let badname = good.replace("\"fixer\"", "\"dead-beef\"");
        assert!(matches!(
            AgentSpec::decode(&badname),
            Err(DecodeError::Invalid(_))
        ));
        let noargv = good.replace("[\"x\"]", "[]");
        assert!(matches!(
            AgentSpec::decode(&noargv),
            Err(DecodeError::Invalid(_))
        ));
        let extra = good.replace("\"name\"", "\"colour\":1,\"name\"");
        assert!(matches!(
            AgentSpec::decode(&extra),
            Err(DecodeError::Syntax(_))
        ));
        assert!(AgentSpec::decode("").is_err());
    }

    #[test]
    fn a_scope_is_kept_and_checked_as_declared() {
        let mut spec = AgentSpec::new("w", strings(&["pi"]));
        assert!(!spec.encode().contains("scope"), "left out when empty");
        spec.scope = strings(&["/srv/shared", "../cache"]);
        let back = AgentSpec::decode(&spec.encode()).expect("decodes");
        assert_eq!(back.scope, spec.scope);
        let bad = spec.encode().replace("../cache", "~/cache");
        assert!(matches!(
            AgentSpec::decode(&bad),
            Err(DecodeError::Invalid(_))
        ));
    }

    #[test]
    fn decode_fills_defaults_for_fields_left_out() {
        let spec = AgentSpec::decode(r#"{"version":1,"spec":{"name":"w","argv":["pi"]}}"#);
        let spec = spec.ok();
        assert_eq!(spec, Some(AgentSpec::new("w", strings(&["pi"]))));
        assert_eq!(spec.map(|s| s.autostart), Some(true));
    }

    #[test]
    fn the_fingerprint_separates_launch_from_policy() {
        let base = full_spec();
        let fp = base.fingerprint();
        assert_eq!(fp, base.clone().fingerprint(), "deterministic");

        let mut argv = base.clone();
        argv.argv.push("--more".into());
        let mut env = base.clone();
        env.env.insert("HOME".into(), "/home/agent".into());
        let mut cwd = base.clone();
        cwd.cwd = None;
        // A run is judged by the scope its attach record names: a new
        // scope is a new run.
        let mut scope = base.clone();
        scope.scope.push("/srv/shared".into());
        for changed in [argv, env, cwd, scope] {
            let other = changed.fingerprint();
            assert_ne!(other.launch, fp.launch);
            assert_eq!(other.policy, fp.policy);
        }

        let mut restart = base.clone();
        restart.restart = RestartPolicy::Always;
        let mut stall = base.clone();
        stall.stall_after = Some(Duration::from_secs(601));
        let mut resume = base.clone();
        resume.resume = None;
        let mut role = base.clone();
        role.role = Some("sysadmin".into());
        let mut heartbeat = base.clone();
        heartbeat.heartbeat = Some(Duration::from_secs(600));
        let mut prompt = base.clone();
        prompt.heartbeat_prompt = Some("wake up".into());
        for changed in [restart, stall, resume, role, heartbeat, prompt] {
            let other = changed.fingerprint();
            assert_eq!(other.launch, fp.launch);
            assert_ne!(other.policy, fp.policy);
        }
        // A new system prompt is a new process (its argv carries it).
        let mut system = base.clone();
        system.system_prompt = Some("be brief".into());
        assert_ne!(system.fingerprint().launch, fp.launch);
    }

    #[test]
    fn roles_heartbeats_and_prompts_survive_encoding_and_are_absent_when_unset() {
        let mut spec = full_spec();
        spec.role = Some("sysadmin".into());
        spec.heartbeat = Some(Duration::from_secs(600));
        spec.heartbeat_prompt = Some("check in".into());
        spec.system_prompt = Some("be brief".into());
        assert_eq!(AgentSpec::decode(&spec.encode()).ok(), Some(spec));
        // A recipe without them is encoded as before roles existed, so an
        // older colibrid still reads it.
        let bare = AgentSpec::new("w", strings(&["pi"])).encode();
        for key in ["role", "heartbeat", "system_prompt"] {
            assert!(!bare.contains(key), "{key} in {bare}");
        }
    }

    #[test]
    fn a_system_prompt_is_appended_the_harness_way_or_not_at_all() {
        let mut pi = strings(&["/usr/local/bin/pi", "--mode", "rpc"]);
        assert!(add_system_prompt(&mut pi, None, "be brief"));
        assert_eq!(
            pi,
            strings(&[
                "/usr/local/bin/pi",
                "--mode",
                "rpc",
                "--append-system-prompt",
                "be brief"
            ])
        );
        // A wrapper named by its runtime: appended, so the wrapper's own
        // arguments stay in front.
        let mut wrapped = strings(&["env", "FOO=1", "claude", "-p"]);
        assert!(add_system_prompt(&mut wrapped, Some(Runtime::Claude), "x"));
        assert_eq!(wrapped[4..], strings(&["--append-system-prompt", "x"]));
        // Given again (a rendered recipe read back): not twice; nor when
        // another flag of the harness gives it.
        assert!(add_system_prompt(&mut pi, None, "be brief"));
        assert_eq!(pi.len(), 5);
        let mut own = strings(&["pi", "--system-prompt", "be brief"]);
        assert!(add_system_prompt(&mut own, None, "be brief"));
        assert_eq!(own.len(), 3);
        let mut codex = strings(&["codex", "exec", "--json"]);
        assert!(add_system_prompt(&mut codex, None, "x"));
        assert_eq!(
            codex[3..],
            strings(&["-c", r#"developer_instructions="x""#])
        );
        for program in ["gemini", "opencode", "my-agent"] {
            let mut argv = strings(&[program]);
            assert!(!add_system_prompt(&mut argv, None, "x"), "{program}");
            assert_eq!(argv, strings(&[program]));
        }
        assert!(template_places_system_prompt(&strings(&[
            "pi",
            "--system-prompt",
            "{system_prompt}"
        ])));
        assert!(!template_places_system_prompt(&strings(&["pi"])));
    }

    #[test]
    fn system_prompts_fit_a_command_line() {
        assert_eq!(check_system_prompt("be brief"), Ok(()));
        assert_eq!(check_system_prompt(&"x".repeat(MAX_SYSTEM_PROMPT)), Ok(()));
        assert!(check_system_prompt(&"x".repeat(MAX_SYSTEM_PROMPT + 1)).is_err());
        assert!(check_system_prompt("a\0b").is_err());
    }

    #[test]
    fn roles_are_plain_words() {
        for good in ["sysadmin", "db-admin", "git_admin", "a", "R2.d2"] {
            assert_eq!(check_role(good), Ok(()), "{good}");
        }
        let long = "r".repeat(MAX_ROLE_LEN + 1);
        for bad in ["", "a b", "role:x", "é", "a\nb", &long] {
            assert!(check_role(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_fingerprint_is_pinned() {
        // Persisted fingerprints must compare equal after an upgrade: a
        // change of this value restarts every declared agent on the next
        // reload. Change it only on purpose.
        let fp = AgentSpec::new("a", strings(&["x"])).fingerprint();
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(
            fp.launch,
            fnv1a(br#"{"argv":["x"],"runtime":null,"cwd":null,"env":{},"user":null,"jail":null}"#)
        );
    }

    #[test]
    fn names_are_plain_and_never_read_as_ids() {
        for good in ["fixer", "a", "bad", "Web-1", "x.y_z", "deadbeefx"] {
            assert_eq!(check_agent_name(good), Ok(()), "{good}");
        }
        let long = "a".repeat(MAX_NAME_LEN + 1);
        for bad in [
            "",
            "1st",
            "-x",
            ".x",
            "a b",
            "a/b",
            "é",
            "cafe",
            "dead-beef",
            "abcd",
            &long,
        ] {
            assert!(check_agent_name(bad).is_err(), "{bad:?}");
        }
        assert!(looks_like_id("dc663815"));
        assert!(!looks_like_id("dc6"), "shorter than a usable prefix");
    }

    #[test]
    fn templates_expand_and_drop_flags_without_values() {
        let template = strings(&["pi", "--provider", "{provider}", "--model", "{model}"]);
        assert_eq!(
            expand_template(
                &template,
                &[("{provider}", Some("ds")), ("{model}", Some("v3"))]
            ),
            strings(&["pi", "--provider", "ds", "--model", "v3"])
        );
        assert_eq!(
            expand_template(&template, &[("{provider}", Some("ds")), ("{model}", None)]),
            strings(&["pi", "--provider", "ds"])
        );
        assert_eq!(
            expand_template(&strings(&["run", "m={model}"]), &[("{model}", Some("x"))]),
            strings(&["run", "m=x"])
        );
    }

    #[test]
    fn resume_splices_the_argv_and_the_session() {
        let spec = full_spec();
        assert_eq!(
            resume_argv(&spec, "3f9f74a6"),
            Some(strings(&[
                "claude",
                "-p",
                "--verbose",
                "--resume",
                "3f9f74a6"
            ]))
        );
        let mut codex = AgentSpec::new(
            "c",
            strings(&["/usr/local/bin/codex", "exec", "--json", "go"]),
        );
        codex.resume = default_resume_template(Runtime::Codex)
            .map(|t| t.iter().map(|s| (*s).to_owned()).collect());
        assert_eq!(
            resume_argv(&codex, "0199a213-81c0"),
            Some(strings(&[
                "/usr/local/bin/codex",
                "exec",
                "resume",
                "--json",
                "--skip-git-repo-check",
                "0199a213-81c0",
                CODEX_RESUME_PROMPT
            ]))
        );
        // The system prompt the argv held goes with the resume too; a
        // template that repeats the argv has it already.
        codex.system_prompt = Some("be brief".into());
        let argv = resume_argv(&codex, "0199a213-81c0").expect("resumes");
        assert_eq!(
            argv[7..],
            strings(&["-c", r#"developer_instructions="be brief""#])
        );
        let mut pi = AgentSpec::new(
            "p",
            strings(&["pi", "--mode", "rpc", "--append-system-prompt", "x"]),
        );
        pi.system_prompt = Some("x".into());
        pi.resume = default_resume_template(Runtime::Pi)
            .map(|t| t.iter().map(|s| (*s).to_owned()).collect());
        let argv = resume_argv(&pi, "s1").expect("resumes");
        assert_eq!(argv.iter().filter(|a| *a == "x").count(), 1, "{argv:?}");
    }

    #[test]
    fn resume_refuses_unsafe_ids_and_specs_without_a_template() {
        let spec = full_spec();
        for bad in ["", "--help", "a b", "a\nb", "a\u{7}"] {
            assert_eq!(resume_argv(&spec, bad), None, "{bad:?}");
        }
        assert_eq!(
            resume_argv(&AgentSpec::new("x", strings(&["x"])), "id"),
            None
        );
    }

    #[test]
    fn every_default_resume_template_names_the_session() {
        for runtime in Runtime::ALL {
            if let Some(template) = default_resume_template(runtime) {
                let owned: Vec<String> = template.iter().map(|s| (*s).to_owned()).collect();
                assert_eq!(check_resume_template(&owned), Ok(()), "{runtime}");
            }
        }
        assert!(check_resume_template(&strings(&["claude", "--continue"])).is_err());
        assert!(check_resume_template(&strings(&["", "{session}"])).is_err());
    }

    #[test]
    fn the_runtime_is_known_from_the_spec_or_the_program_name() {
        let mut spec = AgentSpec::new("a", strings(&["/usr/local/bin/gemini", "-p"]));
        assert_eq!(known_runtime(&spec), Some(Runtime::Gemini));
        spec.runtime = Some(Runtime::Pi);
        assert_eq!(known_runtime(&spec), Some(Runtime::Pi));
        assert_eq!(
            known_runtime(&AgentSpec::new("b", strings(&["my-agent"]))),
            None
        );
    }

    #[test]
    fn restart_policies_read_the_exit_state() {
        assert!(!RestartPolicy::Never.restarts_after(AgentState::Error));
        assert!(RestartPolicy::OnFailure.restarts_after(AgentState::Error));
        assert!(!RestartPolicy::OnFailure.restarts_after(AgentState::Done));
        assert!(RestartPolicy::Always.restarts_after(AgentState::Done));
        for policy in [
            RestartPolicy::Never,
            RestartPolicy::OnFailure,
            RestartPolicy::Always,
        ] {
            assert_eq!(RestartPolicy::parse(policy.as_str()), Some(policy));
        }
        assert_eq!(RestartPolicy::parse("sometimes"), None);
    }

    #[test]
    fn planned_stops_come_back_at_the_next_start_unless_removed() {
        let shutdown = Wanted::Down {
            by: StopCause::Shutdown,
            reason: None,
        };
        let operator = Wanted::Down {
            by: StopCause::Operator {
                who: "uid 1001".into(),
            },
            reason: Some("upgrading".into()),
        };
        let removed = Wanted::Down {
            by: StopCause::Removed,
            reason: None,
        };
        assert_eq!(shutdown.at_next_start(), Wanted::Up);
        assert_eq!(operator.at_next_start(), Wanted::Up);
        assert_eq!(removed.at_next_start(), removed);
        assert_eq!(Wanted::Up.at_next_start(), Wanted::Up);
        let text = serde_json::to_string(&operator).unwrap_or_default();
        assert_eq!(
            text,
            r#"{"wanted":"down","by":{"cause":"operator","who":"uid 1001"},"reason":"upgrading"}"#
        );
        assert_eq!(serde_json::from_str::<Wanted>(&text).ok(), Some(operator));
    }

    #[test]
    fn the_v1_mapping_keeps_to_five_states_and_planned_stops_never_alert() {
        for pane in AgentState::ALL {
            assert_eq!(v1_state(Actual::Running, pane), pane);
            assert_eq!(v1_state(Actual::Stopped, pane), AgentState::Done);
            assert_eq!(v1_state(Actual::GivenUp, pane), AgentState::Error);
            let waiting = if pane == AgentState::Done {
                AgentState::Done
            } else {
                AgentState::Error
            };
            assert_eq!(v1_state(Actual::Backoff, pane), waiting, "{pane:?}");
            assert!(!alerts(Actual::Stopped, pane), "planned stop, {pane:?}");
            assert!(alerts(Actual::GivenUp, pane));
        }
        assert!(alerts(Actual::Exited, AgentState::Error));
        assert!(!alerts(Actual::Exited, AgentState::Done));
    }

    #[test]
    fn a_record_survives_encode_and_resumes_its_harness_session() {
        let record = AgentRecord {
            spec: full_spec(),
            wanted: Wanted::Down {
                by: StopCause::Shutdown,
                reason: None,
            },
            pane_id: Some("dc663815-1111-4000-8000-000000000001".into()),
            harness_session: Some("3f9f74a6".into()),
            escalation: 2,
        };
        let back = AgentRecord::decode(&record.encode()).ok();
        assert_eq!(back.as_ref(), Some(&record));
        assert_eq!(
            record.start_argv(),
            strings(&["claude", "-p", "--verbose", "--resume", "3f9f74a6"])
        );
        let fresh = AgentRecord {
            harness_session: None,
            ..record.clone()
        };
        assert_eq!(fresh.start_argv(), record.spec.argv);
        let unsafe_id = AgentRecord {
            harness_session: Some("--x".into()),
            ..record
        };
        assert_eq!(unsafe_id.start_argv(), unsafe_id.spec.argv);
        assert!(AgentRecord::decode("{\"version\":9}").is_err());
    }

    #[test]
    fn a_spawned_record_comes_back_at_start_if_its_policy_restarts_it() {
        let with = |restart, by: Option<StopCause>| AgentRecord {
            spec: AgentSpec {
                restart,
                ..AgentSpec::new("w", strings(&["pi"]))
            },
            wanted: by.map_or(Wanted::Up, |by| Wanted::Down { by, reason: None }),
            pane_id: None,
            harness_session: None,
            escalation: 0,
        };
        assert!(with(RestartPolicy::Always, None).comes_back_at_start());
        assert!(with(RestartPolicy::OnFailure, Some(StopCause::Shutdown)).comes_back_at_start());
        assert!(with(
            RestartPolicy::Always,
            Some(StopCause::Operator { who: "op".into() })
        )
        .comes_back_at_start());
        assert!(!with(RestartPolicy::Never, None).comes_back_at_start());
        assert!(!with(RestartPolicy::Always, Some(StopCause::Removed)).comes_back_at_start());
    }
}
