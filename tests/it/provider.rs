//! A scripted model provider on 127.0.0.1 for the real harnesses
//! (`harness.rs`): it speaks just enough of the Anthropic Messages API
//! (streaming SSE, and plain JSON for a non-streaming call) to play a
//! [`Scenario`]: a shell tool call, then, once the tool's result comes
//! back, a final answer, each with usage figures the test knows. Every
//! request is kept, so a test can see what the harness sent (the tool
//! result or the denial, the earlier turns of a resumed session).
//!
//! The step a request gets is the number of `tool_result` blocks in its
//! messages, so the provider holds no conversation state of its own and a
//! resumed session (whose history already holds a result) goes on where
//! it stopped. A request without tools (a harness's side call: a title, a
//! summary) gets a short text with zero usage, so it changes no total.
//! Std only: a listener thread, one thread per connection, no keep-alive.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

/// Token counts one model response reports.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct Tokens {
    /// Uncached input (Anthropic's `input_tokens`).
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
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
        }
    }

    /// What all steps report together.
    pub fn total(&self) -> Tokens {
        Tokens::sum(&self.steps.iter().map(Step::tokens).collect::<Vec<_>>())
    }
}

/// One request the provider received.
#[derive(Clone, Debug)]
pub struct Request {
    pub path: String,
    pub body: Value,
}

impl Request {
    /// The `tool_result` blocks of its messages, in order.
    pub fn tool_results(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for m in self.body["messages"].as_array().into_iter().flatten() {
            for b in m["content"].as_array().into_iter().flatten() {
                if b["type"] == json!("tool_result") {
                    out.push(b.clone());
                }
            }
        }
        out
    }

    pub fn has_tools(&self) -> bool {
        self.body["tools"].as_array().is_some_and(|t| !t.is_empty())
    }
}

pub struct Provider {
    pub port: u16,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Provider {
    pub fn start(scenario: Scenario) -> Provider {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the provider");
        let port = listener.local_addr().expect("provider address").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        let scenario = Arc::new(scenario);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let seen = Arc::clone(&seen);
                let scenario = Arc::clone(&scenario);
                std::thread::spawn(move || {
                    let _ = serve(conn, &scenario, &seen);
                });
            }
        });
        Provider { port, requests }
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The model requests so far (those that offered tools).
    pub fn model_requests(&self) -> Vec<Request> {
        let all = self.requests.lock().expect("requests").clone();
        all.into_iter().filter(Request::has_tools).collect()
    }
}

fn serve(conn: TcpStream, scenario: &Scenario, seen: &Mutex<Vec<Request>>) -> std::io::Result<()> {
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
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut out = conn;
    if !path.contains("/messages") || path.contains("count_tokens") {
        let reply = if path.contains("count_tokens") {
            json!({"input_tokens": 10}).to_string()
        } else {
            json!({"type":"error","error":{"type":"not_found_error","message":"scripted provider"}})
                .to_string()
        };
        let status = if path.contains("count_tokens") {
            "200 OK"
        } else {
            "404 Not Found"
        };
        return write!(
            out,
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
            reply.len()
        );
    }
    let req = Request { path, body };
    let step = if req.has_tools() {
        let n = req.tool_results().len();
        scenario.steps.get(n).or(scenario.steps.last()).cloned()
    } else {
        None
    };
    let tool = shell_tool_name(&req.body);
    let stream = req.body["stream"] == json!(true);
    let model = req.body["model"].as_str().unwrap_or("scripted").to_string();
    let n = seen.lock().map(|mut s| {
        s.push(req);
        s.len()
    });
    let id = format!("msg_scripted_{}", n.unwrap_or(0));
    let (block, stop, tokens) = match step {
        Some(Step::Shell { command, tokens }) => (
            json!({"type":"tool_use","id":format!("toolu_scripted_{}", id),"name":tool,"input":{"command":command,"description":"Run the scripted command"}}),
            "tool_use",
            tokens,
        ),
        Some(Step::Answer { text, tokens }) => {
            (json!({"type":"text","text":text}), "end_turn", tokens)
        }
        None => (
            json!({"type":"text","text":"Scripted."}),
            "end_turn",
            Tokens::default(),
        ),
    };
    let usage = json!({
        "input_tokens": tokens.input,
        "output_tokens": tokens.output,
        "cache_read_input_tokens": tokens.cache_read,
        "cache_creation_input_tokens": tokens.cache_write,
    });
    if !stream {
        let reply = json!({"id":id,"type":"message","role":"assistant","model":model,"content":[block],"stop_reason":stop,"stop_sequence":null,"usage":usage}).to_string();
        return write!(
            out,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
            reply.len()
        );
    }
    let mut events = vec![(
        "message_start",
        json!({"type":"message_start","message":{"id":id,"type":"message","role":"assistant","model":model,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":tokens.input,"output_tokens":1,"cache_read_input_tokens":tokens.cache_read,"cache_creation_input_tokens":tokens.cache_write}}}),
    )];
    if block["type"] == json!("tool_use") {
        let input = block["input"].to_string();
        let mut start = block.clone();
        start["input"] = json!({});
        events.push((
            "content_block_start",
            json!({"type":"content_block_start","index":0,"content_block":start}),
        ));
        events.push(("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":input}})));
    } else {
        events.push(("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})));
        events.push(("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":block["text"]}})));
    }
    events.push((
        "content_block_stop",
        json!({"type":"content_block_stop","index":0}),
    ));
    events.push(("message_delta", json!({"type":"message_delta","delta":{"stop_reason":stop,"stop_sequence":null},"usage":usage})));
    events.push(("message_stop", json!({"type":"message_stop"})));
    write!(
        out,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n"
    )?;
    for (name, data) in events {
        write!(out, "event: {name}\ndata: {data}\n\n")?;
    }
    out.flush()
}

/// The harness's shell tool, as its request names it (Claude Code's
/// `Bash`, Pi's `bash`).
fn shell_tool_name(body: &Value) -> String {
    let names: Vec<&str> = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    ["Bash", "bash"]
        .iter()
        .find(|n| names.contains(n))
        .map_or("bash", |n| n)
        .to_string()
}
