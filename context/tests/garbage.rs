//! Garbage into every input of the crate: no panic, no hang, a bounded answer.

mod common;

use common::counter;
use proptest::prelude::*;
use serde_json::Value;
use switchboard_context::ids::{extract, Ident};
use switchboard_context::schema::{namespace, ToolSchema};
use switchboard_context::{count_chat, Estimate, TokenCounter};

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("type"),
            Just("properties"),
            Just("items"),
            Just("enum"),
            Just("anyOf"),
            Just("required"),
            Just("description"),
            Just("default")
        ]
        .prop_map(|k| Value::String(k.to_owned())),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("type".to_owned()),
                        Just("properties".to_owned()),
                        Just("items".to_owned()),
                        Just("enum".to_owned()),
                        Just("anyOf".to_owned()),
                        Just("oneOf".to_owned()),
                        Just("required".to_owned()),
                        Just("const".to_owned()),
                        "\\PC{0,6}"
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Any JSON as a tool's parameters renders, and a chat body of any JSON counts.
    #[test]
    fn any_json_renders_and_counts(parameters in json(), messages in prop::collection::vec(json(), 0..6), tools in prop::collection::vec(json(), 0..4)) {
        let schema = ToolSchema { name: "t".into(), description: "d".into(), parameters };
        let rendered = namespace(&[schema]);
        prop_assert!(rendered.starts_with("# Tools"));
        let n = count_chat(counter(), &messages, &tools);
        prop_assert!(n >= 3);
    }

    /// Identifiers are found in any text without a panic, and each one found is in the text.
    #[test]
    fn any_text_yields_only_identifiers_it_holds(text in "(\\PC|[<>@#/~.\n])*") {
        let lower = text.to_lowercase();
        for ident in extract(&text) {
            let found = match &ident {
                Ident::Id(id) => text.contains(&id.to_string()),
                Ident::User(name) | Ident::Channel(name) => lower.contains(name.as_str()),
                Ident::Path(path) => text.contains(path.as_str()),
            };
            prop_assert!(found, "{ident:?} not in {text:?}");
        }
    }

    /// Both counters take any text; the tokenizer's count is never more than the bytes.
    #[test]
    fn any_text_counts(text in "\\PC{0,2000}") {
        let n = counter().count(&text);
        prop_assert!(n <= text.len());
        let _ = Estimate.count(&text);
    }
}
