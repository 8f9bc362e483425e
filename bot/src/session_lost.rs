//! The one sign that a gateway session is being given up before anything else says so.
//!
//! After an op 9 INVALID_SESSION that cannot be resumed (or any other reason to identify
//! afresh), serenity's shard runner asks its manager to restart the shard and waits for that
//! — about five seconds, its shutdown timeout — while the old session's stage still reads
//! `Connected`: no event and no stage change reaches an event handler until the new
//! connection starts. `/health` would say `ready` all that time. serenity does log it: the
//! shard reports `Received session invalidation`, its manager `Restarting shard N`. This
//! module's tracing layer ([`layer`]) reads exactly those two lines (target
//! `serenity::gateway`, at INFO, whatever `RUST_LOG` says) and tells every live
//! [`StageWatcher`](crate::gateway::StageWatcher), which says `resuming` (or `connecting`)
//! until the new session is ready.
//!
//! The binary installs the layer beside its log output; `tests/backfill.rs` pins it against
//! the fake's op 9, so a serenity upgrade that rewords the lines fails a test, not silently.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::filter::{FilterFn, Filtered};
use tracing_subscriber::layer::{Context, Layer};

/// What a watcher does when serenity gives a session up.
pub(crate) trait SessionLost: Send + Sync {
    /// The session the watcher reported as live is being given up.
    fn session_lost(self: Arc<Self>);
}

/// Watchers to tell, held weakly (a watcher that is gone is forgotten).
#[derive(Default)]
pub(crate) struct Watchers(Mutex<Vec<Weak<dyn SessionLost>>>);

impl Watchers {
    fn add(&self, watcher: Weak<dyn SessionLost>) {
        let mut watchers = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        watchers.retain(|w| w.strong_count() > 0);
        watchers.push(watcher);
    }

    fn notify(&self) {
        let live: Vec<_> = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for watcher in live {
            watcher.session_lost();
        }
    }
}

/// The process's watchers: every [`StageWatcher`](crate::gateway::StageWatcher) registers
/// here, and [`layer`] tells them.
static WATCHERS: std::sync::LazyLock<Arc<Watchers>> = std::sync::LazyLock::new(Arc::default);

/// Tells `watcher` whenever serenity gives a session up (for as long as it lives).
pub(crate) fn register(watcher: Weak<dyn SessionLost>) {
    WATCHERS.add(watcher);
}

/// Whether a serenity log message means its session is being given up.
pub fn gives_up_the_session(message: &str) -> bool {
    message.contains("Received session invalidation") || message.starts_with("Restarting shard")
}

/// Finds the `message` field of an event.
#[derive(Default)]
struct Message(String);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            value.clone_into(&mut self.0);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

/// Reads serenity's gateway log for sessions given up.
pub struct SessionLostLayer {
    watchers: Arc<Watchers>,
}

impl<S: Subscriber> Layer<S> for SessionLostLayer {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut message = Message::default();
        event.record(&mut message);
        if gives_up_the_session(&message.0) {
            self.watchers.notify();
        }
        if crate::shards::is_sharding_required(&message.0) {
            crate::shards::sharding_required_seen(&message.0);
        }
    }
}

/// The layer's filter: serenity's gateway log lines at INFO and above, and never its spans
/// (the binary keeps those off: one records every gateway event with `Debug`).
type GatewayLines = FilterFn<fn(&Metadata<'_>) -> bool>;

fn gateway_lines(meta: &Metadata<'_>) -> bool {
    meta.is_event()
        && *meta.level() <= Level::INFO
        && meta.target().starts_with("serenity::gateway")
}

/// [`layer`] telling `watchers`.
fn layer_for<S>(watchers: Arc<Watchers>) -> Filtered<SessionLostLayer, GatewayLines, S>
where
    S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let filter: GatewayLines = FilterFn::new(gateway_lines);
    SessionLostLayer { watchers }.with_filter(filter)
}

/// The layer, filtered to serenity's gateway lines at INFO and above (no spans): install it
/// beside the log output, before the gateway starts.
pub fn layer<S>() -> Filtered<SessionLostLayer, GatewayLines, S>
where
    S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    layer_for(Arc::clone(&WATCHERS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tracing_subscriber::prelude::*;

    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl SessionLost for Counting {
        fn session_lost(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn serenitys_lines_for_a_session_given_up_reach_the_watchers() {
        let counting = Arc::new(Counting::default());
        let watcher: Arc<dyn SessionLost> = counting.clone();
        // Its own watchers: the process's belong to the gateway tests running beside this one.
        let watchers = Arc::new(Watchers::default());
        watchers.add(Arc::downgrade(&watcher));
        let subscriber = tracing_subscriber::registry().with(layer_for(Arc::clone(&watchers)));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(target: "serenity::gateway::shard", "[{:?}] Received session invalidation", 0);
            tracing::info!(target: "serenity::gateway::bridge::shard_manager", "Restarting shard {}", 0);
            // Other lines, and the same words from elsewhere, are not signals.
            tracing::info!(target: "serenity::gateway::shard", "[0] Received a Hello");
            tracing::info!(target: "switchboard", "Restarting shard 0");
            tracing::debug!(target: "serenity::gateway::bridge::shard_manager", "Restarting shard 0");
            // serenity's spans stay off: this layer must not turn them on.
            let span = tracing::info_span!(target: "serenity::gateway::shard", "handle_event");
            assert!(span.is_disabled());
        });
        assert_eq!(counting.0.load(Ordering::SeqCst), 2);
        drop(watcher);
        assert!(gives_up_the_session("Restarting shard 3"));
        assert!(!gives_up_the_session(
            "Telling shard queuer to start shard 0"
        ));
    }
}
