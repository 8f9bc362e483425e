//! Provider prompts: `[agent.prompts]` maps model-name globs to system prompts
//! (`"claude-*" = "…"`, `"gpt-*" = "…"`, `default = "…"`); `agent.model` picks the first glob
//! that matches, in the config's order, else `default`.
//!
//! Globs are `globset`'s (`*`, `?`, `[abc]`, `{a,b}`), matched against the whole model name
//! without regard to case (`GPT-4o` is a `gpt-*`), and `*` crosses `/`, so `"*claude*"`
//! matches `openrouter/anthropic/claude-sonnet-4`.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// The key that is not a glob but the fallback.
pub const DEFAULT_KEY: &str = "default";

/// A bad `[agent.prompts]` key.
#[derive(Debug, thiserror::Error)]
#[error("[agent.prompts] key {key:?} is not a valid glob: {source}; write a model-name pattern such as \"gpt-*\" or \"claude-*\"")]
pub struct PromptsError {
    /// The key.
    pub key: String,
    /// What globset said.
    pub source: globset::Error,
}

/// The provider prompts, ready to choose from.
#[derive(Debug, Clone)]
pub struct ProviderPrompts {
    prompts: Vec<String>,
    globs: GlobSet,
    default: Option<String>,
}

impl ProviderPrompts {
    /// From `[agent.prompts]` as `(key, prompt)` pairs in the config's order.
    pub fn new<K, P>(
        entries: impl IntoIterator<Item = (K, P)>,
    ) -> Result<ProviderPrompts, PromptsError>
    where
        K: Into<String>,
        P: Into<String>,
    {
        let mut builder = GlobSetBuilder::new();
        let mut prompts = Vec::new();
        let mut default = None;
        for (key, prompt) in entries {
            let key = key.into();
            if key == DEFAULT_KEY {
                default = Some(prompt.into());
                continue;
            }
            let glob = GlobBuilder::new(&key)
                .case_insensitive(true)
                .literal_separator(false)
                .build()
                .map_err(|source| PromptsError {
                    key: key.clone(),
                    source,
                })?;
            builder.add(glob);
            prompts.push(prompt.into());
        }
        let globs = builder.build().map_err(|source| PromptsError {
            key: String::new(),
            source,
        })?;
        Ok(ProviderPrompts {
            prompts,
            globs,
            default,
        })
    }

    /// The prompt for `model`: the first matching glob's, else `default`'s, else none.
    pub fn select(&self, model: &str) -> Option<&str> {
        self.globs
            .matches(model)
            .into_iter()
            .min()
            .map(|i| self.prompts[i].as_str())
            .or(self.default.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompts() -> ProviderPrompts {
        ProviderPrompts::new([
            ("claude-*", "for claude"),
            ("gpt-4o*", "for 4o"),
            ("gpt-*", "for gpt"),
            ("default", "for the rest"),
            ("*claude*", "for routed claude"),
        ])
        .expect("valid")
    }

    #[test]
    fn the_first_matching_glob_in_config_order_wins() {
        let p = prompts();
        assert_eq!(p.select("claude-sonnet-4"), Some("for claude"));
        assert_eq!(p.select("gpt-4o-mini"), Some("for 4o"));
        assert_eq!(p.select("gpt-4.1"), Some("for gpt"));
        assert_eq!(p.select("GPT-4.1"), Some("for gpt"));
        assert_eq!(
            p.select("openrouter/anthropic/claude-3"),
            Some("for routed claude")
        );
        assert_eq!(p.select("llama3"), Some("for the rest"));
        assert_eq!(p.select(""), Some("for the rest"));
    }

    #[test]
    fn no_default_and_no_match_is_none() {
        let p = ProviderPrompts::new([("gpt-*", "g")]).expect("valid");
        assert_eq!(p.select("claude"), None);
        let empty = ProviderPrompts::new(Vec::<(String, String)>::new()).expect("valid");
        assert_eq!(empty.select("gpt-4"), None);
    }

    #[test]
    fn a_bad_glob_is_refused_with_its_key() {
        let error = ProviderPrompts::new([("gpt-[4", "g")]).expect_err("unclosed class");
        assert_eq!(error.key, "gpt-[4");
        assert!(error.to_string().contains("gpt-[4"));
    }
}
