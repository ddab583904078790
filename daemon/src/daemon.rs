//! The composition root (ARCHITECTURE.md#the-daemon, §S3.5, §S3.6, ARCHITECTURE.md#test-layers): [`Daemon::start`] builds every part of the
//! daemon in the startup order of §S3.5, tearing down what it already started when a step
//! fails, and returns a [`DaemonHandle`]; the handle's shutdown runs the teardown order of
//! §S3.6 / §C8.3.
//!
//! Tracing initialisation (startup step 2) and signal handling belong to the binary that hosts
//! the daemon (`appduct daemon run`): it installs the subscriber before calling [`Daemon::start`]
//! and calls [`DaemonHandle::request_shutdown`] on `SIGINT`, `SIGTERM` and `SIGHUP`.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use appduct_protocol::bootstrap::STATIC_KEY_BYTES;
use appduct_protocol::control::{DaemonStartedData, EventData, Transport};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::limits;
use appduct_protocol::pin::SpkiPin;
use rustls_pki_types::CertificateDer;
use tokio::io::DuplexStream;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tracing::Instrument as _;

use crate::address::{AddressSource, AdvertisedAddress, OsAddresses};
use crate::audit::{AuditWriter, PruneSchedule};
use crate::calls::{Calls, PipelineProbe};
use crate::clock::{Clock, SystemClock};
use crate::control_server::{self, ControlHandler, PeerInfo, ServerOptions, Via};
use crate::control_server::{PeerCheck, SameEuid};
use crate::device_socket::DeviceSocket;
use crate::events::{EventBus, EventsLog};
use crate::handlers::{
    CallsApi as _, DaemonHandler, DaemonIdentity, HandlerContext, ShutdownSwitch,
};
use crate::http_api::{ControlStreams, HttpApi, HttpLimits, McpEndpointFactory};
use crate::links::{DaemonLinkEnv, LinkEnvironment, LinkError};
use crate::listener::{self, AcceptContext, AcceptedDevice, RunningListener};
use crate::policy::PolicyEngine;
use crate::policy_control::PolicyControl;
use crate::preclaim::{PreclaimBudget, PreclaimPolicy};
use crate::sessions::{EngineOptions, SessionManager};
use crate::tls::{HostKey, KeyError, KeySource, TlsError, TlsState};
use appduct_client::config::{Config, ConfigError};
use appduct_client::pidfile::{PidfileError, PidfileLock, PidfileOptions};
use appduct_client::spawn::VERSION_OVERRIDE_ENV;
use appduct_client::state_dir::{self, FILE_MODE, StateDir, StateDirError};
use appduct_client::timestamp::format_iso_ms;

/// The daemon's own version (the workspace version).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Period of the leaf renewal check (§D3.2, §S3.5 step 10).
pub const LEAF_RENEWAL_INTERVAL: Duration = Duration::from_secs(3600);
/// Longest wait for the audit and `events.log` queues at shutdown (§S3.6 step 7).
pub const LOG_FLUSH_WAIT: Duration = crate::audit::SHUTDOWN_FLUSH_TIMEOUT;
/// Buffer of each in-memory control connection (ARCHITECTURE.md#test-layers).
pub const MEMORY_CONTROL_BUFFER: usize = 64 * 1024;
/// Opened device connections waiting for the engine.
const ACCEPTED_QUEUE: usize = 64;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

/// Where the configuration comes from.
#[derive(Debug, Clone)]
pub enum ConfigSource {
    /// `<state>/config.json` (missing file = defaults), read once at start (§S2.1).
    Load,
    /// This configuration; `config.json` is not read.
    Given(Box<Config>),
}

/// Values applied on top of the configuration, whatever its source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConfigOverrides {
    pub wss_port: Option<u16>,
    pub advertised_ip: Option<IpAddr>,
}

/// What the calls module starts from (startup step 6).
#[derive(Debug, Clone)]
pub struct CallsContext {
    pub sessions: SessionManager,
    pub bus: EventBus,
    pub clock: Arc<dyn Clock>,
    pub config: Arc<Config>,
    pub state_dir: StateDir,
    pub policy: PolicyEngine,
    /// Audit records of settled calls go here (§C12).
    pub audit: AuditWriter,
    /// Pending operator approvals and grants (§C11.1).
    pub approvals: Arc<crate::approvals::Approvals>,
    /// `validation.arguments` in force (§C10.8); `daemon.reload` changes it.
    pub arguments: crate::arguments::ArgumentsSwitch,
}

/// Everything [`Daemon::start`] needs. The limits not in `config.json` default to the constants
/// of `appduct_protocol::limits`; tests lower them (ARCHITECTURE.md#test-layers).
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    pub state_dir: PathBuf,
    pub config: ConfigSource,
    pub overrides: ConfigOverrides,
    pub clock: Arc<dyn Clock>,
    pub addresses: Arc<dyn AddressSource>,
    pub peer_check: Arc<dyn PeerCheck>,
    pub pre_claim_timeout: Duration,
    /// The wss listener's pre-claim budget; the web listener gets one of the same capacity
    /// where every peer is local (SECURITY.md "Pre-claim budget").
    pub preclaim: PreclaimPolicy,
    pub control_line_cap: usize,
    pub subscriber_buffer_cap: usize,
    /// Longest control reply ([`limits::MAX_CONTROL_REPLY_BYTES`]); tests lower it.
    pub control_reply_cap: usize,
    /// How long a closing control connection may take to flush.
    pub control_drain_timeout: Duration,
    /// Reported by `daemon.hello`, `daemon.status` and `daemon_started`.
    pub version: String,
    pub pidfile: PidfileOptions,
    /// Tests only: a probe the calls module runs at each pipeline checkpoint.
    pub pipeline_probe: Option<Arc<dyn PipelineProbe>>,
    /// Where `approvals.challenge` writes one-time codes; tests capture them.
    pub operator_terminal: Arc<dyn crate::approvals::OperatorTerminal>,
    /// Tests only: runs before each read of `config.json` by `policy.*` and `daemon.reload`.
    pub config_io_probe: Option<crate::policy_control::IoProbe>,
    /// Limits of the loopback HTTP API (§H2.5); tests lower them.
    pub http_limits: HttpLimits,
    /// The `/mcp` endpoint of the HTTP API (§H7), injected by the binary; `None`: no `/mcp`.
    pub mcp_http: Option<McpEndpointFactory>,
}

impl DaemonOptions {
    /// Production options for `state_dir` (absolute or made absolute at start): system clock,
    /// OS interfaces, same-euid peer check, documented limits, and the crate version unless
    /// `APPDUCT_DAEMON_VERSION_OVERRIDE` is set (§C7).
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        let version = reported_version(std::env::var(VERSION_OVERRIDE_ENV).ok());
        Self::base(state_dir.into(), version)
    }

    /// Test options (ARCHITECTURE.md#test-layers): `wssPort` 0, `advertisedIp` 127.0.0.1 on top of whatever
    /// `config.json` says; the host key is generated at `<state>/key.pem` (0600) on first start.
    /// The version is the crate version; the override variable is ignored.
    pub fn for_tests(state_dir: impl Into<PathBuf>) -> Self {
        let mut opts = Self::base(state_dir.into(), VERSION.to_owned());
        opts.overrides = ConfigOverrides {
            wss_port: Some(0),
            advertised_ip: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        };
        opts
    }

    fn base(state_dir: PathBuf, version: String) -> Self {
        let server = ServerOptions::default();
        Self {
            state_dir,
            config: ConfigSource::Load,
            overrides: ConfigOverrides::default(),
            clock: Arc::new(SystemClock),
            addresses: Arc::new(OsAddresses),
            peer_check: Arc::new(SameEuid::new()),
            pre_claim_timeout: Duration::from_millis(limits::PRE_CLAIM_TIMEOUT_MS),
            preclaim: PreclaimPolicy::wss(),
            control_line_cap: server.line_cap,
            subscriber_buffer_cap: server.subscriber_buffer_cap,
            control_reply_cap: server.max_reply_bytes,
            control_drain_timeout: server.drain_timeout,
            version,
            pidfile: PidfileOptions::default(),
            pipeline_probe: None,
            operator_terminal: Arc::new(crate::approvals::ControllingTerminal),
            config_io_probe: None,
            http_limits: HttpLimits::default(),
            mcp_http: None,
        }
    }

    /// The `/mcp` endpoint of the HTTP API (§H7).
    pub fn mcp_http(mut self, factory: McpEndpointFactory) -> Self {
        self.mcp_http = Some(factory);
        self
    }

    /// Limits of the loopback HTTP API (§H2.5).
    pub fn http_limits(mut self, limits: HttpLimits) -> Self {
        self.http_limits = limits;
        self
    }

    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    pub fn addresses(mut self, addresses: impl AddressSource + 'static) -> Self {
        self.addresses = Arc::new(addresses);
        self
    }

    pub fn peer_check(mut self, check: impl PeerCheck + 'static) -> Self {
        self.peer_check = Arc::new(check);
        self
    }

    /// Uses `config` instead of reading `config.json` (overrides still apply).
    pub fn config(mut self, config: Config) -> Self {
        self.config = ConfigSource::Given(Box::new(config));
        self
    }

    /// Drops the `advertisedIp` override, so the address comes from `config.json` or detection.
    pub fn detect_address(mut self) -> Self {
        self.overrides.advertised_ip = None;
        self
    }

    pub fn pre_claim_timeout(mut self, timeout: Duration) -> Self {
        self.pre_claim_timeout = timeout;
        self
    }

    /// Pre-claim connections each listener holds at most.
    pub fn max_preclaim_connections(mut self, max: usize) -> Self {
        self.preclaim = self.preclaim.capacity(max);
        self
    }

    /// The whole wss pre-claim policy (tests: a per-source cap, a reserve, loopback as stranger).
    pub fn preclaim(mut self, policy: PreclaimPolicy) -> Self {
        self.preclaim = policy;
        self
    }

    pub fn control_line_cap(mut self, cap: usize) -> Self {
        self.control_line_cap = cap;
        self
    }

    pub fn subscriber_buffer_cap(mut self, cap: usize) -> Self {
        self.subscriber_buffer_cap = cap;
        self
    }

    pub fn control_reply_cap(mut self, cap: usize) -> Self {
        self.control_reply_cap = cap;
        self
    }

    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    pub fn pidfile(mut self, pidfile: PidfileOptions) -> Self {
        self.pidfile = pidfile;
        self
    }

    /// Runs `probe` at each checkpoint of the calls module's `tools.call` pipeline (tests that
    /// land a transition or a cancel between two steps).
    pub fn pipeline_probe(mut self, probe: Arc<dyn PipelineProbe>) -> Self {
        self.pipeline_probe = Some(probe);
        self
    }

    /// Writes approval codes through `terminal` instead of the peer's controlling terminal.
    pub fn operator_terminal(
        mut self,
        terminal: Arc<dyn crate::approvals::OperatorTerminal>,
    ) -> Self {
        self.operator_terminal = terminal;
        self
    }

    /// Runs `probe` before each read of `config.json` by `policy.*` and `daemon.reload` (tests
    /// that hold that file I/O).
    pub fn config_io_probe(mut self, probe: crate::policy_control::IoProbe) -> Self {
        self.config_io_probe = Some(probe);
        self
    }

    fn server_options(&self) -> ServerOptions {
        ServerOptions {
            line_cap: self.control_line_cap,
            subscriber_buffer_cap: self.subscriber_buffer_cap,
            drain_timeout: self.control_drain_timeout,
            max_reply_bytes: self.control_reply_cap,
        }
    }
}

/// The version a daemon reports: a non-blank `APPDUCT_DAEMON_VERSION_OVERRIDE`, else [`VERSION`].
pub fn reported_version(override_value: Option<String>) -> String {
    override_value
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| VERSION.to_owned())
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

fn pid_suffix(pid: Option<u32>) -> String {
    pid.map_or_else(String::new, |p| format!(" (pid {p})"))
}

/// Why the daemon did not start. [`StartError::error_type`] gives the CLI its exit code
/// (`daemon run`, §S3.1).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The state directory or the socket path cannot be used (`connection_error`, §S1.1).
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    /// `config.json` is invalid (`validation_error`).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Another daemon holds the pidfile lock, or serves the socket (`connection_error`).
    #[error("An appduct daemon is already running for this state directory{}", pid_suffix(*pid))]
    AlreadyRunning { pid: Option<u32> },
    #[error(transparent)]
    Pidfile(PidfileError),
    #[error("control socket {}: {source}", path.display())]
    Socket {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The host key is missing, loose, foreign or of an unsupported kind (`validation_error`).
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("could not start the events.log writer: {0}")]
    EventsLog(#[source] io::Error),
    #[error("could not bind the {listener} listener: {source}")]
    Bind {
        listener: &'static str,
        #[source]
        source: io::Error,
    },
}

impl From<PidfileError> for StartError {
    fn from(e: PidfileError) -> Self {
        match e {
            PidfileError::DaemonAlreadyRunning { pid } => StartError::AlreadyRunning { pid },
            other => StartError::Pidfile(other),
        }
    }
}

impl StartError {
    /// `connection_error` (exit 70) for an owned state directory or an unusable one,
    /// `validation_error` (65) for the configuration and the host key, `internal_error` (1)
    /// otherwise.
    pub fn error_type(&self) -> ErrorType {
        match self {
            StartError::StateDir(_) | StartError::AlreadyRunning { .. } => {
                ErrorType::ConnectionError
            }
            StartError::Config(_) => ErrorType::ValidationError,
            StartError::Key(KeyError::Generate { .. }) => ErrorType::InternalError,
            StartError::Key(_) => ErrorType::ValidationError,
            StartError::Pidfile(_)
            | StartError::Socket { .. }
            | StartError::Tls(_)
            | StartError::EventsLog(_)
            | StartError::Bind { .. } => ErrorType::InternalError,
        }
    }

    /// The CLI exit code of [`StartError::error_type`].
    pub fn exit_code(&self) -> u8 {
        self.error_type().exit_code()
    }

    /// The running daemon's pid, for "already running".
    pub fn running_pid(&self) -> Option<u32> {
        match self {
            StartError::AlreadyRunning { pid } => *pid,
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pieces
// ---------------------------------------------------------------------------------------------

/// The link environment handed to the engine at step 6, completed once the listeners are bound
/// (steps 7–8). No link can be minted before the control socket exists (step 9).
#[derive(Debug, Default)]
struct LateLinkEnv {
    env: OnceLock<Arc<DaemonLinkEnv>>,
}

impl LinkEnvironment for LateLinkEnv {
    fn native_address(&self, now_unix_ms: u64) -> Result<IpAddr, LinkError> {
        match self.env.get() {
            Some(env) => env.native_address(now_unix_ms),
            None => Err(LinkError::Tls("the listeners are not bound yet".to_owned())),
        }
    }

    fn wss_port(&self) -> u16 {
        self.env.get().map_or(0, |env| env.wss_port())
    }

    fn web_port(&self) -> u16 {
        self.env.get().map_or(0, |env| env.web_port())
    }

    fn pin(&self) -> String {
        self.env.get().map_or_else(String::new, |env| env.pin())
    }

    fn sealed_key(&self) -> [u8; STATIC_KEY_BYTES] {
        self.env
            .get()
            .map_or([0; STATIC_KEY_BYTES], |env| env.sealed_key())
    }
}

/// Hands every opened device connection to the engine.
async fn pump_devices(sessions: SessionManager, mut accepted: mpsc::Receiver<AcceptedDevice>) {
    while let Some(device) = accepted.recv().await {
        // Every log line of the connection (refusals included, §D6.2) names its peer.
        let span = tracing::warn_span!("device", peer = %device.peer, listener = %device.transport);
        let sessions = sessions.clone();
        tokio::spawn(
            async move {
                sessions
                    .handle_connection(
                        device.socket,
                        device.transport,
                        device.claim_deadline,
                        device.preclaim,
                    )
                    .await;
            }
            .instrument(span),
        );
    }
}

/// The hourly leaf renewal check (§D3.2). `link.create` also checks, through the link env.
async fn renew_leaf_hourly(tls: Arc<TlsState>, network: Arc<DaemonLinkEnv>, clock: Arc<dyn Clock>) {
    let mut ticks = tokio::time::interval_at(
        Instant::now() + LEAF_RENEWAL_INTERVAL,
        LEAF_RENEWAL_INTERVAL,
    );
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let address = network.advertised().address;
        match tls.renew_if_needed(address, clock.now_unix_ms()) {
            Ok(Some(leaf)) => tracing::info!(
                %address,
                not_after = leaf.not_after_unix_s(),
                "minted a new leaf certificate"
            ),
            Ok(None) => {}
            Err(e) => tracing::warn!("leaf renewal failed: {e}"),
        }
    }
}

/// Startup step 3, after the lock: a live socket refuses the start, a stale one is removed,
/// anything that is not a socket is an error naming the path (§S1.2, §S3.3).
async fn take_over_socket(path: &Path) -> Result<(), StartError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(StartError::Socket {
                path: path.to_owned(),
                source,
            });
        }
    };
    if !appduct_client::platform::fs::FileTypeExt::is_socket(&meta.file_type()) {
        // Never removes a non-socket; returns the error naming it.
        state_dir::remove_socket_file(path)?;
        return Ok(());
    }
    match appduct_client::platform::connect_control(path).await {
        Ok(_) => {
            tracing::error!(
                "{} accepts connections although no daemon holds the pidfile lock; refusing to start",
                path.display()
            );
            Err(StartError::AlreadyRunning { pid: None })
        }
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound
            ) =>
        {
            if state_dir::remove_socket_file(path)? {
                tracing::info!("removed the stale control socket {}", path.display());
            }
            Ok(())
        }
        Err(source) => Err(StartError::Socket {
            path: path.to_owned(),
            source,
        }),
    }
}

/// What startup has begun so far; dropping it tears that down in reverse order (§S3.5).
#[derive(Default)]
struct StartupGuard {
    pidfile: Option<PidfileLock>,
    calls: Option<Calls>,
    device_pump: Option<JoinHandle<()>>,
    listener_stop: Option<watch::Sender<bool>>,
    socket: Option<PathBuf>,
}

impl Drop for StartupGuard {
    fn drop(&mut self) {
        if let Some(path) = self.socket.take()
            && let Err(e) = state_dir::remove_socket_file(&path)
        {
            tracing::warn!("{e}");
        }
        if let Some(stop) = self.listener_stop.take() {
            stop.send_replace(true);
        }
        if let Some(pump) = self.device_pump.take() {
            pump.abort();
        }
        if let Some(calls) = self.calls.take() {
            calls.stop_timers();
        }
        // The events.log writer stops with the last handle on the bus.
        if let Some(pidfile) = self.pidfile.take()
            && let Err(e) = pidfile.release()
        {
            tracing::warn!("could not remove the pidfile: {e}");
        }
    }
}

/// What the supervisor owns until teardown.
struct Running {
    pidfile: PidfileLock,
    prune: PruneSchedule,
    timers: Vec<JoinHandle<()>>,
    device_pump: JoinHandle<()>,
    listener_stop: watch::Sender<bool>,
    wss: RunningListener,
    web: RunningListener,
    control_stop: watch::Sender<bool>,
    control_task: JoinHandle<()>,
    stopped: watch::Sender<bool>,
}

struct Shared {
    pid: u32,
    version: String,
    state_dir: StateDir,
    socket_path: PathBuf,
    bus: EventBus,
    sessions: SessionManager,
    tls: Arc<TlsState>,
    audit: AuditWriter,
    wss_addr: SocketAddr,
    web_addr: SocketAddr,
    handler: DaemonHandler,
    control_handler: Arc<dyn ControlHandler>,
    calls: Calls,
    server_options: ServerOptions,
    pre_claim_timeout: Duration,
    shutdown: ShutdownSwitch,
    stopped: watch::Receiver<bool>,
    memory_stop: watch::Sender<bool>,
    memory_connections: Mutex<JoinSet<()>>,
    /// The loopback HTTP API (§H1); stopped with the device listeners.
    http: HttpApi,
}

// ---------------------------------------------------------------------------------------------
// Start
// ---------------------------------------------------------------------------------------------

/// The daemon's entry point.
#[derive(Debug)]
pub struct Daemon;

impl Daemon {
    /// Starts a daemon (§S3.5). Must run inside a multi-threaded or current-thread tokio
    /// runtime; the daemon's tasks live on it until [`DaemonHandle::shutdown`].
    pub async fn start(opts: DaemonOptions) -> Result<DaemonHandle, StartError> {
        let pid = std::process::id();
        let clock = Arc::clone(&opts.clock);
        let started_at = format_iso_ms(clock.now_unix_ms());

        // 1. State directory and configuration.
        let dir = StateDir::new(&opts.state_dir)?;
        dir.prepare()?;
        #[cfg(feature = "count-allocs")]
        crate::alloc_count::spawn_reporter(dir.path().to_owned());
        let socket_path = dir.checked_socket_path()?;
        let mut config = match &opts.config {
            ConfigSource::Load => Config::load(dir.path())?.config,
            ConfigSource::Given(config) => (**config).clone(),
        };
        if let Some(port) = opts.overrides.wss_port {
            config.wss_port = port;
        }
        if let Some(ip) = opts.overrides.advertised_ip {
            config.advertised_ip = Some(ip);
        }
        let config = Arc::new(config);

        // 2. Tracing: initialised by the hosting binary.

        // 3. Single instance, then the socket file.
        let mut guard = StartupGuard::default();
        let pid_path = dir.pid_path();
        let pidfile_opts = opts.pidfile;
        // The acquisition may wait up to a second for a stopping daemon; keep it off the runtime.
        let pidfile = tokio::task::spawn_blocking(move || {
            PidfileLock::acquire(&pid_path, pid, &pidfile_opts)
        })
        .await
        .map_err(|e| {
            StartError::Pidfile(PidfileError::Io {
                path: dir.pid_path(),
                source: io::Error::other(e),
            })
        })??;
        guard.pidfile = Some(pidfile);
        take_over_socket(&socket_path).await?;

        // 4. The audit writer (it creates `audit/`, 0700) and the events.log writer.
        let audit = AuditWriter::open(&dir, config.audit_retention_days)?;
        let events_log = EventsLog::start(
            dir.events_log_path(),
            dir.events_log_rotated_path(),
            config.events_log_max_bytes,
        )
        .map_err(StartError::EventsLog)?;

        // 5. Event bus, host key, pin, advertised address, leaf.
        let buffer_size = usize::try_from(config.event_buffer_size).unwrap_or(usize::MAX);
        let bus = EventBus::with_events_log(Arc::clone(&clock), buffer_size, events_log);
        let generate = config.key_path == dir.key_path();
        let (key, key_source) = HostKey::load_or_generate(&config.key_path, generate)?;
        let advertised = AdvertisedAddress::choose(config.advertised_ip, opts.addresses.as_ref());
        let tls = Arc::new(TlsState::new(key, advertised.address, clock.now_unix_ms())?);

        // 6. Link registry and session manager (one engine), the policy engine, then the calls
        //    module (call manager).
        let policy = PolicyEngine::from_config(&config);
        let late_env = Arc::new(LateLinkEnv::default());
        let sessions = SessionManager::new(
            EngineOptions::from_config(&config),
            bus.clone(),
            Arc::clone(&clock),
            Arc::clone(&late_env) as Arc<dyn LinkEnvironment>,
        );
        sessions.set_registry_require(config.registry_require.clone());
        let approvals = Arc::new(crate::approvals::Approvals::new(
            bus.clone(),
            Arc::clone(&clock),
            config.consent,
            Arc::clone(&opts.operator_terminal),
        ));
        let arguments = crate::arguments::ArgumentsSwitch::new(config.validation.arguments);
        let calls = Calls::start(
            &CallsContext {
                sessions: sessions.clone(),
                bus: bus.clone(),
                clock: Arc::clone(&clock),
                config: Arc::clone(&config),
                state_dir: dir.clone(),
                policy: policy.clone(),
                audit: audit.clone(),
                approvals: Arc::clone(&approvals),
                arguments: arguments.clone(),
            },
            opts.pipeline_probe.clone(),
        );
        guard.calls = Some(calls.clone());
        let (accepted, accepted_rx) = mpsc::channel(ACCEPTED_QUEUE);
        guard.device_pump = Some(tokio::spawn(pump_devices(sessions.clone(), accepted_rx)));

        // 7–8. Device listeners.
        let (listener_stop, listener_stop_rx) = watch::channel(false);
        guard.listener_stop = Some(listener_stop);
        // Each listener has its own budget, so a flood on the wss port (reachable from the LAN)
        // cannot hold back a web page on the loopback listener.
        let accept = AcceptContext {
            preclaim: PreclaimBudget::new(opts.preclaim),
            pre_claim_timeout: opts.pre_claim_timeout,
            accepted,
            shutdown: listener_stop_rx,
        };
        let web_accept = AcceptContext {
            preclaim: PreclaimBudget::new(PreclaimPolicy::web(opts.preclaim.capacity)),
            ..accept.clone()
        };
        let wss = listener::bind_wss(config.wss_port)
            .and_then(|sockets| {
                let sealed = Arc::clone(tls.key().sealed_keys());
                listener::serve_wss(sockets, tls.server_config(), sealed, accept)
            })
            .map_err(|source| StartError::Bind {
                listener: "wss",
                source,
            })?;
        let web = listener::bind_web()
            .and_then(|socket| listener::serve_web(socket, config.web_origins.clone(), web_accept))
            .map_err(|source| StartError::Bind {
                listener: "web",
                source,
            })?;
        let network = Arc::new(DaemonLinkEnv::new(
            Arc::clone(&tls),
            Arc::clone(&opts.addresses),
            config.advertised_ip,
            wss.local_addr().port(),
            web.local_addr().port(),
        ));
        // Set exactly once, here.
        let _ = late_env.env.set(Arc::clone(&network));

        // 9. Control socket: bind, 0600 before the first accept, serve. The HTTP API (§H1) is
        //    a client of the control server through in-memory connections, served once
        //    `shared` exists; it starts after the control socket, below.
        let shared_cell: Arc<OnceLock<std::sync::Weak<Shared>>> = Arc::new(OnceLock::new());
        let streams: ControlStreams = {
            let cell = Arc::clone(&shared_cell);
            Arc::new(
                move |peer_pid| match cell.get().and_then(std::sync::Weak::upgrade) {
                    Some(shared) => memory_control_stream(
                        &shared,
                        PeerInfo {
                            pid: peer_pid,
                            via: Via::Http,
                        },
                    ),
                    // Not started yet, or gone: a stream already at EOF.
                    None => tokio::io::duplex(1).0,
                },
            )
        };
        let http = HttpApi::new(dir.path(), streams, opts.http_limits, opts.mcp_http.clone());
        let shutdown = ShutdownSwitch::new();
        let handler = DaemonHandler::new(HandlerContext {
            identity: DaemonIdentity {
                version: opts.version.clone(),
                pid,
                started_at,
                state_dir: dir.path().to_owned(),
                events_log_path: dir.events_log_path(),
            },
            policy_control: PolicyControl::new(
                policy.clone(),
                (*config).clone(),
                dir.path(),
                bus.clone(),
            )
            .with_http(http.clone())
            .with_arguments(arguments)
            .with_sessions(sessions.clone())
            .with_operator_gate(approvals)
            .with_io_probe(opts.config_io_probe.clone()),
            http: http.clone(),
            policy,
            audit: audit.clone(),
            sessions: sessions.clone(),
            bus: bus.clone(),
            network: Arc::clone(&network),
            calls: Arc::new(calls.clone()),
            shutdown: shutdown.clone(),
        });
        let control_handler: Arc<dyn ControlHandler> = Arc::new(handler.clone());
        let server_options = opts.server_options();
        let control =
            control_server::bind_control(&socket_path).map_err(|source| StartError::Socket {
                path: socket_path.clone(),
                source,
            })?;
        guard.socket = Some(socket_path.clone());
        appduct_client::platform::chmod(&socket_path, FILE_MODE).map_err(|source| {
            StartError::Socket {
                path: socket_path.clone(),
                source,
            }
        })?;
        let (control_stop, control_stop_rx) = watch::channel(false);
        let control_task = tokio::spawn(control_server::serve_control(
            control,
            Arc::clone(&control_handler),
            server_options,
            Arc::clone(&opts.peer_check),
            control_stop_rx,
        ));
        tracing::info!(
            pid,
            version = %opts.version,
            socket = %socket_path.display(),
            wss = %wss.local_addr(),
            web = %web.local_addr(),
            "daemon ready"
        );

        // 10. Timers: the audit prune (now, then every 24 h) and the hourly leaf renewal check.
        let prune = audit.spawn_prune_schedule(Arc::clone(&clock));
        let timers = vec![tokio::spawn(renew_leaf_hourly(
            Arc::clone(&tls),
            Arc::clone(&network),
            Arc::clone(&clock),
        ))];

        // 11. daemon_started, and the new pin when the key was generated.
        bus.emit(
            None,
            None,
            EventData::DaemonStarted(DaemonStartedData::new(opts.version.clone(), pid)),
        );
        if key_source == KeySource::Generated {
            tracing::warn!(
                "generated a new host key at {}; its pin is {} (apps pin it from the next link on)",
                tls.key().path().display(),
                tls.pin()
            );
        }

        // Started: the guard hands everything to the supervisor.
        let (Some(pidfile), Some(device_pump), Some(listener_stop)) = (
            guard.pidfile.take(),
            guard.device_pump.take(),
            guard.listener_stop.take(),
        ) else {
            return Err(StartError::Pidfile(PidfileError::Io {
                path: dir.pid_path(),
                source: io::Error::other("startup lost track of its parts"),
            }));
        };
        guard.socket = None;
        guard.calls = None;
        let (stopped_tx, stopped) = watch::channel(false);
        let (memory_stop, _) = watch::channel(false);
        let wss_addr = wss.local_addr();
        let web_addr = web.local_addr();
        let running = Running {
            pidfile,
            prune,
            timers,
            device_pump,
            listener_stop,
            wss,
            web,
            control_stop,
            control_task,
            stopped: stopped_tx,
        };
        let shared = Arc::new(Shared {
            pid,
            version: opts.version.clone(),
            state_dir: dir,
            socket_path,
            bus,
            sessions,
            tls,
            audit,
            wss_addr,
            web_addr,
            handler,
            control_handler,
            calls,
            server_options,
            pre_claim_timeout: opts.pre_claim_timeout,
            shutdown,
            stopped,
            memory_stop,
            memory_connections: Mutex::new(JoinSet::new()),
            http,
        });
        let _ = shared_cell.set(Arc::downgrade(&shared));
        // 9b. The loopback HTTP API, when configured (§H1). A port that cannot be bound stops
        //     the start like the device listeners'.
        if let Err(source) = shared.http.apply(config.http.as_ref()) {
            shared.shutdown.request();
            supervise(Arc::clone(&shared), running).await;
            return Err(StartError::Bind {
                listener: "http",
                source,
            });
        }
        tokio::spawn(supervise(Arc::clone(&shared), running));
        Ok(DaemonHandle { shared })
    }
}

// ---------------------------------------------------------------------------------------------
// Shutdown
// ---------------------------------------------------------------------------------------------

async fn supervise(shared: Arc<Shared>, running: Running) {
    shared.shutdown.requested().await;
    let stopped = running.stopped.clone();
    teardown(&shared, running).await;
    stopped.send_replace(true);
}

/// The teardown order of §S3.6 / §C8.3.
async fn teardown(shared: &Shared, running: Running) {
    tracing::info!("daemon shutting down");
    let Running {
        pidfile,
        prune,
        timers,
        device_pump,
        listener_stop,
        wss,
        web,
        control_stop,
        control_task,
        stopped: _,
    } = running;

    // 1. Timers: the audit prune first, then leaf renewal and the calls module's. Control
    //    requests are refused from here on (the handler sees the switch). The engine's link,
    //    grace and keepalive timers stop as the first part of step 3.
    prune.stop();
    for timer in timers {
        timer.abort();
    }
    shared.calls.stop_timers();

    // 2. Pending calls: the calls module rejects them with `session_not_active`.
    reject_pending_calls(shared);

    // 3. Device sockets: the engine refuses new connections and links, stops its timers, tells
    //    the call router, closes every socket `1001 daemon_shutdown` and waits at most 1 s.
    shared.sessions.shutdown().await;

    // 4. Device listeners and the HTTP API.
    shared.http.stop();
    listener_stop.send_replace(true);
    wss.stopped().await;
    web.stopped().await;
    device_pump.abort();

    // 5. Control connections: stop accepting; flush and close the open ones.
    control_stop.send_replace(true);
    let (_, ()) = tokio::join!(
        control_task,
        shared
            .handler
            .close_connections(shared.server_options.drain_timeout)
    );
    shared.memory_stop.send_replace(true);
    let mut memory = std::mem::take(&mut *lock(&shared.memory_connections));
    while memory.join_next().await.is_some() {}

    // 6. Pidfile (unlink, then unlock), then the socket file.
    if let Err(e) = pidfile.release() {
        tracing::warn!("could not remove the pidfile: {e}");
    }
    if let Err(e) = state_dir::remove_socket_file(&shared.socket_path) {
        tracing::warn!("{e}");
    }

    // 7. Audit and events.log queues, at most 5 s together.
    let (audit_flushed, events_flushed) = tokio::join!(
        shared.audit.flush(LOG_FLUSH_WAIT),
        shared.bus.flush(LOG_FLUSH_WAIT)
    );
    if let Err(e) = audit_flushed {
        tracing::warn!("audit records may be missing: {e}");
    }
    if !events_flushed {
        tracing::warn!("some events.log records were not written before shutdown");
    }
    tracing::info!("daemon stopped");
    // 8. The hosting binary exits 0 once `wait()` resolves.
}

/// Shutdown step 2 (§C8.3).
fn reject_pending_calls(shared: &Shared) {
    shared.calls.reject_pending_for_shutdown();
}

/// A new in-memory control connection served by the real handler (see
/// [`DaemonHandle::control_stream`]); also how the HTTP API reaches the control plane, with
/// the pid of its loopback TCP peer when found (SECURITY.md §4.19).
fn memory_control_stream(shared: &Shared, peer: PeerInfo) -> DuplexStream {
    let (client, server) = tokio::io::duplex(MEMORY_CONTROL_BUFFER);
    let mut stop = shared.memory_stop.subscribe();
    if *stop.borrow() {
        return client;
    }
    let serve = control_server::serve_connection_for(
        server,
        Arc::clone(&shared.control_handler),
        shared.server_options,
        peer,
    );
    let mut tasks = lock(&shared.memory_connections);
    while tasks.try_join_next().is_some() {}
    tasks.spawn(async move {
        // Dropping the connection future at shutdown still runs its close hooks.
        tokio::select! {
            () = serve => {}
            _ = stop.wait_for(|stop| *stop) => {}
        }
    });
    client
}

// ---------------------------------------------------------------------------------------------
// Handle
// ---------------------------------------------------------------------------------------------

/// A running daemon (ARCHITECTURE.md#test-layers). Cheap to clone; dropping every handle does not stop it.
#[derive(Clone)]
pub struct DaemonHandle {
    shared: Arc<Shared>,
}

impl fmt::Debug for DaemonHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DaemonHandle")
            .field("pid", &self.shared.pid)
            .field("version", &self.shared.version)
            .field("state_dir", &self.shared.state_dir)
            .field("wss_addr", &self.shared.wss_addr)
            .field("web_addr", &self.shared.web_addr)
            .field("stopped", &self.is_stopped())
            .finish_non_exhaustive()
    }
}

impl DaemonHandle {
    /// `daemon.reload` (§C8.33): what SIGHUP does to `daemon run` (§S3.6).
    /// The file I/O runs on the blocking pool.
    pub async fn reload(
        &self,
    ) -> Result<appduct_protocol::control::ReloadResult, appduct_protocol::jsonrpc::ErrorObject>
    {
        self.shared
            .handler
            .context()
            .policy_control
            .off_thread(|pc| pc.reload(crate::policy_control::ReloadBy::Signal))
            .await
    }

    /// The bound wss address (the wildcard or dual-stack socket; its port is never 0).
    pub fn wss_addr(&self) -> SocketAddr {
        self.shared.wss_addr
    }

    /// The bound web listener address (`127.0.0.1:<port>`).
    pub fn web_addr(&self) -> SocketAddr {
        self.shared.web_addr
    }

    /// The host key's pin (`sha256/…`).
    pub fn pin(&self) -> SpkiPin {
        self.shared.tls.pin().clone()
    }

    /// The leaf certificate new handshakes get.
    pub fn leaf_der(&self) -> CertificateDer<'static> {
        self.shared.tls.leaf().der().clone()
    }

    /// The event bus (`subscribe_all()` to synchronise on events, never on sleeps).
    pub fn events(&self) -> &EventBus {
        &self.shared.bus
    }

    /// The audit writer.
    pub fn audit(&self) -> &AuditWriter {
        &self.shared.audit
    }

    /// The calls module.
    pub fn calls(&self) -> &Calls {
        &self.shared.calls
    }

    /// The session engine.
    pub fn sessions(&self) -> &SessionManager {
        &self.shared.sessions
    }

    /// The control handler every connection is served by.
    pub fn handler(&self) -> &DaemonHandler {
        &self.shared.handler
    }

    /// A new in-memory control connection served by the real handler (ARCHITECTURE.md#test-layers); hand it to
    /// `ControlClient::from_stream`. After shutdown started, the stream is already at EOF.
    pub fn control_stream(&self) -> DuplexStream {
        memory_control_stream(&self.shared, PeerInfo::default())
    }

    /// The address of the loopback HTTP API while it is on (§H1).
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.shared.http.local_addr()
    }

    /// Runs an in-memory device connection through the real engine (ARCHITECTURE.md#test-layers), with the
    /// pre-claim deadline starting now.
    pub fn attach_device(&self, socket: DeviceSocket, transport: Transport) -> JoinHandle<()> {
        let deadline = Instant::now() + self.shared.pre_claim_timeout;
        self.shared
            .sessions
            .spawn_connection(socket, transport, deadline, ())
    }

    pub fn socket_path(&self) -> &Path {
        &self.shared.socket_path
    }

    pub fn state_dir(&self) -> &StateDir {
        &self.shared.state_dir
    }

    pub fn pid(&self) -> u32 {
        self.shared.pid
    }

    pub fn version(&self) -> &str {
        &self.shared.version
    }

    /// Starts the teardown without waiting (signal handlers).
    pub fn request_shutdown(&self) {
        self.shared.shutdown.request();
    }

    /// Whether teardown has finished.
    pub fn is_stopped(&self) -> bool {
        *self.shared.stopped.borrow()
    }

    /// Stops the daemon (§S3.6) and waits until it has stopped.
    pub async fn shutdown(&self) {
        self.request_shutdown();
        self.wait().await;
    }

    /// Resolves once the daemon has stopped, however shutdown was requested (for example
    /// `daemon.shutdown` over the socket).
    pub async fn wait(&self) {
        let mut stopped = self.shared.stopped.clone();
        // A dropped supervisor (runtime shutting down) also means stopped.
        let _ = stopped.wait_for(|stopped| *stopped).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_override_wins_only_when_not_blank() {
        assert_eq!(
            reported_version(Some("9.0.0-test".to_owned())),
            "9.0.0-test"
        );
        assert_eq!(reported_version(Some(" 1.2.3\n".to_owned())), "1.2.3");
        assert_eq!(reported_version(Some("  ".to_owned())), VERSION);
        assert_eq!(reported_version(None), VERSION);
    }

    #[test]
    fn start_errors_map_to_the_exit_codes_of_daemon_run() {
        let already = StartError::from(PidfileError::DaemonAlreadyRunning { pid: Some(42) });
        assert!(matches!(
            already,
            StartError::AlreadyRunning { pid: Some(42) }
        ));
        assert_eq!(already.exit_code(), 70);
        assert_eq!(already.running_pid(), Some(42));
        assert_eq!(
            already.to_string(),
            "An appduct daemon is already running for this state directory (pid 42)"
        );

        let config = StartError::Config(ConfigError::NotObject {
            path: PathBuf::from("/s/config.json"),
        });
        assert_eq!(config.error_type(), ErrorType::ValidationError);
        assert_eq!(config.exit_code(), 65);

        let loose = StartError::Key(KeyError::Permissions {
            path: PathBuf::from("/s/key.pem"),
            mode: 0o644,
        });
        assert_eq!(loose.exit_code(), 65);
        let generate = StartError::Key(KeyError::Generate {
            path: PathBuf::from("/s/key.pem"),
            reason: "rng".to_owned(),
        });
        assert_eq!(generate.exit_code(), 1);

        let foreign = StartError::StateDir(StateDirError::ForeignOwner {
            path: PathBuf::from("/s"),
            owner: 0,
            euid: 1000,
        });
        assert_eq!(foreign.error_type(), ErrorType::ConnectionError);
        let bind = StartError::Bind {
            listener: "wss",
            source: io::Error::from(io::ErrorKind::AddrInUse),
        };
        assert_eq!(bind.exit_code(), 1);
        assert_eq!(bind.running_pid(), None);
    }

    #[test]
    fn test_options_override_port_and_address_and_keep_spec_limits() {
        let opts = DaemonOptions::for_tests("/tmp/x");
        assert_eq!(
            opts.overrides,
            ConfigOverrides {
                wss_port: Some(0),
                advertised_ip: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            }
        );
        assert_eq!(opts.version, VERSION);
        assert_eq!(opts.control_line_cap, limits::CONTROL_LINE_CAP_BYTES);
        assert_eq!(
            opts.subscriber_buffer_cap,
            limits::SUBSCRIBER_BUFFER_CAP_BYTES
        );
        assert_eq!(opts.preclaim, PreclaimPolicy::wss());
        assert_eq!(
            opts.clone().max_preclaim_connections(7).preclaim.capacity,
            7
        );
        let opts = opts.detect_address().subscriber_buffer_cap(10);
        assert_eq!(opts.overrides.advertised_ip, None);
        assert_eq!(opts.server_options().subscriber_buffer_cap, 10);
        assert_eq!(
            DaemonOptions::new("/tmp/x").overrides,
            ConfigOverrides::default()
        );
    }
}
