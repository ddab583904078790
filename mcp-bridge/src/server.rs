//! The MCP handler (§M1–§M3): `ServerHandler` implemented by hand, dispatching the nine
//! built-ins through the registry, the `appduct://sessions` resource and the roots cache.

use std::borrow::Cow;
use std::sync::Arc;

use appduct_client::client::{ClientError, ControlClient};
use appduct_client::command_runner::{CommandRunner, TokioCommandRunner};
use appduct_protocol::control::SessionsList;
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

use crate::builtins::Call;
use crate::connector::DaemonConnector;
use crate::context::{BridgeContext, is_2026};
use crate::error::ToolFailure;
use crate::options::BridgeOptions;
use crate::project::ProjectEnv;
use crate::{args, catalog};

/// URI of the one resource (§M9).
pub const SESSIONS_URI: &str = "appduct://sessions";
/// `ttlMs` of the fixed lists on 2026-07-28 (§M2.2).
pub const LIST_TTL_MS: u64 = 3_600_000;

/// The supported protocol revisions, exactly (§M2.1).
pub fn supported_versions() -> Vec<ProtocolVersion> {
    vec![
        ProtocolVersion::V_2025_06_18,
        ProtocolVersion::V_2025_11_25,
        ProtocolVersion::V_2026_07_28,
    ]
}

/// The bridge: an rmcp server handler over an injected daemon connector.
#[derive(Clone, Debug)]
pub struct Bridge {
    pub(crate) inner: Arc<BridgeContext>,
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
            inner: Arc::new(BridgeContext::new(connector, options, env, runner)),
        }
    }

    /// Installs an already open control connection (the host's startup connection).
    pub async fn set_control(&self, client: ControlClient) {
        self.inner.set_control(client).await;
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
        let call = Call {
            bridge: &self.inner,
            context,
            request,
            args,
        };
        match (builtin.handler)(call).await {
            Ok(response) => response,
            Err(f) => f.into_result().into(),
        }
    }
}

/// Any name that is not a built-in (§M6).
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
            // rmcp turns -32002 into -32602 on 2026-07-28 (§M9).
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
    /// `-32601`, the second `-32602` (§M6).
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

/// The requests the bridge serves (§M3); `ping` only on the older revisions.
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

/// A list cursor other than `""` is `-32602` (§M3): the lists have one page.
fn check_cursor(request: Option<&PaginatedRequestParams>) -> Result<(), ErrorData> {
    match request.and_then(|r| r.cursor.as_deref()) {
        None | Some("") => Ok(()),
        Some(c) => Err(ErrorData::invalid_params(
            format!("unknown cursor {c:?}: this list has one page"),
            None,
        )),
    }
}
