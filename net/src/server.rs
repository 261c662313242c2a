//! The server: the acceptor, the broker task, and the shutdown that ties the
//! disk and meta workers off.
//!
//! Shutdown (SIGTERM): stop accepting, stop taking requests (frames that
//! still arrive are dropped), send the core `Input::Shutdown` and keep
//! carrying out its outputs until it answers `Output::Stopped` (everything
//! durable, every partition checkpointed, so the next start reads only
//! indexes), at most `SHUTDOWN_WAIT`; then stop the workers, which sync or
//! flush what is queued.
//!
//! The storage is a parameter (`storage::Storage`): production runs the disk
//! and meta worker threads below; the madsim tests run the same server over a
//! simulated store (`simstore.rs`), with madsim's network and clock.
//!
//! ```text
//!  acceptor ──Connected──┐
//!  readers ──Frame───────┤ events (bounded)           ┌─► writers (per connection)
//!          ──Disconnected┤            ▼               │     file parts: pinned, pread
//!  writers ──ReadFailed──┘     broker task ── Broker ─┼─► disk worker thread ──┐
//!  disk, meta ──ReadDone/CleanerDone/...────► ▲       └─► meta worker thread ──┤
//!               (completions, unbounded)      ◄───────────────────────────────┘
//!  disk, meta ──SyncDone/MetaDone: handled on their own thread, under the lock
//! ```
//!
//! The core is a single-threaded state machine: one lock (`SharedDriver`)
//! holds it with the driver, and whoever has an input handles it whole
//! under that lock and drains `poll_output` until it is empty, so outputs
//! leave in the order the core produced them; disk ops in particular go to
//! one queue in that order, and a response's file parts are pinned there
//! too (`response_frame`), so they read the files as the ops before it left
//! them whatever runs after. The broker task has the events, the timers and
//! most completions; a storage worker hands the core the two completions
//! requests wait on itself (`SharedDriver::deliver`), so that a commit's
//! markers and answer do not each wait for the broker task to wake.
//!
//! Listeners: one acceptor task per listener, all numbering connections
//! from one counter and counting them against one limit. A TLS listener
//! (SSL, SASL_SSL) hands each accepted socket to a task of its own for the
//! handshake, bounded by `TLS_HANDSHAKE_TIMEOUT`, so that a slow or silent
//! client holds neither the acceptor nor, for long, a connection slot; a
//! client that does not speak TLS fails its handshake and is closed.
//!
//! The console (`console/`, when `doze.console.listen` gives it an
//! address) is one more task. It asks the broker task for the core's
//! numbers with `Event::MetricsSnapshot` on the same channel as the
//! connections, and reads the driver's own from `NetMetrics`, which the
//! connections, the acceptors and the disk worker keep in atomics.
//!
//! Back-pressure: connection events go through a bounded channel, so a broker
//! that falls behind stops the readers (and TCP stops the clients); and a
//! connection's reader stops while it has `CONN_REQUESTS_IN_FLIGHT_MAX`
//! requests unanswered (`conn::Unanswered`).
//! Completions go through an unbounded one: there are few of them (the core
//! has one sync in flight at a time) and a worker thread must never block;
//! nor does it under the lock, where nothing waits (the queues are
//! unbounded, the writers' channels are only tried).

use std::future::Future;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Context};
use bytes::Bytes;
use doze_core::limits::RESPONSE_DIRECT_WRITES_PER_COMPLETION_MAX;
use doze_core::security::{Listener, SecurityProtocol};
use doze_core::{
    BootState, Broker, BrokerConfig, ConnId, FileRange, FramePart, Input, IoError, Output,
};
use rustc_hash::FxHashMap;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, error, info, warn};

use crate::budget::{Charge, RequestBudget};
use crate::config::{ClientLimits, HostPort};
use crate::conn::{self, ConnHandle, Reply, RequestTiming, Response};
use crate::console::metrics::NetMetrics;
use crate::direct_write::{DirectWrite, WriterState, Written};
use crate::metadb::MetaWrite;
use crate::produce_prep::TopicCodecs;
use crate::quotas::PerIp;
use crate::storage::{Completions, Started, Storage, StorageQueue};

/// Connection events queued for the broker task before readers wait.
const EVENTS_QUEUED_MAX: usize = 4096;
/// Open client connections at most, whatever `max.connections` says, so the
/// broker keeps file descriptors for its segment files; at the limit the
/// acceptors wait for a connection to close (`quotas.rs`).
const CONNECTIONS_MAX: usize = 10_000;
/// How long a client on a TLS listener has to complete its handshake
/// before its socket is closed.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept (typically out of file descriptors) so the
/// acceptor does not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);
/// The longest the broker task sleeps without looking at the wall clock, so a
/// clock jump delays a due `Tick` by at most this much.
const TIMER_RECHECK_MS: i64 = 1000;
/// How long a shutdown waits for the core's `Output::Stopped` (a sync and
/// one meta.db write, normally milliseconds) before it stops anyway: the
/// workers still sync what is queued, and the next start scans what the
/// missing checkpoints would have spared it.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(30);

/// What the connection tasks tell the broker task.
pub enum Event {
    Connected {
        conn: ConnId,
        handle: ConnHandle,
        /// The peer as Kafka shows it (`/127.0.0.1`).
        client_host: String,
        /// The listener it came in on, and its certificate's principal.
        listener: Listener,
    },
    Frame {
        conn: ConnId,
        frame: Bytes,
        /// A Produce request's records as read on the connection task
        /// (`produce_prep`), handed in with it (`Input::CheckedFrame`).
        checks: Option<doze_core::produce_checks::ProduceChecks>,
        /// When the reader had it whole: where its latency starts.
        read_at: Instant,
        /// The frame's bytes in the request budget, given back once the
        /// core has taken it.
        charge: Charge,
    },
    Disconnected {
        conn: ConnId,
    },
    /// A writer could not read a file part of a response; it sent nothing
    /// of that frame and stopped.
    ResponseReadFailed {
        conn: ConnId,
        range: FileRange,
        error: IoError,
    },
    /// The console wants the core's numbers (`Broker::metrics_snapshot`).
    MetricsSnapshot {
        reply: oneshot::Sender<doze_core::metrics::Snapshot>,
    },
}

/// One listener, bound.
pub struct BoundListener {
    /// Its name, as the core knows it (`advertised.listeners`).
    pub name: String,
    pub protocol: SecurityProtocol,
    /// Bound and registered with the runtime.
    pub listener: TcpListener,
    /// What clients that come in on it are told (for the log line).
    pub advertised: HostPort,
    /// For SSL and SASL_SSL: the TLS handshake.
    pub tls: Option<TlsAcceptor>,
}

/// Everything start-up prepared, handed to `serve`.
pub struct Setup<S> {
    /// At least one.
    pub listeners: Vec<BoundListener>,
    /// How the listening line names the listeners: `host:port` of the
    /// first (false: the `--listen` listener alone), or every one as
    /// `NAME://host:port,...` (true: `listeners` was set).
    pub print_names: bool,
    pub settings: BrokerConfig,
    /// What start-up found in storage, for `Input::Boot`.
    pub boot: BootState,
    /// Where disk ops and meta batches go; started here, before the boot.
    pub storage: S,
    /// The console's listener (`doze.console.listen`), bound, and what it
    /// reads beside the Kafka protocol; `None`: off. Not served in a madsim
    /// build.
    pub console: Option<crate::console::ConsoleSetup>,
    /// The driver's own numbers: the connections, the acceptors and the
    /// storage (given the same) keep them, the console reads them.
    pub metrics: Arc<NetMetrics>,
    /// Connection limits and the request budget.
    pub limits: ClientLimits,
}

/// Runs the broker until `shutdown` resolves (or the broker task dies), then
/// shuts down in order: stop accepting, let the core stop (`Input::Shutdown`
/// until `Output::Stopped`), end the broker task, let the disk worker finish
/// its queue and fsync, flush meta.db. An error means the final sync or flush
/// failed, or the broker failed: data may not be durable.
pub async fn serve<S: Storage>(
    setup: Setup<S>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let Setup {
        listeners,
        print_names,
        settings,
        boot,
        storage,
        console,
        metrics,
        limits,
    } = setup;
    let per_ip = PerIp::new(&limits.connections).map_err(|e| anyhow!(e))?;
    let connections_max = limits.connections.max_connections.min(CONNECTIONS_MAX);
    let mut shown = Vec::new();
    for l in &listeners {
        let local = l
            .listener
            .local_addr()
            .context("cannot read the listen address")?;
        shown.push(if print_names {
            format!("{}://{local}", l.name)
        } else {
            local.to_string()
        });
    }
    if shown.is_empty() {
        return Err(anyhow!("no listener to accept on"));
    }
    let shown = if print_names {
        shown.join(",")
    } else {
        shown.swap_remove(0)
    };

    let (completion_tx, completions) = mpsc::unbounded_channel();
    let completion_tx = Completions::new(completion_tx);
    let Started {
        queue: storage,
        backlog,
        finished: storage_finished,
    } = storage.start(completion_tx.clone())?;

    // Boot before the first connection: the core must see `Input::Boot` first,
    // and its repairs are queued before any append.
    // What the console shows of the settings (the core keeps its own).
    let settings_seen = settings.clone();
    let codecs = Arc::new(TopicCodecs::default());
    let mut driver = Driver {
        broker: Broker::new(settings),
        conns: FxHashMap::default(),
        storage,
        metrics: Arc::clone(&metrics),
        codecs: Arc::clone(&codecs),
        stopping: false,
        serving: false,
        stopped: false,
        waits_for_ms: None,
        failed: None,
        direct_writes_left: 0,
    };
    driver.handle(Input::Boot(boot))?;

    let (event_tx, events) = mpsc::channel(EVENTS_QUEUED_MAX);
    let (stop_broker, broker_stop) = oneshot::channel();
    let shared = Arc::new(SharedDriver {
        driver: Mutex::new(driver),
        wake: Notify::new(),
    });
    // Weak: the broker task holds the only strong reference, so its end
    // drops the driver, and with it the storage queues that tell the
    // workers to finish.
    let direct = Arc::downgrade(&shared);
    completion_tx.set_direct(Box::new(move |input| match direct.upgrade() {
        Some(shared) => shared.deliver(input),
        None => Some(input),
    }));
    let mut broker_task = tokio::spawn(run_broker(shared, events, completions, broker_stop));
    let mut acceptors: Vec<JoinHandle<()>> = Vec::new();
    let accepting = Accepting {
        shared: conn::Shared {
            events: event_tx.clone(),
            backlog,
            budget: Arc::new(RequestBudget::new(limits.queued_request_bytes_max)),
            unauthenticated_frame_bytes_max: limits.sasl_server_max_receive_bytes,
            metrics: Arc::clone(&metrics),
            codecs,
        },
        slots: Arc::new(Semaphore::new(connections_max)),
        connections_max,
        per_ip,
        next_conn: Arc::new(AtomicU64::new(1)),
    };
    let console_url = match console {
        Some(console) => {
            let url = crate::console::url(&console.listener)?;
            let facts = crate::console::BrokerFacts::new(
                &settings_seen,
                &listeners,
                url.clone(),
                console.logs_dir,
            );
            let task = crate::console::start(
                console.listener,
                event_tx,
                metrics,
                facts,
                InternalConnector::new(accepting.clone(), &settings_seen),
            );
            acceptors.extend(task);
            Some(url)
        }
        None => None,
    };
    for l in listeners {
        if let Ok(local) = l.listener.local_addr() {
            info!(
                listener = %l.name,
                protocol = l.protocol.name(),
                listen = %local,
                advertised = %l.advertised,
                "accepting"
            );
        }
        acceptors.push(tokio::spawn(accept_loop(l, accepting.clone())));
    }
    drop(accepting);
    let stop_accepting = || acceptors.iter().for_each(JoinHandle::abort);

    // Tests and scripts wait for this line. Written without `println!`, which
    // would panic if stdout had been closed.
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "doze-kafka listening on {shown}").and_then(|()| stdout.flush());
    // Its own line, after the one tests wait for.
    if let Some(url) = &console_url {
        let _ = writeln!(stdout, "doze-kafka console: {url}").and_then(|()| stdout.flush());
    }
    drop(stdout);
    info!(listen = %shown, "doze-kafka listening");

    let joined = tokio::select! {
        () = shutdown => {
            // Stop accepting first (the listener closes with its task), then
            // the broker task, which lets the core stop and drops the
            // workers' queues as it ends.
            stop_accepting();
            let _ = stop_broker.send(());
            broker_task.await
        }
        // The broker task ended on its own: a worker died or the core panicked.
        joined = &mut broker_task => {
            stop_accepting();
            joined
        }
    };
    let broker_result = match joined {
        Ok(result) => result,
        Err(e) if e.is_panic() => Err(anyhow!("the broker task panicked")),
        Err(e) => Err(anyhow!("the broker task failed: {e}")),
    };
    if let Err(e) = &broker_result {
        error!("{e:#}");
    }

    // The broker task is over and its queues dropped: the workers finish what
    // was queued, sync or flush it, and stop.
    storage_finished.await?;
    broker_result?;
    info!("shut down cleanly");
    Ok(())
}

/// What every acceptor shares: what the connections share, the connection
/// limit, and the connection ids.
#[derive(Clone)]
struct Accepting {
    shared: conn::Shared,
    /// One permit per connection (`max.connections`, at most
    /// `CONNECTIONS_MAX`).
    slots: Arc<Semaphore>,
    connections_max: usize,
    /// `max.connections.per.ip` and its overrides; `None`: unlimited.
    per_ip: Option<Arc<PerIp>>,
    /// Connection ids are never reused within a run (the core's contract),
    /// whichever listener a connection came in on.
    next_conn: Arc<AtomicU64>,
}

/// The broker's own connections, in process: the console's Kafka client
/// (`client::Client`) connects through this. Each `connect` is an
/// in-memory pipe whose far end is served as any accepted socket is
/// (`conn::start`: the same framing, the same broker task, the same
/// connection limit, and `doze_connections_*` in /metrics: a page view
/// opens one), on a listener that no network peer can
/// reach, marked `internal` so that the core lets it DESCRIBE and READ
/// whatever the ACLs say (`Listener::internal`).
///
/// Why not TCP to one of the broker's own listeners: every listener may be
/// SASL or TLS, and the console has no credentials (nor should it need a
/// user of its own in meta.db); and no port or address has to be found
/// that reaches the broker from inside it.
///
/// Not a `Connector` in a madsim build (no console there).
#[derive(Clone)]
pub struct InternalConnector {
    // Read only by the `Connector` impl, which a madsim build has not.
    #[cfg_attr(madsim, allow(dead_code))]
    accepting: Accepting,
    /// The address the broker tells a connection that is on none of its
    /// listeners (its default advertised address). Used as the client's
    /// bootstrap address, so that the broker's node, once learnt from
    /// Metadata, maps to the connection already open.
    bootstrap: String,
}

/// The internal listener's name (for the logs; no ACL names it).
pub const INTERNAL_LISTENER_NAME: &str = "doze-internal";
/// Bytes in flight each way in an in-process connection before the writer
/// waits for the reader.
#[cfg(not(madsim))]
const INTERNAL_PIPE_BYTES: usize = 64 * 1024;

impl InternalConnector {
    fn new(accepting: Accepting, settings: &BrokerConfig) -> Self {
        Self {
            accepting,
            bootstrap: format!("{}:{}", settings.advertised_host, settings.advertised_port),
        }
    }

    /// The address to give `Client::connect_with`.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }
}

#[cfg(not(madsim))]
impl crate::client::Connector for InternalConnector {
    type Stream = tokio::io::DuplexStream;

    /// Every address is this broker: one broker, one node.
    async fn connect(&self, _addr: &str) -> std::io::Result<tokio::io::DuplexStream> {
        let shared = &self.accepting;
        let Ok(permit) = Arc::clone(&shared.slots).try_acquire_owned() else {
            return Err(std::io::Error::other(format!(
                "the broker has {} connections open",
                shared.connections_max
            )));
        };
        // Not counted per address: it comes from no address.
        let slot = conn::Slot::new(permit, None, shared.shared.metrics.connection_accepted());
        let conn: ConnId = shared.next_conn.fetch_add(1, Ordering::Relaxed);
        let (ours, theirs) = tokio::io::duplex(INTERNAL_PIPE_BYTES);
        let listener = Listener {
            name: INTERNAL_LISTENER_NAME.into(),
            protocol: SecurityProtocol::Plaintext,
            tls_principal: None,
            internal: true,
        };
        // The peer is this process; ACLs never see it (see Listener::internal).
        let peer = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        debug!(conn, "internal connection");
        conn::start(conn, theirs, peer, listener, shared.shared.clone(), slot).await;
        Ok(ours)
    }
}

/// Accepts connections on one listener until aborted.
async fn accept_loop(bound: BoundListener, shared: Accepting) {
    let BoundListener {
        name,
        protocol,
        listener,
        tls,
        ..
    } = bound;
    loop {
        // A slot before the next connection is taken: at the limit, new
        // clients wait in the listen backlog until one closes, as Kafka's
        // acceptor waits (`quotas.rs`). A slot for the handshake too: a
        // crowd of silent TLS clients counts like any other.
        let permit = match Arc::clone(&shared.slots).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                warn!(listener = %name, limit = shared.connections_max, "at the connection limit (max.connections); waiting for a connection to close");
                Arc::clone(&shared.slots)
                    .acquire_owned()
                    .await
                    .expect("the slots are never closed")
            }
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                warn!(listener = %name, error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let per_ip = match shared.per_ip.as_ref().map(|p| p.admit(peer.ip())) {
            None => None,
            Some(Ok(slot)) => Some(slot),
            Some(Err(limit)) => {
                // Kafka logs a TooManyConnectionsException at INFO.
                info!(%peer, limit, "too many connections from this address (max.connections.per.ip); closed");
                continue; // dropping the stream closes it
            }
        };
        let slot = conn::Slot::new(permit, per_ip, shared.shared.metrics.connection_accepted());
        let conn: ConnId = shared.next_conn.fetch_add(1, Ordering::Relaxed);
        debug!(conn, %peer, listener = %name, "accepted");
        // Kafka requests are small and latency-bound; Nagle would hold them
        // (and a TLS handshake's flights) back.
        if let Err(e) = stream.set_nodelay(true) {
            debug!(conn, %peer, error = %e, "cannot set TCP_NODELAY");
        }
        #[cfg(not(madsim))]
        if let Err(e) = socket2::SockRef::from(&stream)
            .set_send_buffer_size(doze_core::limits::SOCKET_SEND_BUFFER_BYTES)
        {
            debug!(conn, %peer, error = %e, "cannot set SO_SNDBUF");
        }
        let listener_id = Listener {
            name: name.clone(),
            protocol,
            tls_principal: None,
            internal: false,
        };
        match &tls {
            None => conn::start(conn, stream, peer, listener_id, shared.shared.clone(), slot).await,
            Some(acceptor) => {
                let handshake = tls_handshake(acceptor.clone(), stream);
                let shared = shared.clone();
                tokio::spawn(async move {
                    let (stream, tls_principal) = match handshake.await {
                        Ok(done) => done,
                        Err(why) => {
                            // Kafka logs a failed handshake at INFO too.
                            info!(conn, %peer, listener = %listener_id.name, "TLS handshake failed: {why}; closed");
                            return; // the socket and the permit go with it
                        }
                    };
                    debug!(conn, %peer, principal = ?tls_principal, "TLS handshake done");
                    let listener_id = Listener {
                        tls_principal,
                        ..listener_id
                    };
                    conn::start(conn, stream, peer, listener_id, shared.shared, slot).await
                });
            }
        }
    }
}

/// A TLS server handshake, at most `TLS_HANDSHAKE_TIMEOUT`; with it, the
/// principal the client's certificate names, if it gave one.
async fn tls_handshake(
    acceptor: TlsAcceptor,
    stream: TcpStream,
) -> Result<(tokio_rustls::server::TlsStream<TcpStream>, Option<String>), String> {
    let stream = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream))
        .await
        .map_err(|_| format!("not done within {TLS_HANDSHAKE_TIMEOUT:?}"))?
        .map_err(|e| e.to_string())?;
    let principal = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(|leaf| crate::tls::principal(leaf));
    Ok((stream, principal))
}

/// The broker task's state: the core, and where its outputs go.
struct Driver<Q> {
    broker: Broker,
    /// Live connections. Absent: never seen, disconnected, or closed by us;
    /// frames still in flight from such a connection are dropped.
    conns: FxHashMap<ConnId, ConnHandle>,
    storage: Q,
    /// Where the time spent on each input is counted (`core_busy`).
    metrics: Arc<NetMetrics>,
    /// What the core said of topics' compression.type, for the readers.
    codecs: Arc<TopicCodecs>,
    /// `Input::Shutdown` was sent: no more frames go to the core.
    stopping: bool,
    /// The core said it serves (`StorageQueue::serving` was called).
    serving: bool,
    /// The core answered `Output::Stopped`.
    stopped: bool,
    /// The core's deadline the broker task sleeps towards (`poll_timeout`
    /// when it last looked), so that a completion handled on a worker's
    /// thread knows whether the task must look again.
    waits_for_ms: Option<i64>,
    /// A completion handled on a worker's thread failed (a worker gone, or
    /// the core panicked): the broker task ends with it.
    failed: Option<anyhow::Error>,
    /// Responses that may still be written directly (`direct_write.rs`)
    /// while handling the current input: some on a worker's thread, none
    /// on the broker task, whose writers' wake-ups cost little.
    direct_writes_left: usize,
}

/// The driver as the broker task and the storage's workers share it.
///
/// The broker task handles events, timers and the completions that come
/// through the channel; the completions a request waits on (`MetaDone`,
/// `SyncDone`) are handled on the worker's own thread that has them
/// (`Completions::deliver`), under the same lock, so one commit's steps do
/// not each wait for the broker task to wake: the meta worker's thread
/// queues the markers once the decision is durable, the disk worker's (or
/// its syncer's) answers once they are. Each `handle` still runs whole
/// under the lock and drains the core's outputs in order, so outputs keep
/// the core's order whichever thread drains them; nothing under the lock
/// waits (the queues and the writers' channels never block).
struct SharedDriver<Q> {
    driver: Mutex<Driver<Q>>,
    /// Wakes the broker task after a completion handled elsewhere changed
    /// what it waits for: an earlier deadline, the core stopped, a failure.
    wake: Notify,
}

impl<Q: StorageQueue> SharedDriver<Q> {
    /// For the broker task. The lock is poisoned only by a panic on the
    /// broker task itself (`deliver` catches the core's), which ends it.
    fn lock(&self) -> MutexGuard<'_, Driver<Q>> {
        self.driver.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A completion, handled on the calling worker's thread. Given back if
    /// the broker task panicked holding the lock (it is ending).
    fn deliver(&self, input: Input) -> Option<Input> {
        let Ok(mut driver) = self.driver.lock() else {
            return Some(input);
        };
        if driver.failed.is_some() {
            return None; // the broker task is ending; nobody waits for it
        }
        // The first response it lets go may leave from here
        // (`direct_write.rs`); the others go through their writers, which
        // write them on the runtime's threads, in parallel, while this one
        // goes back to its disk or meta.db work.
        driver.direct_writes_left = RESPONSE_DIRECT_WRITES_PER_COMPLETION_MAX;
        // A panic in the core must end the broker, as it does on the
        // broker task, and not the worker's thread, which the final sync
        // still needs.
        let handled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| driver.handle(input)));
        driver.direct_writes_left = 0;
        let wake = match handled {
            Ok(Ok(())) => {
                let earlier = match (driver.broker.poll_timeout(), driver.waits_for_ms) {
                    (Some(due), Some(waits)) => due < waits,
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                earlier || driver.stopped
            }
            Ok(Err(e)) => {
                driver.failed = Some(e);
                true
            }
            Err(_) => {
                driver.failed = Some(anyhow!("the core panicked handling a completion"));
                true
            }
        };
        drop(driver);
        if wake {
            self.wake.notify_one();
        }
        None
    }
}

/// The broker task: events, timers and queued completions, until the core
/// stops or the broker fails.
async fn run_broker<Q: StorageQueue>(
    shared: Arc<SharedDriver<Q>>,
    mut events: mpsc::Receiver<Event>,
    mut completions: mpsc::UnboundedReceiver<Input>,
    mut stop: oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    // Set once the shutdown starts: when to give up waiting for the core.
    let mut give_up: Option<Instant> = None;
    loop {
        let deadline_ms = {
            let mut driver = shared.lock();
            if let Some(e) = driver.failed.take() {
                return Err(e);
            }
            if driver.stopped {
                info!("the broker stopped cleanly");
                return Ok(());
            }
            let deadline_ms = driver.broker.poll_timeout();
            driver.waits_for_ms = deadline_ms;
            deadline_ms
        };
        // `poll_timeout` is wall-clock time; sleeping is monotonic. Sleep
        // towards the deadline, but look at the wall clock again at least
        // every TIMER_RECHECK_MS in case it jumped.
        let wake = deadline_ms.map(|deadline| {
            let wait_ms = (deadline - now_ms()).clamp(0, TIMER_RECHECK_MS);
            Instant::now() + Duration::from_millis(wait_ms as u64)
        });
        tokio::select! {
            // Order matters: the shutdown first, then a due timer (so a
            // stream of frames cannot starve it), then completions (they
            // unblock waiting requests), then new work.
            biased;
            _ = &mut stop, if give_up.is_none() => {
                info!("stopping: waiting for the broker to make everything durable");
                give_up = Some(Instant::now() + SHUTDOWN_WAIT);
                let mut driver = shared.lock();
                driver.stopping = true;
                driver.handle(Input::Shutdown)?;
            }
            () = tokio::time::sleep_until(give_up.unwrap_or_else(Instant::now)), if give_up.is_some() => {
                error!(
                    wait_s = SHUTDOWN_WAIT.as_secs(),
                    "the broker did not stop in time; stopping anyway (the next start may scan more)"
                );
                return Ok(());
            }
            () = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => {
                if deadline_ms.is_some_and(|deadline| now_ms() >= deadline) {
                    shared.lock().handle(Input::Tick)?;
                }
            }
            // A completion handled on a worker's thread: look again.
            () = shared.wake.notified() => {}
            Some(completion) = completions.recv() => shared.lock().handle(completion)?,
            Some(event) = events.recv() => shared.lock().on_event(event)?,
            else => return Err(anyhow!("every event source closed")),
        }
    }
}

impl<Q: StorageQueue> Driver<Q> {
    fn on_event(&mut self, event: Event) -> anyhow::Result<()> {
        match event {
            Event::Connected {
                conn,
                handle,
                client_host,
                listener,
            } => {
                let previous = self.conns.insert(conn, handle);
                assert!(previous.is_none(), "connection id {conn} reused");
                self.handle(Input::Connected {
                    conn,
                    client_host,
                    listener,
                })
            }
            Event::Frame {
                conn,
                frame,
                checks,
                read_at,
                charge,
            } => {
                let Some(handle) = self.conns.get_mut(&conn) else {
                    return Ok(()); // closed by us; the core is done with it
                };
                if self.stopping {
                    debug!(conn, "stopping; request dropped");
                    handle.unanswered.answered();
                    return Ok(());
                }
                handle.requests.read(&frame, read_at);
                let input = match checks {
                    Some(checks) => Input::CheckedFrame {
                        conn,
                        frame,
                        checks,
                    },
                    None => Input::Frame { conn, frame },
                };
                let handled = self.handle(input);
                // Taken by the core: what it keeps of the frame (appends)
                // is counted by the storage's backlog until written.
                drop(charge);
                handled
            }
            Event::Disconnected { conn } => {
                self.conns.remove(&conn);
                self.handle(Input::Disconnected { conn })
            }
            Event::ResponseReadFailed { conn, range, error } => {
                // Dropping the handle stops the reader (the writer has
                // stopped); the core takes the partition offline.
                self.conns.remove(&conn);
                self.handle(Input::ResponseReadFailed { conn, range, error })
            }
            Event::MetricsSnapshot { reply } => {
                // The console may have given up waiting; nothing to do then.
                let _ = reply.send(self.broker.metrics_snapshot());
                Ok(())
            }
        }
    }

    /// Feeds one input to the core and carries out everything it asks for.
    fn handle(&mut self, input: Input) -> anyhow::Result<()> {
        let started = std::time::Instant::now();
        let handled = self.handle_and_carry_out(input);
        self.metrics.core_busy(started.elapsed());
        handled
    }

    fn handle_and_carry_out(&mut self, input: Input) -> anyhow::Result<()> {
        self.broker.handle(now_ms(), input);
        // This input's ops (a parked request's reads, say) come after the
        // point.
        if !self.serving && self.broker.is_serving() {
            self.serving = true;
            self.storage.serving();
        }
        // Disk ops go to the worker together, in order, before any output
        // that must come after them (a response's pins) and at the end.
        let mut disk_ops = Vec::new();
        while let Some(output) = self.broker.poll_output() {
            if !matches!(output, Output::Disk(_)) && !disk_ops.is_empty() {
                self.storage
                    .submit_disks(std::mem::take(&mut disk_ops))
                    .map_err(|e| anyhow!(e.0))?;
            }
            match output {
                Output::Response { conn, frame } => {
                    let timing = self.answered(conn, &frame);
                    self.respond(conn, Response::Frame(frame), timing)
                }
                Output::ResponseParts { conn, parts } => {
                    // Pinned here, in output order with the disk ops (the
                    // contract in storage.rs); not for a connection gone.
                    if self.conns.contains_key(&conn) {
                        // The first part is bytes: the header the core wrote.
                        let timing = match parts.first() {
                            Some(FramePart::Bytes(head)) => self.answered(conn, head),
                            _ => None,
                        };
                        let frame = self.storage.response_frame(parts);
                        self.respond(conn, Response::Parts(frame), timing);
                    }
                }
                // Answered without a response: its reader may read one more.
                Output::NoResponse { conn } => {
                    if let Some(handle) = self.conns.get(&conn) {
                        handle.unanswered.answered();
                    }
                }
                Output::Close { conn } => {
                    if self.conns.remove(&conn).is_some() {
                        debug!(conn, "closing at the broker's request");
                    }
                }
                Output::Disk(op) => disk_ops.push(op),
                // After the disk ops before it (flushed above), in order.
                Output::Clean { io, work } => self
                    .storage
                    .submit_clean(io, work)
                    .map_err(|e| anyhow!(e.0))?,
                Output::Meta { io, ops } => self
                    .storage
                    .submit_meta(MetaWrite { io, ops })
                    .map_err(|e| anyhow!(e.0))?,
                Output::Stopped if self.stopping => self.stopped = true,
                Output::Stopped => warn!("the broker said Stopped unasked; ignored"),
                Output::TopicCompression { topic, prep } => self.codecs.set(topic, prep),
                Output::Authenticated { conn } => {
                    if let Some(handle) = self.conns.get(&conn) {
                        handle.authenticated.store(true, Ordering::Release);
                    }
                }
            }
        }
        if !disk_ops.is_empty() {
            self.storage
                .submit_disks(disk_ops)
                .map_err(|e| anyhow!(e.0))?;
        }
        Ok(())
    }

    /// The stamp of the request a response of `conn` answers.
    fn answered(&mut self, conn: ConnId, response_head: &[u8]) -> Option<RequestTiming> {
        self.conns.get_mut(&conn)?.requests.answered(response_head)
    }

    fn respond(&mut self, conn: ConnId, response: Response, timing: Option<RequestTiming>) {
        let Some(handle) = self.conns.get(&conn) else {
            return; // gone; its reader has sent or will send Disconnected
        };
        let mut response = response;
        // Written here if allowed and the writer is idle
        // (`direct_write.rs`); else, or for what the socket did not take,
        // queued under the same lock, so that the writer does not go idle
        // with it queued.
        let mut direct = handle.direct.as_deref().map(|d| (d, d.lock()));
        if let Some((socket, state)) = direct.as_mut() {
            if **state == WriterState::Idle {
                if let Response::Frame(frame) = &response {
                    if self.direct_writes_left > 0 && DirectWrite::fits(frame.len()) {
                        self.direct_writes_left -= 1;
                        match socket.write(state, frame) {
                            Written::Whole => {
                                handle.unanswered.answered();
                                if let Some(t) = timing {
                                    self.metrics.request_done(t.api_key, t.read_at.elapsed());
                                }
                                return;
                            }
                            Written::Rest(rest) => response = Response::Rest(rest),
                            Written::Nothing => {}
                        }
                    }
                }
                **state = WriterState::Busy;
            }
        }
        let sent = handle.responses.try_send(Reply { response, timing });
        drop(direct);
        match sent {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                // Unreachable while each response answers one request
                // its reader counted (`conn::Unanswered`).
                warn!(
                    conn,
                    queued = conn::RESPONSES_QUEUED_MAX,
                    "more responses queued than requests read; closing"
                );
                self.conns.remove(&conn);
            }
            // The writer failed; the reader will notice the dead socket.
            Err(TrySendError::Closed(_)) => {
                self.conns.remove(&conn);
            }
        }
    }
}

/// Wall-clock milliseconds since the UNIX epoch: the only clock the core sees.
fn now_ms() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}
