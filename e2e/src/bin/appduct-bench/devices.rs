//! Setup: a sequential control client for links and lookups, and the SDK devices that answer
//! the benchmark's calls (the same `appduct-sdk` device for the daemon and the Node relay).

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use appduct_sdk::core::{Bootstrap, Endpoint};
use appduct_sdk::{CallContext, Client, SpkiPin, ToolError, Transport};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::Semaphore;

use crate::load::BenchResult;

/// One control connection used one request at a time (setup only, never measured).
pub struct Ctl {
    lines: Lines<BufReader<OwnedReadHalf>>,
    write: OwnedWriteHalf,
    next_id: u64,
}

impl Ctl {
    pub async fn connect(socket: &Path) -> BenchResult<Self> {
        let stream = UnixStream::connect(socket)
            .await
            .map_err(|e| format!("control connect {}: {e}", socket.display()))?;
        let (read, write) = stream.into_split();
        Ok(Self {
            lines: BufReader::new(read).lines(),
            write,
            next_id: 1,
        })
    }

    /// The `result` of `method`; an error response fails.
    pub async fn result(&mut self, method: &str, params: Value) -> BenchResult<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        self.write
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("control write: {e}"))?;
        loop {
            let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
                .await
                .map_err(|_| format!("{method}: no answer"))?
                .map_err(|e| format!("control read: {e}"))?
                .ok_or("control connection closed")?;
            let msg: Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
            if msg["id"] != json!(id) {
                continue;
            }
            return match msg.get("result") {
                Some(result) => Ok(result.clone()),
                None => Err(format!("{method} failed: {line}")),
            };
        }
    }
}

/// A device model of `tools` tools: `echo` (returns its arguments) and `tools - 1` fillers.
/// `pin` is `None` for a sealed link (which carries the daemon's static key instead).
pub fn device(pin: Option<&SpkiPin>, tools: usize) -> BenchResult<Client> {
    let mut builder = Client::builder();
    if let Some(pin) = pin {
        builder = builder.pins([pin.clone()]);
    }
    let client = builder
        .device(Some("Bench"), Some("Bench device"), Some("Linux"))
        .build()
        .map_err(|e| e.to_string())?;
    client
        .register_tool(
            &json!({"name": "echo", "description": "Returns its arguments.",
                    "input_schema": {"type": "object"}, "output_schema": {"type": "object"}}),
            |args: Value, _ctx: CallContext| async move { Ok::<_, ToolError>(args) },
        )
        .map_err(|e| e.to_string())?;
    for n in 1..tools {
        client
            .register_tool(
                &json!({"name": format!("filler_{n}"),
                        "description": "A tool that only takes room in the registry.",
                        "input_schema": {"type": "object",
                                         "properties": {"value": {"type": "string"}}},
                        "output_schema": {"type": "object"}}),
                |_args: Value, _ctx: CallContext| async move { Ok::<_, ToolError>(json!({})) },
            )
            .map_err(|e| e.to_string())?;
    }
    Ok(client)
}

/// A connected device and its session id.
pub struct Connected {
    pub client: Client,
    pub session_id: String,
}

/// Links minted ahead of their claims: below the daemon's cap of pending links (1,024).
const LINKS_AHEAD: usize = 512;

/// Mints `count` links on the daemon and connects one device (`tools` tools) to each, at most
/// `parallel` claims at a time (below the daemon's pre-claim cap). Links are minted in chunks
/// of [`LINKS_AHEAD`], each chunk connected before the next is minted. Returns the devices and
/// the time the connects took (minting excluded).
pub async fn connect_to_daemon(
    ctl: &mut Ctl,
    count: usize,
    tools: usize,
    parallel: usize,
) -> BenchResult<(Vec<Connected>, Duration)> {
    let mut devices = Vec::with_capacity(count);
    let mut took = Duration::ZERO;
    while devices.len() < count {
        let chunk = (count - devices.len()).min(LINKS_AHEAD);
        let mut links = Vec::with_capacity(chunk);
        for _ in 0..chunk {
            let link = ctl.result("link.create", json!({})).await?;
            let payload = link["deepLinkPayload"]
                .as_str()
                .ok_or_else(|| format!("no payload in {link}"))?
                .to_owned();
            let pin = SpkiPin::parse(link["pin"].as_str().unwrap_or_default())
                .map_err(|e| format!("pin: {e}"))?;
            links.push((payload, pin));
        }
        let start = Instant::now();
        devices.extend(connect_links(links, tools, parallel).await?);
        took += start.elapsed();
    }
    Ok((devices, took))
}

/// Claims each link with a fresh device, at most `parallel` at a time; in link order.
async fn connect_links(
    links: Vec<(String, SpkiPin)>,
    tools: usize,
    parallel: usize,
) -> BenchResult<Vec<Connected>> {
    let gate = Arc::new(Semaphore::new(parallel));
    let mut tasks = tokio::task::JoinSet::new();
    for (index, (payload, pin)) in links.into_iter().enumerate() {
        let gate = gate.clone();
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await.map_err(|e| e.to_string())?;
            let client = device(Some(&pin), tools)?;
            let info = client
                .connect(&payload)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            Ok::<_, String>((
                index,
                Connected {
                    client,
                    session_id: info.session_id,
                },
            ))
        });
    }
    let mut devices = Vec::with_capacity(tasks.len());
    while let Some(done) = tasks.join_next().await {
        devices.push(done.map_err(|e| e.to_string())??);
    }
    devices.sort_by_key(|(index, _)| *index);
    Ok(devices.into_iter().map(|(_, d)| d).collect())
}

/// Connects `count` devices to the Node relay on `port` (certificate pin `pin`).
pub async fn connect_to_relay(
    port: u16,
    pin: &SpkiPin,
    count: usize,
) -> BenchResult<Vec<Connected>> {
    let mut devices = Vec::with_capacity(count);
    for n in 0..count {
        let client = device(Some(pin), 1)?;
        let session_id = format!("relay_{n}");
        client
            .connect_bootstrap(Bootstrap {
                session_id: session_id.clone(),
                token: format!("token_{n}"),
                expires_at: u64::MAX / 2,
                endpoint: Endpoint {
                    transport: Transport::Native,
                    address: IpAddr::V4(Ipv4Addr::LOCALHOST),
                    port,
                    pins: vec![pin.clone()],
                    sealed_key: None,
                },
            })
            .await
            .map_err(|e| format!("relay connect: {e}"))?;
        devices.push(Connected { client, session_id });
    }
    Ok(devices)
}

/// Waits until the daemon lists `tools` tools for every device (registries are sent after the
/// ack, so a call right after `connect` could find none).
pub async fn wait_registries(
    ctl: &mut Ctl,
    devices: &[Connected],
    tools: usize,
) -> BenchResult<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    for device in devices {
        loop {
            let summary = ctl
                .result("sessions.describe", json!({"selector": device.session_id}))
                .await?;
            if summary["toolCount"].as_u64() == Some(tools as u64) {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "registry of {} never arrived: {summary}",
                    device.session_id
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    Ok(())
}
