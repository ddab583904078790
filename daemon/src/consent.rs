//! MRTR consent records behind `consent.create` / `consent.take` (§C8.14, §M10.4).
//!
//! A record keeps a pending call while a person answers an MCP input request. Records live in
//! memory only, are single use, expire `ttlMs` after creation (tokio time, so paused-clock tests
//! drive it), and at most 256 are open (the oldest is evicted). Handles are secrets: the store
//! keeps only their SHA-256, and neither records nor handles are ever logged.
//!
//! Lookup (§C8.14): the map is keyed by the first 16 bytes of the handle's SHA-256 and each
//! entry keeps the whole 32-byte digest, which `take` compares in constant time. The map's
//! variable-time hashing and `==` only ever see a prefix of a digest of the caller's own input,
//! which says nothing about any stored handle; the full digest decides, without an early exit.

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

/// The first half of a [`HandleDigest`]: what the map is keyed by.
type LookupKey = [u8; 16];

struct Entry {
    /// The full digest, compared in constant time after the lookup by its first half.
    digest: HandleDigest,
    record: ConsentRecord,
    expires: Instant,
}

#[derive(Default)]
struct Records {
    by_key: HashMap<LookupKey, Entry>,
    /// Keys in creation order, oldest first, for eviction.
    order: VecDeque<LookupKey>,
}

impl Records {
    fn remove(&mut self, key: &LookupKey) -> Option<Entry> {
        let entry = self.by_key.remove(key)?;
        self.order.retain(|k| k != key);
        Some(entry)
    }

    /// Drops expired records, so they never count against the cap.
    fn purge_expired(&mut self, now: Instant) {
        let by_key = &mut self.by_key;
        self.order.retain(|key| match by_key.get(key) {
            Some(entry) if entry.expires > now => true,
            _ => {
                by_key.remove(key);
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
    // Records and handles stay out of logs (§C8.14): only the count is shown.
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
                    records.by_key.remove(&oldest);
                }
                None => break,
            }
        }
        let key = lookup_key(&digest);
        records.by_key.insert(
            key,
            Entry {
                digest,
                record: params.record(),
                expires: now + Duration::from_millis(ttl_ms),
            },
        );
        records.order.push_back(key);
        drop(records);

        Ok(ConsentCreateResult::new(
            handle,
            now_unix_ms.saturating_add(ttl_ms) / 1000,
        ))
    }

    /// `consent.take`: returns the record and deletes it (single use). Unknown, evicted,
    /// expired or already taken → `-32000` `invalid_request` with `details.reason: "expired"`.
    pub fn take(&self, handle: &str) -> Result<ConsentRecord, ErrorObject> {
        let digest = digest_of(handle);
        let key = lookup_key(&digest);
        let now = Instant::now();
        let mut records = self.lock();
        // Found by half of the handle's hash, accepted only if the whole hash matches in
        // constant time (see the module docs). A mismatch leaves the other record in place.
        let matches = records
            .by_key
            .get(&key)
            .is_some_and(|entry| bool::from(entry.digest.ct_eq(&digest)));
        if !matches {
            return Err(expired());
        }
        match records.remove(&key) {
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

fn lookup_key(digest: &HandleDigest) -> LookupKey {
    let mut key = [0; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

/// `cr_` + base64url (no padding) of 32 CSPRNG bytes.
fn new_handle() -> Result<String, ErrorObject> {
    let bytes = appduct_client::random::random_bytes::<TOKEN_BYTES>()
        .map_err(|_| ErrorObject::internal("The operating system's random source failed"))?;
    Ok(format!("{HANDLE_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> ConsentCreateParams {
        ConsentCreateParams::new(
            "q3VfZ0xkR2ptTnB4",
            "reset_counter",
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
        )
    }

    /// The lookup key only finds a candidate; the full digest decides. A handle whose digest
    /// shares the stored entry's first half but not the rest is refused, and the record stays.
    #[tokio::test]
    async fn a_lookup_key_match_is_not_enough() {
        let store = ConsentStore::new();
        let created = store
            .create(&params(), 0, |_| true)
            .unwrap_or_else(|e| panic!("{e:?}"));
        let real = digest_of(&created.handle);
        let probe = "cr_someone-elses-guess";
        let probe_digest = digest_of(probe);
        {
            // Move the record under the probe's lookup key, keeping its own full digest, as if
            // the two digests shared their first half.
            let mut records = store.lock();
            let entry = records
                .remove(&lookup_key(&real))
                .unwrap_or_else(|| panic!("the record is stored under its lookup key"));
            assert_ne!(entry.digest, probe_digest);
            records.by_key.insert(lookup_key(&probe_digest), entry);
            records.order.push_back(lookup_key(&probe_digest));
        }
        let refused = store.take(probe);
        assert!(refused.is_err());
        assert_eq!(store.len(), 1, "a failed take must not consume the record");

        // The entry's own digest is what matches: put it back and the real handle works.
        {
            let mut records = store.lock();
            let entry = records
                .remove(&lookup_key(&probe_digest))
                .unwrap_or_else(|| panic!("still stored"));
            records.by_key.insert(lookup_key(&real), entry);
            records.order.push_back(lookup_key(&real));
        }
        assert!(store.take(&created.handle).is_ok());
        assert!(store.is_empty());
    }

    #[test]
    fn the_lookup_key_is_the_first_half_of_the_digest() {
        let digest = digest_of("cr_x");
        assert_eq!(lookup_key(&digest)[..], digest[..16]);
        assert_ne!(lookup_key(&digest_of("cr_y")), lookup_key(&digest));
    }
}
