//! One connection to one broker, shared by many concurrent requests.
//!
//! Requests are matched to responses by correlation id: each request parks a
//! oneshot sender in a map, and ONE reader task delivers every response frame
//! to its sender. Frames go to the socket through ONE writer task, so a frame
//! is either handed over whole or not at all: a caller that drops its future
//! can never leave half a frame on the wire.
//!
//! Anything that means the two sides no longer agree about the byte stream (a
//! framing error, a response for a correlation id nobody asked for, an
//! over-size frame, a response that does not decode, a lost socket) poisons
//! the connection: every pending and every future request fails with the same
//! [`ClientError::Poisoned`], and the owner opens a new connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{debug, warn};
use weir_protocol::api::{
    api_key_of, decode_response_tolerant, encode_request, peek_correlation_id,
};
use weir_protocol::frame::FrameDecoder;
use weir_protocol::kafka_protocol::protocol::Request;
use weir_protocol::versions::BrokerVersions;
use weir_protocol::{ApiKey, ProtocolError};

use super::throttle::{Throttle, ThrottleTime};
use crate::{ClientError, Result};

/// How a [`Messenger`] behaves; built by the cluster from the client config.
#[derive(Debug, Clone)]
pub struct MessengerOptions {
    /// Sent in every request header.
    pub client_id: Option<String>,
    /// How long a request may wait for its response.
    pub request_timeout: Duration,
    /// The largest response frame accepted; a larger length poisons the connection.
    pub max_frame_size: usize,
    /// Delays requests while the broker asks us to back off. The cluster
    /// keeps one per (broker, lane), so it outlives a reconnect.
    pub throttle: Arc<Throttle>,
}

impl Default for MessengerOptions {
    fn default() -> Self {
        Self {
            client_id: Some("weir".to_owned()),
            request_timeout: Duration::from_secs(30),
            max_frame_size: weir_protocol::frame::DEFAULT_MAX_FRAME_SIZE,
            throttle: Arc::new(Throttle::default()),
        }
    }
}

/// A response frame (without length prefix), or the poison that ended the connection.
type Delivery = std::result::Result<Bytes, Arc<ClientError>>;

enum Waiter {
    /// A caller is waiting for this response.
    Waiting(oneshot::Sender<Delivery>),
    /// The caller gave up (dropped or timed out) after its frame was sent; the
    /// response will still come and is read and discarded. Past `deadline`
    /// (when the request would have timed out) the connection is presumed
    /// wedged: see [`Messenger::overdue_request`].
    Abandoned {
        api: ApiKey,
        deadline: tokio::time::Instant,
        timeout: Duration,
    },
}

enum State {
    Open { pending: HashMap<i32, Waiter> },
    Poisoned(Arc<ClientError>),
}

pub(super) struct Shared {
    broker: String,
    state: Mutex<State>,
    /// Tells the reader and writer tasks to stop once the connection is poisoned.
    shutdown: watch::Sender<bool>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave the map half-updated
        // in a way that matters more than losing the connection.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fails every waiter with `err` and stops the connection. The first
    /// poison wins; later calls return it.
    pub(super) fn poison(&self, err: ClientError) -> Arc<ClientError> {
        let mut state = self.lock();
        let cause = match &mut *state {
            State::Poisoned(cause) => return Arc::clone(cause),
            State::Open { pending } => {
                let cause = Arc::new(err);
                for (_, waiter) in pending.drain() {
                    if let Waiter::Waiting(tx) = waiter {
                        let _ = tx.send(Err(Arc::clone(&cause)));
                    }
                }
                cause
            }
        };
        warn!(broker = %self.broker, error = %cause, "connection poisoned");
        *state = State::Poisoned(Arc::clone(&cause));
        drop(state);
        let _ = self.shutdown.send(true);
        cause
    }

    pub(super) fn poisoned_error(&self, cause: Arc<ClientError>) -> ClientError {
        ClientError::Poisoned {
            broker: self.broker.clone(),
            cause,
        }
    }

    /// Hands a response frame to its waiter.
    fn deliver(&self, frame: BytesMut) -> Result<(), ClientError> {
        let correlation_id =
            peek_correlation_id(&frame).map_err(|source| ClientError::Protocol {
                broker: self.broker.clone(),
                source,
            })?;
        let mut state = self.lock();
        let State::Open { pending } = &mut *state else {
            return Ok(());
        };
        match pending.remove(&correlation_id) {
            Some(Waiter::Waiting(tx)) => {
                let _ = tx.send(Ok(frame.freeze()));
                Ok(())
            }
            Some(Waiter::Abandoned { .. }) => {
                debug!(broker = %self.broker, correlation_id, "discarding response of abandoned request");
                Ok(())
            }
            None => Err(ClientError::UnknownCorrelationId {
                broker: self.broker.clone(),
                correlation_id,
            }),
        }
    }
}

/// Removes or abandons a request's map entry unless the response was taken,
/// so a cancelled request leaves nothing behind but a tombstone for the
/// response that is still on its way.
struct PendingGuard {
    shared: Arc<Shared>,
    correlation_id: i32,
    sent: bool,
    done: bool,
    api: ApiKey,
    /// When the request times out: its queueing plus `request.timeout.ms`,
    /// or later if its waiter asked for a longer timeout.
    deadline: tokio::time::Instant,
    timeout: Duration,
}

impl Drop for PendingGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = self.shared.lock();
        if let State::Open { pending } = &mut *state {
            if self.sent {
                if let Some(w) = pending.get_mut(&self.correlation_id) {
                    *w = Waiter::Abandoned {
                        api: self.api,
                        deadline: self.deadline,
                        timeout: self.timeout,
                    };
                }
            } else {
                pending.remove(&self.correlation_id);
            }
        }
    }
}

/// A queued request's response frame, on its way.
struct AwaitedFrame {
    guard: PendingGuard,
    rx: oneshot::Receiver<Delivery>,
}

impl AwaitedFrame {
    /// Waits at most `timeout` for the frame. Dropping this future
    /// abandons the request: its response is read and discarded.
    async fn frame(mut self, api: ApiKey, timeout: Duration) -> Result<Bytes> {
        let deadline = tokio::time::Instant::now() + timeout;
        if deadline > self.guard.deadline {
            self.guard.deadline = deadline;
            self.guard.timeout = timeout;
        }
        let shared = Arc::clone(&self.guard.shared);
        let closed = || match &*shared.lock() {
            State::Poisoned(cause) => shared.poisoned_error(Arc::clone(cause)),
            State::Open { .. } => ClientError::ConnectionClosed {
                broker: shared.broker.clone(),
            },
        };
        match tokio::time::timeout(timeout, &mut self.rx).await {
            Ok(Ok(Ok(frame))) => {
                self.guard.done = true;
                Ok(frame)
            }
            Ok(Ok(Err(cause))) => {
                self.guard.done = true;
                Err(shared.poisoned_error(cause))
            }
            Ok(Err(_)) => {
                self.guard.done = true;
                Err(closed())
            }
            Err(_) => Err(ClientError::RequestTimeout {
                broker: shared.broker.clone(),
                api,
                after: timeout,
            }),
        }
    }
}

/// The response to a request already queued on a connection (see
/// [`Messenger::enqueue`]). Dropping it abandons the request: the response
/// is read and discarded when it comes.
pub struct PendingResponse<R> {
    waiting: AwaitedFrame,
    api: ApiKey,
    version: i16,
    timeout: Duration,
    throttle: Arc<Throttle>,
    _response: std::marker::PhantomData<fn() -> R>,
}

impl<R> std::fmt::Debug for PendingResponse<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingResponse")
            .field("broker", &self.waiting.guard.shared.broker)
            .field("api", &self.api)
            .field("correlation_id", &self.waiting.guard.correlation_id)
            .finish_non_exhaustive()
    }
}

impl<R> PendingResponse<R>
where
    R: Request,
    R::Response: ThrottleTime,
{
    /// Waits for the response (at most `request.timeout.ms` from now) and
    /// decodes it.
    ///
    /// # Errors
    /// As [`Messenger::request`].
    pub async fn response(self) -> Result<R::Response> {
        let shared = Arc::clone(&self.waiting.guard.shared);
        let frame = self.waiting.frame(self.api, self.timeout).await?;
        match decode_response_tolerant::<R>(frame, self.version) {
            Ok((_, response, left)) => {
                note_trailing(&shared.broker, self.api, self.version, left);
                self.throttle.record(response.throttle_time_ms());
                Ok(response)
            }
            Err(source) => {
                // The frame boundaries held, but the body does not match what
                // we asked for: a hostile or confused peer. Drop the connection.
                let cause = shared.poison(ClientError::Protocol {
                    broker: shared.broker.clone(),
                    source,
                });
                Err(shared.poisoned_error(cause))
            }
        }
    }
}

/// A multiplexed connection to one broker.
///
/// Cheap to share behind an `Arc`; dropping the last handle stops its tasks
/// and closes the socket.
pub struct Messenger {
    pub(super) shared: Arc<Shared>,
    frames: mpsc::Sender<Bytes>,
    next_correlation_id: AtomicI32,
    versions: BrokerVersions,
    /// When the SASL session ends; past it the connection is not reused.
    expires_at: Option<tokio::time::Instant>,
    pub(super) options: MessengerOptions,
    tasks: [JoinHandle<()>; 2],
}

impl std::fmt::Debug for Messenger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Messenger")
            .field("broker", &self.shared.broker)
            .finish_non_exhaustive()
    }
}

impl Drop for Messenger {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Messenger {
    /// Starts the reader and writer tasks over `stream`. No handshake is done:
    /// the broker's versions are unknown until [`set_versions`](Self::set_versions)
    /// (see [`super::handshake`]). `broker` labels errors and logs.
    pub fn start<S>(stream: S, broker: impl Into<String>, options: MessengerOptions) -> Messenger
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (read_half, write_half) = tokio::io::split(stream);
        let (shutdown, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            broker: broker.into(),
            state: Mutex::new(State::Open {
                pending: HashMap::new(),
            }),
            shutdown,
        });
        // A small queue: the writer drains it quickly, and a full queue makes
        // callers wait before their frame is handed over (cancel-safe).
        let (frames, frames_rx) = mpsc::channel(64);
        let decoder = FrameDecoder::new(options.max_frame_size);
        let reader = tokio::spawn(read_loop(
            read_half,
            decoder,
            Arc::clone(&shared),
            shutdown_rx.clone(),
        ));
        let writer = tokio::spawn(write_loop(
            write_half,
            frames_rx,
            Arc::clone(&shared),
            shutdown_rx,
        ));
        Messenger {
            shared,
            frames,
            next_correlation_id: AtomicI32::new(0),
            versions: BrokerVersions::default(),
            expires_at: None,
            options,
            tasks: [reader, writer],
        }
    }

    /// The broker's address (or label).
    pub fn broker(&self) -> &str {
        &self.shared.broker
    }

    /// The versions the broker advertised in its ApiVersions response.
    pub fn versions(&self) -> &BrokerVersions {
        &self.versions
    }

    /// Records the broker's versions (done once by the handshake).
    pub fn set_versions(&mut self, versions: BrokerVersions) {
        self.versions = versions;
    }

    /// The version `R` is sent at: the highest both sides speak, capped by
    /// [`version_cap`].
    ///
    /// # Errors
    /// [`ClientError::Protocol`] naming the API when there is none.
    pub fn version_for<R: Request>(&self) -> Result<i16> {
        self.version_at_most::<R>(None)
    }

    /// [`version_for`](Self::version_for), capped further at `max` where
    /// the caller needs an older version's semantics (a transaction of
    /// transaction version 1 sends EndTxn at most v4, say).
    ///
    /// # Errors
    /// As [`version_for`](Self::version_for).
    pub fn version_at_most<R: Request>(&self, max: Option<i16>) -> Result<i16> {
        let api = api_key_of::<R>().map_err(|e| self.protocol_error(e))?;
        let cap = match (version_cap(api), max) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.versions
            .negotiate_for::<R>(cap)
            .map_err(|e| self.protocol_error(e))
    }

    /// The cluster's finalized `transaction.version` as this broker
    /// reported it (0 when it reported none: a broker before Kafka 4.0, or
    /// one formatted with `transaction.version=0`). Level 2 is KIP-890's
    /// transaction version 2: EndTxn v5 bumps the producer epoch at every
    /// commit or abort, and partitions join a transaction implicitly.
    pub fn transaction_version(&self) -> i16 {
        self.versions
            .finalized_level("transaction.version")
            .unwrap_or(0)
    }

    /// Whether transactions through this broker use transaction version 2
    /// (KIP-890 part 2): the cluster finalized `transaction.version` >= 2
    /// and the broker speaks the versions that carry it (EndTxn v5,
    /// TxnOffsetCommit v5, Produce v12), as Kafka's Java producer decides.
    pub fn transaction_v2(&self) -> bool {
        let speaks = |api: ApiKey, v: i16| self.versions.range(api).is_some_and(|r| r.max >= v);
        self.transaction_version() >= 2
            && speaks(ApiKey::EndTxn, 5)
            && speaks(ApiKey::TxnOffsetCommit, 5)
            && speaks(ApiKey::Produce, 12)
    }

    /// The error this connection was poisoned with, if any.
    pub fn poison_cause(&self) -> Option<Arc<ClientError>> {
        match &*self.shared.lock() {
            State::Poisoned(cause) => Some(Arc::clone(cause)),
            State::Open { .. } => None,
        }
    }

    /// Retires the connection at `deadline` (the end of its SASL session):
    /// from then on [`is_usable`](Self::is_usable) is false.
    pub fn set_expiry(&mut self, deadline: tokio::time::Instant) {
        self.expires_at = Some(deadline);
    }

    /// Poisons the connection from outside: for bad bytes found after the
    /// response was decoded (a corrupt record batch inside a Fetch response,
    /// say). Every pending and future request fails with `cause`; the first
    /// poison wins and is returned.
    pub fn poison(&self, cause: ClientError) -> Arc<ClientError> {
        self.shared.poison(cause)
    }

    /// A request whose caller gave up on it and that is still unanswered
    /// past its timeout, as the error to poison the connection with.
    ///
    /// A broker answers a connection's requests in order, so one request
    /// that never gets an answer (a network partition that swallowed it)
    /// wedges every later one behind it. A caller that waits out its
    /// timeout gets [`ClientError::RequestTimeout`] and its connection is
    /// dropped; but callers that keep giving up early (a select loop that
    /// re-issues a Metadata request every round) would queue behind the
    /// lost request forever. The connection pool asks this before handing
    /// the connection out again and closes it if so, as Kafka's Java client
    /// closes a connection with a request past `request.timeout.ms`.
    pub fn overdue_request(&self) -> Option<ClientError> {
        let now = tokio::time::Instant::now();
        let state = self.shared.lock();
        let State::Open { pending } = &*state else {
            return None;
        };
        pending.values().find_map(|w| match w {
            Waiter::Abandoned {
                api,
                deadline,
                timeout,
            } if *deadline <= now => Some(ClientError::RequestTimeout {
                broker: self.shared.broker.clone(),
                api: *api,
                after: *timeout,
            }),
            _ => None,
        })
    }

    /// Whether the connection can still carry new requests: not poisoned and
    /// its SASL session not about to end.
    pub fn is_usable(&self) -> bool {
        self.poison_cause().is_none()
            && self
                .expires_at
                .is_none_or(|t| tokio::time::Instant::now() < t)
    }

    /// Sends `req` at the negotiated version and waits for its response.
    ///
    /// # Errors
    /// Connection errors ([`ClientError::Poisoned`], [`ClientError::RequestTimeout`]),
    /// or [`ClientError::Protocol`] if `R` cannot be encoded. Kafka error
    /// codes inside the response are the caller's to check.
    pub async fn request<R>(&self, req: &R) -> Result<R::Response>
    where
        R: Request,
        R::Response: ThrottleTime,
    {
        let version = self.version_for::<R>()?;
        self.request_at(version, req, self.options.request_timeout)
            .await
    }

    /// [`request`](Self::request) at no more than version `max` (see
    /// [`version_at_most`](Self::version_at_most)). Returns the version
    /// used with the response, since its fields depend on it.
    ///
    /// # Errors
    /// As [`request`](Self::request).
    pub async fn request_at_most<R>(&self, req: &R, max: Option<i16>) -> Result<(i16, R::Response)>
    where
        R: Request,
        R::Response: ThrottleTime,
    {
        let version = self.version_at_most::<R>(max)?;
        let response = self
            .request_at(version, req, self.options.request_timeout)
            .await?;
        Ok((version, response))
    }

    /// Sends `req` at `version` and waits at most `timeout` for the response.
    ///
    /// # Errors
    /// As [`request`](Self::request).
    pub async fn request_at<R>(
        &self,
        version: i16,
        req: &R,
        timeout: Duration,
    ) -> Result<R::Response>
    where
        R: Request,
        R::Response: ThrottleTime,
    {
        let api = api_key_of::<R>().map_err(|e| self.protocol_error(e))?;
        let frame = self.roundtrip(api, version, req, timeout, true).await?;
        let Some(frame) = frame else {
            return Err(ClientError::Closed);
        };
        match decode_response_tolerant::<R>(frame, version) {
            Ok((_, response, left)) => {
                note_trailing(&self.shared.broker, api, version, left);
                self.options.throttle.record(response.throttle_time_ms());
                Ok(response)
            }
            Err(source) => {
                // The frame boundaries held, but the body does not match what
                // we asked for: a hostile or confused peer. Drop the connection.
                let cause = self.shared.poison(self.protocol_error(source));
                Err(self.shared.poisoned_error(cause))
            }
        }
    }

    /// Sends `req` at the negotiated version without waiting for a response:
    /// for requests the broker does not answer (Produce with `acks=0`).
    /// Returns once the frame is queued for the writer.
    ///
    /// # Errors
    /// As [`request`](Self::request).
    pub async fn send_oneway<R: Request>(&self, req: &R) -> Result<()> {
        let version = self.version_for::<R>()?;
        let api = api_key_of::<R>().map_err(|e| self.protocol_error(e))?;
        self.roundtrip(api, version, req, self.options.request_timeout, false)
            .await
            .map(|_| ())
    }

    /// Queues `req` at the negotiated version for the writer and returns
    /// as soon as its frame is queued, with a handle on the response.
    ///
    /// Frames reach the socket in the order they were queued, so a caller
    /// that queues requests one after another from a single task fixes their
    /// order on the wire (the idempotent producer needs this: the broker
    /// refuses a batch whose sequence skips ahead). Awaiting the responses
    /// can then happen anywhere, concurrently.
    ///
    /// # Errors
    /// As [`request`](Self::request), for failures before the frame is queued.
    pub async fn enqueue<R>(&self, req: &R) -> Result<PendingResponse<R>>
    where
        R: Request,
        R::Response: ThrottleTime,
    {
        self.enqueue_at_most(req, None).await
    }

    /// [`enqueue`](Self::enqueue) at no more than version `max` (see
    /// [`version_at_most`](Self::version_at_most)).
    ///
    /// # Errors
    /// As [`enqueue`](Self::enqueue).
    pub async fn enqueue_at_most<R>(&self, req: &R, max: Option<i16>) -> Result<PendingResponse<R>>
    where
        R: Request,
        R::Response: ThrottleTime,
    {
        let version = self.version_at_most::<R>(max)?;
        let api = api_key_of::<R>().map_err(|e| self.protocol_error(e))?;
        let waiting = self
            .queue_frame(api, version, req, true)
            .await?
            .ok_or(ClientError::Closed)?;
        Ok(PendingResponse {
            waiting,
            api,
            version,
            timeout: self.options.request_timeout,
            throttle: Arc::clone(&self.options.throttle),
            _response: std::marker::PhantomData,
        })
    }

    /// Sends one request frame and, if `expect_response`, returns the response frame.
    pub(super) async fn roundtrip<R: Request>(
        &self,
        api: ApiKey,
        version: i16,
        req: &R,
        timeout: Duration,
        expect_response: bool,
    ) -> Result<Option<Bytes>> {
        match self.queue_frame(api, version, req, expect_response).await? {
            Some(waiting) => waiting.frame(api, timeout).await.map(Some),
            None => Ok(None),
        }
    }

    /// Waits for room in the writer's queue (and for the broker's throttle)
    /// and queues one request frame. Returns the response's waiter if
    /// `expect_response`.
    async fn queue_frame<R: Request>(
        &self,
        api: ApiKey,
        version: i16,
        req: &R,
        expect_response: bool,
    ) -> Result<Option<AwaitedFrame>> {
        self.options.throttle.wait().await;
        let correlation_id = self.next_id();
        let mut buf = BytesMut::new();
        encode_request(
            &mut buf,
            correlation_id,
            self.options.client_id.as_deref(),
            version,
            req,
        )
        .map_err(|e| self.protocol_error(e))?;

        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.shared.lock();
            match &mut *state {
                State::Poisoned(cause) => {
                    return Err(self.shared.poisoned_error(Arc::clone(cause)));
                }
                State::Open { pending } if expect_response => {
                    pending.insert(correlation_id, Waiter::Waiting(tx));
                }
                State::Open { .. } => {}
            }
        }
        let mut guard = PendingGuard {
            shared: Arc::clone(&self.shared),
            correlation_id,
            sent: false,
            done: !expect_response,
            api,
            deadline: tokio::time::Instant::now() + self.options.request_timeout,
            timeout: self.options.request_timeout,
        };
        // Cancel-safe: if this future is dropped while waiting for room in
        // the queue, the frame never reaches the writer at all.
        if self.frames.send(buf.freeze()).await.is_err() {
            guard.done = true;
            return Err(self.closed_error());
        }
        guard.sent = true;
        if !expect_response {
            return Ok(None);
        }
        tracing::trace!(broker = %self.shared.broker, ?api, version, correlation_id, "request queued");
        Ok(Some(AwaitedFrame { guard, rx }))
    }

    fn next_id(&self) -> i32 {
        // Wraps after 2^31 requests; ids are only compared for equality and
        // a request that old is long answered or abandoned.
        let id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        id & i32::MAX
    }

    fn closed_error(&self) -> ClientError {
        match self.poison_cause() {
            Some(cause) => self.shared.poisoned_error(cause),
            None => ClientError::ConnectionClosed {
                broker: self.shared.broker.clone(),
            },
        }
    }

    pub(super) fn protocol_error(&self, source: ProtocolError) -> ClientError {
        ClientError::Protocol {
            broker: self.shared.broker.clone(),
            source,
        }
    }
}

/// The highest version Weir sends of each API, where newer versions change
/// semantics Weir does not implement yet.
pub fn version_cap(api: ApiKey) -> Option<i16> {
    match api {
        // v13 names topics by id.
        ApiKey::Fetch | ApiKey::Produce => Some(12),
        // v13 moved top-level errors around; 12 is what Weir parses.
        ApiKey::Metadata => Some(12),
        // v9 has top-level error handling Weir does not need; stay at 8.
        ApiKey::ListOffsets => Some(8),
        // v10 names topics by id.
        ApiKey::OffsetFetch => Some(9),
        ApiKey::OffsetCommit => Some(9),
        // v6 names topics by id, like OffsetCommit v10.
        ApiKey::TxnOffsetCommit => Some(5),
        // v4+ (KIP-890) is the brokers' verification form; clients send
        // v3, as Kafka's own producer does (and tansu drops v4+).
        ApiKey::AddPartitionsToTxn => Some(3),
        _ => None,
    }
}

async fn read_loop<R: AsyncRead>(
    read_half: R,
    decoder: FrameDecoder,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut read_half = std::pin::pin!(read_half);
    let mut buf = BytesMut::with_capacity(8 * 1024);
    loop {
        // Deliver every complete frame already buffered.
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    if let Err(e) = shared.deliver(frame) {
                        shared.poison(e);
                        return;
                    }
                }
                Ok(None) => break,
                Err(source) => {
                    shared.poison(ClientError::Protocol {
                        broker: shared.broker.clone(),
                        source,
                    });
                    return;
                }
            }
        }
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(8 * 1024);
        }
        let read = tokio::select! {
            r = read_half.read_buf(&mut buf) => r,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        match read {
            Ok(0) if buf.is_empty() => {
                shared.poison(ClientError::ConnectionClosed {
                    broker: shared.broker.clone(),
                });
                return;
            }
            Ok(0) => {
                let needed = decoder
                    .peek_len(&buf)
                    .ok()
                    .flatten()
                    .map_or(4, |len| len + 4);
                shared.poison(ClientError::Protocol {
                    broker: shared.broker.clone(),
                    source: ProtocolError::Truncated {
                        what: "response frame",
                        needed,
                        available: buf.len(),
                    },
                });
                return;
            }
            Ok(_) => {}
            Err(source) => {
                shared.poison(ClientError::Io {
                    broker: shared.broker.clone(),
                    context: "reading",
                    source,
                });
                return;
            }
        }
    }
}

async fn write_loop<W: AsyncWrite>(
    write_half: W,
    mut frames: mpsc::Receiver<Bytes>,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut write_half = std::pin::pin!(write_half);
    loop {
        let frame = tokio::select! {
            f = frames.recv() => f,
            _ = shutdown.wait_for(|stop| *stop) => None,
        };
        let Some(frame) = frame else {
            let _ = write_half.shutdown().await;
            return;
        };
        let mut result = write_half.write_all(&frame).await;
        // Coalesce whatever else is queued before one flush.
        while result.is_ok() {
            match frames.try_recv() {
                Ok(more) => result = write_half.write_all(&more).await,
                Err(_) => break,
            }
        }
        if result.is_ok() {
            result = write_half.flush().await;
        }
        if let Err(source) = result {
            shared.poison(ClientError::Io {
                broker: shared.broker.clone(),
                context: "writing",
                source,
            });
            return;
        }
    }
}

/// Bytes after a fully decoded response are ignored, as Java and librdkafka
/// ignore them (librdkafka's mock cluster sends one after flexible Metadata
/// responses); they are logged, since they can also mean a version mix-up.
fn note_trailing(broker: &str, api: weir_protocol::ApiKey, version: i16, left: usize) {
    if left > 0 {
        tracing::debug!(
            broker,
            ?api,
            version,
            left,
            "ignoring bytes after a decoded response"
        );
    }
}
