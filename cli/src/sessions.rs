//! `appduct sessions ls | revoke | link` (05 §6).

use std::path::PathBuf;

use appduct_daemon::client::ControlClient;
use appduct_daemon::delivery::{self, ANDROID_SERIAL_ENV, DeliveryError, DeviceTarget, ErrorClass};
use appduct_daemon::project::{self, ProjectError, ResolveEnv};
use appduct_daemon::qr;
use appduct_daemon::seams::CommandRunner;
use appduct_daemon::state_dir::StateDir;
use appduct_protocol::control::{
    DaemonStatus, LinkCreate, LinkCreateParams, NoParams, SelectorParams, SessionsList,
    SessionsRevoke,
};
use appduct_protocol::link::{compose_web_link, web_script};
use time::OffsetDateTime;

use crate::command::{Globals, LinkRequest, OpenTarget};
use crate::connect::{self, Contact};
use crate::error::CliError;
use crate::output::{Output, Success};
use crate::views;

/// `sessions ls`.
pub async fn ls(globals: &Globals, out: &Output) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let sessions = client
        .call::<SessionsList>(NoParams {})
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    Ok(views::sessions_ls(&sessions, OffsetDateTime::now_utc()))
}

/// `sessions revoke [selector]`.
pub async fn revoke(
    globals: &Globals,
    out: &Output,
    selector: Option<&str>,
) -> Result<Success, CliError> {
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let result = client
        .call::<SessionsRevoke>(
            SelectorParams::default().with_selector(selector.map(str::to_owned)),
        )
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    Ok(views::sessions_revoke(&result))
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

/// A detection or delivery failure as the CLI reports it (05 §6.3, 02 §7): argument errors
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

/// Everything `sessions link` decides before contacting the daemon (05 §6.3 steps 1–3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkPlan {
    pub scheme: Option<String>,
    pub app_id: Option<String>,
    /// `--device`, else `ANDROID_SERIAL` for Android; shape already checked.
    pub requested_device: Option<String>,
}

/// Steps 2–3 of 05 §6.3 and the device shape, in `env` (`android_serial` is
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

/// The `link.create` params of 05 §6.3 step 6.
pub fn link_params(req: &LinkRequest) -> LinkCreateParams {
    LinkCreateParams::default()
        .with_ttl_seconds(req.ttl_seconds)
        .with_address_override(delivery::address_override(
            req.open.and_then(OpenTarget::device_target),
            req.transport,
        ))
        .with_transport(Some(req.transport))
}

/// `sessions link` (05 §6.3): every check before minting; a failed delivery revokes the link.
pub async fn link(
    globals: &Globals,
    out: &Output,
    req: &LinkRequest,
    runner: &dyn CommandRunner,
) -> Result<Success, CliError> {
    let state_dir = globals.state_dir()?;
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::usage(format!("cannot determine the current directory: {e}")))?;
    let env = ResolveEnv::from_process(cwd, Some(PathBuf::from(state_dir.path())));
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
    Ok(success)
}

/// Steps 4–7 of 05 §6.3 on an open connection, after [`plan`].
pub async fn mint_and_deliver(
    client: &ControlClient,
    dir: &StateDir,
    req: &LinkRequest,
    plan: &LinkPlan,
    runner: &dyn CommandRunner,
) -> Result<Success, CliError> {
    let rpc = |e| connect::client_error(&e, dir);
    let target = req.open.and_then(OpenTarget::device_target);
    if target == Some(DeviceTarget::IosDevice) {
        let status = client
            .call::<DaemonStatus>(NoParams {})
            .await
            .map_err(rpc)?;
        if delivery::is_loopback_address(&status.advertised_address.address) {
            return Err(CliError::usage(format!(
                "The daemon advertises the loopback address {}, which a device cannot reach",
                status.advertised_address.address
            ))
            .with_hint(format!(
                "Set advertisedIp to this computer's LAN address in {}/config.json and restart \
                 the daemon (appduct daemon stop).",
                dir.path().display()
            )));
        }
    }
    let device = match target {
        Some(target) => Some(
            delivery::detect(runner, target, plan.requested_device.as_deref())
                .await
                .map_err(|e| delivery_error(&e))?,
        ),
        None => None,
    };
    let link = client
        .call::<LinkCreate>(link_params(req))
        .await
        .map_err(rpc)?;
    let now = OffsetDateTime::now_utc();
    if req.open == Some(OpenTarget::Web) {
        let url = req.url.as_deref().unwrap_or_default();
        let composed = compose_web_link(url, &link.deep_link_payload)
            .and_then(|u| web_script(&link.deep_link_payload).map(|s| (u, s)));
        return match composed {
            Ok((url, script)) => Ok(views::web_link_created(
                &link.session_id,
                &url,
                &script,
                link.expires_at,
                now,
            )),
            Err(e) => {
                revoke_quietly(client, &link.session_id).await;
                Err(CliError::internal(format!(
                    "cannot compose the web link: {e}"
                )))
            }
        };
    }
    let scheme = plan.scheme.as_deref().unwrap_or_default();
    let deep_link = match delivery::deep_link(scheme, &link) {
        Ok(d) => d,
        Err(e) => {
            revoke_quietly(client, &link.session_id).await;
            return Err(CliError::internal(e.to_string()));
        }
    };
    let delivered = match (target, device) {
        (Some(target), Some(device)) => {
            let d = delivery::Delivery {
                target,
                device: &device,
                app_id: plan.app_id.as_deref(),
                relaunch: req.relaunch,
                deep_link: &deep_link,
                port: link.endpoint.port,
            };
            if let Err(e) = delivery::deliver(runner, &d).await {
                revoke_quietly(client, &link.session_id).await;
                return Err(delivery_error(&e));
            }
            Some(views::Delivery {
                target: target.as_str().to_owned(),
                device,
            })
        }
        _ => None,
    };
    Ok(views::link_created(
        &link,
        &deep_link,
        delivered.as_ref(),
        now,
    ))
}

/// Revokes a link minted by this command after a later step failed (05 §6.3 step 7).
async fn revoke_quietly(client: &ControlClient, session_id: &str) {
    let params = SelectorParams::default().with_selector(Some(session_id.to_owned()));
    if let Err(e) = client.call::<SessionsRevoke>(params).await {
        tracing::warn!("could not revoke the undelivered link {session_id}: {e}");
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
            device: None,
            app_id: None,
            relaunch: false,
            url: None,
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
