//! A tool server on 127.0.0.1:0 over a [`RecordingPlatform`], for tests and benchmarks of the
//! server, the `tools` CLI, and the crates built on them.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use entity::Snowflake;
use switchboard_config::Config;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::auth::CapabilityGrant;
use crate::platform::RecordingPlatform;
use crate::server::{Core, StartError};

pub mod load;

/// A config that matches [`RecordingPlatform::demo`]: #ops, #release-room and #secret are
/// allowlisted; the demo world's shared aliases ([`demo_world::alias_sections`]: stanley,
/// tomas, the sessions ops, release-room and incident-42, the oncall role); it ends in
/// `[toolserver]`, so text appended to it lands there. Format it (`{DEMO_CONFIG}`) or borrow
/// it as a `&str` (`&DEMO_CONFIG`).
pub static DEMO_CONFIG: DemoConfig = DemoConfig(());

/// The text of [`DEMO_CONFIG`], made from the demo world's ids on first use.
#[derive(Debug)]
pub struct DemoConfig(());

impl DemoConfig {
    /// The TOML text.
    pub fn as_str(&self) -> &'static str {
        static TEXT: OnceLock<String> = OnceLock::new();
        TEXT.get_or_init(|| {
            use demo_world::{OPS, RELEASE_ROOM, SECRET};
            format!(
                r#"
[discord]
allowed_channel_ids = ["{OPS}", "{RELEASE_ROOM}", "{SECRET}"]

{aliases}
[toolserver]
bind = "127.0.0.1:0"
"#,
                aliases = demo_world::alias_sections()
            )
        })
    }
}

impl std::ops::Deref for DemoConfig {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for DemoConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a test server could not start.
#[derive(Debug, thiserror::Error)]
pub enum TestServerError {
    /// The TOML did not parse or validate as a switchboard config; the report says where.
    #[error("test config is invalid:\n{0}")]
    Config(switchboard_config::Report),
    /// [`Core::new`] refused the config.
    #[error(transparent)]
    Start(#[from] StartError),
    /// No loopback port could be opened (or its address read).
    #[error("cannot bind 127.0.0.1:0: {0}")]
    Bind(std::io::Error),
}

/// A running tool server; stops when dropped.
pub struct TestServer {
    addr: SocketAddr,
    operator_token: String,
    core: Arc<Core>,
    console: Arc<crate::console::Console>,
    store: Arc<switchboard_store::MemoryBackend>,
    surface: Arc<RecordingPlatform>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Starts on the demo surface with `config_toml` (its `bind` is ignored: 127.0.0.1:0).
    pub async fn start(config_toml: &str) -> Result<TestServer, TestServerError> {
        Self::start_with(config_toml, Arc::new(RecordingPlatform::demo())).await
    }

    /// Starts on `surface` (for a surface a test prepared or will fail) with `config_toml`
    /// (its `bind` is ignored: 127.0.0.1:0).
    pub async fn start_with(
        config_toml: &str,
        surface: Arc<RecordingPlatform>,
    ) -> Result<TestServer, TestServerError> {
        Self::start_with_tokens(config_toml, surface, &[]).await
    }

    /// [`TestServer::start_with`], with values for the config's named tokens (`(name, value)`),
    /// keeping audit rows, overrides and approvals in a memory store ([`TestServer::store`]).
    pub async fn start_with_tokens(
        config_toml: &str,
        surface: Arc<RecordingPlatform>,
        tokens: &[(&str, &str)],
    ) -> Result<TestServer, TestServerError> {
        Self::start_full(config_toml, surface, tokens, None).await
    }

    /// [`TestServer::start_with`] keeping the audit log in `audit` (such as [`NoAudit`] for a
    /// benchmark of the pipeline alone, or a SQLite backend).
    pub async fn start_with_audit(
        config_toml: &str,
        surface: Arc<RecordingPlatform>,
        audit: Arc<dyn switchboard_store::AuditStore>,
    ) -> Result<TestServer, TestServerError> {
        Self::start_full(config_toml, surface, &[], Some(audit)).await
    }

    async fn start_full(
        config_toml: &str,
        surface: Arc<RecordingPlatform>,
        tokens: &[(&str, &str)],
        audit: Option<Arc<dyn switchboard_store::AuditStore>>,
    ) -> Result<TestServer, TestServerError> {
        let config = Config::parse(config_toml, "test.toml").map_err(TestServerError::Config)?;
        let operator_token = format!("test-operator-{}", std::process::id());
        let secrets = crate::Secrets {
            operator: Some(operator_token.clone()),
            tokens: tokens
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
        };
        // One memory store for everything: the platform's sessions and messages, and the
        // engine's audit rows, overrides and approvals.
        let store = Arc::clone(surface.backend());
        let mut core = Core::new(&config, surface.clone(), secrets, crate::registry())?
            .with_store(store.clone(), Vec::new());
        if let Some(audit) = audit {
            core = core.with_audit(audit);
        }
        let core = Arc::new(core);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(TestServerError::Bind)?;
        let addr = listener.local_addr().map_err(TestServerError::Bind)?;
        let (shutdown, stopped) = oneshot::channel::<()>();
        let front = crate::http::Front::new(Arc::clone(&core));
        let console = Arc::clone(front.console());
        let task = tokio::spawn(crate::http::serve_front(
            front,
            axum::Router::new(),
            listener,
            async {
                let _ = stopped.await;
            },
        ));
        Ok(TestServer {
            addr,
            operator_token,
            core,
            console,
            store,
            surface,
            shutdown: Some(shutdown),
            task: Some(task),
        })
    }

    /// The operator console's state (the HTTP front's, not the engine's).
    pub fn console(&self) -> &Arc<crate::console::Console> {
        &self.console
    }

    /// Where the server keeps its audit rows, overrides and approvals.
    pub fn store(&self) -> &Arc<switchboard_store::MemoryBackend> {
        &self.store
    }

    /// Every audit row kept, oldest first.
    pub fn audit_rows(&self) -> Vec<crate::governance::AuditRow> {
        use switchboard_store::AuditStore as _;
        futures_executor::block_on(self.store.audit_after(0, usize::MAX))
            .unwrap_or_default()
            .into_iter()
            .map(|entry| entry.row)
            .collect()
    }

    /// Every approval request kept (pending and settled), by id.
    pub fn approvals_kept(&self) -> Vec<switchboard_records::Approval> {
        use switchboard_store::ApprovalStore as _;
        futures_executor::block_on(self.store.approvals()).unwrap_or_default()
    }

    /// Every `/tools` override kept.
    pub fn scopes_kept(&self) -> Vec<switchboard_records::SessionScope> {
        use switchboard_store::ScopeStore as _;
        futures_executor::block_on(self.store.session_scopes()).unwrap_or_default()
    }

    /// The server's base URL, `http://127.0.0.1:<port>` (what `SWITCHBOARD_URL` would hold).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The operator token this server accepts (made for the test process).
    pub fn operator_token(&self) -> &str {
        &self.operator_token
    }

    /// The in-memory platform behind the server: seed it, or read what calls did to it.
    pub fn surface(&self) -> &Arc<RecordingPlatform> {
        &self.surface
    }

    /// The server's core, for calling it in-process (as the agent bridge does).
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// Mints a capability token for `session_id` with `scope` globs, valid for `ttl`.
    pub fn mint(&self, session_id: u64, request_id: &str, scope: &[&str], ttl: Duration) -> String {
        self.core
            .mint_capability(CapabilityGrant {
                session_id: Snowflake(session_id),
                request_id: request_id.to_owned(),
                scope: scope.iter().map(|s| (*s).to_owned()).collect(),
                ttl,
                client: None,
                cwd: None,
                trigger_message_id: None,
                requested_by: None,
                gate: None,
            })
            .expect("the OS provides random bytes")
    }

    /// Every message the surface was asked to post, in order.
    pub fn sends(&self) -> Vec<crate::surface::OutgoingMessage> {
        self.surface
            .calls()
            .into_iter()
            .filter_map(|call| match call {
                crate::platform::SurfaceCall::Send(message) => Some(message),
                _ => None,
            })
            .collect()
    }

    /// Stops the server and waits for it.
    pub async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

/// An audit log that keeps nothing (for a benchmark of the pipeline alone): rows are dropped,
/// reads answer that no log is kept.
#[derive(Debug, Default)]
pub struct NoAudit;

impl switchboard_store::AuditStore for NoAudit {
    fn record(
        &self,
        _: switchboard_records::AuditRow,
    ) -> Result<(), switchboard_store::StoreError> {
        Ok(())
    }

    fn audit_page(
        &self,
        _: switchboard_records::AuditFilter,
    ) -> switchboard_store::StoreFuture<'_, switchboard_records::AuditPage> {
        switchboard_store::aggregates::ready(Err(no_audit_log()))
    }

    fn prune_audit(&self, _: u64) -> switchboard_store::StoreFuture<'_, usize> {
        switchboard_store::aggregates::ready(Ok(0))
    }

    fn audit_after(
        &self,
        _: u64,
        _: usize,
    ) -> switchboard_store::StoreFuture<'_, Vec<switchboard_records::AuditEntry>> {
        switchboard_store::aggregates::ready(Ok(Vec::new()))
    }

    fn import_audit(
        &self,
        _: Vec<switchboard_records::AuditEntry>,
    ) -> Result<(), switchboard_store::StoreError> {
        Ok(())
    }
}

fn no_audit_log() -> switchboard_store::StoreError {
    switchboard_store::StoreError::new(
        switchboard_store::StoreErrorKind::Unavailable,
        "this server keeps no audit log",
    )
}
