//! How deep a chain of handoffs may go (`agents.max_handoff_depth`).
//!
//! A run started by a person (a message, a schedule, the chat API) is at depth 0; a run it
//! starts with `agent.handoff` is at depth 1, and so on. A handoff that would start a run
//! deeper than the maximum is refused before anything starts.

/// A handoff refused because the chain is already as deep as allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a run at handoff depth {depth} cannot hand off: agents.max_handoff_depth is {max}")]
pub struct HandoffTooDeep {
    /// The depth of the run that asked.
    pub depth: u32,
    /// `agents.max_handoff_depth`.
    pub max: u32,
}

impl HandoffTooDeep {
    /// The machine-readable code.
    pub fn code(&self) -> &'static str {
        "handoff_too_deep"
    }

    /// What to do about it.
    pub fn help(&self) -> &'static str {
        if self.max == 0 {
            "handoffs are off (agents.max_handoff_depth = 0); do the work in this run"
        } else {
            "do the work in this run, or have the operator raise agents.max_handoff_depth"
        }
    }
}

/// The depth of the run a handoff from a run at `depth` would start, or the refusal.
pub fn handoff_depth(depth: u32, max: u32) -> Result<u32, HandoffTooDeep> {
    match depth.checked_add(1) {
        Some(next) if next <= max => Ok(next),
        _ => Err(HandoffTooDeep { depth, max }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_the_default_depth_two_hops_go_and_the_third_is_refused() {
        let max = crate::DEFAULT_MAX_HANDOFF_DEPTH;
        assert_eq!(handoff_depth(0, max), Ok(1));
        assert_eq!(handoff_depth(1, max), Ok(2));
        let refused = handoff_depth(2, max).unwrap_err();
        assert_eq!(refused, HandoffTooDeep { depth: 2, max: 2 });
        assert_eq!(refused.code(), "handoff_too_deep");
        assert!(refused.to_string().contains("max_handoff_depth is 2"));
    }

    #[test]
    fn depth_zero_turns_handoff_off_and_no_depth_overflows() {
        assert!(handoff_depth(0, 0)
            .unwrap_err()
            .help()
            .contains("handoffs are off"));
        assert!(handoff_depth(u32::MAX, u32::MAX).is_err());
    }
}
