//! Session leases and settled results (issue #19): `sessions.lease` (§C8.41),
//! `sessions.release` (§C8.42), `tools.result` (§C8.43), the `lease_taken` / `lease_released`
//! events and the `lease` of a [`SessionSummary`](super::SessionSummary) (§C10.9, §C10.10).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Obj, ParamError, ToolsCallResult, UnknownValue, is_valid_call_id};
use crate::jsonrpc::ErrorObject;

/// Shortest lease, milliseconds (§C8.41).
pub const MIN_LEASE_TTL_MS: u64 = 1_000;
/// Longest lease, milliseconds: one hour (§C8.41).
pub const MAX_LEASE_TTL_MS: u64 = 3_600_000;
/// A lease's TTL when `ttlMs` is absent: one minute (§C8.41).
pub const DEFAULT_LEASE_TTL_MS: u64 = 60_000;
/// Longest `tools.result` wait, milliseconds (§C8.43).
pub const MAX_RESULT_WAIT_MS: u64 = 600_000;

fn is_false(b: &bool) -> bool {
    !*b
}

/// Who holds a lease: the holding connection's `daemon.hello` client name and its peer pid,
/// each when known (§C10.9).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct LeaseHolder {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

impl LeaseHolder {
    pub fn new(client: Option<String>, pid: Option<u32>) -> Self {
        Self { client, pid }
    }
}

/// A session's lease as `sessions.list`, `sessions.describe`, `daemon.status` and the
/// `session_leased` error report it (§C9.1, §C10.9).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SessionLease {
    pub holder: LeaseHolder,
    /// Unix seconds, rounded up.
    pub expires_at: u64,
}

impl SessionLease {
    pub fn new(holder: LeaseHolder, expires_at: u64) -> Self {
        Self { holder, expires_at }
    }
}

params! {
    /// `sessions.lease` params (§C8.41).
    #[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    pub struct SessionsLeaseParams {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(length(min = 1, max = 128)))]
        "selector" => pub selector: Option<String> => with_selector,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(range(min = 1000, max = 3600000)))]
        "ttlMs" => pub ttl_ms: Option<u64> => with_ttl_ms,
        #[serde(default, skip_serializing_if = "is_false")]
        "steal" => pub steal: bool => with_steal,
    }
}

impl SessionsLeaseParams {
    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        Ok(Self {
            selector: p.selector(Self::SELECTOR)?,
            ttl_ms: p.integer(Self::TTL_MS, MIN_LEASE_TTL_MS, MAX_LEASE_TTL_MS)?,
            steal: p.boolean(Self::STEAL)?.unwrap_or(false),
        })
    }

    /// `ttlMs`, defaulting to [`DEFAULT_LEASE_TTL_MS`].
    pub fn ttl_ms(&self) -> u64 {
        self.ttl_ms.unwrap_or(DEFAULT_LEASE_TTL_MS)
    }
}

/// `sessions.lease` result (§C8.41).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SessionsLeaseResult {
    pub session_id: String,
    pub alias: String,
    pub holder: LeaseHolder,
    /// Unix seconds, rounded up.
    pub expires_at: u64,
    pub ttl_ms: u64,
    /// This connection already held the lease: the call extended it.
    pub renewed: bool,
    /// With `steal`: the holder the lease was taken from; absent when there was none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stolen_from: Option<LeaseHolder>,
}

impl SessionsLeaseResult {
    pub fn new(
        session_id: impl Into<String>,
        alias: impl Into<String>,
        lease: SessionLease,
        ttl_ms: u64,
        renewed: bool,
        stolen_from: Option<LeaseHolder>,
    ) -> Self {
        Self {
            session_id: session_id.into(),
            alias: alias.into(),
            holder: lease.holder,
            expires_at: lease.expires_at,
            ttl_ms,
            renewed,
            stolen_from,
        }
    }
}

/// `sessions.release` result (§C8.42): `released` is `false` when this connection held no
/// lease on the session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SessionsReleaseResult {
    pub session_id: String,
    pub alias: String,
    pub released: bool,
}

impl SessionsReleaseResult {
    pub fn new(session_id: impl Into<String>, alias: impl Into<String>, released: bool) -> Self {
        Self {
            session_id: session_id.into(),
            alias: alias.into(),
            released,
        }
    }
}

params! {
    /// `tools.result` params (§C8.43).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
    pub struct ToolsResultParams {
        #[cfg_attr(feature = "schemas", schemars(pattern(r"^[A-Za-z0-9_-]{1,128}$")))]
        "callId" => pub call_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(feature = "schemas", schemars(range(max = 600000)))]
        "waitMs" => pub wait_ms: Option<u64> => with_wait_ms,
    }
}

impl ToolsResultParams {
    pub fn new(call_id: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            wait_ms: None,
        }
    }

    pub fn validate(params: Option<&Value>) -> Result<Self, ParamError> {
        let p = Obj::params(params, Self::KEYS)?;
        let call_id = p.pattern(
            Self::CALL_ID,
            is_valid_call_id,
            "must match ^[A-Za-z0-9_-]{1,128}$",
        )?;
        Ok(Self {
            call_id: p.required(Self::CALL_ID, call_id)?,
            wait_ms: p.integer(Self::WAIT_MS, 0, MAX_RESULT_WAIT_MS)?,
        })
    }
}

wire_enum! {
    /// `tools.result` `state` (§C8.43).
    CallResultState { Running = "running", Ok = "ok", Error = "error" }
}

/// `tools.result` result (§C8.43): `running` while the call is in flight; once settled, `ok`
/// with the `tools.call` result in `response`, or `error` with its error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolsResultResult {
    pub call_id: String,
    pub state: CallResultState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<ToolsCallResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemas", schemars(with = "Option<Value>"))]
    pub error: Option<ErrorObject>,
    /// Unix milliseconds when the call settled; absent while running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled_at: Option<u64>,
}

impl ToolsResultResult {
    pub fn running(call_id: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            state: CallResultState::Running,
            response: None,
            error: None,
            settled_at: None,
        }
    }

    pub fn settled(
        call_id: impl Into<String>,
        outcome: Result<ToolsCallResult, ErrorObject>,
        settled_at: u64,
    ) -> Self {
        let (state, response, error) = match outcome {
            Ok(r) => (CallResultState::Ok, Some(r), None),
            Err(e) => (CallResultState::Error, None, Some(e)),
        };
        Self {
            call_id: call_id.into(),
            state,
            response,
            error,
            settled_at: Some(settled_at),
        }
    }
}

wire_enum! {
    /// Why a lease ended (`lease_released` `reason`, §C13.1).
    LeaseEndReason {
        Released = "released",
        Expired = "expired",
        Disconnected = "disconnected",
        Stolen = "stolen",
        SessionEnded = "session_ended",
    }
}

/// `lease_taken` data (§C13.1): the new holder and expiry; `stolenFrom` after a steal.
/// A renewal emits no event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct LeaseTakenData {
    pub holder: LeaseHolder,
    /// Unix seconds, rounded up.
    pub expires_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stolen_from: Option<LeaseHolder>,
}

impl LeaseTakenData {
    pub fn new(lease: SessionLease, stolen_from: Option<LeaseHolder>) -> Self {
        Self {
            holder: lease.holder,
            expires_at: lease.expires_at,
            stolen_from,
        }
    }
}

/// `lease_released` data (§C13.1): the holder that lost the lease and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemas", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct LeaseReleasedData {
    pub holder: LeaseHolder,
    pub reason: LeaseEndReason,
}

impl LeaseReleasedData {
    pub fn new(holder: LeaseHolder, reason: LeaseEndReason) -> Self {
        Self { holder, reason }
    }
}
