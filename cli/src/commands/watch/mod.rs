//! `appduct watch` (§L23, issue #16 item 4): a live terminal view of the daemon over the
//! control socket — sessions, calls in flight with progress, pending approvals (approve and
//! deny with a key), the event stream, recent audit records and calls-per-second and latency
//! sparklines.
//!
//! - [`state`]: the model, fed by control replies (`sessions.list`, `calls.list` §C8.40,
//!   `approvals.list`), `events.subscribe` (§C8.12) and the audit day files (read with the
//!   reader of `appduct audit`, §L19).
//! - [`view`]: renders the model into a ratatui frame (tests use `TestBackend`).
//! - [`terminal`]: raw mode and the alternate screen, restored on every way out.
//!
//! It contacts an existing daemon only (it never starts one), refuses unless stdin and stdout
//! are terminals (and under `--json`), and redraws on every event, key, resize and once per
//! 500 ms tick (ages, elapsed times, sparklines).

pub mod state;
pub mod terminal;
pub mod view;

use std::ffi::OsString;
use std::io::IsTerminal as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use appduct_client::client::{ClientError, ControlClient};
use appduct_protocol::control::{
    ApprovalDecision, ApprovalsDecide, ApprovalsDecideParams, ApprovalsList, NoParams,
    SessionsList, SubscribeParams,
};
use appduct_protocol::errors::ErrorType;
use clap::Args;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use tokio::sync::mpsc;

use super::Command;
use super::approvals;
use super::audit::{self, AuditRequest, Follower, Record, Since};
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{Output, Reply};
use crate::signals::Interrupts;
use state::WatchState;
use terminal::Screen;

/// How often the view redraws without an event (elapsed times, ages, sparklines).
const TICK: Duration = Duration::from_millis(500);
/// How far back the audit panel starts.
const AUDIT_BACK: Duration = Duration::from_secs(3600);
/// Minutes of the grant given by `A` (approve and grant the tool on the session).
const GRANT_MINUTES: u64 = 15;
/// How long the input thread may take to notice a pause (it polls every 100 ms).
const PAUSE_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Args)]
pub struct WatchArgs {
    #[arg(hide = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub extra: Vec<OsString>,
}

pub fn validate(a: WatchArgs) -> Result<Command, CliError> {
    if let Some(word) = a.extra.first() {
        return Err(CliError::usage(format!(
            "appduct watch takes no arguments (got \"{}\")",
            word.to_string_lossy()
        )));
    }
    Ok(Command::Watch)
}

/// The refusal when the view has no terminal to draw on (§L23).
pub fn not_a_terminal() -> CliError {
    CliError::usage("appduct watch needs an interactive terminal: stdin and stdout must be a terminal")
        .with_detail("reason", "not_a_terminal")
        .with_hint("Run it in a terminal (SSH works). For scripts use appduct events tail, appduct approvals ls or appduct audit --follow.")
}

fn not_running() -> CliError {
    CliError::connection("No appduct daemon is running; appduct watch does not start one")
        .with_hint("Start it with appduct daemon start (or any command that uses it), then run appduct watch again.")
}

/// Runs the view until `q`, Ctrl-C, SIGINT or SIGTERM (exit 0).
pub fn run(globals: &Globals, out: &Output) -> Result<Reply, CliError> {
    if globals.output.json {
        return Err(CliError::usage(
            "appduct watch has no JSON output; use appduct events tail --json or appduct audit --follow --json",
        ));
    }
    if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
        return Err(not_a_terminal());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::internal(format!("cannot start the async runtime: {e}")))?;
    let result = runtime.block_on(watch(globals, out));
    runtime.shutdown_background();
    result
}

async fn watch(globals: &Globals, out: &Output) -> Result<Reply, CliError> {
    let dir = globals.state_dir()?;
    let client = match connect::connect(globals, out, Contact::Existing, true).await {
        Ok((_, client)) => client,
        Err(e) if e.error_type == ErrorType::ConnectionError.as_str() => return Err(not_running()),
        Err(e) => return Err(e),
    };
    let fail = |e: ClientError| connect::client_error(&e, &dir);
    let mut events = client
        .subscribe(SubscribeParams::default())
        .await
        .map_err(fail)?;
    let mut signals = Interrupts::new(false)
        .map_err(|e| CliError::internal(format!("cannot install signal handlers: {e}")))?;

    let now = audit::now_ms();
    let mut state = WatchState::new(now);
    if let Ok(hello) = client
        .call::<appduct_protocol::control::DaemonStatus>(NoParams {})
        .await
    {
        state.daemon = Some(format!("daemon {} (pid {})", hello.version, hello.pid));
    }
    refresh(&client, &mut state, true, true, true)
        .await
        .map_err(fail)?;
    let audit_dir = audit::audit_dir(globals)?;
    let recent = AuditRequest {
        since: Some(Since::Ago(AUDIT_BACK)),
        session: None,
        tool: None,
        outcome: None,
        follow: false,
    };
    if let Ok((records, _)) = audit::read_records(&audit_dir, &recent, now) {
        for r in records {
            state.push_audit(r);
        }
    }
    let mut follower = Follower::new(&audit_dir, now, false);

    let mut screen = Screen::enter()
        .map_err(|e| CliError::internal(format!("cannot set up the terminal: {e}")))?;
    let mut input = Input::start();
    let mut tick = tokio::time::interval(TICK);
    let colour = out.stdout_paint.enabled;

    let outcome = loop {
        if let Err(e) = screen.terminal.draw(|f| view::draw(f, &state, colour)) {
            break Err(CliError::internal(format!("cannot draw: {e}")));
        }
        tokio::select! {
            event = events.next() => match event {
                Some(event) => {
                    state.apply(&event);
                    while let Some(event) = events.try_next() {
                        state.apply(&event);
                    }
                    if state.stale.any() {
                        let s = state.stale;
                        if let Err(e) = refresh(&client, &mut state, s.sessions, s.calls, s.approvals).await {
                            break Err(fail(e));
                        }
                    }
                }
                None => break Err(CliError::connection("The daemon closed the connection")),
            },
            key = input.rx.recv() => match key {
                Some(Event::Key(key)) if key.kind != KeyEventKind::Release => {
                    match on_key(key, &client, &fail, &mut state, &mut screen, &mut input).await {
                        Ok(true) => break Ok(Reply::Done(0)),
                        Ok(false) => {}
                        Err(e) => break Err(e),
                    }
                }
                Some(_) => {}
                None => break Err(CliError::internal("the terminal input ended")),
            },
            _ = tick.tick() => {
                state.tick(audit::now_ms());
                for line in follower.poll(audit::now_ms()).lines() {
                    if let Some(r) = Record::parse(line) {
                        state.push_audit(r);
                    }
                }
            }
            _ = signals.recv() => break Ok(Reply::Done(0)),
        }
    };
    input.stop();
    drop(screen);
    outcome
}

/// Asks the daemon again for the parts of the model marked stale.
async fn refresh(
    client: &ControlClient,
    state: &mut WatchState,
    sessions: bool,
    calls: bool,
    approvals: bool,
) -> Result<(), ClientError> {
    if sessions {
        state.set_sessions(client.call::<SessionsList>(NoParams {}).await?);
    }
    if calls {
        state.set_calls(client.list_calls().await?);
    }
    if approvals {
        state.set_approvals(client.call::<ApprovalsList>(NoParams {}).await?.approvals);
    }
    Ok(())
}

/// Handles one key; `Ok(true)` quits.
async fn on_key(
    key: KeyEvent,
    client: &ControlClient,
    fail: &dyn Fn(ClientError) -> CliError,
    state: &mut WatchState,
    screen: &mut Screen,
    input: &mut Input,
) -> Result<bool, CliError> {
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    match key.code {
        KeyCode::Char('c') if ctrl => return Ok(true),
        KeyCode::Char('q') | KeyCode::Esc => return Ok(true),
        KeyCode::Down | KeyCode::Char('j') => state.select_next(),
        KeyCode::Up | KeyCode::Char('k') => state.select_previous(),
        KeyCode::Char('d') => {
            let Some(id) = state.selected_approval().map(|a| a.approval_id.clone()) else {
                state.status = Some("Nothing to deny".to_owned());
                return Ok(false);
            };
            let decided = client
                .call::<ApprovalsDecide>(ApprovalsDecideParams::new(
                    id.clone(),
                    ApprovalDecision::Deny,
                ))
                .await;
            state.status = Some(match decided {
                Ok(r) => approvals::decided(&r).human.trim_end().replace('\n', " "),
                Err(e) => format!("Deny {id} failed: {}", fail(e).message),
            });
            let approvals = client.call::<ApprovalsList>(NoParams {}).await;
            if let Ok(list) = approvals {
                state.set_approvals(list.approvals);
            }
        }
        KeyCode::Char(c @ ('a' | 'A')) => {
            let Some(approval) = state.selected_approval().cloned() else {
                state.status = Some("Nothing to approve".to_owned());
                return Ok(false);
            };
            let minutes = (c == 'A').then_some(GRANT_MINUTES);
            // The daemon writes the code to this terminal: leave the view while it is asked
            // for, so the code and the prompt are readable and typed in cooked mode.
            input.pause().await;
            screen.suspend();
            println!(
                "\nApproving {}: {} on {} (caller {}).",
                approval.approval_id,
                crate::render::clean_line(&approval.tool),
                crate::render::clean_line(&approval.alias),
                approval.caller
            );
            let id = approval.approval_id.clone();
            let decided = approvals::approve_interactively(client, &id, minutes, fail).await;
            state.status = Some(match decided {
                Ok(r) => approvals::decided(&r).human.trim_end().replace('\n', " "),
                Err(e) => format!("Not approved: {}", e.message),
            });
            let resumed = screen.resume();
            input.resume();
            resumed.map_err(|e| CliError::internal(format!("cannot restore the view: {e}")))?;
            if let Ok(list) = client.call::<ApprovalsList>(NoParams {}).await {
                state.set_approvals(list.approvals);
            }
        }
        _ => {}
    }
    Ok(false)
}

/// Terminal input read on its own thread (crossterm's reader blocks), forwarded to the loop.
/// Paused while an approval reads its code from the terminal, so no keystroke is taken away
/// from the prompt.
struct Input {
    rx: mpsc::UnboundedReceiver<Event>,
    paused: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    acks: mpsc::UnboundedReceiver<()>,
    thread: std::thread::Thread,
}

impl Input {
    fn start() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let (ack_tx, acks) = mpsc::unbounded_channel();
        let paused = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (Arc::clone(&paused), Arc::clone(&stop));
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if p.load(Ordering::SeqCst) {
                    let _ = ack_tx.send(());
                    while p.load(Ordering::SeqCst) && !s.load(Ordering::SeqCst) {
                        std::thread::park();
                    }
                    continue;
                }
                match event::poll(Duration::from_millis(100)) {
                    Ok(true) => match event::read() {
                        Ok(ev) => {
                            if tx.send(ev).is_err() {
                                return;
                            }
                        }
                        Err(_) => return,
                    },
                    Ok(false) => {}
                    Err(_) => return,
                }
            }
        });
        Self {
            rx,
            paused,
            stop,
            acks,
            thread: handle.thread().clone(),
        }
    }

    /// Stops reading and waits (bounded) until the thread has stopped polling.
    async fn pause(&mut self) {
        while self.acks.try_recv().is_ok() {}
        self.paused.store(true, Ordering::SeqCst);
        let _ = tokio::time::timeout(PAUSE_WAIT, self.acks.recv()).await;
    }

    fn resume(&mut self) {
        self.paused.store(false, Ordering::SeqCst);
        self.thread.unpark();
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.unpark();
    }
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Input").finish_non_exhaustive()
    }
}
#[cfg(test)]
mod tests;
