//! Every numeric bound of the device protocol and the control plane, in one place
//! (§D14, §C2, §C15, §C8). Daemon options default to these values; tests may lower them.

/// Largest text message either side may send, in UTF-8 bytes (§D6).
pub const MAX_MESSAGE_BYTES: usize = 262_144;
/// Largest compact-JSON `args` of a `tools.call`, so the `tool_call` frame fits (§C8.9).
pub const MAX_ARGS_BYTES: usize = 261_120;

/// Pre-claim timeout from TCP accept, in milliseconds (§D6).
pub const PRE_CLAIM_TIMEOUT_MS: u64 = 10_000;
/// Connections allowed in the pre-claim stage, per listener: the wss and the web listener each
/// have a budget of this size (§D6; issue #20 made it per listener). When it is full a newcomer
/// evicts the oldest pending connection that has not sent its first frame (SECURITY.md).
pub const MAX_PRECLAIM_CONNECTIONS: usize = 128;
/// Pre-claim connections one non-loopback address may hold on the wss listener; the next one is
/// closed at accept, before TLS (project decision, SECURITY.md).
pub const MAX_PRECLAIM_PER_SOURCE: usize = 16;
/// Pre-claim slots of the wss listener that non-loopback peers can never take (project decision,
/// SECURITY.md): local apps and simulators get in without evicting anyone during a LAN flood.
pub const PRECLAIM_LOOPBACK_RESERVE: usize = 16;
/// Keepalive: missed pongs after which the daemon terminates the connection (§D6).
pub const MAX_MISSED_PONGS: u32 = 2;
/// Time the daemon waits for the peer's close frame after sending its own (§D6).
pub const CLOSE_HANDSHAKE_WAIT_MS: u64 = 1_000;

/// Default `keepaliveIntervalSeconds` (§S2.2).
pub const DEFAULT_KEEPALIVE_INTERVAL_S: u32 = 15;
/// Default `graceSeconds` (§S2.2).
pub const DEFAULT_GRACE_S: u32 = 600;
/// Default `linkTtlSeconds` (§S2.2).
pub const DEFAULT_LINK_TTL_S: u32 = 300;
/// Largest `ttlSeconds` of `link.create` (§C8.4).
pub const MAX_LINK_TTL_S: u32 = 86_400;
/// A link burns on this failed claim (§D9.5).
pub const MAX_FAILED_CLAIMS: u32 = 5;
/// Claimable (pending, unexpired) links one daemon holds at once; `link.create` beyond it fails
/// `-32000 invalid_request` with `details.reason: "too_many_pending_links"` (project decision:
/// what control clients ask the daemon to hold stays bounded).
pub const MAX_PENDING_LINKS: usize = 1_024;

/// Identifier length bounds, UTF-16 code units (§D7.1).
pub const MIN_IDENTIFIER_LEN: usize = 1;
pub const MAX_IDENTIFIER_LEN: usize = 128;
/// Free-text bound, UTF-16 code units (§D7.1).
pub const MAX_FREE_TEXT_LEN: usize = 4_096;
/// Device field bound, UTF-16 code units (§D7.1).
pub const MAX_DEVICE_FIELD_LEN: usize = 256;
/// Tool name and group segment length (§D8.1).
pub const MAX_TOOL_NAME_LEN: usize = 64;
/// Tools or events one registry may hold (§D8.3).
pub const MAX_REGISTRY_ENTRIES: usize = 2_048;

/// Bytes one session's tool and event registries may hold together, counted as
/// [`crate::descriptor::ToolDescriptor::held_bytes`] (names, descriptions, groups and schemas
/// as their compact JSON text). A snapshot or delta that would pass it is refused like any
/// invalid registry, `1008 invalid_registry` with the prior registry kept (project decision,
/// issue #20). Frames of 256 KiB and 2,048 entries per kind let an app make the daemon hold
/// about 1 GiB for one session; 8 MiB is over ten times a large real registry (500 tools with
/// 8 KiB of schemas each is 4 MiB) and keeps one session's `tools.list` page, descriptors plus
/// envelopes, under [`MAX_CONTROL_REPLY_BYTES`].
pub const MAX_REGISTRY_BYTES: usize = 8 * 1_048_576;

/// Call deadline default and clamp, milliseconds (§D8.1, §C10.3).
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 10_000;
pub const MIN_CALL_TIMEOUT_MS: u64 = 1_000;
pub const MAX_CALL_TIMEOUT_MS: u64 = 600_000;
/// After a cancel, the daemon settles the call itself if the app stays silent (§C10.6).
pub const CANCEL_GRACE_MS: u64 = 2_000;

/// Reconnect backoff: full jitter, base and ceiling in milliseconds (§D13.2).
pub const BACKOFF_BASE_MS: u64 = 500;
pub const BACKOFF_CAP_MS: u64 = 30_000;

/// Random bytes of identifiers (§D9.5).
pub const SESSION_ID_BYTES: usize = 12;
pub const TOKEN_BYTES: usize = 32;
pub const CALL_WIRE_ID_BYTES: usize = 16;

/// Leaf certificate validity, back-dating and renewal threshold, seconds (§D3.2).
pub const LEAF_VALIDITY_S: u64 = 604_800;
pub const LEAF_BACKDATE_S: u64 = 300;
pub const LEAF_RENEW_BEFORE_S: u64 = 86_400;

/// Control plane: inbound line cap in bytes, excluding the terminator (§C2).
pub const CONTROL_LINE_CAP_BYTES: usize = 1_048_576;
/// Control plane: queued outbound bytes above which a subscriber is disconnected (§C15).
pub const SUBSCRIBER_BUFFER_CAP_BYTES: usize = 4_194_304;
/// Control plane: `tools.call` requests one connection may have in flight; one more is answered
/// at once `-32000 invalid_request` with `details.reason: "too_many_calls_in_flight"` and nothing
/// is sent (project decision: what a control connection holds stays bounded, and the daemon keeps
/// reading it, so a hang-up cancels its calls and `tools.cancel` is never held back).
pub const MAX_CALLS_IN_FLIGHT: usize = 1_024;
/// Control plane: `tools.result` requests one connection may have waiting (`waitMs`) at once;
/// one more is answered at once `-32000 invalid_request` with `details.reason:
/// "too_many_result_waits"` (project decision, review19 L5: 20,000 waits on one connection
/// held 29 MB).
pub const MAX_RESULT_WAITS: usize = 256;
/// Control plane: `tools.result` requests the whole daemon may have waiting at once, all
/// connections together; one more is refused as past [`MAX_RESULT_WAITS`], with `details.scope:
/// "daemon"` (project decision, session 10's attack: 2,000 connections × 256 waits held 2.7 GB).
pub const MAX_RESULT_WAITS_TOTAL: usize = 4_096;
/// Control plane: longest method name a `-32601` reply quotes, in UTF-16 code units; a longer
/// one is cut and ends in `…` (project decision: a hostile line cannot inflate the reply).
pub const MAX_QUOTED_METHOD_LEN: usize = 64;
/// Control plane: largest reply line the daemon writes, in bytes (project decision, issue #20).
/// Replies that list app-controlled data page by bytes below it (`tools.list` ends its page
/// early and returns `nextOffset`); any other reply that would pass it is answered
/// `-32000 invalid_request` with `details: {reason: "too_large", limit}`. Well under
/// [`CLIENT_MIN_LINE_BYTES`], so every conforming client reads every reply.
/// Issue #17 raised it from 16 MiB so a `tools.call` reply holding a maximal content result
/// (a 16 MiB body re-encoded is at most about 22.4 MiB of JSON) fits (§D17.2, §C8.9).
pub const MAX_CONTROL_REPLY_BYTES: usize = 24 * 1_048_576;
/// Control plane: lines clients must accept (§C2).
pub const CLIENT_MIN_LINE_BYTES: usize = 64 * 1_048_576;
/// Control protocol spoken by this crate, and the oldest one the daemon serves (§C8.1).
pub const CONTROL_PROTOCOL: u32 = 1;
pub const MIN_CONTROL_PROTOCOL: u32 = 1;

/// Socket paths longer than this fail before bind or connect (§C1.1).
pub const MAX_SOCKET_PATH_BYTES: usize = 100;
/// `tools.list` filter length, characters (§C8.8).
pub const MAX_TOOLS_FILTER_LEN: usize = 256;
/// Event name glob length, characters (§C13.5).
pub const MAX_GLOB_LEN: usize = 4_096;
/// Open consent records, and their lifetime bounds in milliseconds (§C8.14).
pub const MAX_CONSENT_RECORDS: usize = 256;
pub const DEFAULT_CONSENT_TTL_MS: u64 = 600_000;

/// Deepest nesting of arrays and objects in any value inside a frame (`result`, `payload`, a
/// schema, …) and in `tools.call` `args`, the value itself being level 1 (project decision).
/// The daemon wraps app values in JSON-RPC envelopes a few levels deep; this cap keeps every
/// line it writes well inside serde_json's default recursion limit of 128.
pub const MAX_JSON_DEPTH: usize = 64;

/// Largest integer every JSON implementation represents exactly (§D1).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Content results (issue #17, §D17.1): blocks one `content` array may hold.
pub const MAX_CONTENT_BLOCKS: usize = 64;
/// Content results: UTF-8 bytes of one text block's `text`.
pub const MAX_CONTENT_TEXT_BYTES: usize = 1_048_576;
/// Result parts (issue #17, §D17.2): decoded bytes of one `tool_result_part`'s `data`. Its
/// base64 (174,764 characters) plus the other fields stays well under [`MAX_MESSAGE_BYTES`].
pub const MAX_PART_DATA_BYTES: usize = 131_072;
/// Result parts: default of `results.maxBytes` (§S2.2), the largest body one call may send in
/// parts and the most one session may have buffered across its transfers.
pub const DEFAULT_RESULT_MAX_BYTES: u64 = 16 * 1_048_576;
/// Result parts: the range `results.maxBytes` accepts.
pub const MIN_RESULT_MAX_BYTES: u64 = 262_144;
pub const MAX_RESULT_MAX_BYTES: u64 = 16 * 1_048_576;
/// Result parts: default of `results.maxBufferedBytes` (§S2.2), the most all sessions of one
/// daemon may have buffered together.
pub const DEFAULT_RESULT_MAX_BUFFERED_BYTES: u64 = 64 * 1_048_576;
/// Result parts: the range `results.maxBufferedBytes` accepts (at least one maximal body).
pub const MIN_RESULT_MAX_BUFFERED_BYTES: u64 = 262_144;
pub const MAX_RESULT_MAX_BUFFERED_BYTES: u64 = 1_024 * 1_048_576;

/// Most calls one `calls.list` reply lists (§C8.40): the oldest; `truncated` says more exist.
/// Each entry is well under 1 KiB, so the reply stays far below [`MAX_CONTROL_REPLY_BYTES`].
pub const MAX_CALLS_LISTED: usize = 1000;
