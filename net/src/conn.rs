//! One client connection: a reader task and a writer task over the two halves
//! of the socket, so that a slow reader or writer never holds up the broker
//! task, and the broker task never waits on a socket.
//!
//! Framing is Kafka's: a 4-byte big-endian size, then that many bytes. A size
//! of zero, a negative size or one above `limits::REQUEST_BYTES_MAX` closes the
//! connection before anything more is read (Kafka does the same for
//! `socket.request.max.bytes`); so does one above
//! `sasl.server.max.receive.size` from a connection on a SASL listener that
//! has not authenticated yet (Kafka's SaslServerAuthenticator reads with that
//! bound). A frame's declared size is charged to the request budget
//! (`budget.rs`) before its buffer is allocated or a byte of it is read; the
//! reader waits, reading nothing, until its charge fits.
//!
//! Backpressure: at most `limits::CONN_REQUESTS_IN_FLIGHT_MAX` requests
//! of a connection are read and not yet answered (`Unanswered`). At that
//! many the reader stops reading, not even the next size prefix, and the
//! client waits in TCP, as Kafka mutes a channel while its request is
//! handled; it reads on once a response has been written or the core says
//! a request gets none (an acks=0 Produce, `Output::NoResponse`). So the
//! core never holds more of a connection's requests than its own bound (it
//! would close the connection), and the writer's queue never holds more
//! responses than that either, however slowly the client reads them.
//!
//! Memory at rest: an idle connection holds no read buffer (the reader
//! waits on the 4 bytes of the next size, then reads the frame into a
//! buffer of exactly its size) and a small write buffer, touched only as
//! far as its responses filled it.
//!
//! Responses go out in the order the broker task queued them. A response
//! made of parts (a Fetch whose records are file ranges) comes as a future
//! from the storage (`StorageQueue::response_frame`), which pinned its files
//! when the broker task dispatched it; the writer awaits it (the reads run
//! off the broker task) before writing; a large one comes in chunks read
//! ahead while the first ones are written (`storage::Frame`), or, on a
//! plain TCP socket, goes from the page cache with sendfile(2)
//! (`ReadyFrame::Pinned`, `filereader.rs`). If a part cannot be read, the
//! writer stops, and the broker task hears of it
//! (`Event::ResponseReadFailed`) and closes the connection: nothing of that
//! frame is sent if its first chunk failed (or, spliced, if its file is
//! too short), and a later failure cuts it short (the client sees the
//! connection close mid-response).
//!
//! The socket is a plain TCP stream or a TLS stream over one (`Socket`);
//! the reader and writer are the same code for both, compiled for each, so
//! the plaintext path pays nothing for TLS. Over TLS the response's file
//! parts, once read, are encrypted like any other bytes; nothing bypasses
//! the stream.
//!
//! Latency: the reader stamps each frame with the instant it was read; the
//! broker task, which sees both the requests and the responses of a
//! connection, keeps those stamps in order (`RequestTimes`) and hands each
//! response its request's stamp; the writer records the time from one to
//! the response written (flushed to the socket) in the request latency
//! histogram of the request's API (`console::metrics`).
//!
//! Lifetime: the broker task holds a `ConnHandle`. Dropping it (the core said
//! `Close`, or the client stopped reading its responses) stops the reader and
//! lets the writer flush what is queued, then close. Whoever ends the
//! connection, the reader sends exactly one `Disconnected` for it.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use doze_core::limits::{CONN_REQUESTS_IN_FLIGHT_MAX, REQUEST_BYTES_MAX};
use doze_core::security::Listener;
use doze_core::{ConnId, FileRange, IoError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore, SemaphorePermit};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::budget::{Charge, Lane, RequestBudget};
use crate::console::metrics::{NetMetrics, OpenConnection};
use crate::direct_write::DirectWrite;
#[cfg(not(madsim))]
use crate::filereader::SpliceError;
use crate::produce_prep::{is_produce, prepare_off_core, TopicCodecs};
use crate::server::Event;
use crate::storage::{recycle_chunk, Backlog, Frame, FrameFuture, FrameReadError, ReadyFrame};

/// Responses queued for one connection's writer, at most. Each answers one
/// request the reader counted in `Unanswered`, which holds no more than
/// this many, so the queue never fills; if it did (a bug), the broker task
/// closes the connection rather than wait.
pub const RESPONSES_QUEUED_MAX: usize = CONN_REQUESTS_IN_FLIGHT_MAX;
/// The write buffer: large enough that a burst of small responses leaves
/// in one system call; larger ones go around it. Its pages are backed only
/// as far as responses filled it, so an idle connection costs little.
const WRITE_BUFFER_BYTES: usize = 16 * 1024;

/// How long queued responses may take to go out once the connection is over
/// (the client hung up, or the broker closed it) before the socket is dropped.
const LINGER: Duration = Duration::from_secs(5);

/// One response, as the core gave it.
pub enum Response {
    /// A frame without its size prefix (the writer adds it).
    Frame(Bytes),
    /// A frame made of parts, its files pinned at dispatch: the writer
    /// awaits it, size prefix included.
    Parts(FrameFuture),
    /// The rest of a frame a direct write began (`direct_write.rs`): bytes
    /// for the socket as they are.
    Rest(Bytes),
}

/// A response on its way to the writer, with when its request was read.
pub struct Reply {
    pub response: Response,
    /// `None` when the request's stamp was not found (see `RequestTimes`).
    pub timing: Option<RequestTiming>,
}

/// When a request was read, and which API it called.
#[derive(Clone, Copy, Debug)]
pub struct RequestTiming {
    pub api_key: i16,
    pub read_at: Instant,
}

/// The broker task's side of a connection.
pub struct ConnHandle {
    pub responses: mpsc::Sender<Reply>,
    /// Never sent on: dropping it tells the reader to stop.
    pub _stop_reader: oneshot::Sender<()>,
    /// The requests given to the core and not yet answered, oldest first.
    pub requests: RequestTimes,
    /// Set when the core says the connection authenticated
    /// (`Output::Authenticated`); the reader then reads frames as any
    /// logged-in connection's.
    pub authenticated: Arc<AtomicBool>,
    /// Told of the requests the core answers with no response, and of
    /// those answered by a direct write.
    pub unanswered: Unanswered,
    /// A plain TCP socket, for responses written where they are produced
    /// while the writer is idle (`direct_write.rs`); `None`: always
    /// through the writer.
    pub direct: Option<Arc<DirectWrite>>,
}

/// A connection's requests read and not yet answered, at most
/// `CONN_REQUESTS_IN_FLIGHT_MAX` (why: `limits.rs`). The reader takes a
/// place before it reads a frame, waiting while there is none, and the
/// request keeps it until it is answered: the writer gives it back once
/// the response is written, the broker task when the core says the
/// request gets no response (`Output::NoResponse`). A request the core
/// never answers closes the connection, and the places go with it.
#[derive(Clone)]
pub struct Unanswered(Arc<Semaphore>);

impl Default for Unanswered {
    fn default() -> Self {
        Self(Arc::new(Semaphore::new(CONN_REQUESTS_IN_FLIGHT_MAX)))
    }
}

impl Unanswered {
    /// Waits for room for one more request; the caller `forget`s the place
    /// once the request is read (it is given back by `answered`), or drops
    /// it to give it back at once.
    async fn place(&self) -> SemaphorePermit<'_> {
        self.0.acquire().await.expect("never closed")
    }

    /// One request has been answered: the reader may read one more.
    pub fn answered(&self) {
        // More answers than requests would be the core's bug; they must not
        // raise the bound.
        if self.0.available_permits() < CONN_REQUESTS_IN_FLIGHT_MAX {
            self.0.add_permits(1);
        } else {
            warn!("an answer to a request that was not read; ignored");
        }
    }

    /// Requests read and not yet answered.
    #[cfg(test)]
    fn count(&self) -> usize {
        CONN_REQUESTS_IN_FLIGHT_MAX - self.0.available_permits()
    }
}

/// A connection's requests in the order they were read, each with its
/// correlation id, to match the responses, which leave in the same order.
/// A request that gets no response (an acks=0 produce) is passed over by
/// the next response whose correlation id is found behind it; one that is
/// never matched (a SASL token sent bare, without a header) falls out when
/// the queue is full. Owned by the broker task: no lock.
#[derive(Default)]
pub struct RequestTimes {
    queue: VecDeque<(i32, RequestTiming)>,
}

impl RequestTimes {
    /// A frame was read at `read_at` and given to the core. Its first 8
    /// bytes are the API key, the version and the correlation id in every
    /// request header version.
    pub fn read(&mut self, frame: &[u8], read_at: Instant) {
        let Some(header) = frame.get(..8) else {
            return; // the core closes the connection
        };
        let api_key = i16::from_be_bytes([header[0], header[1]]);
        let correlation_id = i32::from_be_bytes([header[4], header[5], header[6], header[7]]);
        if self.queue.len() >= CONN_REQUESTS_IN_FLIGHT_MAX {
            self.queue.pop_front();
        }
        self.queue
            .push_back((correlation_id, RequestTiming { api_key, read_at }));
    }

    /// The stamp of the request a response answers (its frame starts with
    /// the correlation id), dropping those before it, which had no
    /// response. `None`, and nothing dropped, if no request waiting has it.
    pub fn answered(&mut self, response_head: &[u8]) -> Option<RequestTiming> {
        let head = response_head.get(..4)?;
        let correlation_id = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let at = self
            .queue
            .iter()
            .position(|(id, _)| *id == correlation_id)?;
        self.queue.drain(..at);
        self.queue.pop_front().map(|(_, timing)| timing)
    }
}

/// What holds a connection's place: its permit under the connection limit,
/// its count under its address's limit and in the open-connections gauge.
/// Shared by the reader and the writer; the place is freed when both have
/// ended.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    _per_ip: Option<crate::quotas::IpSlot>,
    _open: OpenConnection,
}

impl Slot {
    pub fn new(
        permit: OwnedSemaphorePermit,
        per_ip: Option<crate::quotas::IpSlot>,
        open: OpenConnection,
    ) -> Self {
        Self {
            _permit: permit,
            _per_ip: per_ip,
            _open: open,
        }
    }
}

/// A connection's byte stream, split in two for its reader and writer.
pub trait Socket: Send + 'static {
    type Read: AsyncRead + Unpin + Send + 'static;
    type Write: AsyncWrite + SpliceTarget + Unpin + Send + 'static;
    fn split(self) -> (Self::Read, Self::Write);
    /// A descriptor of the socket of its own (dup(2)) for direct writes
    /// (`direct_write.rs`); `None` where the bytes must go through the
    /// writer: TLS, the in-process pipes, madsim.
    fn direct_fd(&self) -> Option<std::os::fd::OwnedFd> {
        None
    }
}

/// A writer half that large file-backed responses can be spliced into.
pub trait SpliceTarget {
    /// A descriptor of the socket of its own (dup(2)), for sendfile(2) on
    /// the blocking pool (`PinnedFrame::splice`); `None` where the bytes
    /// must pass through this process: TLS encrypts them, and madsim's and
    /// the in-process pipes have no socket.
    fn splice_fd(&self) -> Option<std::os::fd::OwnedFd> {
        None
    }
}

impl<T> SpliceTarget for tokio::io::WriteHalf<T> {}

/// Its own descriptor, so that the blocking task never writes to a number
/// the connection has closed and the kernel has reused; the socket stays
/// open until both are closed, and the task stops soon after its future is
/// dropped.
#[cfg(not(madsim))]
impl SpliceTarget for tokio::net::tcp::OwnedWriteHalf {
    fn splice_fd(&self) -> Option<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        let stream: &TcpStream = self.as_ref();
        stream.as_fd().try_clone_to_owned().ok()
    }
}

impl Socket for TcpStream {
    type Read = OwnedReadHalf;
    type Write = OwnedWriteHalf;

    fn split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        split(self)
    }

    #[cfg(not(madsim))]
    fn direct_fd(&self) -> Option<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        self.as_fd().try_clone_to_owned().ok()
    }
}

/// One TLS session serves both directions, so its halves share it behind
/// tokio's lock (held for one poll at a time).
impl Socket for tokio_rustls::server::TlsStream<TcpStream> {
    type Read = tokio::io::ReadHalf<Self>;
    type Write = tokio::io::WriteHalf<Self>;

    fn split(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self)
    }
}

/// The broker's own in-process connections (the console's Kafka client,
/// `server::InternalConnector`): one end of an in-memory pipe.
#[cfg(not(madsim))]
impl Socket for tokio::io::DuplexStream {
    type Read = tokio::io::ReadHalf<Self>;
    type Write = tokio::io::WriteHalf<Self>;

    fn split(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self)
    }
}

/// What every connection shares with the rest of the server.
#[derive(Clone)]
pub struct Shared {
    pub events: mpsc::Sender<Event>,
    /// Appends queued to the disk: no new request is read while too many.
    pub backlog: Arc<Backlog>,
    /// What request frames may hold, charged before they are read.
    pub budget: Arc<RequestBudget>,
    /// The largest frame before authentication
    /// (`sasl.server.max.receive.size`).
    pub unauthenticated_frame_bytes_max: usize,
    /// Where the writers record request latency.
    pub metrics: Arc<NetMetrics>,
    /// The topics whose Produce batches the reader recompresses before
    /// handing a frame in (`produce_prep`).
    pub codecs: Arc<TopicCodecs>,
}

/// Registers the connection with the broker task (which `listener` it came
/// in on, as the core needs to know), then starts its reader and writer.
/// `slot` holds its place (the connection limit, the gauge) until both end.
pub async fn start<S: Socket>(
    conn: ConnId,
    stream: S,
    peer: SocketAddr,
    listener: Listener,
    shared: Shared,
    slot: Slot,
) {
    let Shared {
        events,
        backlog,
        budget,
        unauthenticated_frame_bytes_max,
        metrics,
        codecs,
    } = shared;
    let direct = stream.direct_fd().map(|fd| Arc::new(DirectWrite::new(fd)));
    let (read_half, write_half) = stream.split();
    let (responses, queued) = mpsc::channel(RESPONSES_QUEUED_MAX);
    let (stop_reader, reader_stopped) = oneshot::channel();
    let unanswered = Unanswered::default();
    // Only a SASL listener's connections have to log in; the others are
    // who their listener (or TLS certificate) says from the start.
    let authenticated = Arc::new(AtomicBool::new(!listener.protocol.is_sasl()));
    // Registered before the reader starts, so the broker task knows the
    // connection before its first frame arrives on the same channel.
    let handle = ConnHandle {
        responses,
        _stop_reader: stop_reader,
        requests: RequestTimes::default(),
        authenticated: Arc::clone(&authenticated),
        unanswered: unanswered.clone(),
        direct: direct.clone(),
    };
    let client_host = format!("/{}", peer.ip());
    if events
        .send(Event::Connected {
            conn,
            handle,
            client_host,
            listener,
        })
        .await
        .is_err()
    {
        return; // shutting down
    }
    debug!(conn, %peer, "connected");
    let slot = Arc::new(slot);
    let (reader_done, writer_linger) = oneshot::channel();
    tokio::spawn(write_loop(
        Writer {
            conn,
            events: events.clone(),
            metrics: Arc::clone(&metrics),
            unanswered: unanswered.clone(),
            direct,
        },
        write_half,
        queued,
        writer_linger,
        Arc::clone(&slot),
    ));
    tokio::spawn(read_loop(
        Reader {
            conn,
            peer,
            events,
            backlog,
            budget,
            authenticated,
            unauthenticated_frame_bytes_max,
            codecs,
            metrics,
            unanswered,
        },
        read_half,
        reader_stopped,
        reader_done,
        slot,
    ));
}

/// What the reader needs besides its socket and the signals of its end.
struct Reader {
    conn: ConnId,
    peer: SocketAddr,
    events: mpsc::Sender<Event>,
    /// Appends queued and not yet written: no new request while too many.
    backlog: Arc<Backlog>,
    budget: Arc<RequestBudget>,
    authenticated: Arc<AtomicBool>,
    unauthenticated_frame_bytes_max: usize,
    codecs: Arc<TopicCodecs>,
    metrics: Arc<NetMetrics>,
    /// Its requests not yet answered: none read while there are too many.
    unanswered: Unanswered,
}

async fn read_loop<R: AsyncRead + Unpin>(
    reader: Reader,
    read_half: R,
    mut stop: oneshot::Receiver<()>,
    _done: oneshot::Sender<()>,
    _slot: Arc<Slot>,
) {
    let Reader {
        conn,
        peer,
        events,
        backlog,
        budget,
        authenticated,
        unauthenticated_frame_bytes_max,
        codecs,
        metrics,
        unanswered,
    } = reader;
    let mut socket = read_half;
    loop {
        let frame = tokio::select! {
            // No new request while the disk is behind, and none whose
            // bytes the budget cannot hold: the client waits in its
            // socket, not in our memory.
            frame = async {
                // Not a byte more while the connection has its most
                // requests unanswered: the client waits in TCP (Kafka
                // mutes the channel), and the broker holds at most that
                // many of its requests and responses.
                let place = unanswered.place().await;
                backlog.room().await;
                // Asked once the frame's size is in, not before: the
                // client sends its first request after authenticating
                // only once it has the answer, which leaves after the
                // broker task set the flag.
                let lane = || {
                    if authenticated.load(Ordering::Acquire) {
                        (Lane::Authenticated, REQUEST_BYTES_MAX)
                    } else {
                        (Lane::Unauthenticated, unauthenticated_frame_bytes_max)
                    }
                };
                let frame = read_frame(&mut socket, &budget, lane).await;
                if let Ok(Some(_)) = frame {
                    place.forget(); // until the request is answered
                }
                frame
            } => frame,
            // The broker dropped its handle; whatever was half read is moot.
            _ = &mut stop => {
                debug!(conn, %peer, "closed by the broker");
                break;
            }
        };
        match frame {
            Ok(Some((mut frame, charge))) => {
                let read_at = Instant::now();
                let mut checks = None;
                // Not before SASL authentication: the core closes such a
                // connection at its first Produce, its records unread.
                if is_produce(&frame) && authenticated.load(Ordering::Acquire) {
                    let prepared = prepare_off_core(frame, Arc::clone(&codecs)).await;
                    if prepared.recompressed > 0 {
                        metrics.batches_recompressed(prepared.recompressed);
                    }
                    frame = prepared.frame;
                    checks = prepared.checks;
                }
                let frame = Event::Frame {
                    conn,
                    frame,
                    checks,
                    read_at,
                    charge,
                };
                if events.send(frame).await.is_err() {
                    return; // shutting down
                }
            }
            Ok(None) => {
                debug!(conn, %peer, "client closed the connection");
                break;
            }
            Err(FrameError::BadSize(size)) => {
                warn!(conn, %peer, size, "bad request size; closing");
                break;
            }
            Err(FrameError::Io(e)) => {
                debug!(conn, %peer, error = %e, "read failed; closing");
                break;
            }
        }
    }
    let _ = events.send(Event::Disconnected { conn }).await;
    // `_done` drops here and starts the writer's linger.
}

/// What the writer needs besides its socket and queue.
struct Writer {
    conn: ConnId,
    /// To report a file part it could not read.
    events: mpsc::Sender<Event>,
    /// Where the latency of each response written goes.
    metrics: Arc<NetMetrics>,
    /// Told of each response written: its request is answered.
    unanswered: Unanswered,
    /// Told when it is idle and when it ends (`direct_write.rs`).
    direct: Option<Arc<DirectWrite>>,
}

/// A file part of a response could not be read: the frame was not sent.
struct PartFailed {
    range: FileRange,
    error: IoError,
}

async fn write_loop<W: AsyncWrite + SpliceTarget + Unpin>(
    writer: Writer,
    write_half: W,
    mut queued: mpsc::Receiver<Reply>,
    reader_done: oneshot::Receiver<()>,
    _slot: Arc<Slot>,
) {
    let conn = writer.conn;
    let metrics = &writer.metrics;
    let mut out = Out::Idle(write_half);
    let write_all = async {
        // Written into the buffer, not yet flushed: their latency ends
        // when the flush does.
        let mut unflushed: Vec<RequestTiming> = Vec::new();
        while let Some(Reply { response, timing }) = queued.recv().await {
            let socket = out.buffered();
            let failed = match response {
                Response::Frame(frame) => {
                    write_frame(socket, &frame).await?;
                    None
                }
                Response::Rest(bytes) => {
                    socket.write_all(&bytes).await?;
                    None
                }
                Response::Parts(frame) => match frame.await {
                    Ok(ReadyFrame::Read(frame)) => write_read_frame(socket, frame).await?,
                    #[cfg(not(madsim))]
                    Ok(ReadyFrame::Pinned(frame)) => match socket.get_ref().splice_fd() {
                        Some(fd) => {
                            // What is buffered goes first: the frame goes
                            // around the buffer.
                            socket.flush().await?;
                            match frame.splice(fd).await {
                                Ok(()) => None,
                                Err(SpliceError::Read(e)) => frame_failed(socket, e).await?,
                                Err(SpliceError::Socket(e)) => return Err(e),
                            }
                        }
                        None => match frame.read().await {
                            Ok(frame) => write_read_frame(socket, frame).await?,
                            Err(e) => frame_failed(socket, e).await?,
                        },
                    },
                    Err(e) => frame_failed(socket, e).await?,
                },
            };
            if failed.is_some() {
                return Ok(failed);
            }
            // Written (at most a buffer's worth waits for the flush below):
            // the reader may read one more request.
            writer.unanswered.answered();
            unflushed.extend(timing);
            // Flush when nothing else is waiting: a burst of responses leaves
            // in one system call, a lone one leaves at once; the buffer goes
            // back to the allocator until the next burst.
            if queued.is_empty() {
                out.flush_and_idle().await?;
                for t in unflushed.drain(..) {
                    metrics.request_done(t.api_key, t.read_at.elapsed());
                }
                // Everything handed to the socket: the next response may
                // be written directly, unless one was queued meanwhile.
                if let Some(direct) = &writer.direct {
                    direct.writer_idle(|| queued.is_empty());
                }
            }
        }
        // The broker dropped the connection: deliver what it had answered
        // (e.g. the responses before a request it refused), then say goodbye.
        out.shutdown().await.map(|()| None)
    };
    let linger = async {
        let _ = reader_done.await;
        tokio::time::sleep(LINGER).await;
    };
    let failed = tokio::select! {
        result = write_all => match result {
            Ok(failed) => failed,
            Err(e) => {
                debug!(conn, error = %e, "write failed; closing");
                None
            }
        },
        // A client that stopped reading must not keep the socket forever.
        () = linger => {
            debug!(conn, "responses not delivered in time; dropping the socket");
            None
        }
    };
    if let Some(PartFailed { range, error }) = failed {
        warn!(conn, error = %error.0, "cannot read a response's records; closing");
        // Told before the socket closes, so that the core has heard of it
        // before anything the client does after seeing the close.
        let failed = Event::ResponseReadFailed { conn, range, error };
        let _ = writer.events.send(failed).await;
    }
    // No direct write after this one's end: their bytes would follow a
    // frame cut short, or go to a socket nobody writes.
    if let Some(direct) = &writer.direct {
        direct.writer_closed();
    }
    // Closes our side; the broker task stops the reader, and the socket is
    // gone once both have.
    drop(out);
}

/// A connection's writer half, with a write buffer only while responses
/// are being written: an idle connection holds none (thousands of idle
/// connections would otherwise hold one each).
enum Out<W> {
    Idle(W),
    Busy(BufWriter<W>),
    /// Only while changing from one to the other (or after a failed flush,
    /// when the connection is over).
    Gone,
}

impl<W: AsyncWrite + Unpin> Out<W> {
    /// The buffered writer, made when a burst of responses starts.
    fn buffered(&mut self) -> &mut BufWriter<W> {
        if let Out::Idle(_) = self {
            let Out::Idle(w) = std::mem::replace(self, Out::Gone) else {
                unreachable!()
            };
            *self = Out::Busy(BufWriter::with_capacity(WRITE_BUFFER_BYTES, w));
        }
        match self {
            Out::Busy(b) => b,
            _ => unreachable!("a connection's writer is used after it failed"),
        }
    }

    /// Writes what is buffered and lets the buffer go.
    async fn flush_and_idle(&mut self) -> io::Result<()> {
        if let Out::Busy(b) = self {
            b.flush().await?;
            let Out::Busy(b) = std::mem::replace(self, Out::Gone) else {
                unreachable!()
            };
            *self = Out::Idle(b.into_inner());
        }
        Ok(())
    }

    async fn shutdown(&mut self) -> io::Result<()> {
        match self {
            Out::Idle(w) => w.shutdown().await,
            Out::Busy(b) => b.shutdown().await,
            Out::Gone => Ok(()),
        }
    }
}

/// A frame read into memory: its first bytes (with the size prefix), then
/// the chunks read meanwhile. A part that fails after the first chunk went
/// out cuts the frame short: the client sees that when the connection
/// closes, and the failure is reported.
async fn write_read_frame<W: AsyncWrite + Unpin>(
    socket: &mut BufWriter<W>,
    frame: Frame,
) -> io::Result<Option<PartFailed>> {
    socket.write_all(&frame.head).await?;
    if let Some(mut rest) = frame.rest {
        while let Some(chunk) = rest.recv().await {
            match chunk {
                Ok(chunk) => {
                    socket.write_all(&chunk).await?;
                    recycle_chunk(chunk);
                }
                Err(e) => return frame_failed(socket, e).await,
            }
        }
    }
    Ok(None)
}

/// A frame could not be read (whole or from some point on): the responses
/// before it go out if they can, and a part's failure is reported.
async fn frame_failed<W: AsyncWrite + Unpin>(
    socket: &mut BufWriter<W>,
    e: FrameReadError,
) -> io::Result<Option<PartFailed>> {
    match e {
        FrameReadError::Part { range, error } => {
            let _ = socket.flush().await;
            Ok(Some(PartFailed { range, error }))
        }
        FrameReadError::Frame(why) => {
            Err(io::Error::other(format!("cannot send a response: {why}")))
        }
    }
}

/// The two halves of a socket. Real tokio splits a `TcpStream` without a
/// lock; madsim's simulated stream has no `into_split`, so there the generic
/// `tokio::io::split` (a lock per poll, uncontended) does the same job.
#[cfg(not(madsim))]
type OwnedReadHalf = tokio::net::tcp::OwnedReadHalf;
#[cfg(not(madsim))]
type OwnedWriteHalf = tokio::net::tcp::OwnedWriteHalf;
#[cfg(madsim)]
type OwnedReadHalf = tokio::io::ReadHalf<TcpStream>;
#[cfg(madsim)]
type OwnedWriteHalf = tokio::io::WriteHalf<TcpStream>;

#[cfg(not(madsim))]
fn split(stream: TcpStream) -> (OwnedReadHalf, OwnedWriteHalf) {
    stream.into_split()
}

#[cfg(madsim)]
fn split(stream: TcpStream) -> (OwnedReadHalf, OwnedWriteHalf) {
    tokio::io::split(stream)
}

#[derive(Debug)]
enum FrameError {
    BadSize(i32),
    Io(io::Error),
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// Reads one frame, charged to `budget` before its buffer is allocated;
/// `None` at a clean end of stream. `lane` says, once the frame's size is
/// read, which share it is charged to and how large it may be.
async fn read_frame<R: AsyncRead + Unpin>(
    socket: &mut R,
    budget: &RequestBudget,
    lane: impl FnOnce() -> (Lane, usize),
) -> Result<Option<(Bytes, Charge)>, FrameError> {
    let mut prefix = [0u8; 4];
    match socket.read_exact(&mut prefix).await {
        Ok(_) => {}
        // Also a hang-up within the prefix: nothing was lost that was whole.
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let size = i32::from_be_bytes(prefix);
    let (lane, bytes_max) = lane();
    let Some(len) = usize::try_from(size)
        .ok()
        .filter(|&n| n > 0 && n <= bytes_max.min(REQUEST_BYTES_MAX))
    else {
        return Err(FrameError::BadSize(size));
    };
    let charge = budget.charge(len, lane).await;
    // The whole frame's capacity at once: growing by doubling from a small
    // buffer copied a 1 MiB produce four times (`make bench` profile). A
    // size prefix alone reserves only address space: pages are backed as
    // the bytes arrive, and the charge bounds it.
    let mut frame = Vec::with_capacity(len);
    let read = socket.take(len as u64).read_to_end(&mut frame).await?;
    if read != len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed inside a frame",
        )
        .into());
    }
    Ok(Some((Bytes::from(frame), charge)))
}

async fn write_frame<W: AsyncWrite + Unpin>(
    socket: &mut BufWriter<W>,
    frame: &[u8],
) -> io::Result<()> {
    let size = i32::try_from(frame.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "response larger than 2 GiB"))?;
    socket.write_all(&size.to_be_bytes()).await?;
    socket.write_all(frame).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use doze_core::limits;

    async fn read_limited(
        bytes: &[u8],
        lane: Lane,
        bytes_max: usize,
    ) -> Result<Option<Bytes>, FrameError> {
        let budget = RequestBudget::default();
        let mut socket = bytes;
        let frame = read_frame(&mut socket, &budget, || (lane, bytes_max)).await?;
        Ok(frame.map(|(frame, charge)| {
            assert_eq!(charge.bytes(), frame.len(), "charged its size");
            frame
        }))
    }

    async fn read(bytes: &[u8]) -> Result<Option<Bytes>, FrameError> {
        read_limited(bytes, Lane::Authenticated, REQUEST_BYTES_MAX).await
    }

    #[tokio::test]
    async fn requests_unanswered_are_bounded_and_given_back() {
        let u = Unanswered::default();
        for _ in 0..CONN_REQUESTS_IN_FLIGHT_MAX {
            u.place().await.forget();
        }
        assert_eq!(u.count(), CONN_REQUESTS_IN_FLIGHT_MAX);
        // At the bound the reader waits, reading nothing.
        let waiting = tokio::time::timeout(Duration::from_millis(20), u.place()).await;
        assert!(waiting.is_err(), "a place beyond the bound");
        // One answered: one more may be read.
        u.answered();
        assert_eq!(u.count(), CONN_REQUESTS_IN_FLIGHT_MAX - 1);
        u.place().await.forget();
        // A place not kept (nothing was read) goes back at once.
        for _ in 0..CONN_REQUESTS_IN_FLIGHT_MAX {
            u.answered();
        }
        assert_eq!(u.count(), 0);
        drop(u.place().await);
        assert_eq!(u.count(), 0);
        // An answer to nothing does not raise the bound.
        u.answered();
        assert_eq!(u.count(), 0);
        assert_eq!(u.0.available_permits(), CONN_REQUESTS_IN_FLIGHT_MAX);
    }

    #[tokio::test]
    async fn framing() {
        let mut two = Vec::new();
        for body in [&b"abc"[..], b"de"] {
            two.extend_from_slice(&(body.len() as i32).to_be_bytes());
            two.extend_from_slice(body);
        }
        let budget = RequestBudget::default();
        let mut socket = &two[..];
        let mut next = async || {
            read_frame(&mut socket, &budget, || {
                (Lane::Authenticated, REQUEST_BYTES_MAX)
            })
            .await
            .unwrap()
            .map(|(frame, _charge)| frame)
        };
        assert_eq!(next().await.unwrap(), &b"abc"[..]);
        assert_eq!(next().await.unwrap(), &b"de"[..]);
        assert!(next().await.is_none());

        assert!(matches!(
            read(&0i32.to_be_bytes()).await,
            Err(FrameError::BadSize(0))
        ));
        assert!(matches!(
            read(&(-1i32).to_be_bytes()).await,
            Err(FrameError::BadSize(-1))
        ));
        let too_big = (REQUEST_BYTES_MAX as i32 + 1).to_be_bytes();
        assert!(matches!(read(&too_big).await, Err(FrameError::BadSize(_))));
        // Cut inside the body: an error, not a short frame.
        assert!(matches!(
            read(&[0, 0, 0, 5, 1, 2]).await,
            Err(FrameError::Io(_))
        ));
        // Cut inside the prefix: a plain hang-up.
        assert!(read(&[0, 0]).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn before_authentication_frames_are_limited_as_kafka_limits_them() {
        let max = limits::SASL_SERVER_MAX_RECEIVE_BYTES;
        let mut at_max = (max as i32).to_be_bytes().to_vec();
        at_max.resize(4 + max, 7);
        let frame = read_limited(&at_max, Lane::Unauthenticated, max).await;
        assert_eq!(frame.unwrap().unwrap().len(), max);
        // One byte more is refused from its size alone, before anything is
        // allocated or read.
        let over = ((max + 1) as i32).to_be_bytes();
        assert!(matches!(
            read_limited(&over, Lane::Unauthenticated, max).await,
            Err(FrameError::BadSize(size)) if size == max as i32 + 1
        ));
    }
}
