//! One model call's usage and what it cost.

use serde::{Deserialize, Serialize};
use switchboard_agents::Findings;
use toml::Spanned;

use crate::money::{RawUsd, MICROS_PER_USD};

/// Characters per token when a model does not report its usage: the usual rule of thumb for
/// English text with BPE tokenizers. An estimate, and marked so.
pub const CHARS_PER_TOKEN: u64 = 4;

/// Tokens one model call used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Tokens in the prompt (the model's `usage.prompt_tokens`).
    pub prompt_tokens: u64,
    /// Tokens in the completion (the model's `usage.completion_tokens`).
    pub completion_tokens: u64,
    /// Whether the counts are estimated from the text's length because the model reported
    /// none.
    pub estimated: bool,
}

impl Usage {
    /// The counts the model reported.
    pub fn reported(prompt_tokens: u64, completion_tokens: u64) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            estimated: false,
        }
    }

    /// An estimate from the characters sent and received (every message's text, tool
    /// definitions and results included), rounded up.
    pub fn estimate(prompt_chars: u64, completion_chars: u64) -> Usage {
        Usage {
            prompt_tokens: prompt_chars.div_ceil(CHARS_PER_TOKEN),
            completion_tokens: completion_chars.div_ceil(CHARS_PER_TOKEN),
            estimated: true,
        }
    }

    /// Prompt and completion tokens together.
    pub fn total(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }

    /// This and `other` together (a run's calls summed); estimated if either is.
    pub fn plus(self, other: Usage) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens.saturating_add(other.prompt_tokens),
            completion_tokens: self
                .completion_tokens
                .saturating_add(other.completion_tokens),
            estimated: self.estimated || other.estimated,
        }
    }

    /// What these tokens cost at `price`, in micro-dollars, rounded up (a call that cost
    /// anything costs at least one micro-dollar, so budgets never undercount).
    pub fn cost_micros(&self, price: Price) -> u64 {
        let millionths = (u128::from(self.prompt_tokens) * u128::from(price.in_micros_per_mtok))
            .saturating_add(
                u128::from(self.completion_tokens) * u128::from(price.out_micros_per_mtok),
            );
        u64::try_from(millionths.div_ceil(u128::from(MICROS_PER_USD))).unwrap_or(u64::MAX)
    }
}

/// An agent's prices: micro-dollars per million tokens, in and out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Price {
    /// `price_in_per_mtok`, in micro-dollars: what a million prompt tokens cost.
    pub in_micros_per_mtok: u64,
    /// `price_out_per_mtok`, in micro-dollars: what a million completion tokens cost.
    pub out_micros_per_mtok: u64,
}

/// Checks an agent's `price_in_per_mtok` and `price_out_per_mtok` (dollars per million
/// tokens; unset is free). `table` is the agent's key path, such as `agents.support` or
/// `agent`.
pub fn price(
    price_in: Option<&Spanned<RawUsd>>,
    price_out: Option<&Spanned<RawUsd>>,
    table: &str,
    findings: &mut Findings,
) -> Price {
    let mut read = |value: Option<&Spanned<RawUsd>>, key: &str| -> u64 {
        let Some(value) = value else { return 0 };
        match value.get_ref().micros() {
            Ok(micros) => micros,
            Err(error) => {
                findings.add(
                    Some(value.span()),
                    format!("{table}.{key}"),
                    error.to_string(),
                    format!("{} (dollars per million tokens)", error.help()),
                );
                0
            }
        }
    };
    Price {
        in_micros_per_mtok: read(price_in, "price_in_per_mtok"),
        out_micros_per_mtok: read(price_out, "price_out_per_mtok"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_is_exact_in_micro_dollars_and_rounds_up_a_fraction() {
        let price = Price {
            in_micros_per_mtok: 3_000_000,
            out_micros_per_mtok: 15_000_000,
        };
        // 1,000 in at $3/Mtok + 500 out at $15/Mtok = $0.003 + $0.0075.
        assert_eq!(Usage::reported(1_000, 500).cost_micros(price), 10_500);
        let cheap = Price {
            in_micros_per_mtok: 150_000,
            out_micros_per_mtok: 600_000,
        };
        // 7 tokens at $0.15/Mtok is 1.05 micro-dollars: 2.
        assert_eq!(Usage::reported(7, 0).cost_micros(cheap), 2);
        assert_eq!(Usage::reported(0, 0).cost_micros(cheap), 0);
        assert_eq!(Usage::reported(5, 5).cost_micros(Price::default()), 0);
    }

    #[test]
    fn cost_never_overflows() {
        let price = Price {
            in_micros_per_mtok: u64::MAX,
            out_micros_per_mtok: u64::MAX,
        };
        assert_eq!(
            Usage::reported(u64::MAX, u64::MAX).cost_micros(price),
            u64::MAX
        );
        assert_eq!(Usage::reported(u64::MAX, 1).total(), u64::MAX);
    }

    #[test]
    fn an_estimate_rounds_up_and_is_marked() {
        let estimate = Usage::estimate(10, 1);
        assert_eq!((estimate.prompt_tokens, estimate.completion_tokens), (3, 1));
        assert!(estimate.estimated);
        let run = Usage::reported(100, 20).plus(estimate);
        assert_eq!(run.total(), 124);
        assert!(run.estimated);
    }

    #[test]
    fn prices_are_read_from_the_agents_table_with_located_problems() {
        #[derive(serde::Deserialize)]
        struct Agent {
            price_in_per_mtok: Option<Spanned<RawUsd>>,
            price_out_per_mtok: Option<Spanned<RawUsd>>,
        }
        let text = "price_in_per_mtok = 0.15\nprice_out_per_mtok = -2\n";
        let agent: Agent = toml::from_str(text).unwrap();
        let mut findings = Findings::new();
        let price = price(
            agent.price_in_per_mtok.as_ref(),
            agent.price_out_per_mtok.as_ref(),
            "agents.support",
            &mut findings,
        );
        assert_eq!(price.in_micros_per_mtok, 150_000);
        let found = findings.into_vec();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].key_path, "agents.support.price_out_per_mtok");
        assert_eq!(&text[found[0].span.clone().unwrap()], "-2");
    }
}
