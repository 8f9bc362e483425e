//! Live config reload: the file is read again on `POST /v1/admin/reload` (`switchboard
//! reload`), on SIGHUP, and when it changes on disk. It is validated as `check-config` validates
//! it; with any problem, each is logged as `check-config` prints it and the config in force
//! stays. Otherwise the parts that read the config swap to the new one (see
//! [`switchboard_config::plan_reload`] for what needs a restart instead).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent::Bridge;
use switchboard_config::{plan_reload, Config, ConfigError, Known};
use switchboard_engine::live::{
    ReloadFuture, ReloadRefused, ReloadTrigger, Reloaded, Reloader, SharedAliases,
};
use switchboard_engine::Core;
use switchboard_records::SessionKind;
use switchboard_store::Store;

/// How long reading and validating the file may take before the reload is given up (the file
/// could sit on a hung network mount).
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Changes to the file this close together are one reload: an editor's save is often several
/// events (truncate, write, rename), and half-written files should not be read.
pub const DEBOUNCE: Duration = Duration::from_millis(250);
/// However long a burst of changes goes on, a reload happens after this long.
const DEBOUNCE_AT_MOST: Duration = Duration::from_secs(2);

/// Reads the config file again and applies it to every part that reads the config.
pub(crate) struct ConfigReloader {
    path: PathBuf,
    core: Arc<Core>,
    store: Store,
    aliases: SharedAliases,
    bridge: Option<Bridge>,
    /// One reload at a time: two triggers at once apply in turn, never interleaved.
    serial: tokio::sync::Mutex<()>,
}

impl ConfigReloader {
    pub(crate) fn new(
        path: PathBuf,
        core: Arc<Core>,
        store: Store,
        aliases: SharedAliases,
        bridge: Option<Bridge>,
    ) -> Self {
        ConfigReloader {
            path,
            core,
            store,
            aliases,
            bridge,
            serial: tokio::sync::Mutex::new(()),
        }
    }

    /// What validation checks names against: this build's callables, and the categories the
    /// store knows (the same checks `check-config` makes with an earlier run's store).
    fn known(&self) -> Known {
        Known {
            callables: Some(switchboard_callables::callable_ids()),
            categories: self
                .store
                .sessions()
                .into_iter()
                .filter(|s| s.kind == SessionKind::Category)
                .map(|s| (s.id, format!("#{}", s.name)))
                .collect(),
        }
    }

    /// Reads the file once and validates it: the config, or every problem as `check-config`
    /// prints it; `None` when `skip_blank` and it holds nothing but white space. (Read as the
    /// config is read: whatever was swapped in at the path, the read never blocks.) One read
    /// for both answers: a file replaced between a look at it and its load must not have the
    /// second file loaded on the first one's say-so.
    async fn read(&self, skip_blank: bool) -> Result<Option<Config>, Vec<String>> {
        let path = self.path.clone();
        let known = self.known();
        let read = tokio::task::spawn_blocking(move || {
            let source = Config::read_source(&path)?;
            if skip_blank && source.bytes().all(|b| b.is_ascii_whitespace()) {
                return Ok(None);
            }
            Config::parse_with(&source, &path.display().to_string(), &known)
                .map(Some)
                .map_err(ConfigError::Invalid)
        });
        match tokio::time::timeout(READ_TIMEOUT, read).await {
            Ok(Ok(Ok(config))) => Ok(config),
            Ok(Ok(Err(ConfigError::Invalid(report)))) => Err(report.problem_texts()),
            Ok(Ok(Err(error))) => Err(vec![format!("error: {error}")]),
            Ok(Err(join)) => Err(vec![format!(
                "error: reading {} failed: {join}",
                self.path.display()
            )]),
            Err(_) => Err(vec![format!(
                "error: reading {} took longer than {} s; is it on a mount that hangs?",
                self.path.display(),
                READ_TIMEOUT.as_secs()
            )]),
        }
    }

    /// Validates the file and, when it has no problem, puts it in force.
    pub(crate) async fn reload(&self, trigger: ReloadTrigger) -> Result<Reloaded, ReloadRefused> {
        let _one_at_a_time = self.serial.lock().await;
        let file = self.path.display().to_string();
        // An empty file is a valid config that allows nothing (and would drop what the store
        // keeps): from the watcher it is far more likely an editor between truncating and
        // writing. Only an explicit reload applies it.
        let new = match self.read(trigger == ReloadTrigger::FileChanged).await {
            Ok(Some(config)) => config,
            Ok(None) => {
                tracing::info!(
                    "the config file is empty; not reloading it (an editor mid-save?). SIGHUP or `switchboard reload` applies it as it is"
                );
                return Ok(Reloaded {
                    file,
                    summary: "no changes (empty file skipped)".to_owned(),
                    changes: Vec::new(),
                    restart_needed: Vec::new(),
                });
            }
            Err(problems) => {
                tracing::warn!(
                    trigger = trigger.as_str(),
                    "config reload refused: {file} has {} problem(s); the config in force did not change",
                    problems.len()
                );
                for problem in &problems {
                    tracing::warn!(trigger = trigger.as_str(), "{problem}");
                }
                return Err(ReloadRefused { file, problems });
            }
        };
        let running = Arc::clone(self.core.settings().config());
        let plan = plan_reload(&running, new);
        if !plan.restart_needed.is_empty() {
            tracing::warn!(
                trigger = trigger.as_str(),
                "config reload: changes to {} take effect only after a restart; until then they keep their running values",
                plan.restart_needed.join(", ")
            );
        }
        if plan.changes_anything() {
            let effective = plan.effective.clone();
            self.aliases.store(Arc::new(effective.aliases.clone()));
            if let (Some(bridge), Some(agent)) = (&self.bridge, &effective.agent) {
                bridge.set_config(agent.clone());
            }
            let allowlist_changed = running.discord.allowed_guild_ids
                != effective.discord.allowed_guild_ids
                || running.discord.allowed_channel_ids != effective.discord.allowed_channel_ids
                || running.discord.allowed_category_ids != effective.discord.allowed_category_ids
                || running.discord.allow_dms != effective.discord.allow_dms;
            self.core.apply(effective);
            if allowlist_changed {
                // What the store holds of channels the new allowlist refuses must go, as at
                // start-up.
                let store = self.store.clone();
                let core = Arc::clone(&self.core);
                let _ = tokio::task::spawn_blocking(move || {
                    bot::service::forget_refused_channels(&store, core.allowlist());
                })
                .await;
            }
        }
        let summary = plan.summary();
        tracing::info!(
            trigger = trigger.as_str(),
            "config reloaded from {file}: {summary}"
        );
        Ok(Reloaded {
            file,
            summary,
            changes: plan.changes,
            restart_needed: plan
                .restart_needed
                .iter()
                .map(|name| (*name).to_owned())
                .collect(),
        })
    }
}

impl Reloader for ConfigReloader {
    fn reload(&self, trigger: ReloadTrigger) -> ReloadFuture<'_> {
        Box::pin(ConfigReloader::reload(self, trigger))
    }
}

/// Reloads on SIGHUP until the task is aborted. Listening starts before this returns, so a
/// SIGHUP right after start-up never falls to the default action (ending the process).
#[cfg(unix)]
pub(crate) fn on_sighup(reloader: Arc<ConfigReloader>) -> Option<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(hangups) => hangups,
        Err(error) => {
            tracing::warn!(
                "cannot listen for SIGHUP ({error}); reload with `switchboard reload` instead"
            );
            return None;
        }
    };
    Some(tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let _ = reloader.reload(ReloadTrigger::Signal).await;
        }
    }))
}

/// Whether a file-system event is about the config file. The directory is watched (editors
/// replace a file by renaming another over it, which a watch on the file itself would miss), so
/// every event is filtered by name.
fn concerns(event: &notify::Event, name: &std::ffi::OsStr) -> bool {
    !matches!(event.kind, notify::EventKind::Access(_))
        && event
            .paths
            .iter()
            .any(|path| path.file_name() == Some(name))
}

/// Watches the config file's directory and reloads, debounced, when the file changes; the
/// watcher lives as long as the task. `None` (with a warning) when the platform refuses a watch:
/// SIGHUP and `switchboard reload` still work.
pub(crate) fn on_file_change(reloader: Arc<ConfigReloader>) -> Option<tokio::task::JoinHandle<()>> {
    use notify::Watcher;
    let path = reloader.path.clone();
    let Some(name) = path.file_name().map(ToOwned::to_owned) else {
        tracing::warn!(path = %path.display(), "the config path names no file; not watching it");
        return None;
    };
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    // One pending signal is enough: any number of events while one waits is the same reload.
    let (changed, mut changes) = tokio::sync::mpsc::channel::<()>(1);
    let watcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
            Ok(event) if concerns(&event, &name) => {
                let _ = changed.try_send(());
            }
            Ok(_) => {}
            Err(error) => tracing::debug!("config watch: {error}"),
        });
    let mut watcher = match watcher {
        Ok(watcher) => watcher,
        Err(error) => {
            tracing::warn!("cannot watch the config file ({error}); reload with SIGHUP or `switchboard reload`");
            return None;
        }
    };
    if let Err(error) = watcher.watch(&directory, notify::RecursiveMode::NonRecursive) {
        tracing::warn!(
            directory = %directory.display(),
            "cannot watch the config file's directory ({error}); reload with SIGHUP or `switchboard reload`"
        );
        return None;
    }
    tracing::debug!(path = %path.display(), "watching the config file for changes");
    Some(tokio::spawn(async move {
        let _watcher = watcher;
        while changes.recv().await.is_some() {
            settle(&mut changes).await;
            let _ = reloader.reload(ReloadTrigger::FileChanged).await;
        }
    }))
}

/// Waits until no change came for [`DEBOUNCE`], or [`DEBOUNCE_AT_MOST`] passed.
async fn settle(changes: &mut tokio::sync::mpsc::Receiver<()>) {
    settle_within(changes, DEBOUNCE, DEBOUNCE_AT_MOST).await;
}

/// Waits until no change came for `quiet`, or `at_most` passed.
async fn settle_within(
    changes: &mut tokio::sync::mpsc::Receiver<()>,
    quiet: Duration,
    at_most: Duration,
) {
    let give_up = tokio::time::Instant::now() + at_most;
    loop {
        let quiet_until = (tokio::time::Instant::now() + quiet).min(give_up);
        match tokio::time::timeout_at(quiet_until, changes.recv()).await {
            Ok(Some(())) if tokio::time::Instant::now() < give_up => {}
            _ => return,
        }
    }
}

/// The path as the reload logs and answers name it: absolute when it can be made so.
pub(crate) fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_events_naming_the_file_count() {
        let name = std::ffi::OsStr::new("switchboard.toml");
        let event = |kind, path: &str| notify::Event::new(kind).add_path(PathBuf::from(path));
        let modify = notify::EventKind::Modify(notify::event::ModifyKind::Any);
        assert!(concerns(&event(modify, "/etc/sb/switchboard.toml"), name));
        assert!(!concerns(
            &event(modify, "/etc/sb/.switchboard.toml.swp"),
            name
        ));
        let read = notify::EventKind::Access(notify::event::AccessKind::Any);
        assert!(!concerns(&event(read, "/etc/sb/switchboard.toml"), name));
    }

    #[tokio::test]
    async fn a_burst_of_changes_settles_within_the_bound() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(1);
        let feeder = tokio::spawn(async move {
            loop {
                let _ = tx.try_send(());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let started = tokio::time::Instant::now();
        // Changes every 5 ms never leave 50 ms quiet: only the bound ends the wait.
        settle_within(
            &mut rx,
            Duration::from_millis(50),
            Duration::from_millis(300),
        )
        .await;
        assert!(started.elapsed() >= Duration::from_millis(300));
        feeder.abort();
        // Quiet: it returns after the quiet spell.
        let (_tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        settle_within(&mut rx, Duration::from_millis(20), Duration::from_secs(60)).await;
    }
}
