//! `model = "switchboard:<agent>"`: which agent a request runs.

use switchboard_agents::{nearest_agent, AgentGrants, AgentName};

use crate::error::ApiError;

/// The prefix of every model id.
pub const MODEL_PREFIX: &str = "switchboard:";

/// The model id of an agent: `switchboard:<agent>`.
pub fn model_id(agent: &AgentName) -> String {
    format!("{MODEL_PREFIX}{agent}")
}

/// Why `model` names no agent the caller may use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// Not `switchboard:<name>` with a valid name, or a name no agent has.
    #[error("the model '{given}' does not exist{}", match .suggestion { Some(near) => format!("; did you mean '{near}'?"), None => String::new() })]
    Unknown {
        /// `model` as given (cut to 100 characters).
        given: String,
        /// The model id it most resembles among those the caller may use.
        suggestion: Option<String>,
        /// The model ids the caller may use.
        available: Vec<String>,
    },
    /// A configured agent outside the token's scope.
    #[error("this token may not use the model '{given}': its scope has no agent:{agent} entry")]
    NotGranted {
        /// `model` as given.
        given: String,
        /// The agent.
        agent: AgentName,
    },
}

impl ModelError {
    /// The answer: 404 `model_not_found` (listing the models the caller may use), or 403
    /// `out_of_scope`.
    pub fn to_api(&self) -> ApiError {
        match self {
            ModelError::Unknown { available, .. } => {
                let listed = if available.is_empty() {
                    "this token may use no agent (its scope needs agent:NAME entries)".to_owned()
                } else {
                    format!("this token may use: {}", available.join(", "))
                };
                ApiError::model_not_found(format!("{self}; {listed} (GET /v1/models lists them)"))
            }
            ModelError::NotGranted { .. } => ApiError::permission(
                "out_of_scope",
                format!("{self}; ask the operator to add it to the token's scope"),
            ),
        }
    }
}

/// The agent `model` names, if the caller may use it.
pub fn parse_model(
    model: &str,
    configured: &[AgentName],
    grants: &AgentGrants,
) -> Result<AgentName, ModelError> {
    let given: String = model.chars().take(100).collect();
    let visible: Vec<AgentName> = grants.visible(configured).into_iter().cloned().collect();
    let name = model.strip_prefix(MODEL_PREFIX);
    let known = name
        .and_then(|name| AgentName::parse(name).ok())
        .and_then(|agent| configured.iter().find(|a| **a == agent).cloned());
    match known {
        Some(agent) if grants.allows(&agent) => Ok(agent),
        Some(agent) => Err(ModelError::NotGranted { given, agent }),
        None => {
            let wanted = name.unwrap_or(model);
            // Suggest only among the agents this caller may use: a did-you-mean must not tell
            // a token about agents it cannot see.
            let suggestion = visible
                .iter()
                .find(|a| a.as_str().eq_ignore_ascii_case(wanted))
                .cloned()
                .or_else(|| {
                    (wanted.len() <= 64)
                        .then(|| nearest_agent(wanted, &visible))
                        .flatten()
                })
                .map(|agent| model_id(&agent));
            Err(ModelError::Unknown {
                given,
                suggestion,
                available: visible.iter().map(model_id).collect(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agents() -> Vec<AgentName> {
        ["support", "release", "secret-ops"]
            .iter()
            .map(|n| AgentName::parse(n).unwrap())
            .collect()
    }

    #[test]
    fn a_granted_agent_is_its_model() {
        let configured = agents();
        let grants = AgentGrants::from_scope(["agent:support", "agent:release"], &configured);
        assert_eq!(
            parse_model("switchboard:release", &configured, &grants),
            Ok(configured[1].clone())
        );
        assert_eq!(model_id(&configured[0]), "switchboard:support");
    }

    #[test]
    fn a_bare_name_or_a_typo_suggests_the_model_id() {
        let configured = agents();
        let grants = AgentGrants::from_scope(["agent:support"], &configured);
        let bare = parse_model("support", &configured, &grants).unwrap_err();
        assert!(
            matches!(&bare, ModelError::Unknown { suggestion: Some(s), .. } if s == "switchboard:support")
        );
        let typo = parse_model("switchboard:suport", &configured, &grants).unwrap_err();
        let api = typo.to_api();
        assert_eq!(
            (api.status, api.body.error.code.as_deref()),
            (404, Some("model_not_found"))
        );
        assert_eq!(
            api.body.error.message,
            "the model 'switchboard:suport' does not exist; did you mean 'switchboard:support'?; this token may use: switchboard:support (GET /v1/models lists them)"
        );
    }

    #[test]
    fn an_agent_outside_the_scope_is_refused_and_never_suggested() {
        let configured = agents();
        let grants = AgentGrants::from_scope(["agent:support"], &configured);
        let error = parse_model("switchboard:secret-ops", &configured, &grants).unwrap_err();
        assert_eq!(error.to_api().status, 403);
        let near_secret = parse_model("switchboard:secret-opz", &configured, &grants).unwrap_err();
        assert!(matches!(
            near_secret,
            ModelError::Unknown {
                suggestion: None,
                ..
            }
        ));
        assert!(!near_secret
            .to_api()
            .body
            .error
            .message
            .contains("secret-ops"));
        let none = parse_model("gpt-4o", &configured, &AgentGrants::default()).unwrap_err();
        assert!(none
            .to_api()
            .body
            .error
            .message
            .contains("may use no agent"));
    }
}
