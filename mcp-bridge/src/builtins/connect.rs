//! `appduct_connect` (§M8.1): validation (all before anything is minted or any helper
//! process runs), auto-detection, and the results. Minting, composing, delivering through the
//! injected [`CommandRunner`](appduct_client::command_runner::CommandRunner) and revoking on
//! failure or cancel are the shared [`LinkFlow`] that `appduct sessions link` runs too, with
//! `appduct_client::{project, qr}`, so both frontends compose byte-identical links and run the
//! same argument vectors (§D5.1, §L6.4).

use appduct_client::client::ControlClient;
use appduct_client::delivery::{self, ANDROID_SERIAL_ENV, DeliveryError, DeviceTarget, ErrorClass};
use appduct_client::link_flow::{DeviceChoice, DeviceOpen, LinkFlow, LinkFlowError};
use appduct_client::project::{self as shared, AppKind, ProjectError, ResolveEnv};
use appduct_client::{picture, qr};
use appduct_protocol::control::{LinkCreateParams, LinkCreateResult, Transport};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::link::is_http_url;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rmcp::RoleServer;
use rmcp::model::{CallToolResponse, ContentBlock};
use rmcp::service::RequestContext;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::builtin::{Call, Definition, Entry, Hints, Reply, cwd_prop, output};
use crate::context::{BridgeContext, cancelled_failure, unless_cancelled};
use crate::error::ToolFailure;
use crate::project::{self, resolve_dir};

pub const NAME: &str = "appduct_connect";

pub const BUILTIN: Entry = Entry {
    name: NAME,
    definition,
    handler,
};

fn definition() -> Definition {
    Definition {
        title: "Connect an app",
        description: "Pair a running app: mint a one-time link and open it on a booted simulator or attached Android device, or return a QR code and deep link for the user. Then call appduct_wait_for_session with the sessionId.",
        hints: Hints {
            read_only: false,
            destructive: false,
            idempotent: false,
            open_world: true,
        },
        input: json!({
            "type": "object",
            "properties": {
                "target": {"type": "string", "enum": ["android", "ios-sim", "ios-device", "web", "none"], "description": "Where to open the link; omitted = auto-detect one simulator or Android device, else QR."},
                "device": {"type": "string", "minLength": 1, "description": "Device serial or simulator UDID when several match target."},
                "appId": {"type": "string", "minLength": 1, "description": "Android package or iOS bundle id; defaults to the project's appduct config."},
                "relaunch": {"type": "boolean", "description": "ios-device only: terminate the running app before opening the link."},
                "url": {"type": "string", "minLength": 1, "description": "web only: http(s) page URL to open with the link."},
                "for": {"type": "string", "enum": ["react-native", "web", "native"], "description": "App kind: react-native (JS-only SDK, Expo Go: sealed link, Wi-Fi ok), web, native. Default: the project platform."},
                "transport": {"type": "string", "enum": ["native", "web", "sealed"], "description": "Link transport; must agree with for. web = loopback, sealed = encrypted LAN link for JS-only apps, native = pinned TLS."},
                "ttlSeconds": {"type": "integer", "minimum": 1, "maximum": 86400, "description": "Link lifetime in seconds; default 300."},
                "cwd": cwd_prop()
            },
            "additionalProperties": false
        }),
        output: Some(json!({
            "type": "object",
            "properties": {
                "sessionId": {"type": "string"},
                "expiresAt": {"type": "integer", "description": "Unix seconds after which the link cannot be claimed."},
                "delivered": {"type": "boolean", "description": "True when the link was opened on a device; otherwise show qr and deepLink to the user."},
                "deepLink": {"type": "string"},
                "qr": {"type": "string"},
                "url": {"type": "string"},
                "instructions": {"type": "string"}
            },
            "required": ["sessionId", "expiresAt"]
        })),
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    target: Option<String>,
    device: Option<String>,
    app_id: Option<String>,
    relaunch: Option<bool>,
    url: Option<String>,
    #[serde(rename = "for")]
    for_app: Option<String>,
    transport: Option<String>,
    ttl_seconds: Option<u32>,
    cwd: Option<String>,
}

/// The result; which keys are present depends on the path (web, delivered, QR).
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Output {
    session_id: String,
    expires_at: u64,
    transport: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    delivered: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    device: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    auto_detected: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deep_link: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    qr: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    script: Option<String>,
    instructions: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cwd_source: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    project_dir: Option<String>,
}

/// Handles a cancel step by step: a minted link is revoked (§M12).
fn handler(call: Call<'_>) -> Reply<'_> {
    Box::pin(async move {
        let args: Args = call.args.parse()?;
        let out = run(call.bridge, call.context, &args).await?;
        let mut reply = output(&out)?;
        if let Some(png) = qr_image(&out)
            && let CallToolResponse::Complete(result) = &mut reply
        {
            result.content.push(png);
        }
        Ok(reply)
    })
}

/// The pairing QR as an `image/png` block after the JSON text (§M8.1): the same deep link as
/// the `qr` text, drawn as an image so a model can show it without garbling block art. `None`
/// for results without a QR code.
fn qr_image(out: &Output) -> Option<ContentBlock> {
    out.qr.as_ref()?;
    let code = qr::encode(out.deep_link.as_deref()?).ok()?;
    match picture::qr_png(&code) {
        Ok(png) => Some(ContentBlock::image(STANDARD.encode(png), "image/png")),
        Err(e) => {
            tracing::warn!("no QR image: {e}");
            None
        }
    }
}

fn invalid(param: &str, message: impl Into<String>) -> ToolFailure {
    ToolFailure::invalid_request(message).with_details(json!({"param": param}))
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
    /// Neither `for`, `transport` nor the target chose the transport: the project's
    /// `platform` decides once the project directory is known.
    transport_defaulted: bool,
}

/// The argument rules of §M8.1 that need no file system or daemon.
fn check_combination<'a>(args: &'a Args) -> Result<Request<'a>, ToolFailure> {
    let target = Target::parse(args.target.as_deref());
    let t = target.as_str();
    let url = args.url.as_deref();
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
    let device = args.device.as_deref();
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
    let app_id = args.app_id.as_deref();
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
    if args.relaunch.is_some() && target != Target::Device(DeviceTarget::IosDevice) {
        return Err(invalid(
            "relaunch",
            "\"relaunch\" is only allowed with target \"ios-device\"",
        ));
    }
    // The schema's enums hold for validated input; anything else is refused the same way.
    let for_app = match args.for_app.as_deref() {
        None => None,
        Some(name) => Some(AppKind::parse(name).ok_or_else(|| {
            invalid(
                "for",
                "\"for\" must be \"react-native\", \"web\" or \"native\"",
            )
        })?),
    };
    let by_flag = match args.transport.as_deref() {
        None => None,
        Some(name) => Some(name.parse::<Transport>().map_err(|_| {
            invalid(
                "transport",
                "\"transport\" must be \"native\", \"web\" or \"sealed\"",
            )
        })?),
    };
    if let (Some(kind), Some(flag)) = (for_app, by_flag)
        && kind.transport() != flag
    {
        return Err(invalid(
            "transport",
            format!(
                "for \"{kind}\" takes {} links; it conflicts with transport \"{flag}\"",
                kind.transport()
            ),
        ));
    }
    let chosen = by_flag.or(for_app.map(AppKind::transport));
    let transport = match (chosen, target) {
        (Some(Transport::Web), Target::Device(DeviceTarget::IosDevice)) => {
            return Err(invalid(
                "transport",
                "transport \"web\" cannot reach a physical iPhone (the web listener is loopback only)",
            ));
        }
        (Some(t @ (Transport::Native | Transport::Sealed)), Target::Web) => {
            let param = if by_flag.is_some() {
                "transport"
            } else {
                "for"
            };
            return Err(invalid(
                param,
                format!("target \"web\" always uses transport \"web\", not \"{t}\""),
            ));
        }
        (Some(t), _) => Some(t),
        (None, Target::Web) => Some(Transport::Web),
        (None, _) => None,
    };
    Ok(Request {
        target,
        device,
        app_id,
        relaunch: args.relaunch.unwrap_or(false),
        url,
        ttl_seconds: args.ttl_seconds,
        transport_defaulted: transport.is_none(),
        transport: transport.unwrap_or(Transport::Native),
    })
}

/// A detection or delivery failure as the bridge reports it (§M8.1, §L6.4): argument
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
    inner: &'a BridgeContext,
    context: &'a RequestContext<RoleServer>,
    req: &'a Request<'a>,
    scheme: &'a str,
    env: &'a ResolveEnv,
}

async fn run(
    inner: &BridgeContext,
    context: &RequestContext<RoleServer>,
    args: &Args,
) -> Result<Output, ToolFailure> {
    let mut req = check_combination(args)?;
    let state_dir = inner.options.state_dir.as_deref();
    if let Some(cwd) = args.cwd.as_deref() {
        project::argument_dir(cwd)?;
    }
    if req.target == Target::Web {
        return web(inner, context, &req).await;
    }
    // Everything else needs the scheme (and device targets an app id), resolved in D.
    let dir = unless_cancelled(
        context,
        resolve_dir(
            args.cwd.as_deref(),
            context,
            &inner.roots,
            &inner.env,
            state_dir,
            inner.options.roots_timeout,
        ),
    )
    .await?;
    let env = inner.env.resolve_env(&dir.dir, state_dir);
    if req.transport_defaulted {
        // The project's `platform` (appduct init), else native (issue #23).
        let kind = shared::default_app_kind(&env).map_err(|e| project::project_failure(&e))?;
        req.transport = kind.transport();
        if req.transport == Transport::Web && req.target == Target::Device(DeviceTarget::IosDevice)
        {
            return Err(invalid(
                "for",
                "the project's platform is \"web\", whose links cannot reach a physical iPhone; pass for \"native\" or \"react-native\"",
            ));
        }
    }
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
    out.cwd_source = Some(dir.source.as_str());
    out.project_dir = Some(dir.dir.display().to_string());
    Ok(out)
}

/// `target: "web"`: the page URL with `#appduct=<payload>` and the connect script (§D5.2).
async fn web(
    inner: &BridgeContext,
    context: &RequestContext<RoleServer>,
    req: &Request<'_>,
) -> Result<Output, ToolFailure> {
    let page = req.url.unwrap_or_default();
    let client = unless_cancelled(context, inner.control()).await?;
    let (link, web) = flow(inner, context, &client)
        .open_web(link_params(req, None), page)
        .await
        .map_err(|e| flow_failure(&e, inner))?;
    Ok(Output {
        url: Some(web.url),
        script: Some(web.script),
        instructions: WEB_INSTRUCTIONS,
        ..base(&link)
    })
}

/// The shared link flow on `client`, selecting on the request's cancel token.
fn flow<'a>(
    inner: &'a BridgeContext,
    context: &'a RequestContext<RoleServer>,
    client: &'a ControlClient,
) -> LinkFlow<'a> {
    LinkFlow::new(client, inner.runner.as_ref()).with_cancel(&context.ct)
}

/// The `link.create` params: the address rule of §L6.4 for `target` (none: the advertised
/// address).
fn link_params(req: &Request<'_>, target: Option<DeviceTarget>) -> LinkCreateParams {
    LinkCreateParams::default()
        .with_ttl_seconds(req.ttl_seconds)
        .with_address_override(delivery::address_override(target, req.transport))
        .with_transport(Some(req.transport))
}

/// A failure of the shared link flow as the bridge reports it. The loopback refusal is
/// `invalid_request` naming `advertisedIp` (§M8.1): the CLI's message and hint in one text.
fn flow_failure(e: &LinkFlowError, inner: &BridgeContext) -> ToolFailure {
    match e {
        LinkFlowError::LoopbackAdvertised { .. } => {
            let hint = e
                .hint(inner.options.state_dir.as_deref())
                .unwrap_or_default();
            invalid("advertisedIp", format!("{e}. {hint}"))
        }
        LinkFlowError::Client(c) => ToolFailure::from_client(c),
        LinkFlowError::Delivery(d) => delivery_failure(d),
        LinkFlowError::DeepLink(d) => ToolFailure::new(ErrorType::InternalError, d.to_string()),
        LinkFlowError::WebLink(w) => ToolFailure::new(ErrorType::InternalError, w.to_string()),
        LinkFlowError::Cancelled => cancelled_failure(),
    }
}

/// The app id a delivery to `target` needs: the argument, else the project's
/// `appId.android|ios` (§L5.2); none for a simulator.
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

/// `device`, else `ANDROID_SERIAL` for Android (§L6.4); shapes checked.
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
/// failed delivery discards the link (§L6.4). A cancelled detection is dropped, which kills its
/// helper process (the runner kills on drop).
async fn explicit(ctx: &Ctx<'_>, target: DeviceTarget) -> Result<Output, ToolFailure> {
    let app_id = app_id_for(ctx, target)?;
    let requested = requested_device(ctx, target)?;
    let client = unless_cancelled(ctx.context, ctx.inner.control()).await?;
    let open = DeviceOpen {
        target,
        device: DeviceChoice::Detect {
            requested: requested.as_deref(),
        },
        app_id: app_id.as_deref(),
        relaunch: ctx.req.relaunch,
        scheme: ctx.scheme,
    };
    let opened = flow(ctx.inner, ctx.context, &client)
        .open_on_device(link_params(ctx.req, Some(target)), open)
        .await
        .map_err(|e| flow_failure(&e, ctx.inner))?;
    Ok(delivered(
        &opened.link,
        &opened.deep_link,
        target,
        &opened.device,
        false,
    ))
}

/// No target: one auto-detected simulator or Android device gets the link; none or several
/// give a QR result whose note says why (§M8.1). Physical iPhones are never detected.
async fn auto(ctx: &Ctx<'_>) -> Result<Output, ToolFailure> {
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
    let flow = flow(ctx.inner, ctx.context, &client);
    let open = DeviceOpen {
        target,
        device: DeviceChoice::Detected(&device),
        app_id: app_id.as_deref(),
        relaunch: false,
        scheme: ctx.scheme,
    };
    match flow
        .open_on_device(link_params(ctx.req, Some(target)), open)
        .await
    {
        Ok(opened) => Ok(delivered(
            &opened.link,
            &opened.deep_link,
            target,
            &device,
            true,
        )),
        // The loopback link was revoked; a fresh one on the advertised address for the QR.
        Err(LinkFlowError::Delivery(e)) => {
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
        Err(e) => Err(flow_failure(&e, ctx.inner)),
    }
}

fn base(link: &LinkCreateResult) -> Output {
    Output {
        session_id: link.session_id.clone(),
        expires_at: link.expires_at,
        transport: link.transport.as_str(),
        ..Output::default()
    }
}

fn delivered(
    link: &LinkCreateResult,
    deep_link: &str,
    target: DeviceTarget,
    device: &str,
    auto_detected: bool,
) -> Output {
    Output {
        delivered: Some(true),
        target: Some(target.as_str()),
        device: Some(device.to_owned()),
        auto_detected: auto_detected.then_some(true),
        deep_link: Some(deep_link.to_owned()),
        instructions: DELIVERED_INSTRUCTIONS,
        ..base(link)
    }
}

/// A link on the advertised address for the user to scan: `deepLink` and its terminal QR
/// code, the same rendering as `appduct sessions link --qr`.
async fn qr_result(
    ctx: &Ctx<'_>,
    client: &ControlClient,
    note: Option<String>,
) -> Result<Output, ToolFailure> {
    let (link, deep_link) = flow(ctx.inner, ctx.context, client)
        .mint_native(link_params(ctx.req, None), ctx.scheme)
        .await
        .map_err(|e| flow_failure(&e, ctx.inner))?;
    let mut notes: Vec<String> = note.into_iter().collect();
    let qr = match qr::terminal_qr(&deep_link) {
        Ok(text) => Some(text),
        Err(e) => {
            notes.push(format!("No QR code: {e}."));
            None
        }
    };
    Ok(Output {
        delivered: Some(false),
        deep_link: Some(deep_link),
        qr,
        instructions: QR_INSTRUCTIONS,
        note: (!notes.is_empty()).then(|| notes.join(" ")),
        ..base(&link)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typed_arguments_read_every_schema_property() {
        super::super::builtin::assert_reads_every_property::<Args>(&definition());
    }
}
