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
//! Subcommands: `doze-kafka users add`, a SCRAM user written into a stopped
//! broker's data dir (`users.rs`), `doze-kafka dump-log`, segment files
//! printed as Kafka's `kafka-dump-log.sh` prints them (`dump_log.rs`), and
//! the operator tools that ask a running broker (any Kafka broker) over the
//! protocol: `topics`, `groups` and `transactions` (`tools/`).
//!
//! Built with `--cfg madsim` (for the simulation tests) there is no binary to
//! speak of: signals, real files and threads do not exist inside madsim, so
//! `main` only says so. The server itself is in the library and is the same.
#![cfg_attr(madsim, allow(dead_code, unused_imports))]

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
#[cfg(not(madsim))]
use tokio::signal::unix::{signal, Signal, SignalKind};
use tracing_subscriber::EnvFilter;

use doze_core::security::scram::Mechanism;
use doze_net::config::{self, HostPort, PlannedListener, Settings};
use doze_net::console::metrics::NetMetrics;
use doze_net::{alloc, boot, datadir, dump_log, server, storage, tls, tools, users};

#[global_allocator]
static GLOBAL: alloc::GuardedAlloc = alloc::GuardedAlloc;

/// How long connection tasks get to finish once the broker has shut down;
/// by then everything durable is already on disk.
const RUNTIME_SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// A single-node, Kafka-compatible broker.
#[derive(Parser, Debug)]
#[command(
    name = "doze-kafka",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// Address to accept Kafka clients on (one PLAINTEXT listener; the
    /// `listeners` setting replaces it).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:9092")]
    listen: HostPort,

    /// Address clients are told to connect to (Metadata, FindCoordinator).
    /// Defaults to the listen address. Its host is also what a listener on
    /// 0.0.0.0 advertises.
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

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// SASL users of a data dir, while no broker runs on it.
    Users {
        #[command(subcommand)]
        command: UsersCommand,
    },
    /// Prints segment files (`<base offset>.log`) batch by batch, as Kafka's
    /// `kafka-dump-log.sh --files` does; offline, it only reads the files.
    DumpLog {
        /// The segment files; a comma-separated list works too.
        #[arg(
            long,
            value_name = "SEGMENT",
            required = true,
            num_args = 1..,
            value_delimiter = ','
        )]
        files: Vec<PathBuf>,

        /// Print each record's offset, timestamp, sizes, sequence and header
        /// keys.
        #[arg(long)]
        deep_iteration: bool,

        /// Print each record with its key and value too (implies
        /// --deep-iteration).
        #[arg(long)]
        print_data_log: bool,

        /// `human`: Kafka's lines; `json`: one JSON object per file, per line.
        #[arg(long, value_enum, default_value_t = OutputFormat::Human)]
        output: OutputFormat,
    },
    /// Topics of a running cluster: list, describe, create, delete (as
    /// Kafka's `kafka-topics.sh`).
    Topics(tools::topics::Args),
    /// Consumer groups of a running cluster: list, and describe with
    /// offsets and lag, members or state (as `kafka-consumer-groups.sh`).
    Groups(tools::groups::Args),
    /// Transactions of a running cluster: list, describe,
    /// describe-producers, find-hanging, abort (as `kafka-transactions.sh`).
    Transactions(tools::transactions::Args),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OutputFormat {
    Human,
    Json,
}

#[derive(Subcommand, Debug)]
enum UsersCommand {
    /// Adds (or replaces) a user's SCRAM credential; SASL/PLAIN logins
    /// check their password against it too.
    Add {
        /// The user; it logs in as the principal User:NAME.
        name: String,

        /// The SCRAM mechanism the credential is for.
        #[arg(long, value_name = "MECHANISM", value_parser = ["SCRAM-SHA-256", "SCRAM-SHA-512"])]
        mechanism: String,

        /// Read the password from the first line of stdin (the only way:
        /// a password on the command line would show in `ps`).
        #[arg(long)]
        password_stdin: bool,

        /// The broker's data directory.
        #[arg(long, value_name = "DIR", default_value = "./doze-data")]
        data_dir: PathBuf,
    },
}

#[cfg(madsim)]
fn main() -> ExitCode {
    eprintln!("doze-kafka: error: built with --cfg madsim; this build is for the simulation tests");
    ExitCode::from(2)
}

#[cfg(not(madsim))]
fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e),
    };
    init_logging();
    match cli.command {
        Some(Command::Users { command }) => return users_command(command),
        Some(Command::DumpLog {
            files,
            deep_iteration,
            print_data_log,
            output,
        }) => {
            let options = dump_log::Options {
                format: match output {
                    OutputFormat::Human => dump_log::Format::Human,
                    OutputFormat::Json => dump_log::Format::Json,
                },
                deep_iteration,
                print_data_log,
            };
            return dump_log_command(&files, options);
        }
        Some(Command::Topics(args)) => return tool_command(tools::topics::run(args)),
        Some(Command::Groups(args)) => return tool_command(tools::groups::run(args)),
        Some(Command::Transactions(args)) => return tool_command(tools::transactions::run(args)),
        None => {}
    }

    // Settings are checked before the data dir or the port is touched, so a
    // typo never leaves a lock file or a half-started broker behind.
    let plan = config::load(cli.config.as_deref(), &cli.set).and_then(|settings| {
        let plan = settings.net.plan(&cli.listen)?;
        Ok((settings, plan))
    });
    let (settings, plan) = match plan {
        Ok((settings, plan)) => {
            for w in &settings.warnings {
                eprintln!("doze-kafka: warning: {w}");
            }
            (settings, plan)
        }
        Err(e) => {
            eprintln!("doze-kafka: error: {e}");
            return ExitCode::from(2);
        }
    };

    match run(cli, settings, plan) {
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
/// tests and scripts read, and the console's address after it.
fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

#[cfg(not(madsim))]
fn run(cli: Cli, settings: Settings, mut plan: Vec<PlannedListener>) -> anyhow::Result<()> {
    let Settings {
        broker: mut settings,
        net,
        ..
    } = settings;
    // The TLS material is read before anything is bound or locked: a bad
    // certificate file stops the start as early as a bad setting.
    let tls = if plan.iter().any(|p| p.protocol.is_tls()) {
        let ssl_listener = plan
            .iter()
            .any(|p| p.protocol == doze_core::security::SecurityProtocol::Ssl);
        Some(tls::Acceptors::load(&net.tls, ssl_listener)?)
    } else {
        None
    };
    // The `--listen` listener keeps its flag for the advertised address.
    if net.listeners.is_none() {
        if let Some(first) = plan.first_mut() {
            first.advertised = first.advertised.take().or(cli.advertised_listener.clone());
        }
    }
    // What a listener on 0.0.0.0 advertises: the host the flags give.
    let fallback_host = cli
        .advertised_listener
        .as_ref()
        .map_or(cli.listen.host.as_str(), |a| a.host.as_str())
        .to_string();

    // Std listeners, bound before the runtime exists, so that "port in use"
    // fails fast and leaves no data dir behind, and so that the real ports
    // are known (for HOST:0) before the broker learns its advertised
    // addresses.
    let mut bound = Vec::new();
    for p in plan {
        let listener = std::net::TcpListener::bind((p.bind.host.as_str(), p.bind.port))
            .with_context(|| format!("cannot listen on {} ({})", p.bind, p.name))?;
        // std listens with a backlog of 128: a crowd connecting at once (10,000
        // clients, `tests/test_hostile.py`) overflowed it whenever the accept
        // loop fell 128 behind, and each dropped SYN cost its client a 1 s
        // retransmit (8,700-9,990 of 10,000 connected in 60 s). The kernel
        // caps it at net.core.somaxconn.
        socket2::SockRef::from(&listener)
            .listen(doze_core::limits::LISTEN_BACKLOG)
            .with_context(|| format!("cannot listen on {} ({})", p.bind, p.name))?;
        listener
            .set_nonblocking(true)
            .context("cannot make the listener non-blocking")?;
        let local = listener
            .local_addr()
            .context("cannot read the listen address")?;
        let advertised = p.advertised_address(local.port(), &fallback_host);
        warn_if_unreachable(&p.name, &advertised, local);
        bound.push((p, listener, advertised));
    }

    // The console's listener too, for the same reasons.
    let console = match &net.console.0 {
        Some(at) => {
            let listener = std::net::TcpListener::bind((at.host.as_str(), at.port))
                .with_context(|| format!("cannot listen on {at} (doze.console.listen)"))?;
            listener
                .set_nonblocking(true)
                .context("cannot make the console's listener non-blocking")?;
            Some(listener)
        }
        None => None,
    };

    // Locked before anything in it is read: two brokers must never share a
    // data dir.
    let data = datadir::DataDir::open(&cli.data_dir)?;

    // The first listener's address is the default one (DescribeConfigs);
    // each listener's own is what its clients are told.
    if let Some((_, _, first)) = bound.first() {
        settings.advertised_host = first.host.clone();
        settings.advertised_port = i32::from(first.port);
    }
    settings.advertised_listeners = bound
        .iter()
        .map(|(p, _, a)| (p.name.clone(), a.host.clone(), i32::from(a.port)))
        .collect();

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
        let mut listeners = Vec::new();
        for (p, listener, advertised) in bound {
            let listener = tokio::net::TcpListener::from_std(listener)
                .context("cannot register the listener")?;
            let acceptor = tls.as_ref().and_then(|tls| match p.protocol {
                doze_core::security::SecurityProtocol::Ssl => Some(tls.ssl.clone()),
                doze_core::security::SecurityProtocol::SaslSsl => Some(tls.sasl_ssl.clone()),
                _ => None,
            });
            listeners.push(server::BoundListener {
                name: p.name,
                protocol: p.protocol,
                listener,
                advertised,
                tls: acceptor,
            });
        }
        let console = console
            .map(tokio::net::TcpListener::from_std)
            .transpose()
            .context("cannot register the console's listener")?
            .map(|listener| doze_net::console::ConsoleSetup {
                listener,
                logs_dir: data.logs_dir(),
            });
        let metrics = Arc::new(NetMetrics::default());
        let setup = server::Setup {
            listeners,
            print_names: net.listeners.is_some(),
            settings,
            boot: boot.state,
            storage: storage::DiskAndSled {
                logs_dir: data.logs_dir(),
                meta: boot.meta,
                metrics: Arc::clone(&metrics),
            },
            console,
            metrics,
            limits: net.limits.clone(),
        };
        server::serve(setup, signals.first_then_force()).await
    });
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN_GRACE);
    // The lock goes last, once every worker has stopped writing.
    drop(data);
    result
}

/// Clients connect to the advertised address; 0.0.0.0 is not one they can use.
fn warn_if_unreachable(listener: &str, advertised: &HostPort, local: std::net::SocketAddr) {
    if config::is_unspecified(&advertised.host) {
        tracing::warn!(
            listener,
            listen = %local,
            "clients will be told to connect to {advertised}, which they cannot reach; \
             set --advertised-listener or advertised.listeners"
        );
    }
}

/// `doze-kafka users ...`: 0 when done, 2 for bad usage, 1 for the rest.
fn users_command(command: UsersCommand) -> ExitCode {
    let UsersCommand::Add {
        name,
        mechanism,
        password_stdin,
        data_dir,
    } = command;
    let Some(mechanism) = Mechanism::from_name(&mechanism) else {
        eprintln!("doze-kafka: error: unknown mechanism {mechanism}");
        return ExitCode::from(2);
    };
    if !password_stdin {
        eprintln!(
            "doze-kafka: error: give the password on stdin with --password-stdin \
             (e.g. `echo \"$PASSWORD\" | doze-kafka users add NAME --mechanism SCRAM-SHA-256 --password-stdin`)"
        );
        return ExitCode::from(2);
    }
    let password = match users::read_password(std::io::stdin().lock()) {
        Ok(password) => password,
        Err(e) => {
            eprintln!("doze-kafka: error: {e:#}");
            return ExitCode::from(2);
        }
    };
    match users::add(&data_dir, &name, mechanism, &password) {
        Ok(added) => {
            println!(
                "doze-kafka: {} {} credential of user {name:?} ({} iterations) in {}",
                if added.replaced {
                    "replaced the"
                } else {
                    "added a"
                },
                mechanism.name(),
                users::ITERATIONS,
                added.meta_db.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("doze-kafka: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `doze-kafka dump-log ...`: 0 when every file could be read (corrupt
/// contents are reported, not failed), 1 when one could not.
fn dump_log_command(files: &[PathBuf], options: dump_log::Options) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut err = std::io::stderr();
    let done = dump_log::dump_files(files, options, &mut out, &mut err)
        .and_then(|failed| out.flush().map(|()| failed));
    match done {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        // The reader went away (`| head`): nothing more to say to it.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("doze-kafka: error: cannot write the dump: {e}");
            ExitCode::FAILURE
        }
    }
}

/// An operator tool, on a runtime of its own: its output printed once it
/// is whole; 0 when done, 1 when the cluster refused or could not be asked
/// (the error names Kafka's code), 2 for bad usage.
#[cfg(not(madsim))]
fn tool_command(
    run: impl std::future::Future<Output = Result<tools::Output, tools::Failure>>,
) -> ExitCode {
    use std::io::Write;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("doze-kafka: error: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run) {
        Ok(output) => {
            let mut out = std::io::stdout().lock();
            match out.write_all(output.as_bytes()).and_then(|()| out.flush()) {
                // The reader went away (`| head`): nothing more to say to it.
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    eprintln!("doze-kafka: error: cannot write the output: {e}");
                    ExitCode::FAILURE
                }
                _ => ExitCode::SUCCESS,
            }
        }
        Err(failure) => {
            eprintln!("doze-kafka: error: {failure}");
            ExitCode::from(failure.exit_code())
        }
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
