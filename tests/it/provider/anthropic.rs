//! The Anthropic Messages API (`POST /v1/messages`), streamed as SSE or
//! answered whole, as Claude Code and Pi call it.

use serde_json::{json, Value};

use super::{Reply, Request, Step, Tokens, Turn};

pub fn tool_results(body: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for m in body["messages"].as_array().into_iter().flatten() {
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == json!("tool_result") {
                out.push(b.clone());
            }
        }
    }
    out
}

pub fn reply(req: &Request, turn: &Turn) -> Reply {
    let id = format!("msg_scripted_{}", turn.n);
    // Claude Code's shell tool is `Bash`, Pi's `bash`.
    let tool = req.offered(&["Bash", "bash"]).unwrap_or("bash");
    let (block, stop, tokens) = match turn.step {
        Some(Step::Shell { command, tokens }) => (
            json!({"type":"tool_use","id":format!("toolu_scripted_{}", turn.n),"name":tool,
                "input":{"command":command,"description":"Run the scripted command"}}),
            "tool_use",
            *tokens,
        ),
        Some(Step::Answer { text, tokens }) => {
            (json!({"type":"text","text":text}), "end_turn", *tokens)
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
    if !turn.stream {
        return Reply::json(
            &json!({"id":id,"type":"message","role":"assistant","model":turn.model,
            "content":[block],"stop_reason":stop,"stop_sequence":null,"usage":usage}),
        );
    }
    let start_usage = json!({"input_tokens":tokens.input,"output_tokens":1,
        "cache_read_input_tokens":tokens.cache_read,"cache_creation_input_tokens":tokens.cache_write});
    let mut events = vec![(
        Some("message_start"),
        json!({"type":"message_start","message":{"id":id,"type":"message","role":"assistant",
            "model":turn.model,"content":[],"stop_reason":null,"stop_sequence":null,"usage":start_usage}}),
    )];
    let delta = if block["type"] == json!("tool_use") {
        let mut start = block.clone();
        start["input"] = json!({});
        events.push((
            Some("content_block_start"),
            json!({"type":"content_block_start","index":0,"content_block":start}),
        ));
        json!({"type":"input_json_delta","partial_json":block["input"].to_string()})
    } else {
        events.push((
            Some("content_block_start"),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ));
        json!({"type":"text_delta","text":block["text"]})
    };
    events.push((
        Some("content_block_delta"),
        json!({"type":"content_block_delta","index":0,"delta":delta}),
    ));
    events.push((
        Some("content_block_stop"),
        json!({"type":"content_block_stop","index":0}),
    ));
    events.push((
        Some("message_delta"),
        json!({"type":"message_delta","delta":{"stop_reason":stop,"stop_sequence":null},"usage":usage}),
    ));
    events.push((Some("message_stop"), json!({"type":"message_stop"})));
    Reply::events(&events)
}
