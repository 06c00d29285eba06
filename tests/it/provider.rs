//! A scripted model provider on 127.0.0.1 for the real harnesses
//! (`harness.rs`): it speaks just enough of four model APIs to play a
//! [`Scenario`] — a shell tool call, then, once the tool's result comes
//! back, a final answer, each with usage figures the test knows:
//!
//! - the Anthropic Messages API (Claude Code, Pi): `anthropic.rs`;
//! - the OpenAI Responses API (Codex) and Chat Completions (OpenCode
//!   through its OpenAI-compatible provider): `openai.rs`;
//! - the Gemini API's `generateContent` and `streamGenerateContent`
//!   (Gemini CLI): `gemini.rs`.
//!
//! Every request is kept, so a test can see what the harness sent (the
//! tool result or the denial, the earlier turns of a resumed session).
//! The step a request gets is the number of tool results in it, so the
//! provider holds no conversation state of its own and a resumed session
//! (whose history already holds a result) goes on where it stopped. A
//! request without tools (a harness's side call: a title, a summary, a
//! model router) gets a short text with zero usage, so it changes no
//! total. A scenario may hold the requests of one step until the test
//! releases them, to stop a harness in the middle of its turn.
//! Std only: a listener thread, one thread per connection, no keep-alive.

mod anthropic;
mod gemini;
mod openai;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};

use serde_json::Value;

/// Token counts one model response reports.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct Tokens {
    /// Uncached input (Anthropic's `input_tokens`; the OpenAI and Gemini
    /// APIs report this plus `cache_read` as their input count).
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    /// Anthropic only: the other APIs have no cache writes to report.
    pub cache_write: u64,
}

impl Tokens {
    pub fn sum(steps: &[Tokens]) -> Tokens {
        steps.iter().fold(Tokens::default(), |a, t| Tokens {
            input: a.input + t.input,
            output: a.output + t.output,
            cache_read: a.cache_read + t.cache_read,
            cache_write: a.cache_write + t.cache_write,
        })
    }

    /// What an API without cache writes reports of these.
    pub fn without_cache_writes(self) -> Tokens {
        Tokens {
            cache_write: 0,
            ..self
        }
    }
}

/// One scripted model response.
#[derive(Clone, Debug)]
pub enum Step {
    /// Ask to run this shell command with the harness's shell tool.
    Shell { command: String, tokens: Tokens },
    /// The final answer.
    Answer { text: String, tokens: Tokens },
}

impl Step {
    pub fn tokens(&self) -> Tokens {
        match self {
            Step::Shell { tokens, .. } | Step::Answer { tokens, .. } => *tokens,
        }
    }
}

/// The conversation every harness test plays: `steps[n]` answers a request
/// that carries `n` tool results; past the end, the last step repeats.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub steps: Vec<Step>,
    /// Requests for this step wait until [`Provider::release`].
    pub hold_step: Option<usize>,
}

impl Scenario {
    /// A shell command, then an answer, with distinct usage figures.
    pub fn shell_then_answer(command: &str) -> Scenario {
        Scenario {
            steps: vec![
                Step::Shell {
                    command: command.to_string(),
                    tokens: Tokens {
                        input: 1200,
                        output: 40,
                        cache_read: 300,
                        cache_write: 50,
                    },
                },
                Step::Answer {
                    text: "Done: the command ran.".to_string(),
                    tokens: Tokens {
                        input: 1500,
                        output: 20,
                        cache_read: 600,
                        cache_write: 0,
                    },
                },
            ],
            hold_step: None,
        }
    }

    /// The same shell command for ever: a model stuck in a loop.
    pub fn same_command_forever(command: &str) -> Scenario {
        Scenario {
            steps: vec![Step::Shell {
                command: command.to_string(),
                tokens: Tokens {
                    input: 100,
                    output: 10,
                    cache_read: 0,
                    cache_write: 0,
                },
            }],
            hold_step: None,
        }
    }

    /// Requests for `step` wait until the test releases them.
    pub fn holding(mut self, step: usize) -> Scenario {
        self.hold_step = Some(step);
        self
    }

    /// What all steps report together.
    pub fn total(&self) -> Tokens {
        Tokens::sum(&self.steps.iter().map(Step::tokens).collect::<Vec<_>>())
    }
}

/// Which API a request came in on, from its path.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Dialect {
    Anthropic,
    Responses,
    Chat,
    Gemini,
}

impl Dialect {
    fn of(path: &str) -> Option<Dialect> {
        if path.contains("/messages") && !path.contains("count_tokens") {
            Some(Dialect::Anthropic)
        } else if path.ends_with("/responses") {
            Some(Dialect::Responses)
        } else if path.ends_with("/chat/completions") {
            Some(Dialect::Chat)
        } else if path.contains(":generateContent") || path.contains(":streamGenerateContent") {
            Some(Dialect::Gemini)
        } else {
            None
        }
    }
}

/// One request the provider received.
#[derive(Clone, Debug)]
pub struct Request {
    pub path: String,
    pub dialect: Dialect,
    pub body: Value,
}

impl Request {
    /// The tool results its history carries, in order, as the API spells
    /// them (Anthropic `tool_result` blocks, Responses
    /// `function_call_output` items, Chat `tool` messages, Gemini
    /// `functionResponse` parts).
    pub fn tool_results(&self) -> Vec<Value> {
        match self.dialect {
            Dialect::Anthropic => anthropic::tool_results(&self.body),
            Dialect::Responses => openai::responses_tool_results(&self.body),
            Dialect::Chat => openai::chat_tool_results(&self.body),
            Dialect::Gemini => gemini::tool_results(&self.body),
        }
    }

    /// The tool names it offers the model.
    pub fn tool_names(&self) -> Vec<String> {
        match self.dialect {
            Dialect::Anthropic | Dialect::Responses => names_at(&self.body["tools"], &["name"]),
            Dialect::Chat => names_at(&self.body["tools"], &["function", "name"]),
            Dialect::Gemini => gemini::tool_names(&self.body),
        }
    }

    pub fn has_tools(&self) -> bool {
        !self.tool_names().is_empty()
    }

    /// Whether it asks for a streamed reply.
    fn streams(&self) -> bool {
        match self.dialect {
            Dialect::Gemini => self.path.contains(":streamGenerateContent"),
            _ => self.body["stream"] == serde_json::json!(true),
        }
    }

    /// The first of `wanted` the request offers as a tool.
    fn offered<'a>(&self, wanted: &[&'a str]) -> Option<&'a str> {
        let names = self.tool_names();
        wanted
            .iter()
            .find(|w| names.iter().any(|n| n == *w))
            .copied()
    }
}

fn names_at(tools: &Value, path: &[&str]) -> Vec<String> {
    tools
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| path.iter().fold(t, |v, k| &v[*k]).as_str())
        .map(str::to_string)
        .collect()
}

/// A reply ready to send: its content type and body.
pub struct Reply {
    pub content_type: &'static str,
    pub body: String,
}

impl Reply {
    fn json(v: &Value) -> Reply {
        Reply {
            content_type: "application/json",
            body: v.to_string(),
        }
    }

    /// Server-sent events, each `(event name or none, data)`.
    fn events(events: &[(Option<&str>, Value)]) -> Reply {
        let mut body = String::new();
        for (name, data) in events {
            if let Some(name) = name {
                body.push_str(&format!("event: {name}\n"));
            }
            body.push_str(&format!("data: {data}\n\n"));
        }
        Reply {
            content_type: "text/event-stream",
            body,
        }
    }
}

/// What a dialect's reply is made of: the step (or a side call's short
/// text), the response's number, the model name asked for, streamed or not.
pub struct Turn<'a> {
    pub step: Option<&'a Step>,
    pub n: usize,
    pub model: &'a str,
    pub stream: bool,
}

/// Requests for the held step wait on this until released.
#[derive(Default)]
struct Gate {
    released: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn wait(&self) {
        let Ok(mut released) = self.released.lock() else {
            return;
        };
        while !*released {
            released = match self.opened.wait(released) {
                Ok(r) => r,
                Err(_) => return,
            };
        }
    }

    fn open(&self) {
        if let Ok(mut released) = self.released.lock() {
            *released = true;
        }
        self.opened.notify_all();
    }
}

pub struct Provider {
    pub port: u16,
    requests: Arc<Mutex<Vec<Request>>>,
    gate: Arc<Gate>,
}

impl Provider {
    pub fn start(scenario: Scenario) -> Provider {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the provider");
        let port = listener.local_addr().expect("provider address").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Gate::default());
        let (seen, held) = (Arc::clone(&requests), Arc::clone(&gate));
        let scenario = Arc::new(scenario);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (seen, held) = (Arc::clone(&seen), Arc::clone(&held));
                let scenario = Arc::clone(&scenario);
                std::thread::spawn(move || {
                    let _ = serve(conn, &scenario, &seen, &held);
                });
            }
        });
        Provider {
            port,
            requests,
            gate,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The model requests so far (those that offered tools).
    pub fn model_requests(&self) -> Vec<Request> {
        let all = self.requests.lock().expect("requests").clone();
        all.into_iter().filter(Request::has_tools).collect()
    }

    /// Lets the held step's requests (and every later one) through.
    pub fn release(&self) {
        self.gate.open();
    }
}

/// Reads one request: its path and JSON body (`Null` when it has none).
fn read_request(conn: &TcpStream) -> std::io::Result<(String, Value)> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok((path, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

fn respond(mut out: TcpStream, status: &str, reply: &Reply) -> std::io::Result<()> {
    write!(
        out,
        "HTTP/1.1 {status}\r\ncontent-type: {}\r\ncontent-length: {}\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n{}",
        reply.content_type,
        reply.body.len(),
        reply.body
    )?;
    out.flush()
}

fn serve(
    conn: TcpStream,
    scenario: &Scenario,
    seen: &Mutex<Vec<Request>>,
    gate: &Gate,
) -> std::io::Result<()> {
    let (path, body) = read_request(&conn)?;
    if path.contains("count_tokens") {
        return respond(
            conn,
            "200 OK",
            &Reply::json(&serde_json::json!({"input_tokens": 10})),
        );
    }
    let Some(dialect) = Dialect::of(&path) else {
        let reply =
            serde_json::json!({"error":{"type":"not_found_error","message":"scripted provider"}});
        return respond(conn, "404 Not Found", &Reply::json(&reply));
    };
    let req = Request {
        path,
        dialect,
        body,
    };
    let step_index = req.has_tools().then(|| req.tool_results().len());
    let step = step_index.and_then(|n| scenario.steps.get(n).or(scenario.steps.last()));
    let model = req.body["model"].as_str().unwrap_or("scripted").to_string();
    let stream = req.streams();
    let reply_to = req.clone();
    let n = seen
        .lock()
        .map(|mut s| {
            s.push(req);
            s.len()
        })
        .unwrap_or(0);
    if step_index.is_some() && step_index == scenario.hold_step {
        gate.wait();
    }
    let turn = Turn {
        step,
        n,
        model: &model,
        stream,
    };
    let reply = match dialect {
        Dialect::Anthropic => anthropic::reply(&reply_to, &turn),
        Dialect::Responses => openai::responses_reply(&reply_to, &turn),
        Dialect::Chat => openai::chat_reply(&reply_to, &turn),
        Dialect::Gemini => gemini::reply(&reply_to, &turn),
    };
    respond(conn, "200 OK", &reply)
}
