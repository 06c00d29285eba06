//! The OpenAI Responses API (`POST /v1/responses`, Codex) and Chat
//! Completions (`POST /v1/chat/completions`, OpenCode through
//! `@ai-sdk/openai-compatible`), streamed as SSE or answered whole.
//! Both count cached tokens inside their input count and have no cache
//! writes.

use serde_json::{json, Value};

use super::{Reply, Request, Step, Tokens, Turn};

pub fn responses_tool_results(body: &Value) -> Vec<Value> {
    body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == json!("function_call_output"))
        .cloned()
        .collect()
}

pub fn chat_tool_results(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == json!("tool"))
        .cloned()
        .collect()
}

fn tokens_of(turn: &Turn) -> Tokens {
    turn.step.map(Step::tokens).unwrap_or_default()
}

pub fn responses_reply(req: &Request, turn: &Turn) -> Reply {
    let id = format!("resp_scripted_{}", turn.n);
    let item = match turn.step {
        Some(Step::Shell { command, .. }) => {
            // Codex 0.171 offers `exec_command` (`cmd`, a string); older
            // ones `shell` (`command`, an argv).
            let (name, args) = match req.offered(&["exec_command", "shell"]) {
                Some("shell") => ("shell", json!({"command":["bash","-lc",command]})),
                _ => ("exec_command", json!({ "cmd": command })),
            };
            json!({"type":"function_call","id":format!("fc_{}", turn.n),
                "call_id":format!("call_scripted_{}", turn.n),"name":name,
                "arguments":args.to_string(),"status":"completed"})
        }
        Some(Step::Answer { text, .. }) => message(text),
        None => message("Scripted."),
    };
    let t = tokens_of(turn);
    let usage = json!({
        "input_tokens": t.input + t.cache_read,
        "input_tokens_details": {"cached_tokens": t.cache_read},
        "output_tokens": t.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": t.input + t.cache_read + t.output,
    });
    let response = json!({"id":id,"object":"response","model":turn.model,"status":"completed",
        "output":[item],"usage":usage});
    if !turn.stream {
        return Reply::json(&response);
    }
    let mut created = response.clone();
    created["status"] = json!("in_progress");
    created["output"] = json!([]);
    created["usage"] = Value::Null;
    Reply::events(&[
        (
            Some("response.created"),
            json!({"type":"response.created","response":created}),
        ),
        (
            Some("response.output_item.added"),
            json!({"type":"response.output_item.added","output_index":0,"item":item}),
        ),
        (
            Some("response.output_item.done"),
            json!({"type":"response.output_item.done","output_index":0,"item":item}),
        ),
        (
            Some("response.completed"),
            json!({"type":"response.completed","response":response}),
        ),
    ])
}

fn message(text: &str) -> Value {
    json!({"type":"message","id":"msg_scripted","role":"assistant","status":"completed",
        "content":[{"type":"output_text","text":text,"annotations":[]}]})
}

pub fn chat_reply(req: &Request, turn: &Turn) -> Reply {
    let tool = req.offered(&["bash", "shell"]).unwrap_or("bash");
    let (message, finish) = match turn.step {
        Some(Step::Shell { command, .. }) => (
            json!({"role":"assistant","content":null,"tool_calls":[{"index":0,
                "id":format!("call_scripted_{}", turn.n),"type":"function",
                "function":{"name":tool,"arguments":json!({"command":command,"description":"Run the scripted command"}).to_string()}}]}),
            "tool_calls",
        ),
        Some(Step::Answer { text, .. }) => (json!({"role":"assistant","content":text}), "stop"),
        None => (json!({"role":"assistant","content":"Scripted."}), "stop"),
    };
    let t = tokens_of(turn);
    let usage = json!({
        "prompt_tokens": t.input + t.cache_read,
        "completion_tokens": t.output,
        "total_tokens": t.input + t.cache_read + t.output,
        "prompt_tokens_details": {"cached_tokens": t.cache_read},
    });
    let id = format!("chatcmpl-scripted-{}", turn.n);
    if !turn.stream {
        return Reply::json(
            &json!({"id":id,"object":"chat.completion","created":1,"model":turn.model,
            "choices":[{"index":0,"message":message,"finish_reason":finish}],"usage":usage}),
        );
    }
    let chunk = |choices: Value, usage: Value| {
        (
            None,
            json!({"id":id,"object":"chat.completion.chunk","created":1,"model":turn.model,
                "choices":choices,"usage":usage}),
        )
    };
    let mut reply = Reply::events(&[
        chunk(
            json!([{"index":0,"delta":message,"finish_reason":null}]),
            Value::Null,
        ),
        chunk(
            json!([{"index":0,"delta":{},"finish_reason":finish}]),
            Value::Null,
        ),
        chunk(json!([]), usage),
    ]);
    reply.body.push_str("data: [DONE]\n\n");
    reply
}
