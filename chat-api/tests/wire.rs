//! The wire types read recorded OpenAI answers (written from the API reference's own
//! examples) and write them back unchanged, and what switchboard writes reads as the official
//! client's decoder reads it.

use serde_json::{json, Value};
use switchboard_agents::{AgentGrants, AgentName};
use switchboard_chat_api::{
    parse_request, ChatCompletion, ChatCompletionChunk, ChunkStream, CompletionUsage, ErrorBody,
    FinishReason, ModelList, Role,
};

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The `data` of each event, split as the official Python client's `SSEDecoder` does: events
/// end at a blank line, `data:` lines are joined with newlines, one space after the colon is
/// dropped, comments (`:`) and other fields are skipped.
fn sse_data(stream: &str) -> Vec<String> {
    let mut events = Vec::new();
    let mut data: Vec<&str> = Vec::new();
    for line in stream.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            if !data.is_empty() {
                events.push(data.join("\n"));
                data.clear();
            }
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        if field == "data" {
            data.push(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    assert!(data.is_empty(), "the stream ended inside an event");
    events
}

fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(value: &Value) -> Value {
    let typed: T = serde_json::from_value(value.clone()).expect("reads");
    serde_json::to_value(&typed).expect("writes")
}

#[test]
fn a_recorded_chat_completion_reads_and_writes_back_unchanged() {
    let recorded: Value = serde_json::from_str(&fixture("chat_completion.json")).unwrap();
    assert_eq!(round_trip::<ChatCompletion>(&recorded), recorded);
    let completion: ChatCompletion = serde_json::from_value(recorded).unwrap();
    assert!(completion
        .text()
        .unwrap()
        .starts_with("The image shows a wooden boardwalk"));
    assert_eq!(completion.choices[0].finish_reason, FinishReason::Stop);
    let usage = completion.usage.unwrap();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens
        ),
        (1117, 46, 1163)
    );
}

#[test]
fn a_recorded_stream_reads_chunk_by_chunk_and_writes_back() {
    let events = sse_data(&fixture("chat_completion_stream.sse"));
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let mut text = String::new();
    let mut usage = None;
    for data in &events[..events.len() - 1] {
        let mut recorded: Value = serde_json::from_str(data).unwrap();
        let chunk: ChatCompletionChunk = serde_json::from_value(recorded.clone()).unwrap();
        // `"usage": null` and no `usage` read the same (Optional[...] = None in the client);
        // switchboard leaves it out.
        if recorded["usage"].is_null() {
            recorded.as_object_mut().unwrap().remove("usage");
        }
        assert_eq!(serde_json::to_value(&chunk).unwrap(), recorded);
        for choice in &chunk.choices {
            text.push_str(choice.delta.content.as_deref().unwrap_or_default());
        }
        if chunk.usage.is_some() {
            usage = chunk.usage;
        }
    }
    assert_eq!(text, "Hello!");
    assert_eq!(usage.map(|u| u.total_tokens), Some(11));
    // The runner's own reading of a model's answer finds the same usage.
    let last: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(
        CompletionUsage::of_answer(&last).map(|u| u.prompt_tokens),
        Some(9)
    );
}

#[test]
fn a_recorded_model_list_and_error_read_and_write_back_unchanged() {
    let models: Value = serde_json::from_str(&fixture("models.json")).unwrap();
    assert_eq!(round_trip::<ModelList>(&models), models);
    let error: Value = serde_json::from_str(&fixture("error.json")).unwrap();
    assert_eq!(round_trip::<ErrorBody>(&error), error);
}

#[test]
fn a_request_as_chat_uis_send_it_is_read() {
    let configured = vec![AgentName::parse("support").unwrap()];
    let request = parse_request(
        fixture("request.json").as_bytes(),
        &configured,
        &AgentGrants::from_scope(["agent:support"], &configured),
    )
    .unwrap();
    assert_eq!(request.messages[0].role, Role::Developer);
    assert_eq!(request.messages[1].content, "Hello!");
    assert!(request.stream && request.include_usage);
    assert_eq!(request.sampling.max_tokens, Some(1024));
}

#[test]
fn switchboards_answers_have_every_field_the_client_requires() {
    let completion = ChatCompletion::answer(
        "chatcmpl-run7",
        1_700_000_000,
        "switchboard:support",
        "Done.",
        FinishReason::Stop,
        Some(CompletionUsage::new(40, 2)),
    );
    let value = serde_json::to_value(&completion).unwrap();
    assert_eq!(
        value,
        json!({
            "id": "chatcmpl-run7", "object": "chat.completion", "created": 1_700_000_000,
            "model": "switchboard:support",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Done.", "refusal": null},
                         "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42}
        })
    );
    let agents = [AgentName::parse("support").unwrap()];
    assert_eq!(
        serde_json::to_value(ModelList::of_agents(&agents, 1_700_000_000)).unwrap(),
        json!({"object": "list", "data": [{"id": "switchboard:support", "object": "model", "created": 1_700_000_000, "owned_by": "switchboard"}]})
    );
    let mut stream = ChunkStream::new("chatcmpl-run7", 1, "switchboard:support", true);
    let mut sse = stream.text("Do");
    sse.push_str(switchboard_chat_api::SSE_KEEPALIVE);
    sse.push_str(&stream.text("ne."));
    sse.push_str(&stream.finish(FinishReason::Stop, Some(CompletionUsage::new(40, 2))));
    let events = sse_data(&sse);
    assert_eq!(events.len(), 6, "{events:?}");
    let text: String = events[..4]
        .iter()
        .map(|data| serde_json::from_str::<ChatCompletionChunk>(data).unwrap())
        .flat_map(|chunk| chunk.choices)
        .filter_map(|choice| choice.delta.content)
        .collect();
    assert_eq!(text, "Done.");
}

#[test]
fn answers_that_are_not_openais_shape_are_refused() {
    let mut wrong_object: Value = serde_json::from_str(&fixture("chat_completion.json")).unwrap();
    wrong_object["object"] = json!("chat.completion.chunk");
    assert!(serde_json::from_value::<ChatCompletion>(wrong_object).is_err());
    let mut no_choices: Value = serde_json::from_str(&fixture("chat_completion.json")).unwrap();
    no_choices.as_object_mut().unwrap().remove("choices");
    assert!(serde_json::from_value::<ChatCompletion>(no_choices).is_err());
    let mut bad_reason: Value = serde_json::from_str(&fixture("chat_completion.json")).unwrap();
    bad_reason["choices"][0]["finish_reason"] = json!("tired");
    assert!(serde_json::from_value::<ChatCompletion>(bad_reason).is_err());
}
