//! The appduct v2 vectors that exercise the app side, replayed against the sans-IO core with a
//! fake transport, a manual clock and a constant jitter source (§D15):
//! `session-scenarios*.json`, `event-registry-frames.json` and `frame-limits.json`. A missing
//! vector file fails; each failing case is reported by its `name`.

use std::collections::{HashSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use appduct_protocol::descriptor::{validate_event_descriptor, validate_tool_descriptor};
use appduct_protocol::frames::DeviceInfo;
use appduct_sdk::core::{Bootstrap, ConnId, Core, Endpoint, OpenFailure, Output};
use appduct_sdk::registry::RegistrationId;
use appduct_sdk::{ClientState, SessionEvent, ToolError, Transport};
use serde_json::{Value, json};

fn vectors_dir() -> PathBuf {
    match std::env::var_os("APPDUCT_CONFORMANCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../protocol/tests/vectors/appduct-v2"
        )),
    }
}

fn load(file: &str) -> Value {
    let path = vectors_dir().join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("vector file {} must exist: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file} is not JSON: {e}"))
}

fn endpoint() -> Endpoint {
    Endpoint {
        transport: Transport::Native,
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port: 8443,
        pins: Vec::new(),
        sealed_key: None,
    }
}

// -------------------------------------------------------------------------------------------------
// Harness: a core, a manual clock, and a fake transport that records the two output channels
// -------------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Wire {
    /// The first frame of a new connection.
    Connect(Value),
    /// Any later frame.
    Send(Value),
    /// A `1001 app_backgrounded` close by the app.
    Suspend,
}

#[derive(Debug, Clone, PartialEq)]
enum App {
    State(ClientState),
    Session(SessionEvent),
    Call {
        id: String,
        name: String,
        args: Value,
    },
    Cancel {
        call: String,
        reason: String,
    },
}

struct Harness {
    core: Core,
    now: u64,
    fail_next_connect: bool,
    newest: Option<ConnId>,
    greeted: HashSet<ConnId>,
    wire: VecDeque<Wire>,
    app: VecDeque<App>,
    errors: Vec<String>,
    events: Vec<(String, RegistrationId)>,
}

impl Harness {
    fn new(start_ms: u64, random: f64) -> Self {
        Self {
            core: Core::new(DeviceInfo::default(), Box::new(move || random)),
            now: start_ms,
            fail_next_connect: false,
            newest: None,
            greeted: HashSet::new(),
            wire: VecDeque::new(),
            app: VecDeque::new(),
            errors: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Executes the core's outputs like a transport would; opening is immediate.
    fn pump(&mut self) {
        while let Some(output) = self.core.poll_output() {
            match output {
                Output::Open { conn, .. } => {
                    if std::mem::take(&mut self.fail_next_connect) {
                        self.core.on_open_failed(
                            self.now,
                            conn,
                            OpenFailure::Other("refused".into()),
                        );
                    } else {
                        self.newest = Some(conn);
                        self.core.on_open(conn);
                    }
                }
                Output::Send { conn, text } => {
                    let frame: Value = serde_json::from_str(&text)
                        .unwrap_or_else(|e| Value::String(format!("not JSON: {e}")));
                    if self.greeted.insert(conn) {
                        self.wire.push_back(Wire::Connect(frame));
                    } else {
                        self.wire.push_back(Wire::Send(frame));
                    }
                }
                // The fake daemon answers every ping.
                Output::Ping { conn } => self.core.on_pong(conn),
                Output::Close { code, reason, .. } => {
                    if code == 1001 && reason == "app_backgrounded" {
                        self.wire.push_back(Wire::Suspend);
                    }
                }
                Output::Abort { .. } | Output::ConnectFinished { .. } => {}
                Output::State(s) => self.app.push_back(App::State(s)),
                Output::Session(e) => self.app.push_back(App::Session(e)),
                Output::CallStarted(c) => self.app.push_back(App::Call {
                    id: c.id,
                    name: c.name,
                    args: Value::Object(c.args),
                }),
                Output::CallCancelled { id, reason } => {
                    self.app.push_back(App::Cancel { call: id, reason })
                }
                Output::Error(e) => self.errors.push(e.message),
            }
        }
    }

    fn newest(&self) -> Result<ConnId, String> {
        self.newest
            .ok_or_else(|| "no connection is open".to_owned())
    }

    /// Moves the clock forward, firing each timer at its own deadline.
    fn advance(&mut self, ms: u64) {
        let target = self.now + ms;
        while let Some(at) = self.core.poll_timeout() {
            if at > target {
                break;
            }
            self.now = self.now.max(at);
            self.core.on_timeout(self.now);
            self.pump();
        }
        self.now = target;
    }

    fn drive(&mut self, step: &Value) -> Result<(), String> {
        let field = |k: &str| step.get(k).ok_or_else(|| format!("step lacks {k}: {step}"));
        let str_field = |k: &str| {
            field(k)?
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{k} is not a string"))
        };
        match step["drive"].as_str().unwrap_or_default() {
            "connect" => {
                self.core.connect_bootstrap(Bootstrap {
                    session_id: str_field("sessionId")?,
                    token: str_field("token")?,
                    expires_at: field("expiresAt")?.as_u64().ok_or("bad expiresAt")?,
                    endpoint: endpoint(),
                });
            }
            "receive" => {
                let conn = self.newest()?;
                self.core
                    .on_text(self.now, conn, &field("frame")?.to_string());
            }
            "close" => {
                let conn = self.newest()?;
                let code = field("code")?.as_u64().and_then(|c| u16::try_from(c).ok());
                let reason = step.get("reason").and_then(Value::as_str);
                self.core.on_closed(self.now, conn, code, reason);
            }
            "drop" => {
                let conn = self.newest()?;
                self.core.on_closed(self.now, conn, None, None);
            }
            "failNextConnect" => self.fail_next_connect = true,
            "advance" => self.advance(field("ms")?.as_u64().ok_or("bad ms")?),
            "registerTool" => {
                let tool = validate_tool_descriptor(field("descriptor")?)
                    .map_err(|e| format!("descriptor refused: {e}"))?;
                self.core
                    .register_tool(tool)
                    .map_err(|e| format!("registration refused: {e}"))?;
            }
            "respond" => {
                let call = str_field("call")?;
                let outcome = match step.get("error") {
                    Some(e) => Err(ToolError::new(
                        serde_json::from_value(e["type"].clone())
                            .map_err(|e| format!("bad error type: {e}"))?,
                        e["message"].as_str().unwrap_or_default(),
                    )),
                    None => Ok(field("result")?.clone()),
                };
                self.core.call_finished(&call, outcome);
            }
            "disconnect" => self.core.disconnect(),
            "background" => self.core.set_foreground(self.now, false),
            "foreground" => self.core.set_foreground(self.now, true),
            other => return Err(format!("unknown drive step {other:?}")),
        }
        self.pump();
        Ok(())
    }

    fn expect(&mut self, step: &Value) -> Result<(), String> {
        let kind = step["expect"].as_str().unwrap_or_default();
        let named = |k: &str| step.get(k).cloned();
        match kind {
            "connect" | "send" | "suspend" => {
                let got = self
                    .wire
                    .pop_front()
                    .ok_or_else(|| format!("expected wire {kind}, nothing was output"))?;
                match (kind, &got) {
                    ("connect", Wire::Connect(frame)) => {
                        let mode = match frame["type"].as_str() {
                            Some("session_claim") => "claim",
                            Some("session_resume") => "resume",
                            _ => return Err(format!("first frame is not a claim/resume: {frame}")),
                        };
                        let checks = [
                            ("mode", Some(json!(mode))),
                            ("sessionId", frame.get("session_id").cloned()),
                            ("token", frame.get("token").cloned()),
                            ("resumeToken", frame.get("resume_token").cloned()),
                        ];
                        for (k, actual) in checks {
                            if let Some(want) = named(k)
                                && Some(&want) != actual.as_ref()
                            {
                                return Err(format!("connect {k}: want {want}, got {actual:?}"));
                            }
                        }
                        Ok(())
                    }
                    ("send", Wire::Send(frame)) => {
                        let want = named("frame").ok_or("send expect lacks frame")?;
                        // serde_json maps compare as maps: key order is ignored.
                        if &want == frame {
                            Ok(())
                        } else {
                            Err(format!("send: want {want}, got {frame}"))
                        }
                    }
                    ("suspend", Wire::Suspend) => Ok(()),
                    _ => Err(format!("expected wire {kind}, got {got:?}")),
                }
            }
            "state" | "session" | "call" | "cancel" => {
                let got = self
                    .app
                    .pop_front()
                    .ok_or_else(|| format!("expected app {kind}, nothing was output"))?;
                let mismatch = || format!("expected {step}, got {got:?}");
                match (kind, &got) {
                    ("state", App::State(s)) => {
                        let same = named("state") == Some(json!(s.as_str()))
                            && named("reason")
                                .is_none_or(|r| Some(&r) == s.reason().map(|x| json!(x)).as_ref());
                        same.then_some(()).ok_or_else(mismatch)
                    }
                    ("session", App::Session(e)) => {
                        let reason = match e {
                            SessionEvent::Lost { reason } => Some(json!(reason)),
                            _ => None,
                        };
                        let same = named("type") == Some(json!(e.kind()))
                            && named("reason").is_none_or(|r| Some(r) == reason);
                        same.then_some(()).ok_or_else(mismatch)
                    }
                    ("call", App::Call { name, args, .. }) => {
                        let same = named("name").is_none_or(|n| n == json!(name))
                            && named("args").is_none_or(|a| &a == args);
                        same.then_some(()).ok_or_else(mismatch)
                    }
                    ("cancel", App::Cancel { call, reason }) => {
                        let same = named("call").is_none_or(|c| c == json!(call))
                            && named("reason").is_none_or(|r| r == json!(reason));
                        same.then_some(()).ok_or_else(mismatch)
                    }
                    _ => Err(mismatch()),
                }
            }
            other => Err(format!("unknown expect step {other:?}")),
        }
    }

    /// Runs a scenario's steps; outputs left unexpected at the end fail it.
    fn run(mut self, steps: &[Value]) -> Result<(), String> {
        for (i, step) in steps.iter().enumerate() {
            let result = if step.get("drive").is_some() {
                self.drive(step)
            } else {
                self.expect(step)
            };
            result.map_err(|e| format!("step {i}: {e}"))?;
        }
        if !self.wire.is_empty() || !self.app.is_empty() {
            return Err(format!(
                "unexpected outputs left: wire {:?}, app {:?}",
                self.wire, self.app
            ));
        }
        Ok(())
    }
}

fn run_scenario(scenario: &Value) -> Result<(), String> {
    let start = scenario["startMs"].as_u64().ok_or("startMs")?;
    let random = scenario["random"].as_f64().ok_or("random")?;
    let steps = scenario["steps"].as_array().ok_or("steps")?;
    Harness::new(start, random).run(steps)
}

fn run_scenario_file(file: &str) -> usize {
    let scenarios = load(file);
    let Some(scenarios) = scenarios.as_array() else {
        panic!("{file} must hold an array of scenarios");
    };
    assert!(!scenarios.is_empty(), "{file} holds no scenario");
    let failures: Vec<String> = scenarios
        .iter()
        .filter_map(|s| run_scenario(s).err().map(|e| format!("{}: {e}", s["name"])))
        .collect();
    assert!(failures.is_empty(), "{file}:\n{}", failures.join("\n"));
    scenarios.len()
}

#[test]
fn session_scenarios() {
    assert_eq!(run_scenario_file("session-scenarios.json"), 17);
}

#[test]
fn session_scenarios_background() {
    assert_eq!(run_scenario_file("session-scenarios-background.json"), 7);
}

/// The runner itself must be able to fail: a missing, an extra and an out-of-order output.
#[test]
fn the_runner_fails_wrong_scenarios() {
    let ack = json!({"type": "session_ack", "session_id": "s", "status": "ok", "alias": "a",
                     "resume_token": "r", "keepalive_interval_s": 15, "grace_s": 10});
    let connect =
        json!({"drive": "connect", "sessionId": "s", "token": "t", "expiresAt": 1_700_000_300u64});
    let claim = json!({"expect": "connect", "mode": "claim", "sessionId": "s", "token": "t"});
    let connecting = json!({"expect": "state", "state": "connecting"});
    let snapshot = json!({"expect": "send", "frame": {"type": "tool_registry_snapshot", "session_id": "s", "tools": []}});
    let good = vec![
        connect.clone(),
        claim.clone(),
        connecting.clone(),
        json!({"drive": "receive", "frame": ack}),
        json!({"expect": "state", "state": "active"}),
        json!({"expect": "session", "type": "claimed"}),
        snapshot.clone(),
    ];
    let scenario =
        |steps: Vec<Value>| json!({"startMs": 1_700_000_000_000u64, "random": 0.5, "steps": steps});
    assert_eq!(run_scenario(&scenario(good.clone())), Ok(()));

    let mut missing = good.clone();
    missing.push(json!({"expect": "state", "state": "reconnecting"}));
    let err = run_scenario(&scenario(missing)).unwrap_err();
    assert!(err.contains("nothing was output"), "{err}");

    let mut extra = good.clone();
    extra.pop();
    let err = run_scenario(&scenario(extra)).unwrap_err();
    assert!(err.contains("unexpected outputs left"), "{err}");

    let mut out_of_order = good.clone();
    out_of_order.swap(4, 5);
    assert!(run_scenario(&scenario(out_of_order)).is_err());

    let mut wrong_reason = good;
    wrong_reason.push(json!({"drive": "close", "code": 1008, "reason": "invalid_message"}));
    wrong_reason.push(json!({"expect": "state", "state": "closed", "reason": "revoked"}));
    assert!(run_scenario(&scenario(wrong_reason)).is_err());
}

// -------------------------------------------------------------------------------------------------
// Event registry frames
// -------------------------------------------------------------------------------------------------

fn active_harness(session_id: &str, event_registry: bool) -> Harness {
    let mut h = Harness::new(1_700_000_000_000, 0.5);
    h.core.connect_bootstrap(Bootstrap {
        session_id: session_id.to_owned(),
        token: "claim-token".to_owned(),
        expires_at: 1_700_000_300,
        endpoint: endpoint(),
    });
    h.pump();
    let ack = json!({"type": "session_ack", "session_id": session_id, "status": "ok",
                     "alias": "phone", "resume_token": "resume-1", "keepalive_interval_s": 15,
                     "grace_s": 600, "event_registry": event_registry});
    let Ok(conn) = h.newest() else {
        panic!("the claim did not open");
    };
    h.core.on_text(h.now, conn, &ack.to_string());
    h.pump();
    assert_eq!(h.core.state(), &ClientState::Active);
    h
}

fn declare(h: &mut Harness, descriptor: &Value) -> Result<(), String> {
    let event = validate_event_descriptor(descriptor).map_err(|e| e.to_string())?;
    let name = event.name.clone();
    let id = h.core.declare_event(event).map_err(|e| e.to_string())?;
    h.events.push((name, id));
    Ok(())
}

fn run_event_registry_case(case: &Value) -> Result<(), String> {
    let session_id = case["sessionId"].as_str().ok_or("sessionId")?;
    // Declarations made before the ack go into the snapshot.
    let mut h = Harness::new(1_700_000_000_000, 0.5);
    for d in case["declaredBeforeAck"]
        .as_array()
        .ok_or("declaredBeforeAck")?
    {
        declare(&mut h, d)?;
    }
    h.core.connect_bootstrap(Bootstrap {
        session_id: session_id.to_owned(),
        token: "claim-token".to_owned(),
        expires_at: 1_700_000_300,
        endpoint: endpoint(),
    });
    h.pump();
    let ack = json!({"type": "session_ack", "session_id": session_id, "status": "ok",
                     "alias": "phone", "resume_token": "resume-1", "keepalive_interval_s": 15,
                     "grace_s": 600, "event_registry": true});
    let conn = h.newest()?;
    h.core.on_text(h.now, conn, &ack.to_string());
    h.pump();
    // Back to back, with no waiting.
    for step in case["afterAck"].as_array().ok_or("afterAck")? {
        match step["op"].as_str() {
            Some("register") => declare(&mut h, &step["event"])?,
            Some("remove") => {
                let name = step["name"].as_str().ok_or("remove without name")?;
                let (_, id) = h
                    .events
                    .iter()
                    .rev()
                    .find(|(n, _)| n == name)
                    .cloned()
                    .ok_or_else(|| format!("no registration named {name}"))?;
                h.core.remove_event(id);
            }
            other => return Err(format!("unknown op {other:?}")),
        }
        h.pump();
    }
    let sent: Vec<Value> = h
        .wire
        .iter()
        .filter_map(|w| match w {
            Wire::Send(f)
                if f["type"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("event_registry_")) =>
            {
                Some(f.clone())
            }
            _ => None,
        })
        .collect();
    let want = case["frames"].as_array().ok_or("frames")?;
    if &sent != want {
        return Err(format!("want {want:?}\ngot  {sent:?}"));
    }
    Ok(())
}

#[test]
fn event_registry_frames() {
    let cases = load("event-registry-frames.json");
    let cases = cases.as_array().expect("an array");
    assert!(!cases.is_empty());
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            run_event_registry_case(c)
                .err()
                .map(|e| format!("{}: {e}", c["name"]))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// -------------------------------------------------------------------------------------------------
// Frame limits
// -------------------------------------------------------------------------------------------------

#[test]
fn frame_limits() {
    let file = load("frame-limits.json");
    assert_eq!(file["limitBytes"], 262_144);
    let vectors = file["vectors"].as_array().expect("vectors");
    assert!(!vectors.is_empty());
    let mut failures = Vec::new();
    for v in vectors {
        let name = v["name"].as_str().unwrap_or_default();
        let frame_bytes = v["frameBytes"].as_u64().expect("frameBytes") as usize;
        let filler = v["filler"].as_str().expect("filler");
        let sent = v["sent"].as_bool().expect("sent");

        let mut h = active_harness("session-1", false);
        h.wire.clear();
        h.app.clear();
        // Measure with an empty payload string, then fill the gap (§D15).
        h.core
            .post_event(h.now, "limits", Some(json!("")))
            .expect("an empty event fits");
        h.pump();
        let Some(Wire::Send(base)) = h.wire.pop_back() else {
            panic!("{name}: the empty event was not sent");
        };
        let gap = frame_bytes - base.to_string().len();
        let count = gap / filler.len();
        let payload = filler.repeat(count) + &"a".repeat(gap - count * filler.len());

        let result = h.core.post_event(h.now, "limits", Some(json!(payload)));
        h.pump();
        let on_wire: Vec<&Wire> = h.wire.iter().collect();
        if sent {
            match (result, on_wire.as_slice()) {
                (Ok(()), [Wire::Send(frame)]) if frame.to_string().len() == frame_bytes => {}
                other => failures.push(format!("{name}: expected it sent, got {other:?}")),
            }
        } else {
            let message_ok = h
                .errors
                .iter()
                .any(|m| m.contains(&frame_bytes.to_string()) && m.contains("262144"));
            if result.is_ok() || !on_wire.is_empty() || !message_ok {
                failures.push(format!(
                    "{name}: expected a refusal naming {frame_bytes} and 262144, got {:?} / {:?}",
                    h.errors, on_wire
                ));
            }
            if h.core.state() != &ClientState::Active {
                failures.push(format!("{name}: the connection must stay open"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
