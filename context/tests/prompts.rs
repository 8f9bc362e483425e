//! Provider prompts chosen by model name: the first glob in config order that matches, else
//! `default`, checked against a plain-string oracle for prefix, suffix, infix and exact keys.

use proptest::prelude::*;
use switchboard_context::prompts::ProviderPrompts;

#[derive(Debug, Clone)]
enum Key {
    Prefix(String),
    Suffix(String),
    Infix(String),
    Exact(String),
}

impl Key {
    fn glob(&self) -> String {
        match self {
            Key::Prefix(s) => format!("{s}*"),
            Key::Suffix(s) => format!("*{s}"),
            Key::Infix(s) => format!("*{s}*"),
            Key::Exact(s) => s.clone(),
        }
    }

    fn matches(&self, model: &str) -> bool {
        let model = model.to_lowercase();
        match self {
            Key::Prefix(s) => model.starts_with(&s.to_lowercase()),
            Key::Suffix(s) => model.ends_with(&s.to_lowercase()),
            Key::Infix(s) => model.contains(&s.to_lowercase()),
            Key::Exact(s) => model == s.to_lowercase(),
        }
    }
}

fn part() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("gpt".to_owned()),
        Just("claude".to_owned()),
        Just("4o".to_owned()),
        Just("mini".to_owned()),
        "[a-zA-Z0-9.-]{1,6}",
    ]
}

fn key() -> impl Strategy<Value = Key> {
    prop_oneof![
        part().prop_map(Key::Prefix),
        part().prop_map(Key::Suffix),
        part().prop_map(Key::Infix),
        part().prop_map(Key::Exact),
    ]
}

fn model() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![part(), Just("-".to_owned()), Just("/".to_owned())],
        0..5,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #[test]
    fn the_first_matching_glob_in_config_order_is_chosen(
        keys in prop::collection::vec(key(), 0..6),
        default in prop::option::of("[a-z]{1,5}"),
        models in prop::collection::vec(model(), 1..8),
    ) {
        let mut entries: Vec<(String, String)> = keys.iter().enumerate().map(|(i, k)| (k.glob(), format!("prompt {i}"))).collect();
        if let Some(default) = &default {
            entries.insert(entries.len() / 2, ("default".to_owned(), default.clone()));
        }
        let prompts = ProviderPrompts::new(entries).expect("these globs are valid");
        for model in &models {
            let expected = keys
                .iter()
                .position(|k| k.matches(model))
                .map(|i| format!("prompt {i}"))
                .or_else(|| default.clone());
            prop_assert_eq!(prompts.select(model).map(str::to_owned), expected, "{}", model);
        }
    }

    /// Any key either builds or is refused naming itself; selection never panics.
    #[test]
    fn any_key_builds_or_is_refused_with_its_name(key in "\\PC{0,12}", model in "\\PC{0,20}") {
        match ProviderPrompts::new([(key.clone(), "p".to_owned())]) {
            Ok(prompts) => { let _ = prompts.select(&model); }
            Err(error) => prop_assert_eq!(error.key, key),
        }
    }
}
