//! What every built-in shares (§M1, §M10.1): the persistent control connection with its
//! daemon features and tool cache, the consent channel, the project environment and options,
//! and the request helpers for cancellation and protocol revision. Depends on no built-in.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use appduct_client::client::ControlClient;
use appduct_client::command_runner::CommandRunner;
use appduct_protocol::control::features;
use appduct_protocol::control::{SelectorParams, SessionSummary, SessionsDescribe};
use appduct_protocol::errors::ErrorType;
use rmcp::RoleServer;
use rmcp::model::ProtocolVersion;
use rmcp::service::RequestContext;
use tokio::sync::Mutex;

use crate::connector::DaemonConnector;
use crate::error::ToolFailure;
use crate::identity;
use crate::options::BridgeOptions;
use crate::project::{ProjectEnv, RootsCache};
use crate::tool_cache::ToolCache;

/// Whether a request runs on 2026-07-28 (or later).
pub fn is_2026(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// The consent channel a request would use (§M10.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsentChannel {
    Elicitation,
    InputRequired,
    None,
}

impl ConsentChannel {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Elicitation => "elicitation",
            Self::InputRequired => "input_required",
            Self::None => "none",
        }
    }
}

/// The failure of a request the client cancelled; rmcp never writes it (§M12).
pub fn cancelled_failure() -> ToolFailure {
    ToolFailure::new(
        ErrorType::ToolCancelled,
        "the request was cancelled by the client",
    )
}

/// Runs `step` unless the request is cancelled first; a request already cancelled does not
/// start it (§M12: every long step selects on the cancel token). Dropping `step` must be
/// harmless: use it for lookups, not for steps whose effect needs undoing.
pub async fn unless_cancelled<T>(
    context: &RequestContext<RoleServer>,
    step: impl Future<Output = Result<T, ToolFailure>>,
) -> Result<T, ToolFailure> {
    tokio::select! {
        biased;
        () = context.ct.cancelled() => Err(cancelled_failure()),
        r = step => r,
    }
}

/// Form-mode elicitation declared in this request's capabilities: `elicitation: {}` or
/// `elicitation.form`; url-only means no channel (§M2.2).
pub fn declares_form_elicitation(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// The state every built-in reads, one per bridge.
pub(crate) struct BridgeContext {
    pub connector: Arc<dyn DaemonConnector>,
    pub options: BridgeOptions,
    pub env: ProjectEnv,
    /// Runs `adb` and `xcrun` for `appduct_connect` (ARCHITECTURE.md#test-layers).
    pub runner: Arc<dyn CommandRunner>,
    pub roots: RootsCache,
    control: Mutex<Option<Control>>,
    /// A client that rejected the `mode` tag of `elicitation/create` (`-32602`) has no consent
    /// channel from then on (§M2.2); other failures count for one call only (§M10.3).
    pub elicitation_broken: AtomicBool,
    /// MCP tasks of this connection (§M19); served by the stdio framing only.
    pub tasks: Arc<crate::tasks::Tasks>,
}

struct Control {
    client: ControlClient,
    /// `daemon.hello` features, learned on first need.
    features: Option<Vec<String>>,
    /// The tool cache, bound to this connection's subscription.
    cache: CacheSlot,
}

impl Control {
    fn new(client: ControlClient) -> Self {
        Self {
            client,
            features: None,
            cache: CacheSlot::Unopened,
        }
    }
}

/// The tool cache of one connection: subscribed on the first `appduct_call_tool`.
enum CacheSlot {
    Unopened,
    Open(Arc<ToolCache>),
    /// The subscription failed: this connection works without the cache.
    Unavailable,
}

impl std::fmt::Debug for BridgeContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("connector", &self.connector)
            .field("options", &self.options)
            .field("runner", &self.runner)
            .finish_non_exhaustive()
    }
}

impl BridgeContext {
    pub fn new(
        connector: Arc<dyn DaemonConnector>,
        options: BridgeOptions,
        env: ProjectEnv,
        runner: Arc<dyn CommandRunner>,
    ) -> Self {
        Self {
            connector,
            options,
            env,
            runner,
            roots: RootsCache::default(),
            control: Mutex::new(None),
            elicitation_broken: AtomicBool::new(false),
            tasks: Arc::default(),
        }
    }

    /// Installs an already open control connection (the host's startup connection).
    pub async fn set_control(&self, client: ControlClient) {
        *self.control.lock().await = Some(Control::new(client));
    }

    /// The persistent control connection, reconnecting (connect-or-spawn) when it closed.
    pub async fn control(&self) -> Result<ControlClient, ToolFailure> {
        let mut slot = self.control.lock().await;
        Ok(self.open_control(&mut slot).await?.client.clone())
    }

    async fn open_control<'s>(
        &self,
        slot: &'s mut Option<Control>,
    ) -> Result<&'s mut Control, ToolFailure> {
        if let Some(c) = slot.as_ref()
            && !c.client.is_open()
        {
            *slot = None;
        }
        if slot.is_none() {
            let client = self
                .connector
                .connect(true)
                .await
                .map_err(|e| ToolFailure::from_client(&e))?;
            *slot = Some(Control::new(client));
        }
        slot.as_mut()
            .ok_or_else(|| ToolFailure::new(ErrorType::InternalError, "no control connection"))
    }

    /// [`BridgeContext::control`] with its tool cache (`tool_cache`), subscribed on first need; `None`
    /// when the subscription failed, and the connection then works without it.
    pub async fn control_with_cache(
        &self,
    ) -> Result<(ControlClient, Option<Arc<ToolCache>>), ToolFailure> {
        let mut slot = self.control.lock().await;
        let control = self.open_control(&mut slot).await?;
        let cache = match &control.cache {
            CacheSlot::Open(cache) => Some(cache.clone()),
            CacheSlot::Unavailable => None,
            CacheSlot::Unopened => match ToolCache::subscribe(control.client.clone()).await {
                Ok(cache) => {
                    let cache = Arc::new(cache);
                    control.cache = CacheSlot::Open(cache.clone());
                    Some(cache)
                }
                Err(e) => {
                    tracing::debug!("the tool cache is off for this connection: {e}");
                    control.cache = CacheSlot::Unavailable;
                    None
                }
            },
        };
        Ok((control.client.clone(), cache))
    }

    /// Whether the daemon advertises MRTR consent records (`consent.records`).
    pub async fn has_consent_records(&self) -> bool {
        let Ok(client) = self.control().await else {
            return false;
        };
        {
            let slot = self.control.lock().await;
            if let Some(f) = slot.as_ref().and_then(|c| c.features.as_ref()) {
                return f.iter().any(|f| f == features::CONSENT_RECORDS);
            }
        }
        let found = match client
            .handshake("appduct-mcp", identity::SERVER_VERSION)
            .await
        {
            Ok(info) => info.features,
            Err(e) => {
                // Not cached: the next call that needs the features asks again.
                tracing::debug!("daemon.hello failed: {e}");
                return false;
            }
        };
        let has = found.iter().any(|f| f == features::CONSENT_RECORDS);
        if let Some(c) = self.control.lock().await.as_mut()
            && c.client.is_open()
        {
            c.features = Some(found);
        }
        has
    }

    /// Whether the daemon has `consent.records`, learnt without spawning (`appduct_status`,
    /// §M8.9): the features of the open persistent connection, else a `daemon.hello` on
    /// `status` (the status check's own connection), else — no daemon runs — `true`, because
    /// the daemon a call would spawn is this version's.
    pub async fn consent_records_without_spawn(&self, status: Option<&ControlClient>) -> bool {
        let open = {
            let slot = self.control.lock().await;
            match slot.as_ref() {
                Some(c) if c.client.is_open() => match &c.features {
                    Some(f) => return f.iter().any(|f| f == features::CONSENT_RECORDS),
                    None => true,
                },
                _ => false,
            }
        };
        if open {
            return self.has_consent_records().await;
        }
        let Some(client) = status else {
            return true;
        };
        match client
            .handshake("appduct-mcp", identity::SERVER_VERSION)
            .await
        {
            Ok(info) => info.features.iter().any(|f| f == features::CONSENT_RECORDS),
            Err(e) => {
                tracing::debug!("daemon.hello failed: {e}");
                false
            }
        }
    }

    /// The channel for a `"prompt"` tool in this request (§M10.1).
    pub async fn consent_channel(&self, context: &RequestContext<RoleServer>) -> ConsentChannel {
        if !declares_form_elicitation(context) {
            return ConsentChannel::None;
        }
        if is_2026(context) {
            if self.has_consent_records().await {
                ConsentChannel::InputRequired
            } else {
                ConsentChannel::None
            }
        } else if self.elicitation_broken.load(Ordering::Relaxed) {
            ConsentChannel::None
        } else {
            ConsentChannel::Elicitation
        }
    }

    /// Resolves a selector once (§M7).
    pub async fn resolve(
        &self,
        client: &ControlClient,
        selector: Option<&str>,
    ) -> Result<SessionSummary, ToolFailure> {
        client
            .call::<SessionsDescribe>(
                SelectorParams::default().with_selector(selector.map(str::to_owned)),
            )
            .await
            .map_err(|e| ToolFailure::from_client(&e))
    }
}
