//! The `appduct mcp` host minus logging setup (§M14, §M15): startup connection and version
//! check (exit 70 with one stderr line), the stdio transport, and exit 0 soon after stdin EOF or
//! SIGINT/SIGTERM, at any point of the startup included.

use std::future::Future;
#[cfg(unix)]
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
#[cfg(unix)]
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::sync::Arc;
use std::time::Duration;

use appduct_client::client::{ClientError, ClientOptions};
use appduct_protocol::link::validate_scheme;
use rmcp::serve_server;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;
use tracing::instrument::WithSubscriber;

use crate::connector::SocketConnector;
use crate::deferred_log::DeferredLog;
use crate::framing::LineTransport;
use crate::options::BridgeOptions;
use crate::project;
use crate::server::Bridge;

/// Exit code of a failed startup (version drift that cannot be resolved, §M14).
pub const EXIT_STARTUP_FAILED: u8 = 70;

/// Part of [`BridgeOptions::exit_grace`] kept for the runtime and process teardown after the
/// in-flight work was given up, so the whole exit stays within the grace.
pub const EXIT_MARGIN: Duration = Duration::from_millis(500);

/// What the host passes in.
#[derive(Debug, Clone)]
pub struct StdioOptions {
    /// Connection settings: state dir, version policy (`--daemon-restart`), `client_name`
    /// `appduct-mcp`.
    pub client: ClientOptions,
    pub bridge: BridgeOptions,
}

/// SIGINT and SIGTERM, registered when this value is created (so a signal that arrives during
/// startup is caught, not fatal).
struct Signals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let get = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!("cannot handle {name}: {e}");
                    None
                }
            };
            Self {
                interrupt: get(SignalKind::interrupt(), "SIGINT"),
                terminate: get(SignalKind::terminate(), "SIGTERM"),
            }
        }
        #[cfg(not(unix))]
        {
            Self {}
        }
    }

    /// Resolves at the first SIGINT or SIGTERM; never when neither could be registered.
    async fn recv(mut self) {
        #[cfg(unix)]
        {
            async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                () = next(&mut self.interrupt) => {}
                () = next(&mut self.terminate) => {}
            }
        }
        // Windows: Ctrl-C and Ctrl-Break of the console (docs/state.md §S4.3).
        #[cfg(windows)]
        {
            let _ = &mut self;
            let ctrl_break = async {
                match tokio::signal::windows::ctrl_break() {
                    Ok(mut s) => {
                        s.recv().await;
                    }
                    Err(_) => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                () = ctrl_break => {}
            }
        }
    }
}

/// The one stderr line of a failed startup: both versions and the remedies, whatever the
/// reason (§M14).
pub fn startup_failure_line(e: &ClientError) -> String {
    let mut line = e.to_string().replace('\n', " ");
    if !(line.contains("appduct daemon stop") && line.contains("--daemon-restart")) {
        line.push_str(
            " Remedies: stop the daemon with `appduct daemon stop` and start appduct mcp again, \
             or rerun appduct mcp with --daemon-restart to replace it.",
        );
    }
    line
}

/// The scheme as it resolves at startup, in the directory a call without `cwd` or roots would
/// use; either problem is one stderr line and never stops the bridge (§M14, §L12).
fn scheme_diagnostics(bridge: &Bridge) {
    let inner = &bridge.inner;
    let options = &inner.options;
    if let Some(s) = &options.scheme
        && let Err(e) = validate_scheme(s)
    {
        eprintln!("{e} (--scheme {s:?}); starting anyway, and appduct_connect reports it");
        return;
    }
    let Some(dir) = project::startup_dir(&inner.env) else {
        return;
    };
    if let Err(f) = project::resolve_scheme(
        &dir,
        options.scheme.as_deref(),
        &inner.env,
        options.state_dir.as_deref(),
    ) {
        eprintln!(
            "could not resolve the deep-link scheme in {}: {}; starting anyway (appduct_connect needs it, or a cwd argument naming the project)",
            dir.display(),
            f.message.replace('\n', " ").trim_end_matches('.')
        );
    }
}

/// Runs `appduct mcp` on this process's stdin and stdout, on a single-threaded runtime built
/// here (call it outside any runtime, after installing the stderr logger); returns the exit
/// code.
///
/// One thread (project decision, ARCHITECTURE.md "MCP bridge"): the bridge serves one client,
/// and a call is a chain of hops between stdin, rmcp's tasks, the control client's reader and
/// writer tasks and stdout. On a multi-threaded runtime most hops wake another worker thread,
/// which cost about 18 µs per daemon round trip measured; here each is a queue push. Nothing in
/// the bridge computes for long: its waits are all I/O.
pub fn run_stdio(opts: StdioOptions) -> u8 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("appduct mcp cannot start its async runtime: {e}");
            return EXIT_STARTUP_FAILED;
        }
    };
    let code = runtime.block_on(host(opts));
    // Nothing left on the runtime may delay the exit: a blocked stdin read, connection tasks,
    // a cancel in flight (§M15).
    runtime.shutdown_background();
    code
}

/// The host on the current runtime: signals, connector, stdio.
async fn host(opts: StdioOptions) -> u8 {
    // First of all, so SIGINT/SIGTERM during the startup connection also exit 0 (§M15).
    let signals = Signals::install();
    let connector = Arc::new(SocketConnector::new(opts.client.clone()));
    let bridge = Bridge::new(connector, opts.bridge);
    let (read, write) = stdio_streams();
    serve_stdio(bridge, read, write, signals.recv()).await
}

type Input = Box<dyn AsyncRead + Send + Unpin>;
type Output = Box<dyn AsyncWrite + Send + Unpin>;

/// stdin and stdout, driven by readiness when they are pipes or sockets (what MCP clients hand
/// a server). Tokio's own stdio moves every read and every write to a blocking-pool thread,
/// two thread hand-offs per message that each call pays. Anything else (a terminal, a file)
/// keeps tokio's stdio. stdout also keeps it when stderr shares its file, because readiness
/// needs `O_NONBLOCK`, and the logger's blocking writes to stderr must not meet it.
#[cfg(unix)]
fn stdio_streams() -> (Input, Output) {
    let read = duplicate(std::io::stdin().as_fd())
        .and_then(readiness_input)
        .unwrap_or_else(|| Box::new(tokio::io::stdin()));
    let stdout = std::io::stdout();
    let write = duplicate(stdout.as_fd())
        .filter(|out| !same_file(out, std::io::stderr().as_fd()))
        .and_then(readiness_output)
        .unwrap_or_else(|| Box::new(tokio::io::stdout()));
    (read, write)
}

/// Windows: tokio's stdio (docs/state.md §S4).
#[cfg(not(unix))]
fn stdio_streams() -> (Input, Output) {
    (Box::new(tokio::io::stdin()), Box::new(tokio::io::stdout()))
}

#[cfg(unix)]
fn duplicate(fd: BorrowedFd<'_>) -> Option<OwnedFd> {
    fd.try_clone_to_owned().ok()
}

#[cfg(unix)]
fn same_file(a: &OwnedFd, b: BorrowedFd<'_>) -> bool {
    let id = |fd: BorrowedFd<'_>| {
        fd.try_clone_to_owned()
            .ok()
            .and_then(|fd| std::fs::File::from(fd).metadata().ok())
            .map(|m| (m.dev(), m.ino()))
    };
    // Unknown counts as shared: the fallback is only slower.
    match (id(a.as_fd()), id(b)) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    }
}

#[cfg(unix)]
fn is_socket(fd: &OwnedFd) -> bool {
    fd.try_clone()
        .ok()
        .and_then(|fd| std::fs::File::from(fd).metadata().ok())
        .is_some_and(|m| m.file_type().is_socket())
}

#[cfg(unix)]
fn readiness_input(fd: OwnedFd) -> Option<Input> {
    if is_socket(&fd) {
        return unix_stream(fd).map(|s| Box::new(s) as Input);
    }
    tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
        .ok()
        .map(|p| Box::new(p) as Input)
}

#[cfg(unix)]
fn readiness_output(fd: OwnedFd) -> Option<Output> {
    if is_socket(&fd) {
        return unix_stream(fd).map(|s| Box::new(s) as Output);
    }
    tokio::net::unix::pipe::Sender::from_owned_fd(fd)
        .ok()
        .map(|p| Box::new(p) as Output)
}

#[cfg(unix)]
fn unix_stream(fd: OwnedFd) -> Option<tokio::net::UnixStream> {
    let stream = std::os::unix::net::UnixStream::from(fd);
    stream.set_nonblocking(true).ok()?;
    tokio::net::UnixStream::from_std(stream).ok()
}

/// The host over any reader and writer, ending when `stop` resolves (a signal) or the input
/// ends; returns the exit code. [`run_stdio`] passes stdin, stdout and SIGINT/SIGTERM.
pub async fn serve_stdio<R, W>(
    bridge: Bridge,
    read: R,
    write: W,
    stop: impl Future<Output = ()>,
) -> u8
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    tokio::pin!(stop);
    let options = bridge.inner.options.clone();
    // What the client logs while connecting waits for the outcome: a failed startup prints
    // exactly one stderr line (§M14).
    let held = DeferredLog::for_current();
    let startup = tokio::select! {
        r = bridge.inner.connector.connect(true).with_subscriber(held.dispatch()) => r,
        () = &mut stop => return 0,
    };
    let control = match startup {
        Ok(c) => Some(c),
        Err(e @ ClientError::VersionMismatch { .. }) => {
            eprintln!("{}", startup_failure_line(&e));
            return EXIT_STARTUP_FAILED;
        }
        Err(e) => {
            held.replay();
            tracing::warn!("starting without a daemon connection: {e}");
            None
        }
    };
    held.replay();
    scheme_diagnostics(&bridge);
    if let Some(n) = control.as_ref().and_then(|c| c.version_notice()) {
        tracing::info!("{}", n.message);
    }
    if let Some(c) = control {
        bridge.set_control(c).await;
    }
    let eof = Arc::new(Notify::new());
    let transport = LineTransport::new(read, write)
        .with_eof_signal(eof.clone())
        .with_tasks(bridge.inner.tasks.clone());
    let running = tokio::select! {
        r = serve_server(bridge, transport) => match r {
            Ok(r) => r,
            Err(e) => {
                tracing::info!("the MCP client left before initializing: {e}");
                return 0;
            }
        },
        () = &mut stop => return 0,
    };
    let service = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    tokio::select! {
        _ = &mut waiting => return 0,
        () = eof.notified() => {}
        // Stops reading and cancels the handlers in flight (§M15: same as EOF).
        () = &mut stop => service.cancel(),
    }
    // In-flight work gets what is left of the grace; then the process exits and the daemon
    // cancels the calls of its closed connections (§M15).
    let _ =
        tokio::time::timeout(options.exit_grace.saturating_sub(EXIT_MARGIN), &mut waiting).await;
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use appduct_client::client::MismatchReason;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn pipes_and_sockets_are_driven_by_readiness_and_files_are_not() {
        // A pipe in: read without a blocking thread.
        let (r, mut w) = std::io::pipe().unwrap();
        let mut input = readiness_input(OwnedFd::from(r)).expect("a pipe is driven by readiness");
        std::io::Write::write_all(&mut w, b"{}\n").unwrap();
        let mut line = [0u8; 3];
        input.read_exact(&mut line).await.unwrap();
        assert_eq!(&line, b"{}\n");
        // A socket out (some clients hand their server a socket pair).
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut output =
            readiness_output(OwnedFd::from(a)).expect("a socket is driven by readiness");
        output.write_all(b"ok\n").await.unwrap();
        output.flush().await.unwrap();
        let mut got = [0u8; 3];
        std::io::Read::read_exact(&mut &b, &mut got).unwrap();
        assert_eq!(&got, b"ok\n");
        // A regular file keeps tokio's stdio.
        let file = tempfile::tempfile().unwrap();
        assert!(readiness_input(OwnedFd::from(file)).is_none());
    }

    #[test]
    fn stdout_sharing_stderr_is_recognised() {
        let (r, w) = std::io::pipe().unwrap();
        let w = OwnedFd::from(w);
        let r = OwnedFd::from(r);
        let dup = w.try_clone().unwrap();
        assert!(same_file(&w, dup.as_fd()), "one pipe");
        let (_, other) = std::io::pipe().unwrap();
        let other = OwnedFd::from(other);
        assert!(!same_file(&w, other.as_fd()), "two pipes");
        drop(r);
    }

    #[test]
    fn the_startup_failure_line_names_both_versions_and_both_remedies_for_every_reason() {
        for reason in [
            MismatchReason::DaemonBusy,
            MismatchReason::StillDifferentAfterRestart,
            MismatchReason::IncompatibleProtocol { min: 2, max: 3 },
            MismatchReason::MissingFeature("consent.records".into()),
        ] {
            let e = ClientError::VersionMismatch {
                daemon: "0.0.1".into(),
                client: "0.9.0".into(),
                sessions: 1,
                pending_links: 0,
                pending_calls: 0,
                reason: reason.clone(),
            };
            let line = startup_failure_line(&e);
            assert!(!line.contains('\n'), "{reason:?}: one line");
            for part in ["0.0.1", "0.9.0", "appduct daemon stop", "--daemon-restart"] {
                assert!(
                    line.contains(part),
                    "{reason:?}: {part} missing from {line:?}"
                );
            }
        }
    }
}
