//! The operator console: an HTTP/1 listener in the broker process, opened
//! beside the Kafka listeners at start-up (`doze.console.listen`, default
//! `127.0.0.1:8092`; `none` opens nothing).
//!
//! Routes (`route`), each a module beside this one:
//! - `GET /`: the cluster page (`cluster.rs`): the broker, topics and
//!   partitions, transactions (hanging ones with the command that aborts
//!   them), consumer groups with lag.
//! - `GET /topics/{topic}/{partition}?from=OFFSET`: a partition's log, a
//!   page at a time (`partition.rs`, `window.rs`): batches, markers as
//!   dividers, what read_uncommitted and read_committed readers see, the
//!   LSO as a line named by what holds it.
//! - `GET /metrics`: the broker's numbers in Prometheus' text format
//!   (`metrics.rs`).
//!
//! Anything else is 404, as is an unknown topic or partition; a method
//! other than GET or HEAD on a route is 405.
//!
//! The pages get their facts by speaking Kafka's protocol to this broker
//! through `client::Client`, over in-process connections
//! (`server::InternalConnector`, `source.rs`), plus a listing of the data
//! directory for segment counts and sizes. Each page is server-rendered
//! HTML with an inline stylesheet (`html.rs`): no script, no CDN, works
//! offline; everything from the broker is escaped, and the
//! Content-Security-Policy forbids scripts anyway. Asking the broker is
//! bounded (`CONSOLE_PAGE_MS_MAX` a page, `CONSOLE_REQUEST_MS_MAX` a
//! request): a broker that fails or does not answer in time gives an
//! error page (502, 504), never a hang.
//!
//! `/metrics` takes the core's numbers from the broker task, which owns
//! the core: a handler sends `Event::MetricsSnapshot` on the connections'
//! channel and waits for the reply (at most `CONSOLE_SNAPSHOT_WAIT_MS`).
//! The driver's own (latency, fsyncs, connections) are read from
//! `NetMetrics`.
//!
//! Bounds: at most `CONSOLE_CONNECTIONS_MAX` connections at once (one more
//! is closed as it comes), one request per connection (no keep-alive, so an
//! idle scraper holds nothing), its header within
//! `CONSOLE_HEADER_READ_TIMEOUT_MS`, the whole exchange within
//! `CONSOLE_CONNECTION_MS_MAX`. Request bodies are never read.
//!
//! Not in a madsim build: the simulation tests have no console, and hyper
//! is not built there (`start` says so and serves nothing).

#[cfg(not(madsim))]
pub mod cluster;
pub mod html;
pub mod metrics;
#[cfg(not(madsim))]
pub mod partition;
#[cfg(not(madsim))]
pub mod source;
#[cfg(not(madsim))]
pub mod txns;
pub mod window;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use doze_core::BrokerConfig;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::server::{BoundListener, Event, InternalConnector};
use metrics::NetMetrics;

/// What start-up gives the console besides the broker's channels.
pub struct ConsoleSetup {
    /// `doze.console.listen`, bound.
    pub listener: TcpListener,
    /// `<data-dir>/logs`, for segment counts and sizes.
    pub logs_dir: PathBuf,
}

/// One listener, as the cluster page lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerFact {
    pub name: String,
    pub protocol: String,
    pub bound: String,
    pub advertised: String,
}

/// What the pages show that no Kafka API tells: from the settings and
/// start-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerFacts {
    pub node_id: i32,
    pub version: &'static str,
    pub listeners: Vec<ListenerFact>,
    pub console_url: String,
    /// `<data-dir>/logs`; None: sizes on disk are not shown.
    pub logs_dir: Option<PathBuf>,
    /// `transaction.max.timeout.ms`: find-hanging's age bound.
    pub transaction_max_timeout_ms: i64,
    /// The address the commands shown (`doze-kafka transactions ... abort`)
    /// connect to: the first PLAINTEXT listener's advertised address (the
    /// tools speak neither TLS nor SASL); None without one.
    pub tools_bootstrap: Option<String>,
}

impl BrokerFacts {
    /// The facts the page tests render with.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Self {
        Self {
            node_id: 1,
            version: "0.1.0",
            listeners: Vec::new(),
            console_url: "http://127.0.0.1:8092/".into(),
            logs_dir: None,
            transaction_max_timeout_ms: 900_000,
            tools_bootstrap: Some("127.0.0.1:9092".into()),
        }
    }

    pub fn new(
        settings: &BrokerConfig,
        listeners: &[BoundListener],
        console_url: String,
        logs_dir: PathBuf,
    ) -> Self {
        let listeners: Vec<ListenerFact> = listeners
            .iter()
            .map(|l| ListenerFact {
                name: if l.name.is_empty() {
                    "PLAINTEXT".into()
                } else {
                    l.name.clone()
                },
                protocol: l.protocol.name().into(),
                bound: l
                    .listener
                    .local_addr()
                    .map_or_else(|e| format!("? ({e})"), |a| a.to_string()),
                advertised: l.advertised.to_string(),
            })
            .collect();
        let tools_bootstrap = listeners
            .iter()
            .find(|l| l.protocol == "PLAINTEXT")
            .map(|l| l.advertised.clone());
        Self {
            node_id: settings.node_id,
            version: env!("CARGO_PKG_VERSION"),
            listeners,
            console_url,
            logs_dir: Some(logs_dir),
            transaction_max_timeout_ms: i64::from(settings.transaction_max_timeout_ms),
            tools_bootstrap,
        }
    }
}

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
    facts: BrokerFacts,
    kafka: InternalConnector,
) -> Option<JoinHandle<()>> {
    let console = Arc::new(http::Console {
        events,
        metrics,
        facts,
        kafka,
    });
    Some(tokio::spawn(http::accept_loop(listener, console)))
}

#[cfg(madsim)]
pub fn start(
    _listener: TcpListener,
    _events: mpsc::Sender<Event>,
    _metrics: Arc<NetMetrics>,
    _facts: BrokerFacts,
    _kafka: InternalConnector,
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
        CONSOLE_PAGE_MS_MAX, CONSOLE_SNAPSHOT_WAIT_MS,
    };
    use http_body_util::Full;
    use hyper::body::Incoming;
    use hyper::header::{
        HeaderName, HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE,
        REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    };
    use hyper::{Method, Request, Response, StatusCode};
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tokio::net::TcpListener;
    use tokio::sync::{mpsc, oneshot, Semaphore};
    use tracing::{debug, warn};

    use super::html::{self, esc};
    use super::metrics::{self, NetMetrics};
    use super::partition::Refusal;
    use super::{cluster, partition, source, BrokerFacts};
    use crate::client::{self, TopicPartition};
    use crate::server::{Event, InternalConnector};

    /// Pause after a failed accept (out of file descriptors), so the loop
    /// does not spin while it lasts.
    const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

    /// What the handlers share.
    pub(super) struct Console {
        /// To ask the broker task for the core's numbers.
        pub events: mpsc::Sender<Event>,
        pub metrics: Arc<NetMetrics>,
        pub facts: BrokerFacts,
        /// The pages' in-process Kafka connections.
        pub kafka: InternalConnector,
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
        let path = req.uri().path().to_string();
        let query = req.uri().query().map(str::to_string);
        let get = matches!(*req.method(), Method::GET | Method::HEAD);
        match path.as_str() {
            "/metrics" if get => metrics_page(console).await,
            "/" if get => cluster_page(console).await,
            _ if get && path.starts_with("/topics/") => {
                partition_page(console, &path, query.as_deref()).await
            }
            "/metrics" | "/" => method_not_allowed("GET, HEAD"),
            _ if path.starts_with("/topics/") => method_not_allowed("GET, HEAD"),
            _ => not_found(),
        }
    }

    /// `/`.
    async fn cluster_page(console: &Console) -> Response<Full<Bytes>> {
        let asked = async {
            let mut client = source::connect(&console.kafka).await?;
            cluster::gather(&mut client, &console.facts).await
        };
        match bounded(asked).await {
            Ok(Ok(view)) => html_page(StatusCode::OK, cluster::render(&view, &console.facts)),
            Ok(Err(e)) => broker_error(&e),
            Err(Late) => too_late(),
        }
    }

    /// `/topics/{topic}/{partition}?from=OFFSET`.
    async fn partition_page(
        console: &Console,
        path: &str,
        query: Option<&str>,
    ) -> Response<Full<Bytes>> {
        let Some(tp) = parse_partition_path(path) else {
            return not_found();
        };
        let from = match html::query_param(query, "from").filter(|f| !f.is_empty()) {
            None => None,
            Some(text) => match text.trim().parse::<i64>() {
                Ok(offset) => Some(offset),
                Err(_) => {
                    return error_page(
                        StatusCode::BAD_REQUEST,
                        "Bad offset",
                        &format!("from={text} is not an offset."),
                    )
                }
            },
        };
        let asked = async {
            let mut client = source::connect(&console.kafka)
                .await
                .map_err(Refusal::Broker)?;
            partition::gather(&mut client, &console.facts, &tp, from).await
        };
        match bounded(asked).await {
            Ok(Ok(view)) => html_page(StatusCode::OK, partition::render(&view, &console.facts)),
            Ok(Err(Refusal::Unknown)) => not_found(),
            Ok(Err(Refusal::Broker(e))) => broker_error(&e),
            Err(Late) => too_late(),
        }
    }

    /// A page that took longer than `CONSOLE_PAGE_MS_MAX` to ask for.
    struct Late;

    async fn bounded<T>(asked: impl std::future::Future<Output = T>) -> Result<T, Late> {
        tokio::time::timeout(Duration::from_millis(CONSOLE_PAGE_MS_MAX), asked)
            .await
            .map_err(|_| Late)
    }

    fn broker_error(e: &client::Error) -> Response<Full<Bytes>> {
        error_page(
            StatusCode::BAD_GATEWAY,
            "The broker could not answer",
            &format!("{e}"),
        )
    }

    fn too_late() -> Response<Full<Bytes>> {
        error_page(
            StatusCode::GATEWAY_TIMEOUT,
            "The broker did not answer in time",
            &format!(
                "Asking the broker for this page took longer than {} ms.",
                CONSOLE_PAGE_MS_MAX
            ),
        )
    }

    fn not_found() -> Response<Full<Bytes>> {
        error_page(
            StatusCode::NOT_FOUND,
            "Not found",
            "No such page, topic or partition.",
        )
    }

    /// `/topics/{topic}/{partition}`: the topic percent-decoded and a legal
    /// Kafka topic name, the partition a number.
    pub(super) fn parse_partition_path(path: &str) -> Option<TopicPartition> {
        let rest = path.strip_prefix("/topics/")?;
        let (topic, partition) = rest.split_once('/')?;
        let partition = partition.strip_suffix('/').unwrap_or(partition);
        if partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let partition: i32 = partition.parse().ok()?;
        let topic = String::from_utf8(html::percent_decode(topic, false)?).ok()?;
        legal_topic(&topic).then(|| TopicPartition::new(topic, partition))
    }

    /// Kafka's rule: 1 to 249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
    fn legal_topic(name: &str) -> bool {
        (1..=249).contains(&name.len())
            && name != "."
            && name != ".."
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    }

    fn error_page(status: StatusCode, title: &str, detail: &str) -> Response<Full<Bytes>> {
        let body = format!(
            "<h1>{}</h1><p class=\"error\" data-status=\"{}\">{}</p><p><a href=\"/\">the cluster page</a></p>",
            esc(title),
            status.as_u16(),
            esc(detail)
        );
        html_page(status, html::page(title, &body))
    }

    /// An HTML response with the headers every page carries: no script may
    /// run (there is none), no framing, nothing cached.
    fn html_page(status: StatusCode, text: String) -> Response<Full<Bytes>> {
        let mut response = Response::new(Full::new(Bytes::from(text)));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        headers.insert(
            CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
                 frame-ancestors 'none'; base-uri 'none'",
            ),
        );
        headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        headers.insert(
            HeaderName::from_static("x-frame-options"),
            HeaderValue::from_static("DENY"),
        );
        response
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

#[cfg(all(test, not(madsim)))]
mod tests {
    use super::http::parse_partition_path;
    use crate::client::TopicPartition;

    #[test]
    fn partition_paths() {
        let tp = |t: &str, p| Some(TopicPartition::new(t, p));
        assert_eq!(parse_partition_path("/topics/orders/3"), tp("orders", 3));
        assert_eq!(parse_partition_path("/topics/orders/3/"), tp("orders", 3));
        assert_eq!(parse_partition_path("/topics/a.b_c-d/0"), tp("a.b_c-d", 0));
        assert_eq!(parse_partition_path("/topics/%6Frders/0"), tp("orders", 0));
        for bad in [
            "/topics/orders",
            "/topics/orders/",
            "/topics/orders/x",
            "/topics/orders/-1",
            "/topics/orders/1/2",
            "/topics//0",
            "/topics/../0",
            "/topics/%2e%2e/0",
            "/topics/%3Cscript%3E/0",
            "/topics/a%2Fb/0",
            "/topics/%zz/0",
            "/topics/orders/99999999999",
        ] {
            assert_eq!(parse_partition_path(bad), None, "{bad}");
        }
    }
}
