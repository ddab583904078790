//! `appduct sessions ls | revoke | link` (05 §6).

use std::net::{IpAddr, Ipv4Addr};

use appduct_daemon::client::ControlClient;
use appduct_daemon::seams::CommandRunner;
use appduct_daemon::state_dir::StateDir;
use appduct_protocol::control::{
    DaemonStatus, LinkCreate, LinkCreateParams, LinkCreateResult, NoParams, SelectorParams,
    SessionsList, SessionsRevoke, Transport,
};
use appduct_protocol::link::{compose_deep_link, compose_web_link, web_script};
use appduct_protocol::pin::SpkiPin;
use time::OffsetDateTime;

use crate::command::{Globals, LinkRequest, OpenTarget};
use crate::connect::{self, Contact};
use crate::delivery::{self, Delivery};
use crate::error::CliError;
use crate::output::{Output, Success};
use crate::qr;
use crate::resolve::{self, Platform, ResolveEnv};
use crate::views;

/// Variable naming the default Android device (05 §2.2).
pub const ANDROID_SERIAL_ENV: &str = "ANDROID_SERIAL";

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
        .call::<SessionsRevoke>(SelectorParams {
            selector: selector.map(str::to_owned),
        })
        .await
        .map_err(|e| connect::client_error(&e, &dir))?;
    Ok(views::sessions_revoke(&result))
}

/// Everything `sessions link` decides before contacting the daemon (05 §6.3 steps 1–3).
#[derive(Debug, Clone, PartialEq, Eq)]
struct LinkPlan {
    scheme: Option<String>,
    app_id: Option<String>,
    /// `--device`, else `ANDROID_SERIAL` for Android; shape already checked.
    requested_device: Option<String>,
}

fn plan(req: &LinkRequest, dir: &StateDir) -> Result<LinkPlan, CliError> {
    let env = ResolveEnv::from_process(dir.path())?;
    let scheme = match req.open {
        Some(OpenTarget::Web) => None,
        _ => Some(resolve::resolve_scheme(req.scheme.as_deref(), &env)?),
    };
    let app_id = match req.open {
        Some(OpenTarget::Android) => Some(resolve::resolve_app_id(
            req.app_id.as_deref(),
            Platform::Android,
            &env,
        )?),
        Some(OpenTarget::IosDevice) => Some(resolve::resolve_app_id(
            req.app_id.as_deref(),
            Platform::Ios,
            &env,
        )?),
        _ => None,
    };
    let requested_device = match (req.open, &req.device) {
        (Some(target), Some(device)) => {
            delivery::check_device_shape(target, device, "--device")?;
            Some(device.clone())
        }
        (Some(OpenTarget::Android), None) => {
            match std::env::var(ANDROID_SERIAL_ENV)
                .ok()
                .filter(|s| !s.is_empty())
            {
                Some(serial) => {
                    delivery::check_device_shape(OpenTarget::Android, &serial, ANDROID_SERIAL_ENV)?;
                    Some(serial)
                }
                None => None,
            }
        }
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
    let loopback = matches!(req.open, Some(OpenTarget::Android | OpenTarget::IosSim));
    LinkCreateParams {
        ttl_seconds: req.ttl_seconds,
        address_override: (loopback && req.transport == Transport::Native)
            .then_some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        transport: Some(req.transport),
    }
}

/// The deep link of a minted link: with the pin for the native transport, without for web.
pub fn deep_link(scheme: &str, link: &LinkCreateResult) -> Result<String, CliError> {
    let pin = match link.transport {
        Transport::Native => Some(SpkiPin::parse(&link.pin).map_err(|e| {
            CliError::internal(format!(
                "the daemon sent an invalid pin \"{}\": {e}",
                link.pin
            ))
        })?),
        Transport::Web => None,
    };
    compose_deep_link(scheme, &link.deep_link_payload, pin.as_ref())
        .map_err(|e| CliError::internal(format!("cannot compose the deep link: {e}")))
}

/// `sessions link` (05 §6.3): every check before minting; a failed delivery revokes the link.
pub async fn link(
    globals: &Globals,
    out: &Output,
    req: &LinkRequest,
    runner: &dyn CommandRunner,
) -> Result<Success, CliError> {
    let plan = plan(req, &globals.state_dir()?)?;
    let (dir, client) = connect::connect(globals, out, Contact::Full, true).await?;
    let rpc = |e| connect::client_error(&e, &dir);
    if req.open == Some(OpenTarget::IosDevice) {
        let status = client
            .call::<DaemonStatus>(NoParams {})
            .await
            .map_err(rpc)?;
        let loopback = status
            .advertised_address
            .address
            .parse::<IpAddr>()
            .is_ok_and(|a| a.is_loopback());
        if loopback {
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
    let device = match req.open {
        Some(target @ (OpenTarget::Android | OpenTarget::IosSim | OpenTarget::IosDevice)) => {
            Some(delivery::detect(runner, target, plan.requested_device.as_deref()).await?)
        }
        _ => None,
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
                revoke_quietly(&client, &link.session_id).await;
                Err(CliError::internal(format!(
                    "cannot compose the web link: {e}"
                )))
            }
        };
    }
    let scheme = plan.scheme.as_deref().unwrap_or_default();
    let deep_link = match deep_link(scheme, &link) {
        Ok(d) => d,
        Err(e) => {
            revoke_quietly(&client, &link.session_id).await;
            return Err(e);
        }
    };
    let delivered = match (req.open, device) {
        (Some(target), Some(device)) => {
            let d = Delivery {
                target,
                device: &device,
                app_id: plan.app_id.as_deref(),
                relaunch: req.relaunch,
                deep_link: &deep_link,
                port: link.endpoint.port,
            };
            if let Err(e) = delivery::deliver(runner, &d).await {
                revoke_quietly(&client, &link.session_id).await;
                return Err(delivery::delivery_failure(e));
            }
            Some(views::Delivery {
                target: target.as_str().to_owned(),
                device,
            })
        }
        _ => None,
    };
    let mut success = views::link_created(&link, &deep_link, delivered.as_ref(), now);
    if req.qr && !out.flags.json {
        match qr::terminal_qr(&deep_link) {
            Ok(text) => {
                success.human.push('\n');
                success.human.push_str(&text);
            }
            Err(e) => out.notice(&format!("No QR code: {e}")),
        }
    }
    Ok(success)
}

/// Revokes a link minted by this command after a later step failed (05 §6.3 step 7).
async fn revoke_quietly(client: &ControlClient, session_id: &str) {
    let params = SelectorParams {
        selector: Some(session_id.to_owned()),
    };
    if let Err(e) = client.call::<SessionsRevoke>(params).await {
        tracing::warn!("could not revoke the undelivered link {session_id}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
