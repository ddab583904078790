//! `appduct_connect` (06 §6.8.1): validation (all before anything is minted), minting with
//! `link.create`, and the shared link composer.
//!
//! Implemented: explicit `target: "none"` (QR-style result with the deep link), `target:
//! "web"` (page URL + script), and auto-detection falling back to the QR-style result.
//! Not implemented here: device detection and delivery (`adb`, `xcrun`), which 01 §3.4 puts in
//! the shared client-side `appduct_daemon::delivery` module (not built yet), and the terminal QR
//! rendering (`appduct_daemon::qr`, not built yet): explicit device targets fail with
//! `tool_execution_error` before minting, and QR results carry no `qr` field.

use appduct_protocol::control::{DaemonStatus, LinkCreate, LinkCreateParams, Transport};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::link::{compose_deep_link, compose_web_link, web_script};
use appduct_protocol::pin::SpkiPin;
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde_json::{Map, Value, json};

use crate::args::Args;
use crate::error::ToolFailure;
use crate::project::{self, resolve_dir};
use crate::server::Inner;

fn invalid(param: &str, message: impl Into<String>) -> ToolFailure {
    ToolFailure::invalid_request(message).with_details(json!({"param": param}))
}

/// `^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$` (05 §5.2).
pub fn is_valid_app_id(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 255
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

/// Android serial `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$` or UDID `^[A-Za-z0-9][A-Za-z0-9-]{0,63}$`
/// (02 §7).
fn is_valid_device(target: &str, s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || !b[0].is_ascii_alphanumeric() {
        return false;
    }
    if target == "android" {
        b.len() <= 128
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-'))
    } else {
        b.len() <= 64 && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
    }
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

/// The argument rules of 06 §6.8.1 that need no file system or daemon.
fn check_combination(args: &Args) -> Result<(Option<&str>, Transport), ToolFailure> {
    let target = args.str("target");
    let t = target.unwrap_or("");
    match (args.str("url"), t) {
        (Some(_), "web") => {}
        (Some(_), _) => {
            return Err(invalid(
                "url",
                "\"url\" is only allowed with target \"web\"",
            ));
        }
        (None, "web") => {
            return Err(invalid(
                "url",
                "target \"web\" needs \"url\", the http(s) page to open",
            ));
        }
        (None, _) => {}
    }
    if let Some(u) = args.str("url")
        && !is_http_url(u)
    {
        return Err(invalid(
            "url",
            format!("\"url\" must be an absolute http: or https: URL, not {u:?}"),
        ));
    }
    if let Some(d) = args.str("device") {
        if !matches!(t, "android" | "ios-sim" | "ios-device") {
            return Err(invalid(
                "device",
                "\"device\" is only allowed with target \"android\", \"ios-sim\" or \"ios-device\"",
            ));
        }
        if !is_valid_device(t, d) {
            return Err(invalid(
                "device",
                format!("\"device\" {d:?} is not a valid serial or UDID"),
            ));
        }
    }
    if let Some(id) = args.str("appId") {
        if matches!(t, "ios-sim" | "web" | "none") {
            return Err(invalid(
                "appId",
                format!("\"appId\" is not used with target \"{t}\""),
            ));
        }
        if !is_valid_app_id(id) {
            return Err(invalid(
                "appId",
                format!("\"appId\" {id:?} must match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,254}}$"),
            ));
        }
    }
    if args.has("relaunch") && t != "ios-device" {
        return Err(invalid(
            "relaunch",
            "\"relaunch\" is only allowed with target \"ios-device\"",
        ));
    }
    let transport = match (args.str("transport"), t) {
        (Some("web"), "ios-device") => {
            return Err(invalid(
                "transport",
                "transport \"web\" cannot reach a physical iPhone (the web listener is loopback only)",
            ));
        }
        (Some("native"), "web") => {
            return Err(invalid(
                "transport",
                "target \"web\" always uses transport \"web\"",
            ));
        }
        (Some("web"), _) | (None, "web") => Transport::Web,
        _ => Transport::Native,
    };
    Ok((target, transport))
}

const QR_INSTRUCTIONS: &str = "Show deepLink to the user in a code block and ask them to open it on the device running the app (or scan it as a QR code), then call appduct_wait_for_session with sessionId.";

pub async fn run(
    inner: &Inner,
    context: &RequestContext<RoleServer>,
    args: &Args,
) -> Result<Value, ToolFailure> {
    let (target, transport) = check_combination(args)?;
    let state_dir = inner.options.state_dir.as_deref();
    if let Some(cwd) = args.str("cwd") {
        project::argument_dir(cwd)?;
    }
    let ttl_seconds = args.u64("ttlSeconds").map(|t| t as u32);

    if target == Some("web") {
        let page = args.str("url").unwrap_or_default();
        let client = inner.control().await?;
        let link = client
            .call::<LinkCreate>(LinkCreateParams {
                ttl_seconds,
                address_override: None,
                transport: Some(Transport::Web),
            })
            .await
            .map_err(|e| ToolFailure::from_client(&e))?;
        let url = compose_web_link(page, &link.deep_link_payload)
            .map_err(|e| ToolFailure::new(ErrorType::InternalError, e.to_string()))?;
        let script = web_script(&link.deep_link_payload)
            .map_err(|e| ToolFailure::new(ErrorType::InternalError, e.to_string()))?;
        return Ok(json!({
            "sessionId": link.session_id,
            "expiresAt": link.expires_at,
            "transport": "web",
            "url": url,
            "script": script,
            "instructions": "Open url in the page's browser, or run script in an already loaded page, then call appduct_wait_for_session with sessionId.",
        }));
    }

    // Everything else needs the scheme (and device targets an app id), resolved in D.
    let dir = resolve_dir(
        args.str("cwd"),
        context,
        &inner.roots,
        &inner.env,
        state_dir,
        inner.options.roots_timeout,
    )
    .await?;
    let scheme = project::resolve_scheme(
        &dir.dir,
        inner.options.scheme.as_deref(),
        &inner.env,
        state_dir,
    )?;
    if let Some(platform) = match target {
        Some("android") => Some("android"),
        Some("ios-device") => Some("ios"),
        _ => None,
    } && args.str("appId").is_none()
        && project::project_app_id(&dir.dir, platform, &inner.env, state_dir)?.is_none()
    {
        return Err(invalid(
            "appId",
            format!(
                "target \"{}\" needs an app id: pass appId, or set appId.{platform} in the project's .appduct/config.json (appduct init --{platform}-app-id)",
                target.unwrap_or_default()
            ),
        ));
    }
    let client = inner.control().await?;
    if target == Some("ios-device") {
        let status = client
            .call::<DaemonStatus>(Default::default())
            .await
            .map_err(|e| ToolFailure::from_client(&e))?;
        let loopback = status
            .advertised_address
            .address
            .parse::<std::net::IpAddr>()
            .is_ok_and(|a| a.is_loopback());
        if loopback {
            return Err(invalid(
                "advertisedIp",
                format!(
                    "the daemon advertises the loopback address {}, which a physical iPhone cannot reach; set advertisedIp in the daemon's config.json to the Mac's LAN address and restart the daemon",
                    status.advertised_address.address
                ),
            ));
        }
    }
    let mut note = None;
    match target {
        Some("android" | "ios-sim" | "ios-device") => {
            return Err(ToolFailure::execution(format!(
                "this build of appduct mcp cannot detect or deliver to devices yet (target \"{}\"); use target \"none\" and show the deep link to the user",
                target.unwrap_or_default()
            ))
            .with_details(json!({"target": target})));
        }
        None => {
            note = Some("Device auto-detection is not available in this build; nothing was opened. A physical iPhone needs target \"ios-device\" and appId.".to_owned());
        }
        _ => {}
    }
    let link = client
        .call::<LinkCreate>(LinkCreateParams {
            ttl_seconds,
            address_override: None,
            transport: Some(transport),
        })
        .await
        .map_err(|e| ToolFailure::from_client(&e))?;
    let pin = match transport {
        Transport::Native => Some(SpkiPin::parse(&link.pin).map_err(|e| {
            ToolFailure::new(
                ErrorType::InternalError,
                format!("the daemon sent an invalid pin: {e}"),
            )
        })?),
        Transport::Web => None,
    };
    let deep_link = compose_deep_link(&scheme.scheme, &link.deep_link_payload, pin.as_ref())
        .map_err(|e| ToolFailure::invalid_request(e.to_string()))?;
    let mut out = Map::new();
    out.insert("sessionId".into(), json!(link.session_id));
    out.insert("expiresAt".into(), json!(link.expires_at));
    out.insert("transport".into(), json!(transport.as_str()));
    out.insert("delivered".into(), json!(false));
    out.insert("deepLink".into(), json!(deep_link));
    out.insert("instructions".into(), json!(QR_INSTRUCTIONS));
    if let Some(n) = note {
        out.insert("note".into(), json!(n));
    }
    out.insert("cwdSource".into(), json!(dir.source.as_str()));
    out.insert("projectDir".into(), json!(dir.dir.display().to_string()));
    Ok(Value::Object(out))
}
