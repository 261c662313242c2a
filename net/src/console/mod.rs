//! The operator console: an HTTP/1 listener in the broker process, opened
//! beside the Kafka listeners at start-up (`doze.console.listen`, default
//! `127.0.0.1:8092`; `none` opens nothing).
//!
//! Routes (`route`), each a module beside this one:
//! - `GET /metrics`: the broker's numbers in Prometheus' text format
//!   (`metrics.rs`).
//!
//! Anything else is 404, and a method other than GET or HEAD on a route is
//! 405. A page is one more arm in `route` and a module of its own.
//!
//! The core's numbers come from the broker task, which owns the core: a
//! handler sends `Event::MetricsSnapshot` on the connections' channel and
//! waits for the reply (at most `CONSOLE_SNAPSHOT_WAIT_MS`). The driver's
//! own (latency, fsyncs, connections) are read from `NetMetrics`.
//!
//! Bounds: at most `CONSOLE_CONNECTIONS_MAX` connections at once (one more
//! is closed as it comes), one request per connection (no keep-alive, so an
//! idle scraper holds nothing), its header within
//! `CONSOLE_HEADER_READ_TIMEOUT_MS`, the whole exchange within
//! `CONSOLE_CONNECTION_MS_MAX`. Request bodies are never read.
//!
//! Not in a madsim build: the simulation tests have no console, and hyper
//! is not built there (`start` says so and serves nothing).

pub mod metrics;

use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::server::Event;
use metrics::NetMetrics;

/// The console's address as a URL, for the start-up line.
pub fn url(listener: &TcpListener) -> anyhow::Result<String> {
    let local = listener
        .local_addr()
        .context("cannot read the console's address")?;
    Ok(format!("http://{local}/"))
}

/// Serves the console on `listener` until the task is aborted.
#[cfg(not(madsim))]
pub fn start(
    listener: TcpListener,
    events: mpsc::Sender<Event>,
    metrics: Arc<NetMetrics>,
) -> Option<JoinHandle<()>> {
    let console = Arc::new(http::Console { events, metrics });
    Some(tokio::spawn(http::accept_loop(listener, console)))
}

#[cfg(madsim)]
pub fn start(
    _listener: TcpListener,
    _events: mpsc::Sender<Event>,
    _metrics: Arc<NetMetrics>,
) -> Option<JoinHandle<()>> {
    tracing::warn!("no console in a madsim build; its listener is not served");
    None
}

#[cfg(not(madsim))]
mod http {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use doze_core::limits::{
        CONSOLE_CONNECTIONS_MAX, CONSOLE_CONNECTION_MS_MAX, CONSOLE_HEADER_READ_TIMEOUT_MS,
        CONSOLE_SNAPSHOT_WAIT_MS,
    };
    use http_body_util::Full;
    use hyper::body::Incoming;
    use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
    use hyper::{Method, Request, Response, StatusCode};
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tokio::net::TcpListener;
    use tokio::sync::{mpsc, oneshot, Semaphore};
    use tracing::{debug, warn};

    use super::metrics::{self, NetMetrics};
    use crate::server::Event;

    /// Pause after a failed accept (out of file descriptors), so the loop
    /// does not spin while it lasts.
    const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

    /// What the handlers share.
    pub(super) struct Console {
        /// To ask the broker task for the core's numbers.
        pub events: mpsc::Sender<Event>,
        pub metrics: Arc<NetMetrics>,
    }

    pub(super) async fn accept_loop(listener: TcpListener, console: Arc<Console>) {
        let slots = Arc::new(Semaphore::new(CONSOLE_CONNECTIONS_MAX));
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    warn!(error = %e, "console: accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            };
            let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
                debug!(%peer, limit = CONSOLE_CONNECTIONS_MAX, "console: too many connections; refused");
                continue; // dropping the stream closes it
            };
            let console = Arc::clone(&console);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|req| {
                    let console = Arc::clone(&console);
                    async move { Ok::<_, Infallible>(route(&console, req).await) }
                });
                let exchange = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(Duration::from_millis(CONSOLE_HEADER_READ_TIMEOUT_MS))
                    .keep_alive(false)
                    .serve_connection(TokioIo::new(stream), service);
                let limit = Duration::from_millis(CONSOLE_CONNECTION_MS_MAX);
                match tokio::time::timeout(limit, exchange).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => debug!(%peer, error = %e, "console: connection failed"),
                    Err(_) => debug!(%peer, "console: connection too slow; closed"),
                }
                drop(permit);
            });
        }
    }

    /// The router: one arm per page.
    async fn route(console: &Console, req: Request<Incoming>) -> Response<Full<Bytes>> {
        match req.uri().path() {
            "/metrics" => match *req.method() {
                Method::GET | Method::HEAD => metrics_page(console).await,
                _ => method_not_allowed("GET, HEAD"),
            },
            _ => plain(StatusCode::NOT_FOUND, "not found\n"),
        }
    }

    /// `/metrics`: the core's snapshot, asked of the broker task, and the
    /// driver's own numbers.
    async fn metrics_page(console: &Console) -> Response<Full<Bytes>> {
        let (reply, snapshot) = oneshot::channel();
        let wait = Duration::from_millis(CONSOLE_SNAPSHOT_WAIT_MS);
        let asked = async {
            console
                .events
                .send(Event::MetricsSnapshot { reply })
                .await
                .ok()?;
            snapshot.await.ok()
        };
        let Ok(Some(snapshot)) = tokio::time::timeout(wait, asked).await else {
            // Stopping, or too busy to answer in time.
            return plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "the broker did not answer in time\n",
            );
        };
        let text = metrics::render(&snapshot, &console.metrics);
        let mut response = Response::new(Full::new(Bytes::from(text)));
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static(metrics::CONTENT_TYPE),
        );
        response
    }

    fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
        let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
        *response.status_mut() = status;
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }

    fn method_not_allowed(allow: &'static str) -> Response<Full<Bytes>> {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static(allow));
        response
    }
}
