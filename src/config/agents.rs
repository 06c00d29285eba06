//! `[agents.NAME]` and `[resume.RUNTIME]`: declared agents, read into
//! [`AgentSpec`]s, and the argv templates that resume a harness's session.
//!
//! A declared agent is checked in two steps. The file's [`Validator`]
//! checks each value where it stands (so `--check-config` reports every bad
//! value with its line), including that a named provider exists; resolution
//! then expands the provider template into the agent's argv and picks its
//! resume template: the agent's own `resume`, else `[resume.RUNTIME]` for
//! its runtime (given, or its program's base name), else colibri's default
//! for that harness ([`default_resume_template`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};
use toml::Spanned;

use super::file::Validator;
use super::{
    check_jail_name, parse_duration, parse_stall_after, ConfigError, Provider,
    DEFAULT_PROVIDER_NAMES,
};
use crate::core::heartbeat::{check_period, check_prompt as check_heartbeat_prompt};
use crate::core::spec::{
    add_system_prompt, check_agent_name, check_argv, check_resume_template, check_role,
    check_scope_path, check_system_prompt, default_resume_template, expand_template, known_runtime,
    template_places_system_prompt, AgentSpec, RestartPolicy, MAX_SCOPE_PATHS,
    SYSTEM_PROMPT_PLACEHOLDER,
};
use crate::core::taxonomy::Runtime;

/// The contract's provider whose `model` is the executable to run.
pub const LOCAL_PROVIDER: &str = "local";

/// One `[agents.NAME]` table as the file gives it, checked but not yet
/// resolved against the providers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentDecl {
    /// Everything but the argv (empty until resolved) and the resume
    /// template (in `resume`).
    pub spec: AgentSpec,
    pub launch: Launch,
    /// `Some(vec![])` is `resume = []`: never resume this agent.
    pub resume: Option<Vec<String>>,
    /// The line of the `[agents.NAME]` header, for errors found later.
    pub line: Option<usize>,
}

/// How a declared agent's argv is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    Argv(Vec<String>),
    Provider {
        provider: String,
        model: Option<String>,
    },
}

/// `[resume.RUNTIME]`, resolved: `argv` is empty when the harness is never
/// resumed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResumeRecipe {
    pub argv: Vec<String>,
}

// The file as serde sees it.

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawAgent {
    argv: Option<Spanned<Vec<String>>>,
    provider: Option<Spanned<String>>,
    model: Option<Spanned<String>>,
    runtime: Option<Spanned<String>>,
    cwd: Option<Spanned<String>>,
    env: Option<Spanned<BTreeMap<String, String>>>,
    user: Option<Spanned<String>>,
    jail: Option<Spanned<String>>,
    restart: Option<Spanned<String>>,
    backoff: Option<Vec<Spanned<String>>>,
    max_restarts: Option<Spanned<u64>>,
    stall_after: Option<Spanned<String>>,
    autostart: Option<bool>,
    resume: Option<Spanned<Vec<String>>>,
    role: Option<Spanned<String>>,
    heartbeat: Option<Spanned<String>>,
    heartbeat_prompt: Option<Spanned<String>>,
    system_prompt: Option<Spanned<String>>,
    scope: Option<Spanned<Vec<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(super) struct RawResume {
    argv: Spanned<Vec<String>>,
}

impl Validator<'_> {
    /// Every `[agents.NAME]`, each value checked where it stands.
    /// `providers` are the file's own; the built-in ones are known too.
    pub(super) fn agents(
        &mut self,
        raw: BTreeMap<String, Spanned<RawAgent>>,
        providers: &BTreeMap<String, Provider>,
    ) -> BTreeMap<String, AgentDecl> {
        let mut agents = BTreeMap::new();
        for (name, table) in raw {
            let span = table.span();
            let key = format!("agents.{name}");
            if let Err(msg) = check_agent_name(&name) {
                self.invalid(span, &key, msg);
                continue;
            }
            let line = Some(self.line_of(span.start));
            let errors_before = self.error_count();
            let decl = self.agent(&name, &key, table, providers);
            if let (Some(mut decl), true) = (decl, self.error_count() == errors_before) {
                decl.line = line;
                agents.insert(name, decl);
            }
        }
        agents
    }

    fn agent(
        &mut self,
        name: &str,
        key: &str,
        table: Spanned<RawAgent>,
        providers: &BTreeMap<String, Provider>,
    ) -> Option<AgentDecl> {
        let span = table.span();
        let raw = table.into_inner();
        let launch = self.launch(key, span, raw.argv, raw.provider, raw.model, providers);
        let mut spec = AgentSpec::new(name, Vec::new());
        spec.runtime = self.opt(raw.runtime, &format!("{key}.runtime"), parse_runtime);
        spec.cwd = self.opt(raw.cwd, &format!("{key}.cwd"), |v| {
            absolute_dir(v).map(PathBuf::from)
        });
        spec.env = self
            .opt(raw.env, &format!("{key}.env"), check_env)
            .unwrap_or_default();
        spec.user = self.opt(raw.user, &format!("{key}.user"), |v| {
            if v.is_empty() {
                Err("must not be empty".to_owned())
            } else {
                Ok(v)
            }
        });
        spec.jail = self.opt(raw.jail, &format!("{key}.jail"), |v| {
            check_jail_name(&v).map(|()| v)
        });
        if let Some(policy) = self.opt(raw.restart, &format!("{key}.restart"), |v| {
            RestartPolicy::parse(&v)
                .ok_or_else(|| format!("invalid restart policy {v:?} (never, on-failure, always)"))
        }) {
            spec.restart = policy;
        }
        spec.backoff = raw.backoff.map(|items| {
            items
                .into_iter()
                .filter_map(|item| {
                    self.one(item, &format!("{key}.backoff"), |v| parse_duration(&v))
                })
                .collect::<Vec<Duration>>()
        });
        spec.max_restarts = self.opt(raw.max_restarts, &format!("{key}.max_restarts"), |v| {
            u32::try_from(v).map_err(|_| format!("{v} is out of range (0..=4294967295)"))
        });
        spec.stall_after = self.opt(raw.stall_after, &format!("{key}.stall_after"), |v| {
            parse_stall_after(&v)
        });
        spec.autostart = raw.autostart.unwrap_or(true);
        spec.role = self.opt(raw.role, &format!("{key}.role"), |v| {
            check_role(&v).map(|()| v)
        });
        spec.heartbeat = self.opt(raw.heartbeat, &format!("{key}.heartbeat"), |v| {
            let d = parse_duration(&v)?;
            check_period(d).map(|()| d)
        });
        spec.heartbeat_prompt = self.opt(
            raw.heartbeat_prompt,
            &format!("{key}.heartbeat_prompt"),
            |v| check_heartbeat_prompt(&v).map(|()| v),
        );
        spec.system_prompt = self.opt(raw.system_prompt, &format!("{key}.system_prompt"), |v| {
            check_system_prompt(&v).map(|()| v)
        });
        spec.scope = self
            .opt(raw.scope, &format!("{key}.scope"), check_scope)
            .unwrap_or_default();
        let resume = self.opt(raw.resume, &format!("{key}.resume"), check_resume);
        Some(AgentDecl {
            spec,
            launch: launch?,
            resume,
            line: None,
        })
    }

    /// `argv`, or `provider` (and `model`): exactly one way to start.
    pub(super) fn launch(
        &mut self,
        key: &str,
        span: std::ops::Range<usize>,
        argv: Option<Spanned<Vec<String>>>,
        provider: Option<Spanned<String>>,
        model: Option<Spanned<String>>,
        providers: &BTreeMap<String, Provider>,
    ) -> Option<Launch> {
        match (argv, provider) {
            (Some(argv), None) => {
                if let Some(model) = model {
                    self.invalid(
                        model.span(),
                        &format!("{key}.model"),
                        "only goes with provider".to_owned(),
                    );
                    return None;
                }
                self.one(argv, &format!("{key}.argv"), |argv| {
                    check_argv(&argv).map(|()| Launch::Argv(argv))
                })
            }
            (None, Some(provider)) => {
                let model = model.map(|m| m.into_inner());
                let known = |name: &str| {
                    providers.contains_key(name) || DEFAULT_PROVIDER_NAMES.contains(&name)
                };
                self.one(provider, &format!("{key}.provider"), |provider| {
                    if provider == LOCAL_PROVIDER {
                        return match model.as_deref() {
                            Some(exe) if !exe.is_empty() => Ok(Launch::Argv(vec![exe.to_owned()])),
                            _ => Err(
                                "provider \"local\" needs model: the executable to run".to_owned(),
                            ),
                        };
                    }
                    if !known(&provider) {
                        return Err(format!(
                            "unknown provider {provider:?}: configure [providers.{provider}] argv = [...]"
                        ));
                    }
                    Ok(Launch::Provider { provider, model })
                })
            }
            (Some(argv), Some(_)) => {
                self.invalid(
                    argv.span(),
                    key,
                    "give argv, or provider and model, not both".to_owned(),
                );
                None
            }
            (None, None) => {
                self.invalid(span, key, "needs argv, or provider and model".to_owned());
                None
            }
        }
    }

    /// Every `[resume.RUNTIME]`, by runtime name.
    pub(super) fn resume(
        &mut self,
        raw: BTreeMap<String, Spanned<RawResume>>,
    ) -> BTreeMap<String, Vec<String>> {
        let mut recipes = BTreeMap::new();
        for (runtime, table) in raw {
            let span = table.span();
            let key = format!("resume.{runtime}");
            if Runtime::parse(&runtime).is_none() {
                let names: Vec<&str> = Runtime::ALL.iter().map(|r| r.as_str()).collect();
                self.invalid(
                    span,
                    &key,
                    format!("unknown runtime {runtime:?} (one of {})", names.join(", ")),
                );
                continue;
            }
            if let Some(argv) = self.one(
                table.into_inner().argv,
                &format!("{key}.argv"),
                check_resume,
            ) {
                recipes.insert(runtime, argv);
            }
        }
        recipes
    }
}

/// `[]` (never resume) or a template that names the session.
fn check_resume(template: Vec<String>) -> Result<Vec<String>, String> {
    if template.is_empty() {
        return Ok(template);
    }
    check_resume_template(&template).map(|()| template)
}

/// An agent's `scope`: at most [`MAX_SCOPE_PATHS`] paths, each absolute
/// or relative to its `cwd`.
fn check_scope(paths: Vec<String>) -> Result<Vec<String>, String> {
    if paths.len() > MAX_SCOPE_PATHS {
        return Err(format!("at most {MAX_SCOPE_PATHS} paths"));
    }
    for p in &paths {
        check_scope_path(p)?;
    }
    Ok(paths)
}

/// Environment names an `execve` and a shell both take.
/// A `runtime` value: one of the harnesses colibri knows.
pub(super) fn parse_runtime(v: String) -> Result<Runtime, String> {
    Runtime::parse(&v).ok_or_else(|| {
        let names: Vec<&str> = Runtime::ALL.iter().map(|r| r.as_str()).collect();
        format!("unknown runtime {v:?} (one of {})", names.join(", "))
    })
}

/// A `cwd` value: an absolute directory.
pub(super) fn absolute_dir(v: String) -> Result<String, String> {
    if v.starts_with('/') {
        Ok(v)
    } else {
        Err(format!("{v:?} is not an absolute directory"))
    }
}

pub(super) fn check_env(env: BTreeMap<String, String>) -> Result<BTreeMap<String, String>, String> {
    for (name, value) in &env {
        let plain = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if name.is_empty() || !plain || name.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!(
                "invalid variable name {name:?} (letters, digits and '_', not starting with a digit)"
            ));
        }
        if value.contains('\0') {
            return Err(format!("the value of {name} holds a NUL byte"));
        }
    }
    Ok(env)
}

/// colibri's resume templates for the harnesses it knows, by runtime name;
/// a harness without one maps to an empty argv (never resumed).
pub fn default_resume() -> BTreeMap<String, ResumeRecipe> {
    Runtime::ALL
        .iter()
        .map(|runtime| {
            let argv = default_resume_template(*runtime)
                .map(|t| t.iter().map(|s| (*s).to_owned()).collect())
                .unwrap_or_default();
            (runtime.as_str().to_owned(), ResumeRecipe { argv })
        })
        .collect()
}

/// Each declared agent with its argv expanded and its resume template
/// chosen. `source` labels errors.
pub fn resolve_agents(
    decls: BTreeMap<String, AgentDecl>,
    providers: &BTreeMap<String, Provider>,
    resume: &BTreeMap<String, ResumeRecipe>,
    source: Option<&PathBuf>,
) -> (BTreeMap<String, AgentSpec>, Vec<ConfigError>) {
    let mut agents = BTreeMap::new();
    let mut errors = Vec::new();
    for (name, decl) in decls {
        match resolve_one(decl, providers, resume) {
            Ok(spec) => {
                agents.insert(name, spec);
            }
            Err((line, key, msg)) => errors.push(ConfigError::Invalid {
                path: source.cloned(),
                line,
                key,
                msg,
            }),
        }
    }
    (agents, errors)
}

type ResolveFailure = (Option<usize>, String, String);

fn resolve_one(
    decl: AgentDecl,
    providers: &BTreeMap<String, Provider>,
    resume: &BTreeMap<String, ResumeRecipe>,
) -> Result<AgentSpec, ResolveFailure> {
    let mut spec = decl.spec;
    let key = format!("agents.{}", spec.name);
    let (argv, placed) = match decl.launch {
        Launch::Argv(argv) => (argv, false),
        Launch::Provider { provider, model } => {
            let Some(template) = providers.get(&provider) else {
                return Err((
                    decl.line,
                    format!("{key}.provider"),
                    format!("unknown provider {provider:?}"),
                ));
            };
            let values = [
                ("{provider}", Some(provider.as_str())),
                ("{model}", model.as_deref()),
                // A declared agent has no per-request session id: the
                // placeholder drops out with its flag.
                ("{session_id}", None),
                (SYSTEM_PROMPT_PLACEHOLDER, spec.system_prompt.as_deref()),
            ];
            let argv = expand_template(&template.argv, &values);
            check_argv(&argv).map_err(|msg| (decl.line, format!("{key}.provider"), msg))?;
            (argv, template_places_system_prompt(&template.argv))
        }
    };
    spec.argv = argv;
    if let (Some(prompt), false) = (spec.system_prompt.as_deref(), placed) {
        // A harness that takes none still finds it in COLIBRI_SYSTEM_PROMPT.
        add_system_prompt(&mut spec.argv, spec.runtime, prompt);
    }
    spec.resume = match decl.resume {
        Some(template) => Some(template),
        None => known_runtime(&spec)
            .and_then(|runtime| resume.get(runtime.as_str()))
            .map(|recipe| recipe.argv.clone()),
    }
    .filter(|template| !template.is_empty());
    Ok(spec)
}

/// `--check-config` renders each agent as a table that loads back to the
/// same spec: the expanded argv (not the provider), durations as text, and
/// the resume template actually in effect (`[]` for none).
pub(super) fn render<S: Serializer>(
    agents: &BTreeMap<String, AgentSpec>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(agents.iter().map(|(name, spec)| (name, Rendered::of(spec))))
}

#[derive(Serialize)]
struct Rendered<'a> {
    argv: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cwd: Option<&'a PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jail: Option<&'a str>,
    restart: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    backoff: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_restarts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stall_after: Option<String>,
    autostart: bool,
    resume: &'a [String],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    scope: &'a [String],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    env: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    heartbeat: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    heartbeat_prompt: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_prompt: Option<&'a str>,
}

impl<'a> Rendered<'a> {
    fn of(spec: &'a AgentSpec) -> Rendered<'a> {
        let text = |d: &Duration| humantime::format_duration(*d).to_string();
        Rendered {
            argv: &spec.argv,
            runtime: spec.runtime.map(Runtime::as_str),
            cwd: spec.cwd.as_ref(),
            user: spec.user.as_deref(),
            jail: spec.jail.as_deref(),
            restart: spec.restart.as_str(),
            backoff: spec
                .backoff
                .as_ref()
                .map(|list| list.iter().map(text).collect()),
            max_restarts: spec.max_restarts,
            stall_after: spec.stall_after.as_ref().map(text),
            autostart: spec.autostart,
            resume: spec.resume.as_deref().unwrap_or(&[]),
            scope: &spec.scope,
            env: &spec.env,
            role: spec.role.as_deref(),
            heartbeat: spec.heartbeat.as_ref().map(text),
            heartbeat_prompt: spec.heartbeat_prompt.as_deref(),
            system_prompt: spec.system_prompt.as_deref(),
        }
    }
}
