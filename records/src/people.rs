//! Users and roles: the names the entity mapper resolves `@name` with.

use entity::Snowflake;

/// A Discord user as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The user's id.
    pub id: Snowflake,
    /// The account's username.
    pub username: String,
    /// The global display name, when set.
    pub global_name: Option<String>,
    /// Whether it is a bot account.
    pub is_bot: bool,
}

impl User {
    /// The name to show: the global (display) name, else the username.
    pub fn display_name(&self) -> &str {
        self.global_name
            .as_deref()
            .filter(|name| !name.is_empty())
            .unwrap_or(&self.username)
    }

    /// Every non-empty name the user goes by (the username, then the display name).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.username.as_str())
            .chain(self.global_name.as_deref())
            .filter(|name| !name.is_empty())
    }
}

/// A guild role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    /// The role's id.
    pub id: Snowflake,
    /// Its name.
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_display_name_wins_unless_empty() {
        let mut user = User {
            id: Snowflake(1),
            username: "mira".into(),
            global_name: Some("Mira K".into()),
            is_bot: false,
        };
        assert_eq!(user.display_name(), "Mira K");
        assert_eq!(user.names().collect::<Vec<_>>(), ["mira", "Mira K"]);
        user.global_name = Some(String::new());
        assert_eq!(user.display_name(), "mira");
        assert_eq!(user.names().count(), 1);
    }
}
