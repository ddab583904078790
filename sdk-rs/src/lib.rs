//! `appduct-sdk`: the Rust SDK for apps (Tauri, Bevy, command-line tools) that expose tools to
//! appduct (ARCHITECTURE.md#crates, §D16).
//!
//! - [`Client`] parses and validates a link, connects (`wss://` with the daemon's SPKI pin
//!   checked inside the TLS handshake, before any frame; or loopback `ws://` for the web
//!   listener; or, for a sealed link, a Noise channel inside plain `ws://`, issue #23), claims,
//!   and resumes with full-jitter backoff within the grace window.
//! - Tools ([`Client::register_tool`]) and events ([`Client::declare_event`],
//!   [`Client::post_event`]) are sent as snapshots after every ack and as deltas after.
//! - Handlers are async closures taking the call's `args` and a [`CallContext`] with a
//!   cancellation token, progress reporting and the app-side deadline.
//!
//! Every protocol rule lives in the sans-IO [`core::Core`]; [`Client`] is its tokio driver.
//! The wire itself (frames, descriptors, links, pins, limits) comes from `appduct-protocol`.
//!
//! ```no_run
//! # async fn demo(link: &str) -> Result<(), Box<dyn std::error::Error>> {
//! use appduct_sdk::{Client, ToolError};
//! use serde_json::{json, Value};
//!
//! let client = Client::builder().device(None, Some("Playground"), Some("Linux")).build()?;
//! client.register_tool(
//!     &json!({"name": "echo", "description": "Echo the text back.",
//!             "input_schema": {"type": "object"}, "output_schema": {"type": "object"}}),
//!     |args: Value, _ctx| async move { Ok::<_, ToolError>(json!({"echo": args})) },
//! )?;
//! let session = client.connect(link).await?;
//! println!("connected as {}", session.alias);
//! # Ok(()) }
//! ```

pub mod cancel;
pub mod client;
pub mod clock;
pub mod core;
pub mod refusal;
pub mod registry;
pub mod sealed;
#[cfg(feature = "testing")]
pub mod testing;
pub mod transport;
pub mod trust;
pub mod types;

pub use appduct_protocol::control::Transport;
/// Registry declarations a tool may carry (device.md §D18), for
/// [`Client::register_tool_descriptor`].
pub use appduct_protocol::declarations::{RiskLevel, TestCases};
pub use appduct_protocol::frames::ToolErrorType;
pub use appduct_protocol::pin::SpkiPin;
pub use cancel::CancellationToken;
pub use client::{
    BuildError, CallContext, Client, ClientBuilder, ConnectOptions, ContentHandlerFuture,
    ContentToolHandler, EventRegistration, HandlerFuture, PendingConnect, ToolHandler,
    ToolRegistration,
};
pub use clock::{Clock, TokioClock};
pub use trust::{Trust, is_private_lan_address};
pub use types::{
    ClientEvent, ClientState, ConnectError, ErrorPhase, ErrorReport, EventError, RegistrationError,
    SessionEvent, SessionInfo, ToolError, ToolOutput,
};
pub use types::{ContentBlock, ImageMimeType};
