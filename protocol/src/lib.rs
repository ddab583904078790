//! appduct v2 device protocol and appduct control-plane types.
//!
//! This crate is I/O-free: no sockets, no files, no async runtime. It holds every wire type,
//! codec and validator, so the daemon, the CLI, the MCP bridge and the Rust SDK share one
//! definition of the protocol. References: `docs/protocol/device.md` (device wire, §D) and
//! `docs/protocol/control.md` (control plane, §C).
//!
//! # Which types are `#[non_exhaustive]`
//!
//! Other crates build wire types through constructors, so the protocol can grow an optional
//! field without touching them (the additive style of rmcp's model types):
//!
//! - **Wire structs** (device frames, control params, results, event data, notifications,
//!   descriptors, the bootstrap payload, JSON-RPC envelopes) are `#[non_exhaustive]`. They are
//!   built with `new(required…)` and chained `with_*` setters for optional fields; an optional
//!   field's setter takes `T` or `Option<T>`. Fields stay public for reading and mutation.
//!   Control params declare each field's wire key once ([`control`]'s `params!`), and
//!   `validate` accepts exactly those keys, naming each through its generated constant.
//! - **Daemon snapshots** whose every field is required and which one daemon function fills
//!   (`HelloResult`, `StatusResult`, `SessionSummary`) stay exhaustive: a field added to the
//!   protocol must be filled there, and the struct literal is where the compiler says so; a
//!   positional constructor of ten same-typed counters and strings would invite silent swaps.
//! - **Closed value sets and sum types** stay exhaustive: the frame enums (`AppFrame`,
//!   `DaemonFrame`, the registry deltas), `EventData`, `AppEventData`, the wire enums of
//!   [`control`] (`EventKind`, `Transport`, …), [`errors::ErrorType`],
//!   [`errors::ToolErrorType`], [`close::CloseReason`], `Settlement`, `RequestId`, `Incoming`,
//!   `ServerMessage`, `ServerNotification`. Each is a table of the references, and the matches on them
//!   (exit codes, close codes, frame dispatch in the daemon and the SDK, renderers) are
//!   exhaustive on purpose: a new variant is a protocol change every consumer must handle, and a
//!   `_` arm would hide the places to change.
//! - **Error enums** that callers only display or test for one variant (`bootstrap`,
//!   `link` (scheme and compose errors), `descriptor`, `ids`, `pin`, `glob`, `jsonrpc::MessageError`,
//!   `control::EventDecodeError`) are `#[non_exhaustive]`, so a new failure reason is additive.
//!   `link::LinkError` and `frames::DaemonMessageError` stay exhaustive: the SDK maps each
//!   link error to its connect error code, and the fuzz body checks each daemon message error;
//!   so do `sealed::SealedError` and `sealed::Malformed` (each maps to one close, and the fuzz
//!   model checks each).
//!   Error structs built only here (`frames::Rejection`, `control::NotificationError`) are
//!   `#[non_exhaustive]` too; `Rejection` has `new`.
//! - Validated newtypes and ids (`SessionId`, `CallId`, tokens, `SpkiPin`, `Schema`, `Glob`)
//!   need nothing: their fields are private and their constructors validate. Field-less and
//!   constant shapes (`NoParams`, `Empty`, `OkResult`) and the framer's `Overflow` / `FrameTooLarge` errors stay as they are.

/// `with_*` setters for the optional fields of a `#[non_exhaustive]` wire struct. Each takes
/// anything that converts into the field's type: for an `Option<T>` field, `T` or `Option<T>`.
macro_rules! setters {
    ($name:ident { $($(#[$doc:meta])* $setter:ident => $field:ident: $ty:ty),* $(,)? }) => {
        impl $name {
            $(
                $(#[$doc])*
                #[must_use]
                pub fn $setter(mut self, value: impl Into<$ty>) -> Self {
                    self.$field = value.into();
                    self
                }
            )*
        }
    };
}

pub mod bootstrap;
pub mod canonical;
pub mod close;
pub mod content;
pub mod control;
pub mod declarations;
pub mod descriptor;
pub mod errors;
pub mod frames;
pub mod glob;
pub mod ids;
pub mod jsonrpc;
pub mod limits;
pub mod link;
pub mod parts;
pub mod pin;
pub mod preview;
#[cfg(feature = "schemas")]
pub mod schema;
pub mod sealed;
pub mod signature;
pub mod text;
