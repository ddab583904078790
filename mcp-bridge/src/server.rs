//! The MCP handler (06 §6.1–§6.3): `ServerHandler` implemented by hand, dispatching the nine
//! built-ins, the `appduct://sessions` resource and the roots cache.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use appduct_daemon::client::{ClientError, ControlClient};
use appduct_daemon::seams::{CommandRunner, TokioCommandRunner};
use appduct_protocol::control::features;
use appduct_protocol::control::{SelectorParams, SessionSummary, SessionsDescribe, SessionsList};
use appduct_protocol::errors::ErrorType;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CustomRequest, CustomResult, ErrorCode,
    ErrorData, InitializeResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{RoleServer, ServerHandler};
use serde_json::json;
use tokio::sync::Mutex;

use crate::catalog;
use crate::connector::DaemonConnector;
use crate::error::ToolFailure;
use crate::options::BridgeOptions;
use crate::project::{ProjectEnv, RootsCache};
use crate::tool_cache::ToolCache;
use crate::{args, builtins, call, connect, status, wait};

/// URI of the one resource (06 §6.9).
pub const SESSIONS_URI: &str = "appduct://sessions";
/// `ttlMs` of the fixed lists on 2026-07-28 (06 §6.2.2).
pub const LIST_TTL_MS: u64 = 3_600_000;

/// The supported protocol revisions, exactly (06 §6.2.1).
pub fn supported_versions() -> Vec<ProtocolVersion> {
    vec![
        ProtocolVersion::V_2025_06_18,
        ProtocolVersion::V_2025_11_25,
        ProtocolVersion::V_2026_07_28,
    ]
}

/// Whether a request runs on 2026-07-28 (or later).
pub fn is_2026(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// The consent channel a request would use (06 §6.10.1).
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

/// The failure of a request the client cancelled; rmcp never writes it (06 §6.12).
pub fn cancelled_failure() -> ToolFailure {
    ToolFailure::new(
        ErrorType::ToolCancelled,
        "the request was cancelled by the client",
    )
}

/// Runs `step` unless the request is cancelled first; a request already cancelled does not
/// start it (06 §6.12: every long step selects on the cancel token). Dropping `step` must be
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
/// `elicitation.form`; url-only means no channel (06 §6.2.2).
pub fn declares_form_elicitation(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

pub(crate) struct Inner {
    pub connector: Arc<dyn DaemonConnector>,
    pub options: BridgeOptions,
    pub env: ProjectEnv,
    /// Runs `adb` and `xcrun` for `appduct_connect` (01 §9.1).
    pub runner: Arc<dyn CommandRunner>,
    pub roots: RootsCache,
    control: Mutex<Option<Control>>,
    /// A client that rejected the `mode` tag of `elicitation/create` (`-32602`) has no consent
    /// channel from then on (06 §6.2.2); other failures count for one call only (§6.10.3).
    pub elicitation_broken: AtomicBool,
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

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("connector", &self.connector)
            .field("options", &self.options)
            .field("runner", &self.runner)
            .finish_non_exhaustive()
    }
}

impl Inner {
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

    /// [`Inner::control`] with its tool cache (`tool_cache`), subscribed on first need; `None`
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
            .handshake("appduct-mcp", catalog::SERVER_VERSION)
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
    /// 06 §6.8.9): the features of the open persistent connection, else a `daemon.hello` on
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
            .handshake("appduct-mcp", catalog::SERVER_VERSION)
            .await
        {
            Ok(info) => info.features.iter().any(|f| f == features::CONSENT_RECORDS),
            Err(e) => {
                tracing::debug!("daemon.hello failed: {e}");
                false
            }
        }
    }

    /// The channel for a `"prompt"` tool in this request (06 §6.10.1).
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

    /// Resolves a selector once (06 §6.7).
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

/// The bridge: an rmcp server handler over an injected daemon connector.
#[derive(Clone, Debug)]
pub struct Bridge {
    pub(crate) inner: Arc<Inner>,
}

impl Bridge {
    pub fn new(connector: Arc<dyn DaemonConnector>, options: BridgeOptions) -> Self {
        Self::with_env(connector, options, ProjectEnv::from_process())
    }

    /// [`Bridge::new`] with explicit process inputs (tests).
    pub fn with_env(
        connector: Arc<dyn DaemonConnector>,
        options: BridgeOptions,
        env: ProjectEnv,
    ) -> Self {
        Self::with_runner(connector, options, env, Arc::new(TokioCommandRunner::new()))
    }

    /// [`Bridge::with_env`] with the runner of delivery commands injected (tests script it).
    pub fn with_runner(
        connector: Arc<dyn DaemonConnector>,
        options: BridgeOptions,
        env: ProjectEnv,
        runner: Arc<dyn CommandRunner>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                connector,
                options,
                env,
                runner,
                roots: RootsCache::default(),
                control: Mutex::new(None),
                elicitation_broken: AtomicBool::new(false),
            }),
        }
    }

    /// Installs an already open control connection (the host's startup connection).
    pub async fn set_control(&self, client: ControlClient) {
        *self.inner.control.lock().await = Some(Control::new(client));
    }

    async fn dispatch(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let name = request.name.as_ref();
        let Some(builtin) = catalog::builtin(name) else {
            return not_a_builtin(name).into_result().into();
        };
        let args = match args::validate(&builtin.input_schema, request.arguments.as_ref()) {
            Ok(a) => a,
            Err(f) => return f.into_result().into(),
        };
        let inner = &self.inner;
        // `connect` and `call_tool` handle a cancel step by step (a minted link is revoked, a
        // sent call is cancelled); every step of the others can simply be dropped (06 §6.12).
        let outcome = match name {
            catalog::CONNECT => connect::run(inner, context, &args).await,
            catalog::CALL_TOOL => return call::run(inner, context, request, &args).await,
            catalog::WAIT_FOR_SESSION => {
                unless_cancelled(context, wait::for_session(inner, context, &args)).await
            }
            catalog::LIST_TOOLS => {
                unless_cancelled(context, builtins::list_tools(inner, &args)).await
            }
            catalog::DESCRIBE_TOOL => {
                unless_cancelled(context, builtins::describe_tool(inner, &args)).await
            }
            catalog::LIST_EVENTS => {
                unless_cancelled(context, builtins::list_events(inner, &args)).await
            }
            catalog::EVENTS => unless_cancelled(context, builtins::events(inner, &args)).await,
            catalog::WAIT_FOR_EVENT => {
                unless_cancelled(context, wait::for_event(inner, context, &args)).await
            }
            catalog::STATUS => unless_cancelled(context, status::run(inner, context, &args)).await,
            _ => Err(not_a_builtin(name)),
        };
        match outcome {
            Ok(value) => crate::error::success(value, None).into(),
            Err(f) => f.into_result().into(),
        }
    }
}

/// Any name that is not a built-in (06 §6.6).
fn not_a_builtin(name: &str) -> ToolFailure {
    ToolFailure::new(
        ErrorType::ToolNotFound,
        format!(
            "\"{name}\" is not an appduct MCP tool. App tools are not MCP tools: find them with appduct_list_tools and run them with appduct_call_tool"
        ),
    )
    .with_details(json!({ "name": name }))
}

fn sessions_resource() -> Resource {
    Resource::new(SESSIONS_URI, "sessions")
        .with_title("Live sessions")
        .with_description("Sessions the appduct daemon holds, as JSON.")
        .with_mime_type("application/json")
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(catalog::capabilities())
            .with_server_info(catalog::server_info())
            .with_instructions(catalog::INSTRUCTIONS)
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Owned(supported_versions())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        check_cursor(request.as_ref())?;
        let mut result = ListToolsResult::with_all_items(catalog::tools());
        if is_2026(&context) {
            result = result
                .with_ttl_ms(LIST_TTL_MS)
                .with_cache_scope(CacheScope::Public);
        }
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(self.dispatch(&request, &context).await)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        check_cursor(request.as_ref())?;
        let mut result = ListResourcesResult::with_all_items(vec![sessions_resource()]);
        if is_2026(&context) {
            result = result
                .with_ttl_ms(LIST_TTL_MS)
                .with_cache_scope(CacheScope::Public);
        }
        Ok(result)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri != SESSIONS_URI {
            // rmcp turns -32002 into -32602 on 2026-07-28 (06 §6.9).
            return Err(ErrorData::resource_not_found(
                format!("unknown resource {}", request.uri),
                Some(json!({"uri": request.uri})),
            ));
        }
        let unreachable = |e: &ClientError| {
            ErrorData::internal_error(
                format!("cannot read {SESSIONS_URI}: {e}"),
                Some(json!({"type": "connection_error"})),
            )
        };
        let client = match self.inner.control().await {
            Ok(c) => c,
            Err(f) => {
                return Err(ErrorData::internal_error(
                    format!("cannot read {SESSIONS_URI}: {}", f.message),
                    Some(json!({"type": "connection_error"})),
                ));
            }
        };
        let sessions = client
            .call::<SessionsList>(Default::default())
            .await
            .map_err(|e| unreachable(&e))?;
        let text = serde_json::to_string(&sessions).unwrap_or_else(|_| "[]".to_owned());
        let mut result = ReadResourceResult::new(vec![ResourceContents::TextResourceContents {
            uri: SESSIONS_URI.to_owned(),
            mime_type: Some("application/json".to_owned()),
            text,
            meta: None,
        }]);
        if is_2026(&context) {
            result = result.with_ttl_ms(0).with_cache_scope(CacheScope::Private);
        }
        Ok(result.into())
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        self.inner.roots.invalidate();
    }

    /// rmcp hands over as a custom request both unknown methods and known ones whose params do
    /// not fit the MCP schema (a `tools/call` without `name`, `arguments: "x"`). The first get
    /// `-32601`, the second `-32602` (06 §6.6).
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        if served_method(&request.method, is_2026(&context)) {
            let reason = params_error(&request);
            return Err(ErrorData::invalid_params(
                format!("invalid params for {}: {reason}", request.method),
                None,
            ));
        }
        Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            request.method,
            None,
        ))
    }
}

/// The requests the bridge serves (06 §6.3); `ping` only on the older revisions.
fn served_method(method: &str, on_2026: bool) -> bool {
    match method {
        "initialize"
        | "tools/list"
        | "tools/call"
        | "resources/list"
        | "resources/read"
        | "resources/templates/list"
        | "server/discover" => true,
        "ping" => !on_2026,
        _ => false,
    }
}

/// Why the params of a served method did not parse, for the `-32602` message.
fn params_error(request: &CustomRequest) -> String {
    let Some(params) = request.params.as_ref() else {
        return "params are missing".to_owned();
    };
    let parsed = match request.method.as_str() {
        "tools/call" => serde_json::from_value::<CallToolRequestParams>(params.clone()).err(),
        "resources/read" => {
            serde_json::from_value::<ReadResourceRequestParams>(params.clone()).err()
        }
        _ => None,
    };
    match parsed {
        Some(e) => e.to_string(),
        None if !params.is_object() => "params must be an object".to_owned(),
        None => "params do not match the request schema".to_owned(),
    }
}

/// A list cursor other than `""` is `-32602` (06 §6.3): the lists have one page.
fn check_cursor(request: Option<&PaginatedRequestParams>) -> Result<(), ErrorData> {
    match request.and_then(|r| r.cursor.as_deref()) {
        None | Some("") => Ok(()),
        Some(c) => Err(ErrorData::invalid_params(
            format!("unknown cursor {c:?}: this list has one page"),
            None,
        )),
    }
}
