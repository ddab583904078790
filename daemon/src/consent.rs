//! MRTR consent records behind `consent.create` / `consent.take` (03 §9.14, 06 §6.10.4).
//!
//! A record keeps a pending call while a person answers an MCP input request. Records live in
//! memory only, are single use, expire `ttlMs` after creation (tokio time, so paused-clock tests
//! drive it), and at most 256 are open (the oldest is evicted). Handles are secrets: the store
//! keeps only their SHA-256, and neither records nor handles are ever logged.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use appduct_protocol::control::{ConsentCreateParams, ConsentCreateResult, ConsentRecord};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::jsonrpc::ErrorObject;
use appduct_protocol::limits::{MAX_CONSENT_RECORDS, TOKEN_BYTES};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq as _;
use tokio::time::Instant;

/// Prefix of every consent handle.
pub const HANDLE_PREFIX: &str = "cr_";

type HandleDigest = [u8; 32];

struct Entry {
    /// Kept to compare in constant time after the map lookup.
    digest: HandleDigest,
    record: ConsentRecord,
    expires: Instant,
}

#[derive(Default)]
struct Records {
    by_digest: HashMap<HandleDigest, Entry>,
    /// Digests in creation order, oldest first, for eviction.
    order: VecDeque<HandleDigest>,
}

impl Records {
    fn remove(&mut self, digest: &HandleDigest) -> Option<Entry> {
        let entry = self.by_digest.remove(digest)?;
        self.order.retain(|d| d != digest);
        Some(entry)
    }

    /// Drops expired records, so they never count against the cap.
    fn purge_expired(&mut self, now: Instant) {
        let by_digest = &mut self.by_digest;
        self.order.retain(|digest| match by_digest.get(digest) {
            Some(entry) if entry.expires > now => true,
            _ => {
                by_digest.remove(digest);
                false
            }
        });
    }
}

/// The daemon's consent records.
pub struct ConsentStore {
    records: Mutex<Records>,
    capacity: usize,
}

impl fmt::Debug for ConsentStore {
    // Records and handles stay out of logs (03 §9.14): only the count is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsentStore")
            .field("open", &self.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl Default for ConsentStore {
    fn default() -> Self {
        Self::new()
    }
}

impl ConsentStore {
    /// A store with the cap of 256 open records.
    pub fn new() -> Self {
        Self::with_capacity(MAX_CONSENT_RECORDS)
    }

    /// A store with another cap (tests; at least 1).
    pub fn with_capacity(capacity: usize) -> Self {
        ConsentStore {
            records: Mutex::new(Records::default()),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Records> {
        // The table stays consistent across a panic elsewhere; keep serving it.
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Open, unexpired records.
    pub fn len(&self) -> usize {
        let mut records = self.lock();
        records.purge_expired(Instant::now());
        records.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `consent.create`: stores the record of validated `params` and returns its handle.
    /// `is_live` answers whether `params.sessionId` is the exact id of a live session (the
    /// session engine decides); otherwise the answer is `unknown_session`. `now_unix_ms` is the
    /// wall clock for `expiresAt`; expiry itself runs on tokio time.
    pub fn create(
        &self,
        params: &ConsentCreateParams,
        now_unix_ms: u64,
        is_live: impl FnOnce(&str) -> bool,
    ) -> Result<ConsentCreateResult, ErrorObject> {
        if !is_live(&params.session_id) {
            return Err(ErrorObject::application(
                ErrorType::UnknownSession,
                format!("No live session has the id {:?}", params.session_id),
            )
            .with_details(json!({ "sessionId": params.session_id })));
        }
        let ttl_ms = params.ttl_ms();
        let handle = new_handle()?;
        let digest = digest_of(&handle);
        let now = Instant::now();

        let mut records = self.lock();
        records.purge_expired(now);
        while records.order.len() >= self.capacity {
            match records.order.pop_front() {
                Some(oldest) => {
                    records.by_digest.remove(&oldest);
                }
                None => break,
            }
        }
        records.by_digest.insert(
            digest,
            Entry {
                digest,
                record: params.record(),
                expires: now + Duration::from_millis(ttl_ms),
            },
        );
        records.order.push_back(digest);
        drop(records);

        Ok(ConsentCreateResult {
            handle,
            expires_at: now_unix_ms.saturating_add(ttl_ms) / 1000,
        })
    }

    /// `consent.take`: returns the record and deletes it (single use). Unknown, evicted,
    /// expired or already taken → `-32000` `invalid_request` with `details.reason: "expired"`.
    pub fn take(&self, handle: &str) -> Result<ConsentRecord, ErrorObject> {
        let digest = digest_of(handle);
        let now = Instant::now();
        let mut records = self.lock();
        // Looked up by the handle's hash, then compared in constant time: the time taken says
        // nothing about other handles (03 §9.14).
        let matches = records
            .by_digest
            .get(&digest)
            .is_some_and(|entry| bool::from(entry.digest.ct_eq(&digest)));
        if !matches {
            return Err(expired());
        }
        match records.remove(&digest) {
            Some(entry) if entry.expires > now => Ok(entry.record),
            _ => Err(expired()),
        }
    }
}

fn expired() -> ErrorObject {
    ErrorObject::application(
        ErrorType::InvalidRequest,
        "The consent record is unknown, expired or already used; call the tool again",
    )
    .with_details(json!({ "reason": "expired" }))
}

fn digest_of(handle: &str) -> HandleDigest {
    Sha256::digest(handle.as_bytes()).into()
}

/// `cr_` + base64url (no padding) of 32 CSPRNG bytes.
fn new_handle() -> Result<String, ErrorObject> {
    let bytes = crate::random::random_bytes::<TOKEN_BYTES>()
        .map_err(|_| ErrorObject::internal("The operating system's random source failed"))?;
    Ok(format!("{HANDLE_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
}
