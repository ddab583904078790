//! The appduct MCP bridge (`appduct mcp`, docs/mcp.md): a stdio MCP server on rmcp that is a thin
//! client of the daemon. It adds the MCP surface (ten built-ins and one resource), argument
//! hygiene, the error contract, consent (elicitation / MRTR), progress and cancellation
//! mapping, and project resolution.
//!
//! Entry points: [`serve`] runs the bridge over any rmcp transport with an injected
//! [`DaemonConnector`]; [`run_stdio`] is the whole `appduct mcp` host except logging setup.

mod app_events;
mod app_tools;
pub mod args;
mod builtins;
pub mod catalog;
pub mod connector;
pub mod content;
mod context;
pub mod deferred_log;
pub mod error;
pub mod framing;
pub mod http;
mod identity;
pub mod options;
pub mod progress;
pub mod project;
pub mod server;
pub mod stdio;
pub mod tasks;
mod tool_cache;
mod wait;

pub use connector::{DaemonConnector, SocketConnector};
pub use error::{PUBLISHED_ERROR_TYPES, ToolFailure};
pub use framing::LineTransport;
pub use options::BridgeOptions;
pub use server::Bridge;
pub use stdio::{StdioOptions, run_stdio, serve_stdio};

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::service::{RunningService, ServerInitializeError, serve_server};
use rmcp::transport::IntoTransport;

/// Serves the bridge over `transport` until the client goes away (§M1).
pub async fn serve<T, E, A>(
    transport: T,
    connector: Arc<dyn DaemonConnector>,
    options: BridgeOptions,
) -> Result<RunningService<RoleServer, Bridge>, ServerInitializeError>
where
    T: IntoTransport<RoleServer, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    serve_server(Bridge::new(connector, options), transport).await
}
