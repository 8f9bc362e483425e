//! Garbage bodies: whatever arrives, `parse_request` answers with a request or a typed
//! refusal whose answer is an OpenAI error with a 4xx status — never a panic.

use proptest::prelude::*;
use serde_json::{json, Value};
use switchboard_agents::{AgentGrants, AgentName};
use switchboard_chat_api::{parse_request, ChatCompletionChunk, Role, MAX_MESSAGES};

fn agents() -> Vec<AgentName> {
    vec![
        AgentName::parse("support").unwrap(),
        AgentName::parse("release").unwrap(),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|n| json!(n)),
        "\\PC{0,12}".prop_map(Value::String),
        Just(json!("user")),
        Just(json!("text")),
        Just(json!("switchboard:support")),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("role".to_owned()),
                    Just("content".to_owned()),
                    Just("type".to_owned()),
                    Just("text".to_owned()),
                    Just("model".to_owned()),
                    Just("messages".to_owned()),
                    Just("stream".to_owned()),
                    Just("tools".to_owned()),
                    "[a-z_]{1,8}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..200),
        json_value().prop_map(|v| v.to_string().into_bytes()),
        (
            json_value(),
            prop::collection::vec(json_value(), 0..4),
            json_value()
        )
            .prop_map(|(model, messages, extra)| {
                let mut body = json!({"model": model, "messages": messages});
                if let (Value::Object(body), Value::Object(extra)) = (&mut body, extra) {
                    body.extend(extra);
                }
                body.to_string().into_bytes()
            }),
        prop::collection::vec((json_value(), "\\PC{0,20}"), 1..5).prop_map(|turns| {
            let messages: Vec<Value> = turns
                .into_iter()
                .map(|(role, content)| json!({"role": role, "content": content}))
                .chain([json!({"role": "user", "content": "hi"})])
                .collect();
            json!({"model": "switchboard:support", "messages": messages})
                .to_string()
                .into_bytes()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_body_is_a_request_or_a_4xx_openai_error(body in body(), grant_all in any::<bool>()) {
        let configured = agents();
        let grants = if grant_all { AgentGrants::all() } else { AgentGrants::from_scope(["agent:support"], &configured) };
        match parse_request(&body, &configured, &grants) {
            Ok(request) => {
                prop_assert!(grants.allows(&request.agent));
                prop_assert!(!request.messages.is_empty() && request.messages.len() <= MAX_MESSAGES);
                let last = request.messages.last().unwrap();
                prop_assert_eq!(last.role, Role::User);
                prop_assert!(!last.content.trim().is_empty());
                prop_assert!(request.messages.iter().all(|m| m.role != Role::Tool));
            }
            Err(error) => {
                let api = error.to_api();
                prop_assert!((400..500).contains(&api.status), "{error:?} -> {}", api.status);
                prop_assert!(!api.body.error.message.is_empty());
                prop_assert_eq!(api.headers(), [("x-should-retry", "false")]);
            }
        }
    }

    #[test]
    fn any_json_is_a_chunk_or_refused(value in json_value()) {
        let _ = serde_json::from_value::<ChatCompletionChunk>(value);
    }
}
