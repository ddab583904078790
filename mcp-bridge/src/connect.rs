//! `appduct_connect` (06 §6.8.1): validation (all before anything is minted or any helper
//! process runs), device detection, minting with `link.create`, the shared deep-link composer,
//! delivery through the injected [`CommandRunner`](appduct_daemon::seams::CommandRunner), and
//! the QR result. Resolution, detection, delivery and the QR text are the client-side helpers
//! of `appduct_daemon::{project, delivery, qr}` that `appduct sessions link` uses too, so both
//! frontends compose byte-identical links and run the same argument vectors (02 §5.1, §7).

use appduct_daemon::client::ControlClient;
use appduct_daemon::delivery::{self, ANDROID_SERIAL_ENV, DeliveryError, DeviceTarget, ErrorClass};
use appduct_daemon::project::{self as shared, ProjectError, ResolveEnv};
use appduct_daemon::qr;
use appduct_protocol::control::{
    DaemonStatus, LinkCreate, LinkCreateParams, LinkCreateResult, SelectorParams, SessionsRevoke,
    Transport,
};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::link::{compose_web_link, web_script};
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde_json::{Map, Value, json};

use crate::args::Args;
use crate::error::ToolFailure;
use crate::project::{self, resolve_dir};
use crate::server::{Inner, cancelled_failure, unless_cancelled};

fn invalid(param: &str, message: impl Into<String>) -> ToolFailure {
    ToolFailure::invalid_request(message).with_details(json!({"param": param}))
}

fn is_http_url(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"));
    rest.is_some_and(|r| {
        !r.split(['/', '?', '#'])
            .next()
            .unwrap_or_default()
            .is_empty()
    }) && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Where the caller asked the link to go (`target`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// Omitted: auto-detect one simulator or Android device, else a QR result.
    Auto,
    /// `none`: a QR result, nothing detected.
    Qr,
    Web,
    Device(DeviceTarget),
}

impl Target {
    fn parse(s: Option<&str>) -> Self {
        match s {
            None => Target::Auto,
            Some("web") => Target::Web,
            Some(other) => DeviceTarget::parse(other).map_or(Target::Qr, Target::Device),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Target::Auto => "",
            Target::Qr => "none",
            Target::Web => "web",
            Target::Device(t) => t.as_str(),
        }
    }
}

/// The arguments after the checks that need no file system, daemon or helper process.
#[derive(Debug)]
struct Request<'a> {
    target: Target,
    transport: Transport,
    device: Option<&'a str>,
    app_id: Option<&'a str>,
    relaunch: bool,
    url: Option<&'a str>,
    ttl_seconds: Option<u32>,
}

/// The argument rules of 06 §6.8.1 that need no file system or daemon.
fn check_combination<'a>(args: &'a Args) -> Result<Request<'a>, ToolFailure> {
    let target = Target::parse(args.str("target"));
    let t = target.as_str();
    let url = args.str("url");
    match (url.is_some(), target == Target::Web) {
        (true, false) => {
            return Err(invalid(
                "url",
                "\"url\" is only allowed with target \"web\"",
            ));
        }
        (false, true) => {
            return Err(invalid(
                "url",
                "target \"web\" needs \"url\", the http(s) page to open",
            ));
        }
        _ => {}
    }
    if let Some(u) = url
        && !is_http_url(u)
    {
        return Err(invalid(
            "url",
            format!("\"url\" must be an absolute http: or https: URL, not {u:?}"),
        ));
    }
    let device = args.str("device");
    if let Some(d) = device {
        let Target::Device(device_target) = target else {
            return Err(invalid(
                "device",
                "\"device\" is only allowed with target \"android\", \"ios-sim\" or \"ios-device\"",
            ));
        };
        delivery::check_device_shape(device_target, d, "\"device\"")
            .map_err(|e| delivery_failure(&e))?;
    }
    let app_id = args.str("appId");
    if let Some(id) = app_id {
        if matches!(
            target,
            Target::Qr | Target::Web | Target::Device(DeviceTarget::IosSim)
        ) {
            return Err(invalid(
                "appId",
                format!("\"appId\" is not used with target \"{t}\""),
            ));
        }
        if !shared::is_valid_app_id(id) {
            return Err(invalid(
                "appId",
                format!("\"appId\" {id:?} must match {}", shared::APP_ID_PATTERN),
            ));
        }
    }
    if args.has("relaunch") && target != Target::Device(DeviceTarget::IosDevice) {
        return Err(invalid(
            "relaunch",
            "\"relaunch\" is only allowed with target \"ios-device\"",
        ));
    }
    let transport = match (args.str("transport"), target) {
        (Some("web"), Target::Device(DeviceTarget::IosDevice)) => {
            return Err(invalid(
                "transport",
                "transport \"web\" cannot reach a physical iPhone (the web listener is loopback only)",
            ));
        }
        (Some("native"), Target::Web) => {
            return Err(invalid(
                "transport",
                "target \"web\" always uses transport \"web\"",
            ));
        }
        (Some("web"), _) | (None, Target::Web) => Transport::Web,
        _ => Transport::Native,
    };
    Ok(Request {
        target,
        transport,
        device,
        app_id,
        relaunch: args.bool("relaunch").unwrap_or(false),
        url,
        ttl_seconds: args.u64("ttlSeconds").map(|t| t as u32),
    })
}

/// A detection or delivery failure as the bridge reports it (06 §6.8.1, 02 §7): argument
/// errors are `invalid_request` listing the candidates, no device and failed commands are
/// `tool_execution_error` (the latter with `{argv, exitCode, stderr}`).
pub fn delivery_failure(e: &DeliveryError) -> ToolFailure {
    let mut f = match e.class() {
        ErrorClass::Argument if !e.candidates().is_empty() => {
            ToolFailure::invalid_request(format!("{e}; pass \"device\" with one of them"))
                .with_details(json!({"param": "device"}))
        }
        ErrorClass::Argument => {
            ToolFailure::invalid_request(e.to_string()).with_details(json!({"param": "device"}))
        }
        ErrorClass::NoDevice | ErrorClass::Command => ToolFailure::execution(e.to_string()),
        ErrorClass::Internal => ToolFailure::new(ErrorType::InternalError, e.to_string()),
    };
    if let Some(d) = e.details() {
        f = f.merge_details(d);
    }
    if let Some(h) = e.hint() {
        f = f.merge_details(json!({"hint": h}));
    }
    f
}

const QR_INSTRUCTIONS: &str = "Show qr verbatim in a code block together with deepLink, ask the user to scan it with the device running the app (or open deepLink there), then call appduct_wait_for_session with sessionId.";
const DELIVERED_INSTRUCTIONS: &str =
    "The link was opened in the app on the device; call appduct_wait_for_session with sessionId.";
const WEB_INSTRUCTIONS: &str = "Open url in the page's browser, or run script in an already loaded page, then call appduct_wait_for_session with sessionId.";

/// What every non-web step needs.
struct Ctx<'a> {
    inner: &'a Inner,
    context: &'a RequestContext<RoleServer>,
    req: &'a Request<'a>,
    scheme: &'a str,
    env: &'a ResolveEnv,
}

pub async fn run(
    inner: &Inner,
    context: &RequestContext<RoleServer>,
    args: &Args,
) -> Result<Value, ToolFailure> {
    let req = check_combination(args)?;
    let state_dir = inner.options.state_dir.as_deref();
    if let Some(cwd) = args.str("cwd") {
        project::argument_dir(cwd)?;
    }
    if req.target == Target::Web {
        return web(inner, context, &req).await;
    }
    // Everything else needs the scheme (and device targets an app id), resolved in D.
    let dir = unless_cancelled(
        context,
        resolve_dir(
            args.str("cwd"),
            context,
            &inner.roots,
            &inner.env,
            state_dir,
            inner.options.roots_timeout,
        ),
    )
    .await?;
    let env = inner.env.resolve_env(&dir.dir, state_dir);
    let scheme = shared::resolve_scheme(inner.options.scheme.as_deref(), &env)
        .map_err(|e| project::project_failure(&e))?;
    let ctx = Ctx {
        inner,
        context,
        req: &req,
        scheme: &scheme.scheme,
        env: &env,
    };
    let mut out = match req.target {
        Target::Device(target) => explicit(&ctx, target).await?,
        Target::Auto => auto(&ctx).await?,
        Target::Qr | Target::Web => {
            let client = unless_cancelled(context, inner.control()).await?;
            qr_result(&ctx, &client, None).await?
        }
    };
    out.insert("cwdSource".into(), json!(dir.source.as_str()));
    out.insert("projectDir".into(), json!(dir.dir.display().to_string()));
    Ok(Value::Object(out))
}

/// `target: "web"`: the page URL with `#appduct=<payload>` and the connect script (02 §5.3).
async fn web(
    inner: &Inner,
    context: &RequestContext<RoleServer>,
    req: &Request<'_>,
) -> Result<Value, ToolFailure> {
    let page = req.url.unwrap_or_default();
    let client = unless_cancelled(context, inner.control()).await?;
    let link = mint(context, &client, req, None).await?;
    let composed = compose_web_link(page, &link.deep_link_payload)
        .and_then(|url| web_script(&link.deep_link_payload).map(|script| (url, script)));
    let (url, script) = match composed {
        Ok(pair) => pair,
        Err(e) => {
            revoke(&client, &link.session_id).await;
            return Err(ToolFailure::new(ErrorType::InternalError, e.to_string()));
        }
    };
    let mut out = base(&link);
    out.insert("url".into(), json!(url));
    out.insert("script".into(), json!(script));
    out.insert("instructions".into(), json!(WEB_INSTRUCTIONS));
    Ok(Value::Object(out))
}

/// The app id a delivery to `target` needs: the argument, else the project's
/// `appId.android|ios` (05 §5.2); none for a simulator.
fn app_id_for(ctx: &Ctx<'_>, target: DeviceTarget) -> Result<Option<String>, ToolFailure> {
    let Some(platform) = target.app_id_platform() else {
        return Ok(None);
    };
    if let Some(id) = ctx.req.app_id {
        return Ok(Some(id.to_owned()));
    }
    match shared::resolve_app_id(None, platform, ctx.env) {
        Ok(id) => Ok(Some(id)),
        Err(ProjectError::NoAppId { platform }) => Err(ToolFailure::invalid_request(format!(
            "target \"{}\" needs an app id: pass appId, or set appId.{} in the project's .appduct/config.json (appduct init {} <id>)",
            target.as_str(),
            platform.key(),
            platform.init_flag()
        ))
        .with_details(json!({"param": "appId", "platform": platform.key()}))),
        Err(e) => Err(project::project_failure(&e)),
    }
}

/// `device`, else `ANDROID_SERIAL` for Android (02 §7); shapes checked.
fn requested_device(ctx: &Ctx<'_>, target: DeviceTarget) -> Result<Option<String>, ToolFailure> {
    if let Some(d) = ctx.req.device {
        return Ok(Some(d.to_owned()));
    }
    match ctx.inner.env.android_serial.as_deref() {
        Some(serial) if target == DeviceTarget::Android && !serial.is_empty() => {
            delivery::check_device_shape(target, serial, ANDROID_SERIAL_ENV)
                .map_err(|e| delivery_failure(&e))?;
            Ok(Some(serial.to_owned()))
        }
        _ => Ok(None),
    }
}

/// An explicit device target: every check, detection, then mint, compose and deliver; a
/// failed delivery discards the link (02 §7).
async fn explicit(ctx: &Ctx<'_>, target: DeviceTarget) -> Result<Map<String, Value>, ToolFailure> {
    let app_id = app_id_for(ctx, target)?;
    let requested = requested_device(ctx, target)?;
    let client = unless_cancelled(ctx.context, ctx.inner.control()).await?;
    if target == DeviceTarget::IosDevice {
        let status = unless_cancelled(ctx.context, async {
            client
                .call::<DaemonStatus>(Default::default())
                .await
                .map_err(|e| ToolFailure::from_client(&e))
        })
        .await?;
        if delivery::is_loopback_address(&status.advertised_address.address) {
            return Err(invalid(
                "advertisedIp",
                format!(
                    "the daemon advertises the loopback address {}, which a physical iPhone cannot reach; set advertisedIp in the daemon's config.json to the Mac's LAN address and restart the daemon",
                    status.advertised_address.address
                ),
            ));
        }
    }
    let runner = ctx.inner.runner.as_ref();
    // Dropping a detection kills its helper process (the runner kills on drop).
    let device = unless_cancelled(ctx.context, async {
        delivery::detect(runner, target, requested.as_deref())
            .await
            .map_err(|e| delivery_failure(&e))
    })
    .await?;
    let link = mint(ctx.context, &client, ctx.req, Some(target)).await?;
    let deep_link = compose(&client, ctx.scheme, &link).await?;
    let d = delivery::Delivery {
        target,
        device: &device,
        app_id: app_id.as_deref(),
        relaunch: ctx.req.relaunch,
        deep_link: &deep_link,
        port: link.endpoint.port,
    };
    match deliver(ctx, &client, &link, &d).await? {
        Ok(()) => Ok(delivered(&link, &deep_link, target, &device, false)),
        Err(e) => {
            revoke(&client, &link.session_id).await;
            Err(delivery_failure(&e))
        }
    }
}

/// No target: one auto-detected simulator or Android device gets the link; none or several
/// give a QR result whose note says why (06 §6.8.1). Physical iPhones are never detected.
async fn auto(ctx: &Ctx<'_>) -> Result<Map<String, Value>, ToolFailure> {
    let runner = ctx.inner.runner.as_ref();
    let mut sources = Vec::new();
    if ctx.inner.env.detects_simulators {
        sources.push(DeviceTarget::IosSim);
    }
    sources.push(DeviceTarget::Android);
    let mut candidates: Vec<(DeviceTarget, String)> = Vec::new();
    for target in sources {
        let found = unless_cancelled(ctx.context, async {
            Ok(delivery::detect_candidates(runner, target).await)
        })
        .await?;
        match found {
            Ok(found) => candidates.extend(found.into_iter().map(|d| (target, d))),
            // A missing or failing tool only means no candidate from it.
            Err(e) => tracing::debug!("auto-detection: {e}"),
        }
    }
    let (target, device) = match candidates.as_slice() {
        [(target, device)] => (*target, device.clone()),
        [] => {
            let client = unless_cancelled(ctx.context, ctx.inner.control()).await?;
            let searched = if ctx.inner.env.detects_simulators {
                "No booted iOS simulator or attached Android device was found"
            } else {
                "No attached Android device was found (iOS simulators are detected on macOS only)"
            };
            let note = format!(
                "{searched}, so nothing was opened. A physical iPhone needs target \"ios-device\" and appId."
            );
            return qr_result(ctx, &client, Some(note)).await;
        }
        many => {
            let client = unless_cancelled(ctx.context, ctx.inner.control()).await?;
            let listed: Vec<String> = many
                .iter()
                .map(|(t, d)| format!("{} {d}", t.as_str()))
                .collect();
            let note = format!(
                "Several devices were found ({}), so nothing was opened; pass target and device to open the link on one of them.",
                listed.join(", ")
            );
            return qr_result(ctx, &client, Some(note)).await;
        }
    };
    // An auto-detected Android device needs an app id like an explicit one; before minting.
    let app_id = app_id_for(ctx, target)?;
    let client = unless_cancelled(ctx.context, ctx.inner.control()).await?;
    let link = mint(ctx.context, &client, ctx.req, Some(target)).await?;
    let deep_link = compose(&client, ctx.scheme, &link).await?;
    let d = delivery::Delivery {
        target,
        device: &device,
        app_id: app_id.as_deref(),
        relaunch: false,
        deep_link: &deep_link,
        port: link.endpoint.port,
    };
    match deliver(ctx, &client, &link, &d).await? {
        Ok(()) => Ok(delivered(&link, &deep_link, target, &device, true)),
        Err(e) => {
            // Discard the loopback link; a fresh one on the advertised address for the QR.
            revoke(&client, &link.session_id).await;
            let stderr = match &e {
                DeliveryError::CommandFailed { stderr, .. } if !stderr.is_empty() => {
                    format!(" ({stderr})")
                }
                _ => String::new(),
            };
            let note = format!(
                "Opening the link on the auto-detected {} device {device} failed: {e}{stderr}. Nothing was opened; this is a fresh link for the QR code.",
                target.as_str()
            );
            qr_result(ctx, &client, Some(note)).await
        }
    }
}

/// `link.create` with the address rule of 02 §7 for `target` (none: the advertised address).
/// Not started for a cancelled request; not raced either, so the id of the link is always
/// learnt, and a link minted for a request cancelled meanwhile is revoked (06 §6.12).
async fn mint(
    context: &RequestContext<RoleServer>,
    client: &ControlClient,
    req: &Request<'_>,
    target: Option<DeviceTarget>,
) -> Result<LinkCreateResult, ToolFailure> {
    if context.ct.is_cancelled() {
        return Err(cancelled_failure());
    }
    let link = client
        .call::<LinkCreate>(
            LinkCreateParams::default()
                .with_ttl_seconds(req.ttl_seconds)
                .with_address_override(delivery::address_override(target, req.transport))
                .with_transport(Some(req.transport)),
        )
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    if context.ct.is_cancelled() {
        revoke(client, &link.session_id).await;
        return Err(cancelled_failure());
    }
    Ok(link)
}

/// Delivery raced against the cancel token: a cancel stops the helper (dropped, so killed) and
/// revokes the link, which was never opened. The inner result is the delivery's own outcome.
async fn deliver(
    ctx: &Ctx<'_>,
    client: &ControlClient,
    link: &LinkCreateResult,
    d: &delivery::Delivery<'_>,
) -> Result<Result<(), DeliveryError>, ToolFailure> {
    let runner = ctx.inner.runner.as_ref();
    tokio::select! {
        biased;
        () = ctx.context.ct.cancelled() => {
            revoke(client, &link.session_id).await;
            Err(cancelled_failure())
        }
        r = delivery::deliver(runner, d) => Ok(r),
    }
}

/// The shared composer; a link that cannot be composed is discarded.
async fn compose(
    client: &ControlClient,
    scheme: &str,
    link: &LinkCreateResult,
) -> Result<String, ToolFailure> {
    match delivery::deep_link(scheme, link) {
        Ok(d) => Ok(d),
        Err(e) => {
            revoke(client, &link.session_id).await;
            Err(ToolFailure::new(ErrorType::InternalError, e.to_string()))
        }
    }
}

/// Discards a minted link that was not delivered (02 §7).
async fn revoke(client: &ControlClient, session_id: &str) {
    let params = SelectorParams::default().with_selector(Some(session_id.to_owned()));
    if let Err(e) = client.call::<SessionsRevoke>(params).await {
        tracing::warn!("could not revoke the undelivered link {session_id}: {e}");
    }
}

fn base(link: &LinkCreateResult) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("sessionId".into(), json!(link.session_id));
    out.insert("expiresAt".into(), json!(link.expires_at));
    out.insert("transport".into(), json!(link.transport.as_str()));
    out
}

fn delivered(
    link: &LinkCreateResult,
    deep_link: &str,
    target: DeviceTarget,
    device: &str,
    auto_detected: bool,
) -> Map<String, Value> {
    let mut out = base(link);
    out.insert("delivered".into(), json!(true));
    out.insert("target".into(), json!(target.as_str()));
    out.insert("device".into(), json!(device));
    if auto_detected {
        out.insert("autoDetected".into(), json!(true));
    }
    out.insert("deepLink".into(), json!(deep_link));
    out.insert("instructions".into(), json!(DELIVERED_INSTRUCTIONS));
    out
}

/// A link on the advertised address for the user to scan: `deepLink` and its terminal QR
/// code, the same rendering as `appduct sessions link --qr`.
async fn qr_result(
    ctx: &Ctx<'_>,
    client: &ControlClient,
    note: Option<String>,
) -> Result<Map<String, Value>, ToolFailure> {
    let link = mint(ctx.context, client, ctx.req, None).await?;
    let deep_link = compose(client, ctx.scheme, &link).await?;
    let mut notes: Vec<String> = note.into_iter().collect();
    let mut out = base(&link);
    out.insert("delivered".into(), json!(false));
    out.insert("deepLink".into(), json!(deep_link));
    match qr::terminal_qr(&deep_link) {
        Ok(text) => {
            out.insert("qr".into(), json!(text));
        }
        Err(e) => notes.push(format!("No QR code: {e}.")),
    }
    out.insert("instructions".into(), json!(QR_INSTRUCTIONS));
    if !notes.is_empty() {
        out.insert("note".into(), json!(notes.join(" ")));
    }
    Ok(out)
}
