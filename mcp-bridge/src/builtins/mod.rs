//! The built-ins (§M8): one module each, holding its definition, its typed arguments, its
//! typed output and its handler, and the one registry both `tools/list` and `tools/call` read
//! (through [`crate::catalog`]). Adding a built-in is a module and a line in [`BUILTINS`].

mod builtin;
pub mod call_result;
pub mod call_tool;
pub mod connect;
pub mod describe_tool;
pub mod events;
pub mod list_events;
pub mod list_tools;
pub mod status;
pub mod wait_for_event;
pub mod wait_for_session;

pub use builtin::{Call, Entry, Handler};

/// Every built-in, in `tools/list` order (§M8).
pub const BUILTINS: &[Entry] = &[
    connect::BUILTIN,
    wait_for_session::BUILTIN,
    list_tools::BUILTIN,
    describe_tool::BUILTIN,
    call_tool::BUILTIN,
    list_events::BUILTIN,
    events::BUILTIN,
    wait_for_event::BUILTIN,
    status::BUILTIN,
    call_result::BUILTIN,
];
