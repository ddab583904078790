//! The devices of the soak: `appduct-sdk` clients in this process, each checking that every
//! call it receives was meant for it; the pool callers pick targets from; the tasks that drop
//! and resume devices, claim and revoke short-lived devices, and post events.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use appduct_sdk::testing::RawFrame;
use appduct_sdk::{CallContext, Client, ClientState, SpkiPin, ToolError};
use serde_json::{Value, json};

use super::rpc::Rpc;
use super::{Busy, Counters, Phase, Rng, Soak, SoakResult, bump, lock};

/// Tools every soak device registers (the registry wait counts them).
pub const TOOLS: u64 = 3;
/// What a slow call sleeps unless cancelled or timed out first.
pub const SLOW_MS: u64 = 5_000;

/// One device and what the soak knows of it.
#[derive(Debug)]
pub struct Device {
    pub client: Client,
    pub session_id: String,
    /// Calls the soak has sent to it and not seen settle (a short-lived device is revoked only
    /// once this is zero, so no call can meet a revoked session).
    in_flight: AtomicUsize,
    dropping: AtomicBool,
}

impl Device {
    pub fn is_active(&self) -> bool {
        self.client.state() == ClientState::Active
    }
}

/// Whether a call that reached the device named in its arguments; counts it otherwise.
fn meant_for_me(
    me: &OnceLock<String>,
    args: &Value,
    ctx: &CallContext,
    counters: &Counters,
) -> bool {
    let ok = me
        .get()
        .is_some_and(|me| args["target"] == me.as_str() && ctx.session_id() == me);
    if !ok {
        bump(&counters.misrouted_at_device);
        counters.note(format!(
            "misrouted at the device: {:?} got a call for {} (frame session {})",
            me.get(),
            args["target"],
            ctx.session_id()
        ));
    }
    ok
}

/// Mints a link, connects a new SDK device to it and waits until the daemon holds its
/// registry. `echo` returns `{device, args}`, `slow` waits `args.ms` unless cancelled, `fail`
/// fails with `tool_execution_error`; each first checks that the call was meant for it.
pub async fn claim(rpc: &Rpc, counters: &Arc<Counters>, ttl_s: u64) -> SoakResult<Arc<Device>> {
    let link = rpc
        .result("link.create", json!({"ttlSeconds": ttl_s}))
        .await?;
    let payload = link["deepLinkPayload"]
        .as_str()
        .ok_or_else(|| format!("no payload in {link}"))?;
    let pin = SpkiPin::parse(link["pin"].as_str().unwrap_or_default())
        .map_err(|e| format!("pin: {e}"))?;
    let client = Client::builder()
        .pins([pin])
        .device(Some("Soak"), Some("Soak device"), Some("Linux"))
        .build()
        .map_err(|e| e.to_string())?;
    let me: Arc<OnceLock<String>> = Arc::default();
    let (who, count) = (me.clone(), counters.clone());
    client
        .register_tool(
            &json!({"name": "echo", "description": "Returns its arguments.",
                    "input_schema": {"type": "object"}, "output_schema": {"type": "object"}}),
            move |args: Value, ctx: CallContext| {
                let ok = meant_for_me(&who, &args, &ctx, &count);
                let device = who.get().cloned().unwrap_or_default();
                async move {
                    if ok {
                        Ok(json!({"device": device, "args": args}))
                    } else {
                        Err(ToolError::execution("misrouted"))
                    }
                }
            },
        )
        .map_err(|e| e.to_string())?;
    let (who, count) = (me.clone(), counters.clone());
    client
        .register_tool(
            &json!({"name": "slow", "description": "Waits, unless cancelled.",
                    "input_schema": {"type": "object"}, "output_schema": {"type": "object"}}),
            move |args: Value, ctx: CallContext| {
                let ok = meant_for_me(&who, &args, &ctx, &count);
                let device = who.get().cloned().unwrap_or_default();
                let wait = Duration::from_millis(args["ms"].as_u64().unwrap_or(SLOW_MS));
                async move {
                    if !ok {
                        return Err(ToolError::execution("misrouted"));
                    }
                    tokio::select! {
                        _ = ctx.cancelled() => Err(ToolError::execution("cancelled")),
                        () = tokio::time::sleep(wait) => Ok(json!({"device": device})),
                    }
                }
            },
        )
        .map_err(|e| e.to_string())?;
    let (who, count) = (me.clone(), counters.clone());
    client
        .register_tool(
            &json!({"name": "fail", "description": "Always fails.",
                    "input_schema": {"type": "object"}}),
            move |args: Value, ctx: CallContext| {
                let ok = meant_for_me(&who, &args, &ctx, &count);
                async move {
                    Err::<Value, _>(ToolError::execution(if ok { "soak" } else { "misrouted" }))
                }
            },
        )
        .map_err(|e| e.to_string())?;
    client
        .declare_event(&json!({"name": "tick", "description": "A soak event."}))
        .map_err(|e| e.to_string())?;
    let info = client
        .connect(payload)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = me.set(info.session_id.clone());
    let device = Arc::new(Device {
        client,
        session_id: info.session_id,
        in_flight: AtomicUsize::new(0),
        dropping: AtomicBool::new(false),
    });
    wait_registry(rpc, &device.session_id).await?;
    Ok(device)
}

/// Waits until the daemon lists the device's tools (registries follow the ack).
async fn wait_registry(rpc: &Rpc, session_id: &str) -> SoakResult<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let summary = rpc
            .result("sessions.describe", json!({"selector": session_id}))
            .await?;
        if summary["toolCount"].as_u64() == Some(TOOLS) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the registry of {session_id} never arrived: {summary}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Connects `count` devices, `parallel` claims at a time, each on its own setup connection.
pub async fn claim_many(
    socket: &std::path::Path,
    counters: &Arc<Counters>,
    count: usize,
    parallel: usize,
) -> SoakResult<Vec<Arc<Device>>> {
    let mut devices = Vec::with_capacity(count);
    while devices.len() < count {
        let chunk = (count - devices.len()).min(parallel);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..chunk {
            let socket = socket.to_owned();
            let counters = counters.clone();
            tasks.spawn(async move {
                let rpc = Rpc::connect(&socket, None).await?;
                claim(&rpc, &counters, 300).await
            });
        }
        while let Some(done) = tasks.join_next().await {
            devices.push(done.map_err(|e| e.to_string())??);
        }
    }
    Ok(devices)
}

/// The devices calls may target: the long-lived ones plus the short-lived ones while ready.
#[derive(Debug, Default)]
pub struct Pool(Mutex<Vec<Arc<Device>>>);

/// A picked target; its in-flight count drops with it.
#[derive(Debug)]
pub struct Target(Arc<Device>);

impl std::ops::Deref for Target {
    type Target = Device;
    fn deref(&self) -> &Device {
        &self.0
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Pool {
    pub fn add(&self, device: Arc<Device>) {
        lock(&self.0).push(device);
    }

    fn remove(&self, session_id: &str) {
        lock(&self.0).retain(|d| d.session_id != session_id);
    }

    /// A random target, counted in flight under the pool's lock (a device removed from the
    /// pool is never picked again, so its count only falls).
    pub fn pick(&self, rng: &mut Rng) -> Option<Target> {
        let devices = lock(&self.0);
        if devices.is_empty() {
            return None;
        }
        let device = devices[rng.below(devices.len())].clone();
        device.in_flight.fetch_add(1, Ordering::SeqCst);
        Some(Target(device))
    }
}

/// Waits at most `limit` for the client's state to satisfy `check`.
async fn wait_state(
    device: &Device,
    limit: Duration,
    check: impl Fn(&ClientState) -> bool,
) -> bool {
    let mut states = device.client.watch_state();
    let wait = async {
        loop {
            if check(&states.borrow_and_update()) {
                return true;
            }
            if states.changed().await.is_err() {
                return false;
            }
        }
    };
    tokio::time::timeout(limit, wait).await.unwrap_or(false)
}

/// Drops long-lived devices now and then, one at a time per device and at most a fifth of
/// them at once: half lose their socket (a close frame the daemon takes as a lost
/// connection; the SDK resumes with backoff), half go to the background for a while and come
/// back. Each must be active again within 30 s.
pub async fn dropper(soak: Arc<Soak>, mut rng: Rng) {
    let most = (soak.stable.len() / 5).max(1);
    loop {
        if !soak.gate.sleep(rng.millis(400, 1200)).await {
            if soak.gate.phase() == Phase::Stop {
                return;
            }
            continue;
        }
        let Some(busy) = soak.gate.enter().await else {
            return;
        };
        let dropping = soak
            .stable
            .iter()
            .filter(|d| d.dropping.load(Ordering::SeqCst))
            .count();
        if dropping >= most {
            continue;
        }
        let device = soak.stable[rng.below(soak.stable.len())].clone();
        if !device.is_active() || device.dropping.swap(true, Ordering::SeqCst) {
            continue;
        }
        let socket_drop = rng.below(2) == 0;
        let away = rng.millis(100, 1500);
        let soak = soak.clone();
        tokio::spawn(drop_and_resume(soak, device, socket_drop, away, busy));
    }
}

async fn drop_and_resume(
    soak: Arc<Soak>,
    device: Arc<Device>,
    socket_drop: bool,
    away: Duration,
    busy: Busy,
) {
    let counters = &soak.counters;
    if socket_drop {
        let sent = device.client.send_raw(RawFrame::Close {
            code: 4000,
            reason: "soak_drop".to_owned(),
        });
        if sent {
            bump(&counters.drops_socket);
        }
    } else {
        device.client.background();
        bump(&counters.drops_background);
        tokio::time::sleep(away).await;
        device.client.foreground();
    }
    let left = wait_state(&device, Duration::from_secs(5), |s| {
        *s != ClientState::Active
    })
    .await;
    if !left {
        bump(&counters.drops_unseen);
    }
    if wait_state(&device, Duration::from_secs(30), |s| {
        *s == ClientState::Active
    })
    .await
    {
        bump(&counters.resumes);
    } else {
        bump(&counters.resume_failures);
        counters.note(format!(
            "{} did not resume within 30 s: {:?}",
            device.session_id,
            device.client.state()
        ));
    }
    device.dropping.store(false, Ordering::SeqCst);
    drop(busy);
}

/// Claims short-lived devices (at most `soak.options.churn` at once), puts each in the pool
/// for a few seconds, then takes it out, waits for its calls to settle and revokes it. On a
/// pause every one of them is revoked first.
pub async fn churn(soak: Arc<Soak>, mut rng: Rng) {
    let rpc = match Rpc::connect(&soak.socket, None).await {
        Ok(rpc) => rpc,
        Err(e) => {
            bump(&soak.counters.churn_failures);
            soak.counters.note(e);
            return;
        }
    };
    let mut live: Vec<(Arc<Device>, Instant)> = Vec::new();
    let mut busy: Option<Busy> = None;
    loop {
        match soak.gate.phase() {
            Phase::Run => {}
            phase => {
                for (device, _) in live.drain(..) {
                    retire(&soak, &rpc, &device).await;
                }
                // Nothing of ours is under way now: the pause may count zero.
                drop(busy.take());
                if phase == Phase::Stop {
                    return;
                }
                match soak.gate.enter().await {
                    Some(b) => busy = Some(b),
                    None => return,
                }
            }
        }
        if busy.is_none() {
            busy = soak.gate.enter().await;
            if busy.is_none() {
                return;
            }
        }
        let now = Instant::now();
        let (due, keep): (Vec<_>, Vec<_>) = live.drain(..).partition(|(_, at)| *at <= now);
        live = keep;
        for (device, _) in due {
            retire(&soak, &rpc, &device).await;
        }
        if live.len() < soak.options.churn {
            match claim(&rpc, &soak.counters, 60).await {
                Ok(device) => {
                    bump(&soak.counters.claims);
                    soak.pool.add(device.clone());
                    live.push((device, Instant::now() + rng.millis(2_000, 8_000)));
                }
                Err(e) => {
                    bump(&soak.counters.churn_failures);
                    soak.counters.note(format!("claim: {e}"));
                }
            }
        }
        if live.is_empty() {
            busy = None;
        }
        soak.gate.sleep(rng.millis(300, 1200)).await;
    }
}

async fn retire(soak: &Soak, rpc: &Rpc, device: &Device) {
    soak.pool.remove(&device.session_id);
    let deadline = Instant::now() + Duration::from_secs(20);
    while device.in_flight.load(Ordering::SeqCst) > 0 {
        if Instant::now() > deadline {
            bump(&soak.counters.churn_failures);
            soak.counters.note(format!(
                "{}: calls still in flight after 20 s",
                device.session_id
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    match rpc
        .result("sessions.revoke", json!({"selector": device.session_id}))
        .await
    {
        Ok(_) => bump(&soak.counters.revokes),
        Err(e) => {
            bump(&soak.counters.churn_failures);
            soak.counters.note(format!("revoke: {e}"));
        }
    }
    device.client.disconnect();
}

/// Posts `tick` events from the long-lived devices, round robin, about `rate` per second in
/// all; only active devices post (the SDK drops events otherwise).
pub async fn post_events(soak: Arc<Soak>, rate: u64) {
    let every = Duration::from_micros(1_000_000 / rate.max(1));
    let mut n: u64 = 0;
    loop {
        let Some(busy) = soak.gate.enter().await else {
            return;
        };
        let device = &soak.stable[(n as usize) % soak.stable.len()];
        n += 1;
        if device.is_active()
            && device
                .client
                .post_event("tick", Some(json!({"n": n})))
                .is_ok()
        {
            bump(&soak.counters.events_posted);
        }
        drop(busy);
        soak.gate.sleep(every).await;
    }
}
