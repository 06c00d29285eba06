//! The Gemini API (`POST /v1beta/models/M:generateContent`, and
//! `:streamGenerateContent?alt=sse`), as Gemini CLI calls it through
//! `GOOGLE_GEMINI_BASE_URL`. Its prompt count holds the cached tokens; it
//! has no cache writes.

use serde_json::{json, Value};

use super::{Reply, Request, Step, Turn};

pub fn tool_results(body: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for c in body["contents"].as_array().into_iter().flatten() {
        for p in c["parts"].as_array().into_iter().flatten() {
            if p.get("functionResponse").is_some() {
                out.push(p.clone());
            }
        }
    }
    out
}

pub fn tool_names(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for t in body["tools"].as_array().into_iter().flatten() {
        for d in t["functionDeclarations"].as_array().into_iter().flatten() {
            if let Some(name) = d["name"].as_str() {
                out.push(name.to_string());
            }
        }
    }
    out
}

pub fn reply(_req: &Request, turn: &Turn) -> Reply {
    let part = match turn.step {
        Some(Step::Shell { command, .. }) => {
            json!({"functionCall":{"name":"run_shell_command","args":{"command":command}}})
        }
        Some(Step::Answer { text, .. }) => json!({ "text": text }),
        // A side call (the model router asks which model to use) wants JSON.
        None => json!({"text":"{\"reasoning\":\"scripted\",\"model_choice\":\"flash\"}"}),
    };
    let t = turn.step.map(Step::tokens).unwrap_or_default();
    let chunk = json!({
        "candidates":[{"content":{"role":"model","parts":[part]},"finishReason":"STOP","index":0}],
        "usageMetadata":{
            "promptTokenCount": t.input + t.cache_read,
            "candidatesTokenCount": t.output,
            "cachedContentTokenCount": t.cache_read,
            "totalTokenCount": t.input + t.cache_read + t.output,
        },
        "modelVersion": turn.model,
    });
    if turn.stream {
        Reply::events(&[(None, chunk)])
    } else {
        Reply::json(&chunk)
    }
}
