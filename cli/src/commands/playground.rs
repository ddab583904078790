//! `appduct playground [--tour]`: the CLI's demo device (ARCHITECTURE.md#crates). An in-process app built on
//! `appduct-sdk` that exposes exactly the playground contract of §T14 (tools `sum`,
//! `call_count`, `reset_counter`, `slow_task`, `throwing_tool`; event `playground_ping`),
//! connected through a native link over the daemon's real wss listener with the pin from
//! `link.create` embedded (`Trust::Pin`), so the SPKI pin is checked before any frame.
//!
//! Without `--tour` it stays connected until SIGINT or SIGTERM (then disconnects and revokes
//! its session, exit 0); a `ping` (or empty) line on stdin posts `playground_ping`. With
//! `--tour` it runs a short scripted tour of the commands against itself and exits 0.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use appduct_client::client::{CallProgress, ControlClient, ToolCallError};
use appduct_client::state_dir::StateDir;
use appduct_protocol::control::{
    Caller, LinkCreate, LinkCreateParams, NoParams, SelectorParams, SessionsList, SessionsRevoke,
    ToolsCallParams, ToolsCancel, ToolsCancelParams, ToolsListParams, Transport,
};
use appduct_protocol::pin::SpkiPin;
use appduct_sdk::{
    CallContext, Client, ClientState, ContentBlock, ImageMimeType, RegistrationError, ToolError,
    ToolOutput, Trust,
};
use clap::Args;
use serde_json::{Map, Value, json};
use time::OffsetDateTime;
use tokio::io::AsyncBufReadExt as _;

use super::Command;
use super::sessions::sessions_ls;
use super::tools::call::{new_call_id, tools_call, tools_call_showing};
use super::tools::content::Pictures;
use super::tools::describe::tools_describe;
use super::tools::ls::{ToolsLs, tools_ls};
use super::tools::{describe_session, list_all, tool_not_found};
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{Output, Reply, Success};
use crate::render::Paint;
use crate::signals::Interrupts;

#[derive(Debug, Args)]
pub struct PlaygroundArgs {
    /// Run a short scripted tour of the commands against the playground, then exit
    #[arg(long)]
    pub tour: bool,
}

pub fn validate(a: PlaygroundArgs) -> Command {
    Command::Playground { tour: a.tour }
}

/// The picture tool (issue #17): the counter's recent values as a PNG bar chart.
pub const CHART_TOOL: &str = "counter_chart";
/// The playground's event (§T14.2).
pub const PING_EVENT: &str = "playground_ping";
/// Steps of `slow_task` (§T14.1): 500 ms, then a progress report, three times.
pub const SLOW_TASK_STEPS: [(f64, &str); 3] =
    [(0.33, "warming up"), (0.66, "almost there"), (1.0, "done")];
pub const SLOW_TASK_STEP: Duration = Duration::from_millis(500);
/// The message of `throwing_tool`.
pub const THROWING_MESSAGE: &str = "throwing_tool always fails on purpose.";

fn empty_object_schema() -> Value {
    json!({"type": "object", "properties": {}, "additionalProperties": false})
}

fn count_schema() -> Value {
    json!({"type": "object", "properties": {"count": {"type": "integer", "minimum": 0}},
           "required": ["count"], "additionalProperties": false})
}

/// The tool descriptors of §T14.1, in registration order, byte for byte: the five of the
/// contract, then `counter_chart`.
pub fn tool_descriptors() -> Vec<Value> {
    vec![
        json!({
            "name": "sum",
            "description": "Adds a and b and returns the total. Each call raises call_count by one.",
            "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                             "required": ["a", "b"], "additionalProperties": false},
            "output_schema": {"type": "object", "properties": {"total": {"type": "number"}},
                              "required": ["total"], "additionalProperties": false},
            "testCases": [{"name": "adds two numbers", "arguments": {"a": 1, "b": 2},
                           "expect": {"schema": {"type": "object", "required": ["total"],
                                                 "properties": {"total": {"const": 3}}}}}],
        }),
        json!({
            "name": "call_count",
            "description": "Returns how many times sum and slow_task have completed. Read-only.",
            "group": "counter",
            "annotations": {"readOnlyHint": true},
            "input_schema": empty_object_schema(),
            "output_schema": count_schema(),
            "testCases": [{"name": "returns the count", "arguments": {},
                           "expect": {"schema": {"type": "object", "required": ["count"],
                                                 "properties": {"count": {"type": "integer"}}}}}],
        }),
        json!({
            "name": "reset_counter",
            "description": "Sets the call counter back to zero. Destructive; repeating it changes nothing.",
            "group": "counter",
            "annotations": {"destructiveHint": true, "idempotentHint": true},
            "input_schema": empty_object_schema(),
            "output_schema": count_schema(),
            "testCases": [{"name": "sets the count to zero", "arguments": {},
                           "expect": {"schema": {"type": "object", "required": ["count"],
                                                 "properties": {"count": {"const": 0}}}}}],
        }),
        json!({
            "name": "slow_task",
            "description": "Runs for about 1.5 s and reports progress three times, then raises call_count by one.",
            "group": "diagnostics/progress",
            "timeout_ms": 5000,
            "input_schema": empty_object_schema(),
            "output_schema": {"type": "object", "properties": {"done": {"type": "boolean"}},
                              "required": ["done"], "additionalProperties": false},
        }),
        json!({
            "name": "throwing_tool",
            "description": "Fails every time with tool_execution_error and changes nothing.",
            "group": "diagnostics",
            "annotations": {"readOnlyHint": true},
            "input_schema": empty_object_schema(),
            "testCases": [{"name": "always fails", "arguments": {},
                           "expect": {"error": "tool_execution_error"}}],
        }),
        json!({
            "name": CHART_TOOL,
            "description": "Draws the call counter's recent values as a PNG bar chart. Read-only.",
            "group": "counter",
            "annotations": {"readOnlyHint": true},
            "input_schema": empty_object_schema(),
            "testCases": [{"name": "draws a chart", "arguments": {}, "expect": {}}],
        }),
    ]
}

/// The `playground_ping` declaration (§T14.2).
pub fn ping_descriptor() -> Value {
    json!({
        "name": PING_EVENT,
        "description": "Posted when the playground's ping control is pressed.",
        "payload_schema": {"type": "object", "properties": {"at": {"type": "number"}}, "required": ["at"]},
    })
}

/// A JSON number that prints like JavaScript's: integral values without a fraction.
fn js_number(x: f64) -> Value {
    const SAFE: f64 = 9_007_199_254_740_991.0;
    if x.fract() == 0.0 && x.abs() <= SAFE {
        json!(x as i64)
    } else {
        json!(x)
    }
}

fn number_arg(args: &Value, key: &str) -> Result<f64, ToolError> {
    args.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| ToolError::input_validation(format!("\"{key}\" must be a number")))
}

/// The shared call counter: only a completed `sum` or `slow_task` raises it. It keeps its
/// last [`CHART_MAX_BARS`](appduct_client::picture::CHART_MAX_BARS) values, one per change,
/// for `counter_chart`.
#[derive(Debug, Clone, Default)]
pub struct Counter(Arc<CounterState>);

#[derive(Debug, Default)]
struct CounterState {
    value: AtomicU64,
    history: std::sync::Mutex<std::collections::VecDeque<u64>>,
}

impl Counter {
    pub fn get(&self) -> u64 {
        self.0.value.load(Ordering::SeqCst)
    }
    fn bump(&self) {
        let now = self.0.value.fetch_add(1, Ordering::SeqCst) + 1;
        self.record(now);
    }
    fn reset(&self) {
        self.0.value.store(0, Ordering::SeqCst);
        self.record(0);
    }
    fn record(&self, value: u64) {
        let mut history = self.0.history.lock().unwrap_or_else(|p| p.into_inner());
        if history.len() == appduct_client::picture::CHART_MAX_BARS {
            history.pop_front();
        }
        history.push_back(value);
    }
    /// The values after each change, oldest first (at most 16).
    pub fn history(&self) -> Vec<u64> {
        let history = self.0.history.lock().unwrap_or_else(|p| p.into_inner());
        history.iter().copied().collect()
    }
    /// `counter_chart`'s PNG: one bar per recorded value.
    pub fn chart_png(&self) -> Result<Vec<u8>, appduct_client::picture::EncodeError> {
        appduct_client::picture::bar_chart(&self.history())
    }
}

/// Registers the playground contract on `client` (tools first, in order, then the event).
pub fn register_playground(client: &Client, counter: &Counter) -> Result<(), RegistrationError> {
    let d = tool_descriptors();
    let c = counter.clone();
    client.register_tool(&d[0], move |args: Value, _ctx: CallContext| {
        let c = c.clone();
        async move {
            let total = number_arg(&args, "a")? + number_arg(&args, "b")?;
            c.bump();
            Ok(json!({"total": js_number(total)}))
        }
    })?;
    let c = counter.clone();
    client.register_tool(&d[1], move |_args: Value, _ctx: CallContext| {
        let count = c.get();
        async move { Ok(json!({"count": count})) }
    })?;
    let c = counter.clone();
    client.register_tool(&d[2], move |_args: Value, _ctx: CallContext| {
        c.reset();
        async move { Ok(json!({"count": 0})) }
    })?;
    let c = counter.clone();
    client.register_tool(&d[3], move |_args: Value, ctx: CallContext| {
        let c = c.clone();
        async move {
            for (progress, message) in SLOW_TASK_STEPS {
                tokio::select! {
                    () = tokio::time::sleep(SLOW_TASK_STEP) => {}
                    reason = ctx.cancelled() => {
                        return Err(ToolError::execution(format!("slow_task stopped: {reason}")));
                    }
                }
                ctx.progress(Some(progress), Some(message));
            }
            c.bump();
            Ok(json!({"done": true}))
        }
    })?;
    client.register_tool(&d[4], |_args: Value, _ctx: CallContext| async {
        Err(ToolError::execution(THROWING_MESSAGE).with_details(json!({"name": "Error"})))
    })?;
    // The picture tool (§T14.1, §D17): one image block, no JSON result.
    let c = counter.clone();
    client.register_content_tool(&d[5], move |_args: Value, _ctx: CallContext| {
        let png = c.chart_png();
        async move {
            let png = png.map_err(|e| ToolError::execution(e.to_string()))?;
            Ok(ToolOutput::content(vec![ContentBlock::image(
                &png,
                ImageMimeType::Png,
            )]))
        }
    })?;
    client.declare_event(&ping_descriptor())?;
    Ok(())
}

/// The connected playground: its device client and session.
struct Playground {
    device: Client,
    session_id: String,
    alias: String,
}

fn internal(what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::internal(format!("{what}: {e}"))
}

/// Mints a native link for this machine and connects the device with the link's pin embedded.
async fn start_device(client: &ControlClient, dir: &StateDir) -> Result<Playground, CliError> {
    let link = client
        .call::<LinkCreate>(
            LinkCreateParams::default()
                .with_address_override(Some(IpAddr::V4(Ipv4Addr::LOCALHOST)))
                .with_transport(Some(Transport::Native)),
        )
        .await
        .map_err(|e| connect::client_error(&e, dir))?;
    let pin =
        SpkiPin::parse(&link.pin).map_err(|e| internal("the daemon sent an invalid pin", e))?;
    let device = Client::builder()
        .trust(Trust::Pin(vec![pin]))
        .device(
            Some("appduct"),
            Some("Playground"),
            Some(std::env::consts::OS),
        )
        .build()
        .map_err(|e| internal("cannot build the playground device", e))?;
    register_playground(&device, &Counter::default())
        .map_err(|e| internal("cannot register the playground contract", e))?;
    let session = device.connect(&link.deep_link_payload).await.map_err(|e| {
        CliError::connection(format!(
            "the playground could not connect to the daemon: {e}"
        ))
        .with_detail("code", e.code())
    })?;
    let playground = Playground {
        device,
        session_id: session.session_id,
        alias: session.alias,
    };
    wait_registered(client, dir, &playground.session_id).await?;
    Ok(playground)
}

/// How long the playground waits for the daemon to hold its tools and event.
const REGISTRATION_WAIT: Duration = Duration::from_secs(5);
const REGISTRATION_POLL: Duration = Duration::from_millis(20);

/// The claim is acked before the registry snapshots arrive; wait (bounded polling) until the
/// daemon lists the whole contract, so the ready line and the tour see every tool.
async fn wait_registered(
    client: &ControlClient,
    dir: &StateDir,
    session_id: &str,
) -> Result<(), CliError> {
    let tools = tool_descriptors().len() as u64;
    let deadline = tokio::time::Instant::now() + REGISTRATION_WAIT;
    loop {
        let s = describe_session(client, dir, Some(session_id)).await?;
        if s.tool_count == tools && s.event_count == 1 {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CliError::connection(format!(
                "the daemon lists {} of the playground's {tools} tools after {} s",
                s.tool_count,
                REGISTRATION_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(REGISTRATION_POLL).await;
    }
}

/// Ends the playground's session: a clean disconnect, then the revoke so nothing lingers.
async fn stop_device(client: &ControlClient, p: &Playground) {
    p.device.disconnect();
    let params = SelectorParams::default().with_selector(Some(p.session_id.clone()));
    if let Err(e) = client.call::<SessionsRevoke>(params).await {
        tracing::debug!("revoking the playground session: {e}");
    }
}

/// `appduct playground [--tour]`.
pub async fn run(globals: &Globals, out: &Output, tour: bool) -> Result<Reply, CliError> {
    let mut signals =
        Interrupts::new(false).map_err(|e| internal("cannot install signal handlers", e))?;
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let playground = tokio::select! {
        p = start_device(&client, &dir) => p?,
        _ = signals.recv() => return Ok(Reply::Done(crate::signals::INTERRUPTED)),
    };
    // `None`: interrupted while waiting.
    let ready = tokio::select! {
        r = wait_registered(&client, &dir, &playground.session_id) => Some(r),
        _ = signals.recv() => None,
    };
    match ready {
        Some(Ok(())) => {}
        Some(Err(e)) => {
            stop_device(&client, &playground).await;
            return Err(e);
        }
        None => {
            stop_device(&client, &playground).await;
            return Ok(Reply::Done(crate::signals::INTERRUPTED));
        }
    }
    let result = if tour {
        tokio::select! {
            r = run_tour(&client, &dir, out, &playground) => r,
            _ = signals.recv() => Ok(Reply::Done(crate::signals::INTERRUPTED)),
        }
    } else {
        serve(&client, out, &playground, &mut signals).await
    };
    stop_device(&client, &playground).await;
    result
}

const TRY_COMMANDS: &[&str] = &[
    "appduct sessions ls",
    "appduct tools ls",
    "appduct tools describe sum",
    "appduct tools call sum --input '{\"a\": 1.5, \"b\": 2}'",
    "appduct tools call slow_task",
    "appduct tools call throwing_tool",
    "appduct events tail",
];

/// Stays connected until SIGINT or SIGTERM; stdin lines post `playground_ping`.
async fn serve(
    client: &ControlClient,
    out: &Output,
    p: &Playground,
    signals: &mut Interrupts,
) -> Result<Reply, CliError> {
    let mut human = views_block(
        "Playground connected",
        &[
            ("Session", p.session_id.as_str()),
            ("Alias", p.alias.as_str()),
        ],
    );
    human.push_str("\nTry these in another terminal:\n");
    for c in TRY_COMMANDS {
        human.push_str(&format!("  {c}\n"));
    }
    human.push_str(
        "\nPress Enter here to post a playground_ping event. Ctrl-C stops the playground.\n",
    );
    let data = json!({
        "sessionId": p.session_id,
        "alias": p.alias,
        "tools": tool_descriptors().iter().map(|d| d["name"].clone()).collect::<Vec<_>>(),
        "events": [PING_EVENT],
    });
    out.print_success(&Success::new(data, human));
    let mut state = p.device.watch_state();
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut stdin_open = true;
    // The control connection only closes when the daemon goes away; the device would keep
    // retrying until its grace window ends, so the playground ends with the daemon instead.
    let mut daemon_check = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = signals.recv() => return Ok(Reply::Done(0)),
            _ = daemon_check.tick() => {
                if !client.is_open() {
                    out.notice("The appduct daemon stopped; the playground ends.");
                    return Ok(Reply::Done(0));
                }
            }
            changed = state.changed() => {
                let now = state.borrow().clone();
                if changed.is_err() {
                    return Ok(Reply::Done(0));
                }
                if let ClientState::Closed { reason } = now {
                    out.notice(&format!("The playground session ended ({reason})."));
                    return Ok(Reply::Done(0));
                }
            }
            line = stdin.next_line(), if stdin_open => match line {
                Ok(Some(text)) if text.trim().is_empty() || text.trim() == "ping" => {
                    let at = OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000;
                    match p.device.post_event(PING_EVENT, Some(json!({"at": at as f64}))) {
                        Ok(()) => out.notice("Posted playground_ping."),
                        Err(e) => out.notice(&format!("playground_ping not sent: {e}")),
                    }
                }
                Ok(Some(_)) => out.notice("Press Enter (or type ping) to post playground_ping."),
                Ok(None) | Err(_) => stdin_open = false,
            }
        }
    }
}

fn views_block(title: &str, rows: &[(&str, &str)]) -> String {
    crate::render::sections(&[crate::render::Section::new(
        title,
        rows.iter()
            .map(|(k, v)| crate::render::Row::field(*k, *v))
            .collect(),
    )])
}

// ---------------------------------------------------------------------------------------------
// The tour
// ---------------------------------------------------------------------------------------------

/// One step of the tour: the command shown, and what it printed.
struct Step {
    command: String,
    outcome: Result<Success, CliError>,
    /// Lines shown between the command and its result (progress, the simulated Ctrl-C).
    notes: Vec<String>,
}

impl Step {
    fn exit_code(&self) -> u8 {
        self.outcome
            .as_ref()
            .map_or_else(CliError::exit_code, |_| 0)
    }

    fn json(&self, out: &Output) -> Value {
        let mut m = Map::new();
        m.insert("command".into(), json!(self.command));
        m.insert("exitCode".into(), json!(self.exit_code()));
        match &self.outcome {
            Ok(s) => m.insert("data".into(), s.data.clone()),
            Err(e) => m.insert(
                "error".into(),
                out.failure_envelope(e)
                    .get("error")
                    .cloned()
                    .unwrap_or(Value::Null),
            ),
        };
        Value::Object(m)
    }

    fn human(&self, out: &Output) -> String {
        let mut text = format!("$ {}\n", self.command);
        for n in &self.notes {
            text.push_str(&format!("  {n}\n"));
        }
        match &self.outcome {
            Ok(s) => text.push_str(&s.human),
            Err(e) => {
                let mut plain = out.clone();
                plain.flags.verbose = false;
                text.push_str(&plain.render_error_block(e, Paint::PLAIN));
                text.push_str(&format!("(exit code {})\n", e.exit_code()));
            }
        }
        text
    }
}

fn call_params(session_id: &str, name: &str, args: Value, call_id: String) -> ToolsCallParams {
    ToolsCallParams::new(name.to_owned())
        .with_selector(Some(session_id.to_owned()))
        .with_args(match args {
            Value::Object(m) => m,
            _ => Map::new(),
        })
        .with_caller(Some(Caller::Cli))
        .with_call_id(Some(call_id))
}

fn call_outcome(
    name: &str,
    dir: &StateDir,
    r: Result<appduct_protocol::control::ToolsCallResult, ToolCallError>,
) -> Result<Success, CliError> {
    r.map(|r| tools_call(name, &r))
        .map_err(|e| connect::tool_call_error(&e, dir))
}

/// Progress notifications as tour notes: `[###-------] 33% warming up`.
fn progress_note(item: &CallProgress) -> Option<String> {
    match item {
        CallProgress::Started(s) => Some(format!(
            "started on {} (deadline {:.1} s)",
            s.alias,
            s.deadline_ms as f64 / 1000.0
        )),
        CallProgress::Progress(p) => {
            let bar = p
                .progress
                .as_ref()
                .and_then(|n| n.as_f64())
                .map(crate::progress::bar)
                .unwrap_or_default();
            Some(
                format!("{bar} {}", p.message.as_deref().unwrap_or_default())
                    .trim()
                    .to_owned(),
            )
        }
    }
}

async fn run_tour(
    client: &ControlClient,
    dir: &StateDir,
    out: &Output,
    p: &Playground,
) -> Result<Reply, CliError> {
    let mut steps: Vec<Step> = Vec::new();
    let rpc = |e| connect::client_error(&e, dir);
    let sid = p.session_id.clone();

    let sessions = client
        .call::<SessionsList>(NoParams {})
        .await
        .map_err(rpc)?;
    steps.push(Step {
        command: "appduct sessions ls".into(),
        outcome: Ok(sessions_ls(&sessions, OffsetDateTime::now_utc())),
        notes: Vec::new(),
    });

    let session = describe_session(client, dir, Some(&sid)).await?;
    let req = ToolsLs {
        params: ToolsListParams::default().with_selector(Some(sid.clone())),
        groups_only: false,
        full: false,
    };
    let listed = list_all(client, dir, &sid).await?;
    steps.push(Step {
        command: format!("appduct tools ls {}", session.alias),
        outcome: Ok(tools_ls(&req, &listed, &session.alias)),
        notes: Vec::new(),
    });
    let describe = match listed.tools.iter().find(|t| t.name() == "sum") {
        Some(entry) => Ok(tools_describe(entry)),
        None => Err(tool_not_found("sum", &session.alias, &listed)),
    };
    steps.push(Step {
        command: format!("appduct tools describe {} sum", session.alias),
        outcome: describe,
        notes: Vec::new(),
    });

    let r = client
        .call_tool(call_params(
            &sid,
            "sum",
            json!({"a": 1.5, "b": 2}),
            new_call_id()?,
        ))
        .await;
    steps.push(Step {
        command: format!(
            "appduct tools call {} sum --input '{{\"a\": 1.5, \"b\": 2}}'",
            session.alias
        ),
        outcome: call_outcome("sum", dir, r),
        notes: Vec::new(),
    });

    let (mut stream, pending) =
        client.call_tool_with_progress(call_params(&sid, "slow_task", json!({}), new_call_id()?));
    let mut notes = Vec::new();
    let mut result = std::pin::pin!(pending.result());
    let r = loop {
        tokio::select! {
            r = &mut result => break r,
            Some(item) = stream.next() => notes.extend(progress_note(&item)),
        }
    };
    while let Ok(Some(item)) = tokio::time::timeout(Duration::ZERO, stream.next()).await {
        notes.extend(progress_note(&item));
    }
    steps.push(Step {
        command: format!("appduct tools call {} slow_task", session.alias),
        outcome: call_outcome("slow_task", dir, r),
        notes,
    });

    // A picture (§L7.3.1): the counter chart saved with --out-dir, in a fresh directory under
    // the temporary directory, kept for the user to open.
    let out_dir = std::env::temp_dir().join(format!("appduct-tour-{}", std::process::id()));
    let r = client
        .call_tool(call_params(&sid, CHART_TOOL, json!({}), new_call_id()?))
        .await;
    let pictures = Pictures {
        out_dir: Some(out_dir.clone()),
        inline: None,
    };
    let outcome = r
        .map_err(|e| connect::tool_call_error(&e, dir))
        .and_then(|r| tools_call_showing(CHART_TOOL, &r, &pictures));
    steps.push(Step {
        command: format!(
            "appduct tools call {} {CHART_TOOL} --out-dir {}",
            session.alias,
            out_dir.display()
        ),
        outcome,
        notes: Vec::new(),
    });

    let r = client
        .call_tool(call_params(
            &sid,
            "throwing_tool",
            json!({}),
            new_call_id()?,
        ))
        .await;
    steps.push(Step {
        command: format!("appduct tools call {} throwing_tool", session.alias),
        outcome: call_outcome("throwing_tool", dir, r),
        notes: Vec::new(),
    });

    // A cancel: start slow_task, and once it runs, do what the first Ctrl-C of `tools call`
    // does (tools.cancel with client_cancelled).
    let call_id = new_call_id()?;
    let (mut stream, pending) =
        client.call_tool_with_progress(call_params(&sid, "slow_task", json!({}), call_id.clone()));
    let mut notes = Vec::new();
    let mut result = std::pin::pin!(pending.result());
    let mut cancelled = false;
    let r = loop {
        tokio::select! {
            r = &mut result => break r,
            Some(item) = stream.next() => {
                if !cancelled && matches!(item, CallProgress::Started(_)) {
                    cancelled = true;
                    notes.push("^C (Ctrl-C sends tools.cancel; the tool stops at its next step)".to_owned());
                    client
                        .call::<ToolsCancel>(ToolsCancelParams::new(call_id.clone()).with_reason(Some("client_cancelled".into())))
                        .await
                        .map_err(rpc)?;
                }
            }
        }
    };
    steps.push(Step {
        command: format!("appduct tools call {} slow_task", session.alias),
        outcome: call_outcome("slow_task", dir, r),
        notes,
    });

    let expected: [u8; 8] = [0, 0, 0, 0, 0, 0, 72, 72];
    let codes: Vec<u8> = steps.iter().map(Step::exit_code).collect();
    let ok = codes == expected;
    if out.flags.json {
        let data = json!({
            "sessionId": p.session_id,
            "alias": p.alias,
            "steps": steps.iter().map(|s| s.json(out)).collect::<Vec<_>>(),
            "ok": ok,
        });
        if !ok {
            return Err(
                CliError::internal("the playground tour did not go as expected")
                    .with_detail("steps", data["steps"].clone()),
            );
        }
        return Ok(Reply::Success(Success::new(data, String::new())));
    }
    let mut text = format!(
        "appduct playground tour\n\nThe playground app is connected as {} (session {}). Each step \
         shows a command and what it prints.\n\n",
        p.alias, p.session_id
    );
    for s in &steps {
        text.push_str(&s.human(out));
        text.push('\n');
    }
    if !ok {
        crate::output::write_stdout(&text);
        return Err(CliError::internal(format!(
            "the playground tour did not go as expected (exit codes {codes:?}, expected {expected:?})"
        )));
    }
    text.push_str(
        "Tour complete. Run \"appduct playground\" to keep the app connected and try the commands \
         yourself.\n",
    );
    Ok(Reply::Success(Success::new(json!({}), text)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use appduct_protocol::descriptor::validate_tool_descriptor;

    #[test]
    fn the_chart_draws_one_bar_per_change_of_the_counter() {
        let c = Counter::default();
        assert!(c.history().is_empty());
        c.bump();
        c.bump();
        c.reset();
        c.bump();
        assert_eq!(c.history(), [1, 2, 0, 1]);
        for _ in 0..20 {
            c.bump();
        }
        assert_eq!(c.history().len(), 16);
        assert_eq!(c.history().last(), Some(&21));
        let png = c.chart_png().unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    }

    #[test]
    fn descriptors_are_the_contract_byte_for_byte() {
        let d = tool_descriptors();
        let names: Vec<&str> = d.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "sum",
                "call_count",
                "reset_counter",
                "slow_task",
                "throwing_tool",
                "counter_chart"
            ]
        );
        assert_eq!(
            d[0]["input_schema"].to_string(),
            r#"{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"],"additionalProperties":false}"#
        );
        assert_eq!(
            d[1]["output_schema"].to_string(),
            r#"{"type":"object","properties":{"count":{"type":"integer","minimum":0}},"required":["count"],"additionalProperties":false}"#
        );
        assert_eq!(
            d[2]["annotations"].to_string(),
            r#"{"destructiveHint":true,"idempotentHint":true}"#
        );
        assert_eq!(d[3]["timeout_ms"], 5000);
        assert_eq!(d[3]["group"], "diagnostics/progress");
        assert!(d[4].get("output_schema").is_none());
        assert!(d[0].get("group").is_none() && d[0].get("annotations").is_none());
        for t in &d {
            validate_tool_descriptor(t).unwrap();
        }
        assert_eq!(
            ping_descriptor()["payload_schema"].to_string(),
            r#"{"type":"object","properties":{"at":{"type":"number"}},"required":["at"]}"#
        );
    }

    #[test]
    fn numbers_print_like_javascript() {
        assert_eq!(js_number(3.0).to_string(), "3");
        assert_eq!(js_number(3.5).to_string(), "3.5");
        assert_eq!(js_number(-0.25).to_string(), "-0.25");
    }

    #[test]
    fn sum_rejects_non_numbers() {
        assert!(number_arg(&json!({"a": "1"}), "a").is_err());
        assert_eq!(number_arg(&json!({"a": 2}), "a").unwrap(), 2.0);
    }
}
