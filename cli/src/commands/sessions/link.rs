//! `appduct sessions link` (§L6.3): flag combination rules, scheme and app-id resolution,
//! the shared link-connect flow, and the link's rendering. Resolution, the flow (minting,
//! delivery, revoke on failure) and the terminal QR code come from `appduct-client`'s
//! `project`, `link_flow` and `qr` modules, shared with the MCP bridge's `appduct_connect`.

use std::path::PathBuf;

use appduct_client::client::ControlClient;
use appduct_client::command_runner::CommandRunner;
use appduct_client::delivery::{self, ANDROID_SERIAL_ENV, DeliveryError, DeviceTarget, ErrorClass};
use appduct_client::link_flow::{DeviceChoice, DeviceOpen, LinkFlow, LinkFlowError};
use appduct_client::project::{self, AppKind, ProjectError, ResolveEnv};
use appduct_client::qr;
use appduct_client::state_dir::StateDir;
use appduct_protocol::control::{LinkCreateParams, LinkCreateResult, Transport};
use appduct_protocol::limits::MAX_LINK_TTL_S;
use appduct_protocol::link::is_http_url;
use clap::{Args, ValueEnum};
use serde_json::{Map, Value, json};
use time::OffsetDateTime;

use crate::commands::args::{app_id, int_in, opt, scheme, too_many};
use crate::commands::init::PlatformArg;
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::globals::Globals;
use crate::output::{Output, Success, write_stdout};
use crate::render::{self, Row, Section, to_value};

use super::wait;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OpenArg {
    Android,
    IosSim,
    IosDevice,
    Web,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportArg {
    Native,
    Web,
    Sealed,
}

impl TransportArg {
    fn transport(self) -> Transport {
        match self {
            TransportArg::Native => Transport::Native,
            TransportArg::Web => Transport::Web,
            TransportArg::Sealed => Transport::Sealed,
        }
    }
}

#[derive(Debug, Args)]
pub struct LinkArgs {
    /// Link lifetime in seconds, 1-86400 (default: the daemon's linkTtlSeconds)
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub ttl: Option<String>,
    /// Print the deep link as a QR code (human mode only)
    #[arg(long)]
    pub qr: bool,
    /// Deep-link scheme
    #[arg(long, value_name = "SCHEME")]
    pub scheme: Option<String>,
    /// Deliver the link to a device or print a web link
    #[arg(long, value_enum, value_name = "TARGET")]
    pub open: Option<OpenArg>,
    /// The kind of app the link is for: react-native (sealed link), web, native (default: the
    /// project's platform from appduct init, else native)
    #[arg(long = "for", value_enum, value_name = "APP")]
    pub for_app: Option<PlatformArg>,
    /// Link transport (overrides --for's choice; must agree with it when both are given)
    #[arg(long, value_enum, value_name = "TRANSPORT")]
    pub transport: Option<TransportArg>,
    /// Device serial or UDID (with --open android, ios-sim or ios-device)
    #[arg(long, value_name = "ID")]
    pub device: Option<String>,
    /// Android application id or iOS bundle id (with --open android or ios-device)
    #[arg(long, value_name = "ID")]
    pub app_id: Option<String>,
    /// Terminate a running app first (with --open ios-device)
    #[arg(long)]
    pub relaunch: bool,
    /// The page URL (required with, and only with, --open web)
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Then wait until the app claims the session and sends its tools (default 120000 ms)
    #[arg(long, value_name = "MS", num_args = 0..=1, require_equals = true, default_missing_value = "120000")]
    pub wait: Option<String>,
    #[arg(hide = true)]
    pub positionals: Vec<String>,
}

/// `sessions link` (§L6.3), after the flag combination rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkRequest {
    pub ttl_seconds: Option<u32>,
    pub qr: bool,
    /// Syntax already checked; resolution (§L5.1) happens when the command runs.
    pub scheme: Option<String>,
    pub open: Option<OpenTarget>,
    /// From `--for`, `--transport` or `--open web`; else `native` until the project's
    /// `platform` is read ([`LinkRequest::with_project_default`]).
    pub transport: Transport,
    /// No flag chose the transport: the project config's `platform` decides.
    pub transport_defaulted: bool,
    pub device: Option<String>,
    pub app_id: Option<String>,
    pub relaunch: bool,
    /// Only with `--open web`; an `http` or `https` URL.
    pub url: Option<String>,
    /// `--wait[=MS]`: wait this long for the claim and the registry (issue #23).
    pub wait: Option<u64>,
}

/// A `sessions link --open` target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenTarget {
    Android,
    IosSim,
    IosDevice,
    Web,
}

impl OpenTarget {
    /// The delivery target of `--open`; `web` opens nothing.
    pub fn device_target(self) -> Option<DeviceTarget> {
        match self {
            OpenTarget::Android => Some(DeviceTarget::Android),
            OpenTarget::IosSim => Some(DeviceTarget::IosSim),
            OpenTarget::IosDevice => Some(DeviceTarget::IosDevice),
            OpenTarget::Web => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OpenTarget::Android => "android",
            OpenTarget::IosSim => "ios-sim",
            OpenTarget::IosDevice => "ios-device",
            OpenTarget::Web => "web",
        }
    }
}

pub fn validate(a: LinkArgs) -> Result<LinkRequest, CliError> {
    if !a.positionals.is_empty() {
        return Err(too_many(
            "sessions link",
            "no positional arguments",
            &a.positionals,
        ));
    }
    let open = a.open.map(|o| match o {
        OpenArg::Android => OpenTarget::Android,
        OpenArg::IosSim => OpenTarget::IosSim,
        OpenArg::IosDevice => OpenTarget::IosDevice,
        OpenArg::Web => OpenTarget::Web,
    });
    let is = |t: OpenTarget| open == Some(t);
    let chosen = chosen_transport(a.for_app.map(PlatformArg::kind), a.transport, open)?;
    match (a.transport, open) {
        (Some(TransportArg::Web), Some(OpenTarget::IosDevice)) => {
            return Err(CliError::usage(
                "--transport web is not allowed with --open ios-device",
            ));
        }
        (Some(TransportArg::Native), Some(OpenTarget::Web)) => {
            return Err(CliError::usage(
                "--transport native is not allowed with --open web (a web link always uses the web transport)",
            ));
        }
        _ => {}
    }
    if a.qr && is(OpenTarget::Web) {
        return Err(CliError::usage("--qr is not allowed with --open web"));
    }
    if a.scheme.is_some() && is(OpenTarget::Web) {
        return Err(CliError::usage("--scheme is not allowed with --open web"));
    }
    if a.device.is_some() && (open.is_none() || is(OpenTarget::Web)) {
        return Err(CliError::usage(
            "--device requires --open android, --open ios-sim or --open ios-device",
        ));
    }
    if a.app_id.is_some() && !(is(OpenTarget::Android) || is(OpenTarget::IosDevice)) {
        return Err(CliError::usage(
            "--app-id is only allowed with --open android or --open ios-device",
        ));
    }
    if a.relaunch && !is(OpenTarget::IosDevice) {
        return Err(CliError::usage(
            "--relaunch is only allowed with --open ios-device",
        ));
    }
    match (&a.url, is(OpenTarget::Web)) {
        (Some(_), false) => {
            return Err(CliError::usage("--url is only allowed with --open web"));
        }
        (None, true) => {
            return Err(CliError::usage("--open web requires --url <url>"));
        }
        (Some(url), true) if !is_http_url(url) => {
            return Err(CliError::usage(format!(
                "--url must be an http or https URL (got \"{url}\")"
            )));
        }
        _ => {}
    }
    if a.device.as_deref() == Some("") {
        return Err(CliError::usage("--device requires a value"));
    }
    let ttl_seconds = opt(a.ttl, |v| {
        int_in(
            "--ttl",
            v,
            1,
            u64::from(MAX_LINK_TTL_S),
            &format!("an integer from 1 to {MAX_LINK_TTL_S}"),
        )
    })?
    .map(|t| u32::try_from(t).unwrap_or(MAX_LINK_TTL_S));
    let wait = opt(a.wait, |v| {
        int_in(
            "--wait",
            v,
            1,
            wait::MAX_WAIT_MS,
            &format!("an integer from 1 to {}", wait::MAX_WAIT_MS),
        )
    })?;
    Ok(LinkRequest {
        wait,
        ttl_seconds,
        qr: a.qr,
        scheme: a.scheme.map(scheme).transpose()?,
        open,
        transport: chosen.unwrap_or(Transport::Native),
        transport_defaulted: chosen.is_none(),
        device: a.device,
        app_id: a.app_id.map(|v| app_id("--app-id", v)).transpose()?,
        relaunch: a.relaunch,
        url: a.url,
    })
}

/// The transport the flags choose (`None`: none does), or a usage error when they disagree:
/// `--for` maps through [`AppKind::transport`], `--transport` names one, `--open web` implies
/// `web`.
fn chosen_transport(
    for_app: Option<AppKind>,
    transport: Option<TransportArg>,
    open: Option<OpenTarget>,
) -> Result<Option<Transport>, CliError> {
    let by_for = for_app.map(AppKind::transport);
    let by_flag = transport.map(TransportArg::transport);
    if let (Some(kind), Some(t), Some(flag)) = (for_app, by_for, by_flag)
        && t != flag
    {
        return Err(CliError::usage(format!(
            "--for {kind} takes {t} links; it conflicts with --transport {flag}"
        )));
    }
    if open == Some(OpenTarget::Web) {
        if let Some(kind) = for_app.filter(|k| k.transport() != Transport::Web) {
            return Err(CliError::usage(format!(
                "--for {kind} is not allowed with --open web (a web link is for a web page)"
            )));
        }
        if by_flag == Some(Transport::Sealed) {
            return Err(CliError::usage(
                "--transport sealed is not allowed with --open web (a web link always uses the web transport)",
            ));
        }
        return Ok(Some(Transport::Web));
    }
    Ok(by_flag.or(by_for))
}

impl LinkRequest {
    /// Fills in the transport from the project's `platform` when no flag chose one (issue
    /// #23); without a project config it stays `native`.
    pub fn with_project_default(mut self, env: &ResolveEnv) -> Result<Self, CliError> {
        if self.transport_defaulted {
            let kind = project::default_app_kind(env).map_err(|e| project_error(&e))?;
            self.transport = kind.transport();
            if self.transport == Transport::Web && self.open == Some(OpenTarget::IosDevice) {
                return Err(CliError::usage(
                    "the project's platform is \"web\", whose links cannot reach a physical iPhone; pass --for native or --for react-native",
                ));
            }
        }
        Ok(self)
    }
}

/// A resolution failure as the CLI reports it: a usage error (exit 64) with the shared
/// message, details and hint.
pub fn project_error(e: &ProjectError) -> CliError {
    let mut err = CliError::usage(e.to_string());
    err.details = e.details();
    match e.hint() {
        Some(hint) => err.with_hint(hint),
        None => err,
    }
}

/// A detection or delivery failure as the CLI reports it (§L6.3, §L6.4): argument errors
/// exit 64 listing the devices, no device and failed commands are `connection_error` (70),
/// the latter with `{argv, exitCode, stderr}`.
pub fn delivery_error(e: &DeliveryError) -> CliError {
    let mut err = match e.class() {
        ErrorClass::Argument => CliError::usage(e.to_string()),
        ErrorClass::NoDevice | ErrorClass::Command => CliError::connection(e.to_string()),
        ErrorClass::Internal => CliError::internal(e.to_string()),
    };
    err.details = e.details();
    if !e.candidates().is_empty() {
        err = err.with_hint("Pass --device <id> with one of the detected devices.");
    }
    match e.hint() {
        Some(hint) => err.with_hint(hint),
        None => err,
    }
}

/// Everything `sessions link` decides before contacting the daemon (§L6.3 steps 1–3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkPlan {
    pub scheme: Option<String>,
    pub app_id: Option<String>,
    /// `--device`, else `ANDROID_SERIAL` for Android; shape already checked.
    pub requested_device: Option<String>,
}

/// Steps 2–3 of §L6.3 and the device shape, in `env` (`android_serial` is
/// `ANDROID_SERIAL`).
pub fn plan(
    req: &LinkRequest,
    env: &ResolveEnv,
    android_serial: Option<&str>,
) -> Result<LinkPlan, CliError> {
    let target = req.open.and_then(OpenTarget::device_target);
    let scheme = match req.open {
        Some(OpenTarget::Web) => None,
        _ => Some(
            project::resolve_scheme(req.scheme.as_deref(), env)
                .map_err(|e| project_error(&e))?
                .scheme,
        ),
    };
    let app_id = match target.and_then(DeviceTarget::app_id_platform) {
        Some(platform) => Some(
            project::resolve_app_id(req.app_id.as_deref(), platform, env)
                .map_err(|e| project_error(&e))?,
        ),
        None => None,
    };
    let requested_device = match (target, req.device.as_deref()) {
        (Some(target), Some(device)) => {
            delivery::check_device_shape(target, device, "--device")
                .map_err(|e| delivery_error(&e))?;
            Some(device.to_owned())
        }
        (Some(DeviceTarget::Android), None) => match android_serial.filter(|s| !s.is_empty()) {
            Some(serial) => {
                delivery::check_device_shape(DeviceTarget::Android, serial, ANDROID_SERIAL_ENV)
                    .map_err(|e| delivery_error(&e))?;
                Some(serial.to_owned())
            }
            None => None,
        },
        _ => None,
    };
    Ok(LinkPlan {
        scheme,
        app_id,
        requested_device,
    })
}

/// The `link.create` params of §L6.3 step 6.
pub fn link_params(req: &LinkRequest) -> LinkCreateParams {
    LinkCreateParams::default()
        .with_ttl_seconds(req.ttl_seconds)
        .with_address_override(delivery::address_override(
            req.open.and_then(OpenTarget::device_target),
            req.transport,
        ))
        .with_transport(Some(req.transport))
}

/// `sessions link` (§L6.3): every check before minting; a failed delivery revokes the link.
pub async fn run(
    globals: &Globals,
    out: &Output,
    req: &LinkRequest,
    runner: &dyn CommandRunner,
) -> Result<Success, CliError> {
    let state_dir = globals.state_dir()?;
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::usage(format!("cannot determine the current directory: {e}")))?;
    let env = ResolveEnv::from_process(cwd, Some(PathBuf::from(state_dir.path())));
    let req = &req.clone().with_project_default(&env)?;
    let serial = std::env::var(ANDROID_SERIAL_ENV).ok();
    let plan = plan(req, &env, serial.as_deref())?;
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let mut success = mint_and_deliver(&client, &dir, req, &plan, runner).await?;
    if req.qr && !out.flags.json {
        let deep_link = success.data["deepLink"].as_str().unwrap_or_default();
        match qr::terminal_qr(deep_link) {
            Ok(text) => {
                success.human.push('\n');
                success.human.push_str(&text);
            }
            Err(e) => out.notice(&format!("No QR code: {e}")),
        }
    }
    let Some(timeout_ms) = req.wait else {
        return Ok(success);
    };
    // The person needs the link (or its QR code) while the command waits.
    if !out.flags.json {
        write_stdout(&success.human);
    }
    let id = success.data["sessionId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    out.notice(&format!(
        "Waiting up to {timeout_ms} ms for an app to claim session {id}…"
    ));
    wait::wait_ready(&client, &dir, &id, timeout_ms, success).await
}

/// Steps 4–7 of §L6.3 on an open connection, after [`plan`]: runs the shared link flow for
/// the request's target and renders its result.
pub async fn mint_and_deliver(
    client: &ControlClient,
    dir: &StateDir,
    req: &LinkRequest,
    plan: &LinkPlan,
    runner: &dyn CommandRunner,
) -> Result<Success, CliError> {
    let flow = LinkFlow::new(client, runner);
    let failed = |e| link_flow_error(e, dir);
    let scheme = plan.scheme.as_deref().unwrap_or_default();
    match (req.open, req.open.and_then(OpenTarget::device_target)) {
        (Some(OpenTarget::Web), _) => {
            let url = req.url.as_deref().unwrap_or_default();
            let (link, web) = flow.open_web(link_params(req), url).await.map_err(failed)?;
            Ok(web_link_created(
                &link.session_id,
                &web.url,
                &web.script,
                link.expires_at,
                OffsetDateTime::now_utc(),
            ))
        }
        (_, Some(target)) => {
            let open = DeviceOpen {
                target,
                device: DeviceChoice::Detect {
                    requested: plan.requested_device.as_deref(),
                },
                app_id: plan.app_id.as_deref(),
                relaunch: req.relaunch,
                scheme,
            };
            let opened = flow
                .open_on_device(link_params(req), open)
                .await
                .map_err(failed)?;
            let delivered = Delivery {
                target: target.as_str().to_owned(),
                device: opened.device,
            };
            Ok(link_created(
                &opened.link,
                &opened.deep_link,
                Some(&delivered),
                OffsetDateTime::now_utc(),
            ))
        }
        (_, None) => {
            let (link, deep_link) = flow
                .mint_native(link_params(req), scheme)
                .await
                .map_err(failed)?;
            Ok(link_created(
                &link,
                &deep_link,
                None,
                OffsetDateTime::now_utc(),
            ))
        }
    }
}

/// A failure of the shared link flow as the CLI reports it (§L6.3): the loopback refusal is a
/// usage error (64) with the hint naming `<state-dir>/config.json`; a composition failure is
/// internal.
fn link_flow_error(e: LinkFlowError, dir: &StateDir) -> CliError {
    match e {
        LinkFlowError::Client(e) => connect::client_error(&e, dir),
        LinkFlowError::Delivery(e) => delivery_error(&e),
        LinkFlowError::LoopbackAdvertised { .. } => {
            let hint = e.hint(Some(dir.path())).unwrap_or_default();
            CliError::usage(e.to_string()).with_hint(hint)
        }
        LinkFlowError::DeepLink(_) | LinkFlowError::WebLink(_) | LinkFlowError::Cancelled => {
            CliError::internal(e.to_string())
        }
    }
}

/// A delivery that ran for `sessions link --open` (§L6.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// `android`, `ios-sim` or `ios-device`.
    pub target: String,
    /// The serial or UDID used.
    pub device: String,
}

/// `sessions link` for native targets, `--transport web` and no target (§L6.3). `deep_link`
/// is the composed link (with `pin` only for the native transport).
pub fn link_created(
    link: &LinkCreateResult,
    deep_link: &str,
    delivery: Option<&Delivery>,
    now: OffsetDateTime,
) -> Success {
    let web = link.transport == Transport::Web;
    let sealed = link.transport == Transport::Sealed;
    let mut data = Map::new();
    data.insert("sessionId".into(), json!(link.session_id));
    data.insert("transport".into(), to_value(&link.transport));
    data.insert("deepLink".into(), json!(deep_link));
    data.insert("endpoint".into(), to_value(&link.endpoint));
    data.insert("expiresAt".into(), json!(link.expires_at));
    if sealed {
        // The bare payload too: an app can take it without the deep link (e.g. pasted).
        data.insert("payload".into(), json!(link.deep_link_payload));
        data.insert("sealedKey".into(), json!(link.sealed_key));
    } else if !web {
        data.insert("pin".into(), json!(link.pin));
    }
    if let Some(d) = delivery {
        data.insert("delivered".into(), json!(true));
        data.insert("target".into(), json!(d.target));
        data.insert("device".into(), json!(d.device));
    }
    let host = if link.endpoint.address.contains(':') {
        format!("[{}]", link.endpoint.address)
    } else {
        link.endpoint.address.clone()
    };
    let scheme = if web || sealed { "ws" } else { "wss" };
    let mut rows = vec![
        Row::field("Session", link.session_id.as_str()),
        Row::field("Deep link", deep_link),
        Row::field(
            "Endpoint",
            format!("{scheme}://{host}:{}", link.endpoint.port),
        ),
    ];
    if web {
        rows.push(Row::field("Transport", "web"));
    } else if sealed {
        rows.push(Row::field("Transport", "sealed (Noise NK inside plain ws)"));
        rows.push(Row::field("Payload", link.deep_link_payload.as_str()));
        rows.push(Row::field(
            "Daemon key",
            link.sealed_key.as_deref().unwrap_or_default(),
        ));
    } else {
        rows.push(Row::field("Pin", link.pin.as_str()));
    }
    rows.push(Row::field("Expires", expires_text(link.expires_at, now)));
    if let Some(d) = delivery {
        rows.push(Row::field(
            "Delivered",
            format!("{} {}", d.target, d.device),
        ));
    }
    Success::new(
        Value::Object(data),
        render::sections(&[Section::new("Link created", rows)]),
    )
}

/// `sessions link --open web --url <url>` (§L6.3): `url` is the page URL with the payload
/// fragment, `script` the console snippet.
pub fn web_link_created(
    session_id: &str,
    url: &str,
    script: &str,
    expires_at: u64,
    now: OffsetDateTime,
) -> Success {
    let data =
        json!({"sessionId": session_id, "url": url, "script": script, "expiresAt": expires_at});
    let mut human = render::sections(&[Section::new(
        "Web link created",
        vec![
            Row::field("Session", session_id),
            Row::field("URL", url),
            Row::field("Script", script),
            Row::field("Expires", expires_text(expires_at, now)),
        ],
    )]);
    human.push_str("Open the URL in the page's tab, or run the script in its console.\n");
    Success::new(data, human)
}

fn expires_text(expires_at: u64, now: OffsetDateTime) -> String {
    let at = i64::try_from(expires_at)
        .ok()
        .and_then(|s| OffsetDateTime::from_unix_timestamp(s).ok());
    match at {
        Some(at) => format!("{} ({})", render::iso_seconds(at), render::until(at, now)),
        None => expires_at.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use appduct_protocol::control::Transport;
    use serde_json::json;
    use std::net::{IpAddr, Ipv4Addr};

    fn req(open: Option<OpenTarget>, transport: Transport) -> LinkRequest {
        LinkRequest {
            ttl_seconds: Some(60),
            qr: false,
            scheme: None,
            open,
            transport,
            transport_defaulted: false,
            device: None,
            app_id: None,
            relaunch: false,
            url: None,
            wait: None,
        }
    }

    #[test]
    fn loopback_override_only_for_native_links_to_local_targets() {
        let lo = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let p = link_params(&req(Some(OpenTarget::Android), Transport::Native));
        assert_eq!(p.address_override, lo);
        assert_eq!(p.ttl_seconds, Some(60));
        assert_eq!(
            link_params(&req(Some(OpenTarget::IosSim), Transport::Native)).address_override,
            lo
        );
        assert_eq!(
            link_params(&req(Some(OpenTarget::IosDevice), Transport::Native)).address_override,
            None
        );
        assert_eq!(
            link_params(&req(None, Transport::Native)).address_override,
            None
        );
        let web = link_params(&req(Some(OpenTarget::Android), Transport::Web));
        assert_eq!(web.address_override, None);
        assert_eq!(web.transport, Some(Transport::Web));
    }

    fn env_in(dir: &std::path::Path) -> ResolveEnv {
        ResolveEnv {
            dir: dir.to_path_buf(),
            home: None,
            state_dir: None,
            env_scheme: None,
        }
    }

    #[test]
    fn the_plan_resolves_scheme_app_id_and_device_before_anything_runs() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join(".appduct")).unwrap();
        std::fs::write(
            tmp.path().join(".appduct/config.json"),
            r#"{"scheme": "shop", "appId": {"android": "com.shop"}}"#,
        )
        .unwrap();
        let env = env_in(tmp.path());
        let android = req(Some(OpenTarget::Android), Transport::Native);
        let p = plan(&android, &env, Some("emulator-5554")).unwrap();
        assert_eq!(
            p,
            LinkPlan {
                scheme: Some("shop".into()),
                app_id: Some("com.shop".into()),
                requested_device: Some("emulator-5554".into()),
            }
        );
        // --device beats ANDROID_SERIAL; an empty ANDROID_SERIAL is unset.
        let mut named = android.clone();
        named.device = Some("R58M".into());
        assert_eq!(
            plan(&named, &env, Some("emulator-5554"))
                .unwrap()
                .requested_device
                .as_deref(),
            Some("R58M")
        );
        assert_eq!(
            plan(&android, &env, Some("")).unwrap().requested_device,
            None
        );
        // A bad ANDROID_SERIAL is named as such.
        let e = plan(&android, &env, Some("-s")).unwrap_err();
        assert_eq!(e.exit_code(), 64);
        assert!(
            e.message.starts_with("ANDROID_SERIAL \"-s\""),
            "{}",
            e.message
        );
        // ios-device needs appId.ios, which this project lacks: 64 with the init hint.
        let e = plan(
            &req(Some(OpenTarget::IosDevice), Transport::Native),
            &env,
            None,
        )
        .unwrap_err();
        assert_eq!(e.exit_code(), 64);
        assert!(e.hint().unwrap().contains("--ios-app-id"));
        // The simulator needs no app id, web needs no scheme.
        let sim = plan(
            &req(Some(OpenTarget::IosSim), Transport::Native),
            &env,
            None,
        )
        .unwrap();
        assert_eq!((sim.scheme.as_deref(), sim.app_id), (Some("shop"), None));
        let empty = tempfile::tempdir().unwrap();
        let web = plan(
            &req(Some(OpenTarget::Web), Transport::Web),
            &env_in(empty.path()),
            None,
        )
        .unwrap();
        assert_eq!(web.scheme, None);
        let e = plan(&req(None, Transport::Native), &env_in(empty.path()), None).unwrap_err();
        assert_eq!(e.exit_code(), 64);
        assert!(e.hint().unwrap().contains("appduct init"));
    }

    #[test]
    fn delivery_failures_map_to_exit_codes_with_details() {
        let several = DeliveryError::SeveralDevices {
            target: DeviceTarget::Android,
            candidates: vec!["a".into(), "b".into()],
        };
        let e = delivery_error(&several);
        assert_eq!(e.exit_code(), 64);
        assert_eq!(e.details.clone().unwrap()["devices"], json!(["a", "b"]));
        assert!(e.hint().unwrap().contains("--device"));
        let none = delivery_error(&DeliveryError::NoDevice {
            target: DeviceTarget::IosSim,
        });
        assert_eq!(none.exit_code(), 70);
        assert!(
            none.message
                .contains("xcrun simctl list devices booted --json")
        );
        let missing = delivery_error(&DeliveryError::CannotRun {
            argv: vec!["adb".into(), "devices".into()],
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
        assert_eq!(missing.exit_code(), 70);
        assert!(missing.hint().unwrap().contains("adb"));
        let details = missing.details.clone().unwrap();
        assert_eq!(details["argv"], json!(["adb", "devices"]));
        assert_eq!(details["exitCode"], serde_json::Value::Null);
        assert_eq!(
            delivery_error(&DeliveryError::UnsafeLink).exit_code(),
            1,
            "a broken invariant is internal"
        );
    }
}
