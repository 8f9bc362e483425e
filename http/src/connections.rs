//! The HTTP/1.1 serve loop under the router: a cap on open connections, timeouts for clients
//! that are slow or silent, back-off when `accept` fails, and a bounded graceful shutdown.
//!
//! Where each bound comes from:
//!
//! * **Request head**: hyper's `header_read_timeout` (with a [`TokioTimer`]). In hyper 1.12
//!   (the least version Cargo.toml accepts) the timer starts whenever the connection waits for
//!   a request head (`Conn::poll_read_head`), not at its first byte, so it also bounds how long
//!   a fresh connection may stay silent and how long a keep-alive connection may wait for its
//!   next request: an idle keep-alive connection is closed after this timeout.
//! * **Request body**: [`DeadlineBody`]: the whole body must arrive within
//!   `body_read_timeout` of the head (a fixed deadline, not a per-chunk one, so a client
//!   trickling a byte at a time is cut off too); the handler answers `body_timeout` (408).
//! * **Idle**: a connection on which no byte moves for `idle_timeout` while no handler runs on
//!   it is closed. That bounds what hyper does not: a client that stops reading its answer.
//! * **Open connections**: a semaphore slot per connection. At the cap, the connection that
//!   has waited longest for a request head (one that never finished sending it, or an idle
//!   keep-alive one) is closed to make room, so a slowloris client holding every slot with
//!   half-sent heads cannot keep out one that sends its request promptly. When every slot runs
//!   a request (a call, an event stream), new clients wait in the kernel's accept queue until
//!   one ends (they are not refused). The cap never exceeds what the process's open-file limit
//!   leaves after a reserve.
//!
//! HTTP/2 is not served (hyper's HTTP/1 builder only, as `axum::serve` with axum's default
//! features did): the `tools` CLI and every client speak HTTP/1.1.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::response::Response;
use axum::Router;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use switchboard_config::ToolserverConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// How long `accept` rests after a failure (out of descriptors, out of memory) before trying
/// again; the queued connection stays in the kernel meanwhile.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// How long in-flight requests get to finish once shutdown starts; then connections are closed.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// While draining, a connection with no handler running that moves no bytes for this long is
/// closed (such as one that never finished a request head).
const DRAIN_IDLE: Duration = Duration::from_millis(250);
/// Descriptors left for everything but connections: the store, Discord's HTTPS and gateway,
/// agent processes' pipes, log files.
const DESCRIPTOR_RESERVE: u64 = 128;
/// At the cap with nothing to close (every slot runs a request), how often the accept loop
/// looks again for a connection that went back to waiting for a head.
const EVICT_RETRY: Duration = Duration::from_millis(100);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The connection limits from `[toolserver]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_read_timeout: Duration,
}

impl ConnectionLimits {
    pub fn from_config(config: &ToolserverConfig) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: config.max_connections,
            header_read_timeout: config.header_read_timeout,
            idle_timeout: config.idle_timeout,
            body_read_timeout: config.body_read_timeout,
        }
    }
}

/// A request body that did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} ms of its head", .after.as_millis())]
pub struct BodyTimeout {
    after: Duration,
}

/// What shutdown asks of open connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Serving,
    /// Finish the request in flight, take no more.
    Draining,
    /// Close now.
    Closing,
}

/// Serves `router` on `listener` until `shutdown` resolves, then drains (bounded).
pub(crate) async fn serve(
    router: Router,
    guard: crate::browsers::Guard,
    listener: TcpListener,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let cap = connection_cap(limits.max_connections, descriptor_limit());
    tracing::debug!(
        max_connections = cap,
        header_read_timeout_ms = limits.header_read_timeout.as_millis(),
        idle_timeout_s = limits.idle_timeout.as_secs(),
        body_read_timeout_ms = limits.body_read_timeout.as_millis(),
        "tool server connection limits"
    );
    let slots = Arc::new(Semaphore::new(cap));
    let open = Arc::new(Open::default());
    let (phase, watch_phase) = watch::channel(Phase::Serving);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let shared = Arc::new(Shared {
        builder,
        router,
        guard: Arc::new(guard),
        limits,
    });

    tokio::pin!(shutdown);
    let mut trouble = AcceptTrouble::default();
    'serving: loop {
        let stream = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    trouble.recovered();
                    stream
                }
                Err(error) => {
                    if trouble.failed(&error) {
                        tokio::select! {
                            biased;
                            () = &mut shutdown => break,
                            () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                        }
                    }
                    continue;
                }
            },
        };
        // A slot for it: a free one, else the one of the connection that has waited longest
        // for a request head; while every slot runs a request, it waits (and so does the
        // kernel's accept queue behind it).
        let permit = loop {
            if let Ok(permit) = Arc::clone(&slots).try_acquire_owned() {
                break permit;
            }
            // A closed connection gives its slot back as soon as its task runs: wait for that
            // one rather than close another. With none to close, look again now and then.
            let retry = if open.close_oldest_waiting() {
                Duration::MAX
            } else {
                EVICT_RETRY
            };
            tokio::select! {
                biased;
                () = &mut shutdown => break 'serving,
                permit = Arc::clone(&slots).acquire_owned() => match permit {
                    Ok(permit) => break permit,
                    // The semaphore is never closed; stop serving rather than spin if it were.
                    Err(_) => break 'serving,
                },
                () = sleep_at_most(retry) => {}
            }
        };
        tokio::spawn(connection(
            stream,
            permit,
            Arc::clone(&shared),
            Arc::clone(&open),
            watch_phase.clone(),
        ));
    }
    drop(listener);

    // Every open connection holds a permit: all `cap` permits back means all are closed.
    let _ = phase.send(Phase::Draining);
    let all = u32::try_from(cap).unwrap_or(u32::MAX);
    if tokio::time::timeout(DRAIN_TIMEOUT, slots.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(
            open = cap.saturating_sub(slots.available_permits()),
            "requests still running {} s after shutdown began; closing their connections",
            DRAIN_TIMEOUT.as_secs()
        );
        let _ = phase.send(Phase::Closing);
        let _ = tokio::time::timeout(Duration::from_secs(1), slots.acquire_many(all)).await;
    }
    Ok(())
}

struct Shared {
    builder: http1::Builder,
    router: Router,
    /// Host, Origin and Content-Type, checked before any route (`browsers.rs`).
    guard: Arc<crate::browsers::Guard>,
    limits: ConnectionLimits,
}

/// Serves one connection until it ends, its idle time runs out, shutdown closes it, or the
/// accept loop closes it to make room.
async fn connection(
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    shared: Arc<Shared>,
    open: Arc<Open>,
    mut phase: watch::Receiver<Phase>,
) {
    let activity = Arc::new(Activity::new(open.clock));
    let _registered = open.register(&activity);
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: Arc::clone(&activity),
    });
    let service = Service {
        router: shared.router.clone(),
        guard: Arc::clone(&shared.guard),
        activity: Arc::clone(&activity),
        body_read_timeout: shared.limits.body_read_timeout,
    };
    let mut idle_timeout = shared.limits.idle_timeout;
    let conn = shared.builder.serve_connection(io, service);
    tokio::pin!(conn);
    let idle = tokio::time::sleep(idle_timeout);
    tokio::pin!(idle);
    let mut now = *phase.borrow_and_update();
    loop {
        match now {
            Phase::Serving => {}
            // hyper closes a connection waiting between requests and lets a running request
            // finish, but keeps waiting on one that never completed a request head (until the
            // header timeout): so also close once no byte moved for DRAIN_IDLE, no handler
            // running.
            Phase::Draining => {
                conn.as_mut().graceful_shutdown();
                idle_timeout = idle_timeout.min(DRAIN_IDLE);
                idle.as_mut().reset(Instant::now());
            }
            Phase::Closing => return,
        }
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!("connection ended: {error}");
                }
                return;
            }
            () = activity.closing.notified() => {
                tracing::debug!("closing a connection that sent no request head, to make room at the connection cap");
                return;
            }
            changed = phase.changed() => {
                now = match changed {
                    Ok(()) => *phase.borrow_and_update(),
                    // The serve loop is gone.
                    Err(_) => Phase::Closing,
                };
            }
            () = &mut idle => match activity.idle_until(idle_timeout) {
                Some(next_check) => idle.as_mut().reset(next_check),
                None => {
                    tracing::debug!(
                        idle_timeout_ms = idle_timeout.as_millis(),
                        "closing a connection that moved no bytes"
                    );
                    return;
                }
            },
        }
    }
}

/// [`Activity::head`] while a request's head has arrived and its answer is not yet sent.
const IN_REQUEST: u64 = u64::MAX;
/// [`Activity::head`] once the accept loop chose to close the connection.
const CLOSING: u64 = u64::MAX - 1;

/// When a connection last moved a byte, whether a handler is running on it, and since when it
/// waits for a request head.
struct Activity {
    origin: Instant,
    /// Milliseconds from `origin` to the last read, write, or handler start or end.
    last_ms: AtomicU64,
    busy: AtomicBool,
    /// Milliseconds from the serve loop's clock to when the connection began waiting for a
    /// request head (accepted, or its last answer sent); [`IN_REQUEST`] or [`CLOSING`].
    head: AtomicU64,
    /// The serve loop's clock, which `head` counts from (shared by every connection).
    clock: Instant,
    /// Woken when the accept loop closes the connection to make room.
    closing: tokio::sync::Notify,
}

impl Activity {
    fn new(clock: Instant) -> Activity {
        let origin = Instant::now();
        Activity {
            origin,
            last_ms: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            head: AtomicU64::new(millis(clock, origin)),
            clock,
            closing: tokio::sync::Notify::new(),
        }
    }

    /// A request head arrived: false when the connection is being closed to make room (the
    /// request is then not served).
    fn request_started(&self) -> bool {
        let mut now = self.head.load(Ordering::Acquire);
        loop {
            if now == CLOSING {
                return false;
            }
            match self
                .head
                .compare_exchange(now, IN_REQUEST, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(seen) => now = seen,
            }
        }
    }

    /// The answer was sent (or dropped): the connection waits for its next head from now.
    fn request_ended(&self) {
        let since = millis(self.clock, Instant::now());
        let _ = self
            .head
            .compare_exchange(IN_REQUEST, since, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Since when it waits for a head (ms on the loop's clock), or `None` while it serves one.
    fn waiting_since(&self) -> Option<u64> {
        Some(self.head.load(Ordering::Acquire)).filter(|ms| *ms < CLOSING)
    }

    /// Marks it closing if it still waits since `since`; true when it was marked.
    fn close_if_waiting_since(&self, since: u64) -> bool {
        let marked = self
            .head
            .compare_exchange(since, CLOSING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if marked {
            self.closing.notify_one();
        }
        marked
    }

    fn touch(&self) -> Instant {
        let now = Instant::now();
        self.touch_at(now);
        now
    }

    fn touch_at(&self, now: Instant) {
        let ms = u64::try_from(now.duration_since(self.origin).as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// `None` when the connection has been idle for `timeout`; else when to look again.
    fn idle_until(&self, timeout: Duration) -> Option<Instant> {
        self.idle_until_at(Instant::now(), timeout)
    }

    fn idle_until_at(&self, now: Instant, timeout: Duration) -> Option<Instant> {
        if self.busy.load(Ordering::Relaxed) {
            return Some(now + timeout);
        }
        let last = self.origin + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        let deadline = last + timeout;
        (deadline > now).then_some(deadline)
    }
}

/// Sleeps for `wait`; `Duration::MAX` never ends.
async fn sleep_at_most(wait: Duration) {
    match Instant::now().checked_add(wait) {
        Some(deadline) if wait != Duration::MAX => tokio::time::sleep_until(deadline).await,
        _ => std::future::pending().await,
    }
}

fn millis(from: Instant, to: Instant) -> u64 {
    u64::try_from(to.saturating_duration_since(from).as_millis()).unwrap_or(CLOSING - 1)
}

/// The open connections, for closing the one that has waited longest for a request head.
struct Open {
    clock: Instant,
    next: AtomicU64,
    connections: std::sync::Mutex<std::collections::HashMap<u64, Arc<Activity>>>,
}

impl Default for Open {
    fn default() -> Open {
        Open {
            clock: Instant::now(),
            next: AtomicU64::new(0),
            connections: std::sync::Mutex::default(),
        }
    }
}

/// A connection's place in [`Open`], given up when dropped.
struct Registered<'a> {
    open: &'a Open,
    id: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.open.lock().remove(&self.id);
    }
}

impl Open {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, Arc<Activity>>> {
        self.connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn register(&self, activity: &Arc<Activity>) -> Registered<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, Arc::clone(activity));
        Registered { open: self, id }
    }

    /// Closes the connection that has waited longest for a request head; false when every
    /// connection is serving a request (or closing already). A scan of at most the cap's
    /// connections, only when the cap is reached.
    fn close_oldest_waiting(&self) -> bool {
        let connections = self.lock();
        // Ties (the same millisecond) go by accept order.
        let mut waiting: Vec<(u64, u64, &Arc<Activity>)> = connections
            .iter()
            .filter_map(|(id, activity)| {
                activity.waiting_since().map(|since| (since, *id, activity))
            })
            .collect();
        waiting.sort_unstable_by_key(|(since, id, _)| (*since, *id));
        // One that started a request meanwhile is skipped for the next oldest.
        waiting
            .into_iter()
            .any(|(since, _, activity)| activity.close_if_waiting_since(since))
    }
}

/// Marks a handler running on a connection, from the request head to the handler's answer.
struct Busy(Arc<Activity>);

impl Busy {
    fn start(activity: &Arc<Activity>) -> (Busy, Instant) {
        activity.busy.store(true, Ordering::Relaxed);
        let now = activity.touch();
        (Busy(Arc::clone(activity)), now)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.busy.store(false, Ordering::Relaxed);
    }
}

/// The socket, noting when bytes move.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The router behind one connection: bodies get their deadline, handlers mark the connection
/// busy.
struct Service {
    router: Router,
    guard: Arc<crate::browsers::Guard>,
    activity: Arc<Activity>,
    body_read_timeout: Duration,
}

impl hyper::service::Service<hyper::Request<Incoming>> for Service {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, request: hyper::Request<Incoming>) -> Self::Future {
        if !self.activity.request_started() {
            // Closed to make room while this head arrived: not served (the client sees the
            // connection close, as if it had been closed a moment earlier).
            let mut response = Response::new(Body::empty());
            *response.status_mut() = hyper::StatusCode::SERVICE_UNAVAILABLE;
            return Box::pin(std::future::ready(Ok(response)));
        }
        let (busy, now) = Busy::start(&self.activity);
        if let Err(refused) = self.guard.check(request.method(), request.headers()) {
            let response = switchboard_front::error_response(refused);
            drop(busy);
            return Box::pin(std::future::ready(Ok(answered(response, &self.activity))));
        }
        let after = self.body_read_timeout;
        let request: Request = request.map(|body| {
            Body::new(DeadlineBody {
                inner: body,
                deadline: now + after,
                after,
                timer: None,
            })
        });
        let answer = tower::ServiceExt::oneshot(self.router.clone(), request);
        let activity = Arc::clone(&self.activity);
        Box::pin(async move {
            let response = answer.await;
            drop(busy);
            response.map(|response| answered(response, &activity))
        })
    }
}

/// `response`, telling `activity` when its body has been sent (or dropped): from then on the
/// connection waits for its next request head.
fn answered(response: Response, activity: &Arc<Activity>) -> Response {
    response.map(|body| {
        Body::new(Answered {
            inner: body,
            activity: Arc::clone(activity),
        })
    })
}

/// An answer's body; dropping it (hyper does once it is written, or the connection is gone)
/// ends the request.
struct Answered {
    inner: Body,
    activity: Arc<Activity>,
}

impl Drop for Answered {
    fn drop(&mut self) {
        self.activity.request_ended();
    }
}

impl hyper::body::Body for Answered {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that must end by `deadline`. The timer is only set once the body has to be
/// waited for, so a body that came with its head costs none.
struct DeadlineBody {
    inner: Incoming,
    deadline: Instant,
    after: Duration,
    timer: Option<Pin<Box<Sleep>>>,
}

impl hyper::body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        let late = || -> BoxError { Box::new(BodyTimeout { after: this.after }) };
        if let Some(timer) = &mut this.timer {
            if timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Some(Err(late())));
            }
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|frame| frame.map_err(BoxError::from))),
            Poll::Pending => {
                let deadline = this.deadline;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if timer.as_mut().poll(cx).is_ready() {
                    Poll::Ready(Some(Err(late())))
                } else {
                    Poll::Pending
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Failed accepts since the last one that worked: one warning per run of failures.
#[derive(Default)]
struct AcceptTrouble {
    failures: u64,
    since: Option<Instant>,
}

impl AcceptTrouble {
    /// Notes a failed accept; true when the loop should rest before the next one.
    fn failed(&mut self, error: &io::Error) -> bool {
        if matches!(
            error.kind(),
            io::ErrorKind::ConnectionAborted
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionRefused
                | io::ErrorKind::Interrupted
        ) {
            // That one connection is gone (and dequeued): nothing to wait for.
            tracing::debug!("accept: {error}");
            return false;
        }
        if self.failures == 0 {
            self.since = Some(Instant::now());
            tracing::warn!(
                "cannot accept connections: {error}; retrying every {} ms until one is accepted (is the open-file limit, ulimit -n, too low?)",
                ACCEPT_BACKOFF.as_millis()
            );
        }
        self.failures = self.failures.saturating_add(1);
        true
    }

    fn recovered(&mut self) {
        if self.failures > 0 {
            let for_ms = self.since.map_or(0, |since| since.elapsed().as_millis());
            tracing::info!(
                failed_accepts = self.failures,
                for_ms,
                "accepting connections again"
            );
            self.failures = 0;
            self.since = None;
        }
    }
}

/// The process's soft limit on open files, if it has one.
#[cfg(unix)]
#[allow(unsafe_code)] // one FFI call, see SAFETY below
fn descriptor_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given, which lives for the call.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if rc != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    // rlim_t is u64 on most targets but not all.
    #[allow(clippy::useless_conversion)]
    u64::try_from(limit.rlim_cur).ok()
}

#[cfg(not(unix))]
fn descriptor_limit() -> Option<u64> {
    None
}

/// `configured`, lowered so connections leave [`DESCRIPTOR_RESERVE`] descriptors (or half of
/// a small limit) for the rest of the process.
fn connection_cap(configured: usize, descriptor_limit: Option<u64>) -> usize {
    let configured = configured.max(1);
    let Some(limit) = descriptor_limit else {
        return configured;
    };
    let budget = limit
        .saturating_sub(DESCRIPTOR_RESERVE)
        .max(limit / 2)
        .max(1);
    let budget = usize::try_from(budget).unwrap_or(usize::MAX);
    if budget < configured {
        tracing::warn!(
            "toolserver.max_connections = {configured}, but the open-file limit is {limit}: serving at most {budget} connections at once (raise the limit, ulimit -n or systemd's LimitNOFILE, to allow more)"
        );
    }
    configured.min(budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_descriptors_for_the_rest_of_the_process() {
        assert_eq!(connection_cap(512, None), 512);
        assert_eq!(connection_cap(512, Some(1_048_576)), 512);
        assert_eq!(connection_cap(512, Some(1024)), 512);
        assert_eq!(connection_cap(1024, Some(1024)), 1024 - 128);
        assert_eq!(connection_cap(512, Some(256)), 128);
        assert_eq!(connection_cap(512, Some(100)), 50);
        assert_eq!(connection_cap(512, Some(1)), 1);
        assert_eq!(connection_cap(512, Some(0)), 1);
        assert_eq!(connection_cap(0, None), 1);
    }

    #[test]
    fn this_process_has_a_descriptor_limit_on_unix() {
        if cfg!(unix) {
            assert!(descriptor_limit().is_some_and(|limit| limit > 0));
        }
    }

    #[test]
    fn at_the_cap_the_connection_waiting_longest_for_a_head_is_closed() {
        let open = Open::default();
        let at = |ms: u64| {
            let activity = Arc::new(Activity::new(open.clock));
            activity.head.store(ms, Ordering::Release);
            activity
        };
        let (serving, newer, oldest, middle) = (at(1), at(300), at(100), at(200));
        assert!(serving.request_started());
        let _held: Vec<_> = [&serving, &newer, &oldest, &middle]
            .into_iter()
            .map(|activity| open.register(activity))
            .collect();
        assert!(open.close_oldest_waiting());
        assert_eq!(oldest.waiting_since(), None);
        assert!(
            !oldest.request_started(),
            "a head arriving now is not served"
        );
        assert!(open.close_oldest_waiting());
        assert_eq!(middle.waiting_since(), None);
        assert!(open.close_oldest_waiting());
        assert!(
            !open.close_oldest_waiting(),
            "a connection serving a request is never closed to make room"
        );
        // Its answer sent, it waits for a head again: closable.
        serving.request_ended();
        assert!(serving.waiting_since().is_some());
        assert!(open.close_oldest_waiting());
    }

    #[test]
    fn idle_is_measured_from_the_last_byte_and_never_while_busy() {
        let activity = Activity::new(Instant::now());
        let origin = activity.origin;
        let at = |s: u64| origin + Duration::from_secs(s);
        let timeout = Duration::from_secs(60);
        assert_eq!(activity.idle_until_at(at(0), timeout), Some(at(60)));
        activity.touch_at(at(30));
        assert_eq!(activity.idle_until_at(at(75), timeout), Some(at(90)));
        activity.busy.store(true, Ordering::Relaxed);
        assert_eq!(
            activity.idle_until_at(at(700), timeout),
            Some(at(760)),
            "a running handler"
        );
        activity.busy.store(false, Ordering::Relaxed);
        activity.touch_at(at(700));
        assert_eq!(activity.idle_until_at(at(759), timeout), Some(at(760)));
        assert_eq!(activity.idle_until_at(at(760), timeout), None);
        assert_eq!(activity.idle_until_at(at(900), timeout), None);
    }
}
