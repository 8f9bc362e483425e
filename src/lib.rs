//! switchboard, wired together: the composition root the `switchboard` binary runs.
//!
//! [`build`] makes every part from a validated config — the store, the Discord REST client
//! (checking the token), the [`Surface`](switchboard_engine::Surface), the tool server's
//! [`Core`](switchboard_engine::Core), the tool server's listener, the agent bridge and the workflows,
//! and the gateway client — each failure naming the part that failed. [`serve`] then runs them
//! until shutdown, and takes them down in order (no new calls, flush the store, close the
//! gateway).
//!
//! ```no_run
//! # async fn demo(config: switchboard_config::Config) -> Result<(), switchboard::ServiceError> {
//! let service = switchboard::build(config, "bot-token".into(), Some("operator-token".to_owned()).into()).await?;
//! switchboard::serve(service, async { let _ = tokio::signal::ctrl_c().await; }, |addr| {
//!     println!("tool server on http://{addr}");
//! })
//! .await
//! # }
//! ```

#![warn(missing_docs)]

mod cluster;
mod reload;
mod scheduler;
mod service;
pub mod store;

pub use service::{build, probe_sandbox, serve, BuildError, Service, ServiceError, SANDBOX_EXEC};
