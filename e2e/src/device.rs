//! Fake devices: links minted by the CLI, decoded, and a raw-frame device built on the SDK's
//! `testing` escape hatch, so a test decides every frame (claims with wrong tokens, resumes
//! after a dropped socket, oversized or binary frames) and sees every close code.

use std::net::IpAddr;
use std::time::Duration;

use appduct_protocol::link;
use appduct_protocol::pin::SpkiPin;
use appduct_sdk::core::Endpoint;
use appduct_sdk::testing::{RawFrame, RawMessage, RawSocket};
use appduct_sdk::{CallContext, Client, ToolError, Transport};
use serde_json::{Value, json};

use crate::harness::HarnessError;

/// How long a raw device waits for one frame before the test fails.
pub const FRAME_WAIT: Duration = Duration::from_secs(10);

/// A link as `sessions link --json` returned it, decoded.
#[derive(Clone)]
pub struct Link {
    pub session_id: String,
    /// base64url of the claim token, as `session_claim.token` carries it.
    pub token: String,
    pub address: IpAddr,
    pub port: u16,
    pub pin: Option<SpkiPin>,
    pub deep_link: String,
    pub transport: Transport,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("session_id", &self.session_id)
            .field("address", &self.address)
            .field("port", &self.port)
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

impl Link {
    /// From the `data` of `sessions link --json` (native or `--transport web`).
    pub fn from_data(data: &Value) -> Result<Self, HarnessError> {
        let deep_link = data["deepLink"]
            .as_str()
            .ok_or_else(|| HarnessError::Output(format!("no deepLink in {data}")))?
            .to_owned();
        let parsed = link::parse(&deep_link)
            .map_err(|e| HarnessError::Output(format!("bad deep link: {e}")))?;
        let decoded = parsed.decoded.decoded();
        let address = decoded
            .address
            .parse()
            .map_err(|e| HarnessError::Output(format!("bad address: {e}")))?;
        let transport = if data["transport"] == "web" {
            Transport::Web
        } else {
            Transport::Native
        };
        Ok(Self {
            session_id: decoded.session_id,
            token: decoded.token_base64url,
            address,
            port: decoded.port,
            pin: parsed.pin,
            deep_link,
            transport,
        })
    }

    /// From a `link.create` result read straight off the control socket (no CLI, so no version
    /// check): a native link composed with scheme `e2e` and the result's pin.
    pub fn from_create_result(result: &Value) -> Result<Self, HarnessError> {
        let field = |name: &str| {
            result[name]
                .as_str()
                .ok_or_else(|| HarnessError::Output(format!("no {name} in {result}")))
        };
        let pin = SpkiPin::parse(field("pin")?)
            .map_err(|e| HarnessError::Output(format!("bad pin: {e}")))?;
        let deep_link = link::compose_deep_link("e2e", field("deepLinkPayload")?, Some(&pin))
            .map_err(|e| HarnessError::Output(format!("cannot compose: {e}")))?;
        Self::from_data(&json!({"deepLink": deep_link, "transport": "native"}))
    }

    /// Where this link's transport listens, trusting the link's pin.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            transport: self.transport,
            address: self.address,
            port: self.port,
            pins: self.pin.iter().cloned().collect(),
            sealed_key: None,
        }
    }

    /// The endpoint of the other listener (`port`), for wrong-transport checks.
    pub fn endpoint_on(&self, transport: Transport, port: u16) -> Endpoint {
        Endpoint {
            transport,
            address: self.address,
            port,
            pins: self.pin.iter().cloned().collect(),
            sealed_key: None,
        }
    }

    /// A `session_claim` frame for this link with `token` and a device model.
    pub fn claim_frame(&self, token: &str, model: &str) -> String {
        json!({"type": "session_claim", "protocol_version": 2, "session_id": self.session_id,
               "token": token, "device_manufacturer": "E2E", "device_model": model,
               "device_os": "Linux"})
        .to_string()
    }
}

/// How a raw socket ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    /// `None` when the socket ended without a close frame.
    pub code: Option<u16>,
    pub reason: String,
}

/// A device socket whose every frame is chosen by the test.
#[derive(Debug)]
pub struct RawDevice {
    socket: RawSocket,
    /// The session of the last ack, once claimed or resumed.
    pub session_id: String,
}

impl RawDevice {
    /// Opens a socket (TLS with the pin check for native endpoints; plain ws for web).
    pub async fn open(endpoint: &Endpoint) -> Result<Self, HarnessError> {
        let socket = RawSocket::connect(endpoint, false)
            .await
            .map_err(|e| HarnessError::Io(format!("dial {}: {e}", endpoint.url())))?;
        Ok(Self {
            socket,
            session_id: String::new(),
        })
    }

    /// Opens a socket on `link`'s listener and claims it with its own token as `model`;
    /// returns the device and the `session_ack`.
    pub async fn claim(link: &Link, model: &str) -> Result<(Self, Value), HarnessError> {
        let mut device = Self::open(&link.endpoint()).await?;
        device
            .send_text(link.claim_frame(&link.token, model))
            .await?;
        let ack = device.expect_frame("session_ack").await?;
        device.session_id = link.session_id.clone();
        Ok((device, ack))
    }

    /// Opens a socket to `endpoint` and resumes `session_id` with `resume_token`; returns the
    /// device and its first frame (an ack) or how the socket ended.
    pub async fn resume(
        endpoint: &Endpoint,
        session_id: &str,
        resume_token: &str,
    ) -> Result<(Self, Result<Value, Closed>), HarnessError> {
        let mut device = Self::open(endpoint).await?;
        device
            .send_text(
                json!({"type": "session_resume", "protocol_version": 2,
                       "session_id": session_id, "resume_token": resume_token})
                .to_string(),
            )
            .await?;
        let first = device.next_frame().await?;
        if first.is_ok() {
            device.session_id = session_id.to_owned();
        }
        Ok((device, first))
    }

    pub async fn send(&mut self, frame: RawFrame) -> Result<(), HarnessError> {
        self.socket
            .send(frame)
            .await
            .map_err(|e| HarnessError::Io(format!("send: {e}")))
    }

    pub async fn send_text(&mut self, text: impl Into<String>) -> Result<(), HarnessError> {
        self.send(RawFrame::Text(text.into())).await
    }

    /// Sends a frame of this session: `session_id` is added to `frame`.
    pub async fn send_frame(&mut self, mut frame: Value) -> Result<(), HarnessError> {
        frame["session_id"] = json!(self.session_id);
        self.send_text(frame.to_string()).await
    }

    /// Registers tools (a `tool_registry_snapshot`).
    pub async fn register(&mut self, tools: Value) -> Result<(), HarnessError> {
        self.send_frame(json!({"type": "tool_registry_snapshot", "tools": tools}))
            .await
    }

    /// The next JSON frame, or how the socket ended; pings and pongs are skipped.
    pub async fn next_frame(&mut self) -> Result<Result<Value, Closed>, HarnessError> {
        loop {
            let message = tokio::time::timeout(FRAME_WAIT, self.socket.recv())
                .await
                .map_err(|_| HarnessError::Output(format!("no frame within {FRAME_WAIT:?}")))?;
            return Ok(match message {
                Some(RawMessage::Text(text)) => Ok(serde_json::from_str(&text)
                    .map_err(|e| HarnessError::Output(format!("{e}: {text:?}")))?),
                Some(RawMessage::Close { code, reason }) => Err(Closed { code, reason }),
                None => Err(Closed {
                    code: None,
                    reason: String::new(),
                }),
                Some(RawMessage::Binary(_) | RawMessage::Ping(_) | RawMessage::Pong(_)) => {
                    continue;
                }
            });
        }
    }

    /// The next frame, which must have type `kind`.
    pub async fn expect_frame(&mut self, kind: &str) -> Result<Value, HarnessError> {
        match self.next_frame().await? {
            Ok(frame) if frame["type"] == kind => Ok(frame),
            other => Err(HarnessError::Output(format!(
                "expected {kind}, got {other:?}"
            ))),
        }
    }

    /// Reads until the socket ends; frames on the way are an error.
    pub async fn expect_close(&mut self) -> Result<Closed, HarnessError> {
        match self.next_frame().await? {
            Err(closed) => Ok(closed),
            Ok(frame) => Err(HarnessError::Output(format!(
                "expected a close, got {frame}"
            ))),
        }
    }

    /// Answers a `tool_call` with a result.
    pub async fn reply(&mut self, call: &Value, result: Value) -> Result<(), HarnessError> {
        self.send_frame(json!({"type": "tool_result", "id": call["id"], "result": result}))
            .await
    }

    /// Answers a `tool_call` with a tool error.
    pub async fn reply_error(
        &mut self,
        call: &Value,
        error_type: &str,
        message: &str,
    ) -> Result<(), HarnessError> {
        self.send_frame(json!({"type": "tool_error", "id": call["id"],
                               "error": {"type": error_type, "message": message}}))
            .await
    }
}

/// An SDK device (`appduct-sdk` [`Client`]) trusting `link`'s pin, with model `model` and two
/// tools: `whoami` returns `{"device": tag}`, `echo` returns `{"device": tag, "args": args}`.
/// Build it inside a tokio runtime.
pub fn sdk_device(link: &Link, model: &str, tag: &str) -> Result<Client, HarnessError> {
    let mut builder = Client::builder().device(Some("E2E"), Some(model), Some("Linux"));
    if let Some(pin) = &link.pin {
        builder = builder.pins([pin.clone()]);
    }
    let client = builder
        .build()
        .map_err(|e| HarnessError::Io(e.to_string()))?;
    let tag = Value::String(tag.to_owned());
    let who = tag.clone();
    client
        .register_tool(
            &json!({"name": "whoami", "description": "Names the device.",
                    "input_schema": {"type": "object"}, "output_schema": {"type": "object"}}),
            move |_args: Value, _ctx: CallContext| {
                let who = who.clone();
                async move { Ok::<_, ToolError>(json!({"device": who})) }
            },
        )
        .map_err(|e| HarnessError::Io(e.to_string()))?;
    client
        .register_tool(
            &json!({"name": "echo", "description": "Returns its arguments.",
                    "input_schema": {"type": "object"}, "output_schema": {"type": "object"}}),
            move |args: Value, _ctx: CallContext| {
                let tag = tag.clone();
                async move { Ok::<_, ToolError>(json!({"device": tag, "args": args})) }
            },
        )
        .map_err(|e| HarnessError::Io(e.to_string()))?;
    Ok(client)
}

/// Mints a link with `sessions link --scheme e2e <extra…>` and decodes it.
pub fn mint(sb: &crate::harness::Sandbox, extra: &[&str]) -> Result<Link, HarnessError> {
    let mut args = vec!["sessions", "link", "--scheme", "e2e"];
    args.extend_from_slice(extra);
    Link::from_data(&sb.data(&args)?)
}
