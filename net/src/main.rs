//! `doze-kafka`: the production binary.
//!
//! This file is the process shell: flags, logging, signals and exit codes.
//! The order of start-up matters and is spelled out in `run`: every usage error
//! is found before anything touches the disk or the network, the data dir is
//! locked before it is read, and the listening line is printed only once the
//! broker has booted and connections are being accepted (tests wait for it).
//!
//! Exit codes: 0 after a clean shutdown, 2 for bad usage (flags, config file),
//! 1 for anything else (port in use, data dir unusable, a failed final sync).
//!
//! Built with `--cfg madsim` (for the simulation tests) there is no binary to
//! speak of: signals, real files and threads do not exist inside madsim, so
//! `main` only says so. The server itself is in the library and is the same.
#![cfg_attr(madsim, allow(dead_code, unused_imports))]

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
#[cfg(not(madsim))]
use tokio::signal::unix::{signal, Signal, SignalKind};
use tracing_subscriber::EnvFilter;

use doze_net::config::HostPort;
use doze_net::{alloc, boot, config, datadir, server, storage};

#[global_allocator]
static GLOBAL: alloc::GuardedAlloc = alloc::GuardedAlloc;

/// How long connection tasks get to finish once the broker has shut down;
/// by then everything durable is already on disk.
const RUNTIME_SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// A single-node, Kafka-compatible broker.
#[derive(Parser, Debug)]
#[command(name = "doze-kafka", version, about)]
struct Cli {
    /// Address to accept Kafka clients on.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:9092")]
    listen: HostPort,

    /// Address clients are told to connect to (Metadata, FindCoordinator).
    /// Defaults to the listen address.
    #[arg(long, value_name = "HOST:PORT")]
    advertised_listener: Option<HostPort>,

    /// Directory holding meta.db and the partition logs.
    #[arg(long, value_name = "DIR", default_value = "./doze-data")]
    data_dir: PathBuf,

    /// Java-properties file of broker settings (key=value lines, # comments).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// One broker setting; may be repeated and wins over --config.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

#[cfg(madsim)]
fn main() -> ExitCode {
    eprintln!("doze-kafka: error: built with --cfg madsim; this build is for the simulation tests");
    ExitCode::from(2)
}

#[cfg(not(madsim))]
fn main() -> ExitCode {
    alloc::return_large_frees_to_the_system();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e),
    };
    init_logging();

    // Settings are checked before the data dir or the port is touched, so a
    // typo never leaves a lock file or a half-started broker behind.
    let settings = match config::load(cli.config.as_deref(), &cli.set) {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("doze-kafka: error: {e}");
            return ExitCode::from(2);
        }
    };

    match run(cli, settings) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` puts the whole context chain on one line.
            eprintln!("doze-kafka: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--help` and `--version` print as clap formats them; a usage error becomes
/// one line (clap's own message adds a usage block and tips), exit code 2.
fn clap_exit(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let text = e.to_string();
    let first = text.lines().next().unwrap_or("bad usage");
    let first = first.strip_prefix("error: ").unwrap_or(first);
    eprintln!("doze-kafka: error: {first} (see --help)");
    ExitCode::from(2)
}

/// Logs go to stderr so that stdout carries only the listening line, which
/// tests and scripts read.
fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

#[cfg(not(madsim))]
fn run(cli: Cli, mut settings: doze_core::BrokerConfig) -> anyhow::Result<()> {
    // A std listener, bound before the runtime exists, so that "port in use"
    // fails fast and leaves no data dir behind, and so that the real port is
    // known (for --listen HOST:0) before the broker learns its advertised
    // address.
    let listener = std::net::TcpListener::bind((cli.listen.host.as_str(), cli.listen.port))
        .with_context(|| format!("cannot listen on {}", cli.listen))?;
    listener
        .set_nonblocking(true)
        .context("cannot make the listener non-blocking")?;
    let local = listener
        .local_addr()
        .context("cannot read the listen address")?;

    // Locked before anything in it is read: two brokers must never share a
    // data dir.
    let data = datadir::DataDir::open(&cli.data_dir)?;

    let advertised = cli.advertised_listener.unwrap_or_else(|| HostPort {
        host: cli.listen.host.clone(),
        port: local.port(),
    });
    warn_if_unreachable(&advertised, local);
    settings.advertised_host = advertised.host.clone();
    settings.advertised_port = i32::from(advertised.port);

    let boot = boot::load(&data)?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("doze-net")
        .build()
        .context("cannot start the tokio runtime")?;
    let result = runtime.block_on(async {
        // Signals are registered before the listening line is printed: a test
        // that sends SIGTERM right after reading it must get a clean shutdown,
        // not the default action of the signal.
        let signals = Signals::register()?;
        let listener =
            tokio::net::TcpListener::from_std(listener).context("cannot register the listener")?;
        let setup = server::Setup {
            listener,
            advertised,
            settings,
            boot: boot.state,
            storage: storage::DiskAndSled {
                logs_dir: data.logs_dir(),
                db: boot.db,
            },
        };
        server::serve(setup, signals.first_then_force()).await
    });
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN_GRACE);
    // The lock goes last, once every worker has stopped writing.
    drop(data);
    result
}

/// Clients connect to the advertised address; 0.0.0.0 is not one they can use.
fn warn_if_unreachable(advertised: &HostPort, local: SocketAddr) {
    let unspecified = advertised
        .host
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified());
    if unspecified {
        tracing::warn!(
            listen = %local,
            "clients will be told to connect to {advertised}, which they cannot reach; \
             set --advertised-listener"
        );
    }
}

/// SIGTERM and SIGINT, both meaning "shut down cleanly".
#[cfg(not(madsim))]
struct Signals {
    term: Signal,
    int: Signal,
}

#[cfg(not(madsim))]
impl Signals {
    fn register() -> anyhow::Result<Self> {
        let term = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
        let int = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
        Ok(Self { term, int })
    }

    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }

    /// Resolves at the first signal. A second one, while the shutdown is under
    /// way, exits at once: an operator who asks twice does not want to wait.
    async fn first_then_force(mut self) {
        let name = self.recv().await;
        tracing::info!("{name} received; shutting down");
        tokio::spawn(async move {
            let name = self.recv().await;
            eprintln!("doze-kafka: {name} received again; exiting without a clean shutdown");
            std::process::exit(1);
        });
    }
}
