//! The link-connect flow both frontends run, `appduct sessions link` (§L6.3 steps 4–7) and the
//! bridge's `appduct_connect` (§M8.1): refuse a loopback address for a physical iPhone,
//! detect the device, mint a link with `link.create`, compose its deep link (or web link and
//! script), deliver it, and revoke a minted link that a later step failed or a cancel stopped
//! (§L6.4, §M12). Argument parsing and rendering stay with each frontend; both compose
//! byte-identical links and run the same argument vectors.
//!
//! The flow is entered whole, so the order of its steps is written once and no caller can mint
//! a link without the revoke-on-failure and cancel guarantees: [`LinkFlow::open_on_device`]
//! (reachability, detection, mint, deep link, delivery), [`LinkFlow::open_web`] (mint, web link
//! and script) and [`LinkFlow::mint_native`] (mint and deep link, for a QR code or no target).

use std::future::Future;
use std::path::Path;

use appduct_protocol::control::{
    DaemonStatus, LinkCreate, LinkCreateParams, LinkCreateResult, NoParams, SelectorParams,
    SessionsRevoke,
};
use appduct_protocol::link::{ComposeError, compose_web_link, web_script};
use tokio_util::sync::CancellationToken;

use crate::client::{ClientError, ControlClient};
use crate::command_runner::CommandRunner;
use crate::delivery::{self, DeepLinkError, Delivery, DeliveryError, DeviceTarget};

/// Why the flow stopped. Whenever a link had been minted, it was revoked first.
#[derive(Debug, thiserror::Error)]
pub enum LinkFlowError {
    /// `ios-device` while the daemon advertises a loopback address (§L6.3 step 4, SEC-43);
    /// nothing was minted. [`LinkFlowError::hint`] says what to change.
    #[error("The daemon advertises the loopback address {address}, which a device cannot reach")]
    LoopbackAdvertised { address: String },
    /// A control call (`daemon.status`, `link.create`) failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Detection or delivery failed (§L6.4).
    #[error(transparent)]
    Delivery(#[from] DeliveryError),
    /// The minted link's deep link could not be composed (a daemon bug, never the user's).
    #[error(transparent)]
    DeepLink(DeepLinkError),
    /// The web link or its connect script could not be composed.
    #[error("cannot compose the web link: {0}")]
    WebLink(ComposeError),
    /// The request was cancelled (only with [`LinkFlow::with_cancel`]).
    #[error("the request was cancelled")]
    Cancelled,
}

impl LinkFlowError {
    /// The remedy for [`LinkFlowError::LoopbackAdvertised`], naming `<state_dir>/config.json`
    /// when the state directory is known; `None` for the other errors.
    pub fn hint(&self, state_dir: Option<&Path>) -> Option<String> {
        let LinkFlowError::LoopbackAdvertised { .. } = self else {
            return None;
        };
        let config = match state_dir {
            Some(dir) => format!("{}/config.json", dir.display()),
            None => "the state directory's config.json".to_owned(),
        };
        Some(format!(
            "Set advertisedIp to this computer's LAN address in {config} and restart the daemon \
             (appduct daemon stop)."
        ))
    }
}

/// A composed web link (§D5.2): the page URL with `#appduct=<payload>` and the script that
/// connects an already loaded page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebLink {
    pub url: String,
    pub script: String,
}

/// A link opened on a device.
#[derive(Debug, Clone)]
pub struct DeliveredLink {
    pub link: LinkCreateResult,
    pub deep_link: String,
    /// The serial or UDID the link was opened on.
    pub device: String,
}

/// Which device of a target gets the link.
#[derive(Debug, Clone, Copy)]
pub enum DeviceChoice<'a> {
    /// Detect it (§L6.3 step 5): the requested serial or UDID, else the only one attached.
    Detect { requested: Option<&'a str> },
    /// Already found by the caller's own detection (the bridge's auto-detection).
    Detected(&'a str),
}

/// What to open where, for [`LinkFlow::open_on_device`].
#[derive(Debug, Clone, Copy)]
pub struct DeviceOpen<'a> {
    pub target: DeviceTarget,
    pub device: DeviceChoice<'a>,
    /// The app id (Android, physical iPhone); none for a simulator.
    pub app_id: Option<&'a str>,
    pub relaunch: bool,
    pub scheme: &'a str,
}

/// The flow on one open control connection, with the command runner for detection and delivery
/// and, for the bridge, the request's cancel token.
#[derive(Debug, Clone, Copy)]
pub struct LinkFlow<'a> {
    client: &'a ControlClient,
    runner: &'a dyn CommandRunner,
    cancel: Option<&'a CancellationToken>,
}

impl<'a> LinkFlow<'a> {
    pub fn new(client: &'a ControlClient, runner: &'a dyn CommandRunner) -> Self {
        LinkFlow {
            client,
            runner,
            cancel: None,
        }
    }

    /// Every long step selects on `token` (§M12): a cancelled request starts nothing more,
    /// and a link it already minted is revoked.
    pub fn with_cancel(mut self, token: &'a CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }

    fn is_cancelled(&self) -> bool {
        self.cancel.is_some_and(CancellationToken::is_cancelled)
    }

    /// Runs a lookup unless the request is cancelled first; dropping it must be harmless.
    async fn unless_cancelled<T>(
        &self,
        step: impl Future<Output = Result<T, LinkFlowError>>,
    ) -> Result<T, LinkFlowError> {
        match self.cancel {
            None => step.await,
            Some(token) => tokio::select! {
                biased;
                () = token.cancelled() => Err(LinkFlowError::Cancelled),
                r = step => r,
            },
        }
    }

    /// §L6.3 step 4: a physical iPhone cannot reach a loopback advertised address, so
    /// `ios-device` is refused before anything is minted. Other targets pass without a call.
    async fn check_reachable(&self, target: DeviceTarget) -> Result<(), LinkFlowError> {
        if target != DeviceTarget::IosDevice {
            return Ok(());
        }
        let status = self
            .unless_cancelled(async { Ok(self.client.call::<DaemonStatus>(NoParams {}).await?) })
            .await?;
        let address = status.advertised_address.address;
        if delivery::is_loopback_address(&address) {
            return Err(LinkFlowError::LoopbackAdvertised { address });
        }
        Ok(())
    }

    /// Device detection (§L6.3 step 5); a cancel drops it, which kills its helper process.
    async fn detect(
        &self,
        target: DeviceTarget,
        requested: Option<&str>,
    ) -> Result<String, LinkFlowError> {
        self.unless_cancelled(async { Ok(delivery::detect(self.runner, target, requested).await?) })
            .await
    }

    /// `link.create`. Not started for a cancelled request; not raced either, so the id of the
    /// link is always learnt, and a link minted for a request cancelled meanwhile is revoked.
    async fn mint(&self, params: LinkCreateParams) -> Result<LinkCreateResult, LinkFlowError> {
        if self.is_cancelled() {
            return Err(LinkFlowError::Cancelled);
        }
        let link = self.client.call::<LinkCreate>(params).await?;
        if self.is_cancelled() {
            self.revoke(&link.session_id).await;
            return Err(LinkFlowError::Cancelled);
        }
        Ok(link)
    }

    /// The shared deep-link composer; a link that cannot be composed is revoked.
    async fn compose_native(
        &self,
        scheme: &str,
        link: &LinkCreateResult,
    ) -> Result<String, LinkFlowError> {
        match delivery::deep_link(scheme, link) {
            Ok(deep_link) => Ok(deep_link),
            Err(e) => {
                self.revoke(&link.session_id).await;
                Err(LinkFlowError::DeepLink(e))
            }
        }
    }

    /// The web link on `page_url` and the connect script (§D5.2); a link that cannot be
    /// composed is revoked.
    async fn compose_web(
        &self,
        page_url: &str,
        link: &LinkCreateResult,
    ) -> Result<WebLink, LinkFlowError> {
        let composed = compose_web_link(page_url, &link.deep_link_payload).and_then(|url| {
            web_script(&link.deep_link_payload).map(|script| WebLink { url, script })
        });
        match composed {
            Ok(web) => Ok(web),
            Err(e) => {
                self.revoke(&link.session_id).await;
                Err(LinkFlowError::WebLink(e))
            }
        }
    }

    /// Delivers `d` (§L6.3 step 7, §L6.4); a failed delivery revokes the link. With a cancel
    /// token the delivery races it: a cancel stops the helper (dropped, so killed) and revokes
    /// the link, which was never opened.
    async fn deliver(
        &self,
        link: &LinkCreateResult,
        d: &Delivery<'_>,
    ) -> Result<(), LinkFlowError> {
        let outcome = match self.cancel {
            None => delivery::deliver(self.runner, d).await.map_err(Into::into),
            Some(token) => tokio::select! {
                biased;
                () = token.cancelled() => Err(LinkFlowError::Cancelled),
                r = delivery::deliver(self.runner, d) => r.map_err(Into::into),
            },
        };
        if outcome.is_err() {
            self.revoke(&link.session_id).await;
        }
        outcome
    }

    /// §L6.3 steps 4–7 for a device target: refuses a loopback address for a physical
    /// iPhone, detects the device (unless the caller already did), then mints a link with
    /// `params`, composes its deep link and opens it there. Nothing is minted before every
    /// check passed; whatever fails after minting revokes the link.
    pub async fn open_on_device(
        &self,
        params: LinkCreateParams,
        open: DeviceOpen<'_>,
    ) -> Result<DeliveredLink, LinkFlowError> {
        self.check_reachable(open.target).await?;
        let device = match open.device {
            DeviceChoice::Detect { requested } => self.detect(open.target, requested).await?,
            DeviceChoice::Detected(device) => device.to_owned(),
        };
        let (link, deep_link) = self.mint_native(params, open.scheme).await?;
        let d = Delivery {
            target: open.target,
            device: &device,
            app_id: open.app_id,
            relaunch: open.relaunch,
            deep_link: &deep_link,
            port: link.endpoint.port,
        };
        self.deliver(&link, &d).await?;
        Ok(DeliveredLink {
            link,
            deep_link,
            device,
        })
    }

    /// Mints a link with `params` and composes its web link on `page_url` and the connect
    /// script (§D5.2); a link that cannot be composed is revoked.
    pub async fn open_web(
        &self,
        params: LinkCreateParams,
        page_url: &str,
    ) -> Result<(LinkCreateResult, WebLink), LinkFlowError> {
        let link = self.mint(params).await?;
        let web = self.compose_web(page_url, &link).await?;
        Ok((link, web))
    }

    /// Mints a link with `params` and composes its deep link with `scheme`, for a QR code or a
    /// link printed without a target; a link that cannot be composed is revoked.
    pub async fn mint_native(
        &self,
        params: LinkCreateParams,
        scheme: &str,
    ) -> Result<(LinkCreateResult, String), LinkFlowError> {
        let link = self.mint(params).await?;
        let deep_link = self.compose_native(scheme, &link).await?;
        Ok((link, deep_link))
    }

    /// Discards a minted link that was not delivered (§L6.4); a failure is only logged.
    async fn revoke(&self, session_id: &str) {
        let params = SelectorParams::default().with_selector(Some(session_id.to_owned()));
        if let Err(e) = self.client.call::<SessionsRevoke>(params).await {
            tracing::warn!("could not revoke the undelivered link {session_id}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_refusal_names_advertised_ip_and_the_config_file() {
        let e = LinkFlowError::LoopbackAdvertised {
            address: "127.0.0.1".into(),
        };
        assert_eq!(
            e.to_string(),
            "The daemon advertises the loopback address 127.0.0.1, which a device cannot reach"
        );
        assert_eq!(
            e.hint(Some(Path::new("/home/u/.appduct"))).as_deref(),
            Some(
                "Set advertisedIp to this computer's LAN address in /home/u/.appduct/config.json \
                 and restart the daemon (appduct daemon stop)."
            )
        );
        assert!(e.hint(None).unwrap().contains("advertisedIp"));
        assert_eq!(LinkFlowError::Cancelled.hint(None), None);
    }
}
