//! Pending links (§D5, §D9.2 T1 and T3–T9, §D9.5): minting a link for `link.create` (session id,
//! claim token, `expiresAt`, endpoint and bootstrap payload), and the table of pending links and
//! tombstones that claims are checked against.
//!
//! The table is plain data: the session engine keeps it under the same lock as the live
//! sessions, so a claim checks links and sessions in one step and a new id never collides with
//! either. The engine also runs the TTL timers (tokio time) and emits the bus events.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use appduct_protocol::bootstrap::{
    BootstrapPayload, EncodeError, STATIC_KEY_BYTES, SealedBootstrapPayload,
};
use appduct_protocol::control::{Endpoint, LinkCreateParams, LinkCreateResult, Transport};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::ids::{ClaimToken, SessionId};
use appduct_protocol::jsonrpc::ErrorObject;
use appduct_protocol::limits::{MAX_FAILED_CLAIMS, SESSION_ID_BYTES, TOKEN_BYTES};
use appduct_protocol::link::{RefusalReason, verify_refusal_proof};
use serde_json::json;
use tokio::task::AbortHandle;

use crate::address::AddressSource;
use crate::address::AdvertisedAddress;
use crate::tls::{TlsState, sealed_key_text};

// ---------------------------------------------------------------------------------------------
// Randomness
// ---------------------------------------------------------------------------------------------

pub use appduct_client::random::{RandomError, random_bytes};

// ---------------------------------------------------------------------------------------------
// Where links point
// ---------------------------------------------------------------------------------------------

/// Why a link could not be minted. All of these are daemon faults (`internal_error`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error(transparent)]
    Random(#[from] RandomError),
    #[error("could not re-mint the leaf certificate: {0}")]
    Tls(String),
    #[error("could not encode the bootstrap payload: {0}")]
    Encode(#[from] EncodeError),
    #[error("could not mint a session id that is not already in use")]
    IdSpace,
}

impl From<LinkError> for ErrorObject {
    fn from(e: LinkError) -> Self {
        ErrorObject::internal(format!("Could not create a link: {e}"))
    }
}

/// `link.create` refused (project decision,
/// [`MAX_PENDING_LINKS`](appduct_protocol::limits::MAX_PENDING_LINKS)): `limit` claimable links
/// are already pending, or pending links and tombstones together reach twice `limit`. The
/// caller's fault, not the daemon's: `-32000 invalid_request` with `details.reason`, the same
/// details for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TooManyPendingLinks {
    #[error("{limit} links are already pending")]
    Pending { limit: usize },
    #[error("{pending} pending links and {tombstones} tombstones are held (at most {})", 2 * limit)]
    Held {
        limit: usize,
        pending: usize,
        tombstones: usize,
    },
}

impl From<TooManyPendingLinks> for ErrorObject {
    fn from(e: TooManyPendingLinks) -> Self {
        let (limit, message) = match e {
            TooManyPendingLinks::Pending { limit } => (
                limit,
                format!(
                    "Too many pending links: {limit} are waiting to be claimed; revoke one \
                     (sessions.revoke) or wait until one is claimed or expires"
                ),
            ),
            TooManyPendingLinks::Held {
                limit,
                pending,
                tombstones,
            } => (
                limit,
                format!(
                    "Too many links: {pending} are waiting to be claimed and {tombstones} \
                     expired ones are still remembered (at most {} together, pending at most \
                     {limit}); wait until expired links are forgotten, one TTL after they \
                     expired, or revoke a pending one (sessions.revoke)",
                    2 * limit
                ),
            ),
        };
        ErrorObject::application(ErrorType::InvalidRequest, message)
            .with_details(json!({ "reason": "too_many_pending_links", "limit": limit }))
    }
}

/// Admits one more link while fewer than `limit` links are `pending` and fewer than `2 × limit`
/// are held as pending links or tombstones. `pending` must count only claimable links (see
/// [`LinkTable::expire_passed`]); claimed, revoked and burned links are in neither count.
///
/// The second bound is what bounds memory: tombstones are forgotten by monotonic timers, so after
/// a wall-clock jump or a host suspend they can outlive the links' claimable time by far.
pub fn admit_pending(
    pending: usize,
    tombstones: usize,
    limit: usize,
) -> Result<(), TooManyPendingLinks> {
    if pending >= limit {
        Err(TooManyPendingLinks::Pending { limit })
    } else if pending.saturating_add(tombstones) >= limit.saturating_mul(2) {
        Err(TooManyPendingLinks::Held {
            limit,
            pending,
            tombstones,
        })
    } else {
        Ok(())
    }
}

/// What the daemon knows about its listeners when it mints a link.
pub trait LinkEnvironment: Send + Sync + fmt::Debug {
    /// The advertised address a native link carries (§D2.6), after re-minting the leaf when the
    /// address changed or the leaf is close to expiry (§D3.2: checked on every `link.create`).
    fn native_address(&self, now_unix_ms: u64) -> Result<IpAddr, LinkError>;
    /// Bound port of the `wss://` listener.
    fn wss_port(&self) -> u16;
    /// Bound port of the loopback web listener.
    fn web_port(&self) -> u16;
    /// The pin of the host key (`sha256/…`).
    fn pin(&self) -> String;
    /// The sealed transport's X25519 static public key (issue #23), which sealed links carry.
    fn sealed_key(&self) -> [u8; STATIC_KEY_BYTES];
}

/// The production environment: the TLS identity, the address seam and the bound ports.
#[derive(Debug)]
pub struct DaemonLinkEnv {
    tls: Arc<TlsState>,
    addresses: Arc<dyn AddressSource>,
    configured: Option<IpAddr>,
    wss_port: u16,
    web_port: u16,
}

impl DaemonLinkEnv {
    /// `configured` is `advertisedIp` from `config.json`.
    pub fn new(
        tls: Arc<TlsState>,
        addresses: Arc<dyn AddressSource>,
        configured: Option<IpAddr>,
        wss_port: u16,
        web_port: u16,
    ) -> Self {
        Self {
            tls,
            addresses,
            configured,
            wss_port,
            web_port,
        }
    }

    /// What the next native link would carry (`daemon.status.advertisedAddress`).
    pub fn advertised(&self) -> AdvertisedAddress {
        AdvertisedAddress::choose(self.configured, self.addresses.as_ref())
    }
}

impl LinkEnvironment for DaemonLinkEnv {
    fn native_address(&self, now_unix_ms: u64) -> Result<IpAddr, LinkError> {
        let address = self.advertised().address;
        self.tls
            .renew_if_needed(address, now_unix_ms)
            .map_err(|e| LinkError::Tls(e.to_string()))?;
        Ok(address)
    }

    fn wss_port(&self) -> u16 {
        self.wss_port
    }

    fn web_port(&self) -> u16 {
        self.web_port
    }

    fn pin(&self) -> String {
        self.tls.pin().to_string()
    }

    fn sealed_key(&self) -> [u8; STATIC_KEY_BYTES] {
        *self.tls.key().sealed_keys().public_key()
    }
}

/// A fixed environment for tests: no TLS, one address.
#[derive(Debug, Clone)]
pub struct StaticLinkEnv {
    pub address: IpAddr,
    pub wss_port: u16,
    pub web_port: u16,
    pub pin: String,
    pub sealed_key: [u8; STATIC_KEY_BYTES],
}

impl Default for StaticLinkEnv {
    fn default() -> Self {
        Self {
            address: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 20)),
            wss_port: 8443,
            web_port: 53120,
            pin: "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=".to_owned(),
            sealed_key: [0x5e; STATIC_KEY_BYTES],
        }
    }
}

impl LinkEnvironment for StaticLinkEnv {
    fn native_address(&self, _now_unix_ms: u64) -> Result<IpAddr, LinkError> {
        Ok(self.address)
    }

    fn wss_port(&self) -> u16 {
        self.wss_port
    }

    fn web_port(&self) -> u16 {
        self.web_port
    }

    fn pin(&self) -> String {
        self.pin.clone()
    }

    fn sealed_key(&self) -> [u8; STATIC_KEY_BYTES] {
        self.sealed_key
    }
}

// ---------------------------------------------------------------------------------------------
// Pending links
// ---------------------------------------------------------------------------------------------

/// A minted, not yet claimed link (PENDING).
pub struct PendingLink {
    pub transport: Transport,
    token: ClaimToken,
    /// Unix seconds.
    pub expires_at: u64,
    /// Wall-clock mint time; a claimed session reports it as `createdAt`.
    pub created_at_ms: u64,
    failures: u32,
    /// The TTL timer; aborted when the link leaves the table other than by expiring.
    timer: Option<AbortHandle>,
    /// Where the link points (address and port), for the hints of waits that time out.
    pub endpoint: Endpoint,
    /// The first `link_refused` an app sent for it (issue #23); the link stays claimable.
    pub refusal: Option<RefusalReason>,
}

impl fmt::Debug for PendingLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingLink")
            .field("transport", &self.transport)
            .field("expires_at", &self.expires_at)
            .field("failures", &self.failures)
            .field("refusal", &self.refusal)
            .finish_non_exhaustive()
    }
}

impl PendingLink {
    /// Failed claims counted so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Whether `token` (base64url) is this link's claim token, in constant time; nothing is
    /// counted (the plain route's cleartext check, issue #23).
    pub fn token_matches(&self, token: &str) -> bool {
        self.token.matches(token)
    }

    /// §D4.3: expired once `now_seconds >= expires_at`.
    pub fn is_expired(&self, now_unix_s: u64) -> bool {
        now_unix_s >= self.expires_at
    }
}

/// Outcome of checking a claim against the table (§D9.3 steps 1–3). Only `Valid` leaves the
/// link for the caller to [`take`](LinkTable::take); every other outcome is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimCheck {
    /// Right listener and token; the link is still in the table.
    Valid,
    /// Neither pending nor tombstoned.
    NotFound,
    /// T7: the TTL passed; the tombstone stays.
    Tombstone,
    /// T6 then T7: the link was still pending but the wall clock is at or past its `expiresAt`
    /// (its timer had not fired, e.g. after a host suspend). It is a tombstone now; the caller
    /// emits `link_expired`.
    Expired,
    /// T5: not counted, the link stays claimable.
    WrongTransport,
    /// T3: counted, the link stays claimable.
    InvalidToken,
    /// T4: the 5th failure; the link is gone.
    Burned,
}

/// Outcome of checking a `link_refused` frame against the table (issue #23).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalCheck {
    /// The proof verifies and this is the link's first refusal: recorded; the caller emits
    /// `link_refused`.
    Recorded,
    /// The proof verifies but a refusal was already recorded (the first one is kept).
    AlreadyRecorded,
    /// Not a pending link, or the proof does not verify: no effect at all.
    Invalid,
}

/// Pending links and tombstones, by session id.
#[derive(Debug, Default)]
pub struct LinkTable {
    pending: HashMap<String, PendingLink>,
    /// Expired ids, each with the timer that forgets it after the tombstone window (the link's
    /// TTL timer, which runs on), so shutdown can stop it.
    tombstones: HashMap<String, Option<AbortHandle>>,
}

impl LinkTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a freshly minted link.
    pub fn insert(&mut self, id: String, link: PendingLink) {
        self.pending.insert(id, link);
    }

    /// Attaches the TTL timer of a pending link (aborted if the link leaves early).
    pub fn set_timer(&mut self, id: &str, timer: AbortHandle) {
        match self.pending.get_mut(id) {
            Some(link) => link.timer = Some(timer),
            None => timer.abort(),
        }
    }

    /// Whether `id` is pending or tombstoned (taken for minting purposes).
    pub fn knows(&self, id: &str) -> bool {
        self.pending.contains_key(id) || self.tombstones.contains_key(id)
    }

    pub fn is_pending(&self, id: &str) -> bool {
        self.pending.contains_key(id)
    }

    pub fn get(&self, id: &str) -> Option<&PendingLink> {
        self.pending.get(id)
    }

    /// Claimable links (`pendingLinks`) at wall-clock second `now_unix_s`: unexpired, so
    /// tombstones and links past their `expiresAt` do not count.
    pub fn pending_count(&self, now_unix_s: u64) -> usize {
        self.pending
            .values()
            .filter(|link| !link.is_expired(now_unix_s))
            .count()
    }

    /// T6 by the wall clock: every pending link whose `expiresAt` has passed at `now_unix_s`
    /// becomes a tombstone now, even though its timer (monotonic) has not fired yet; the timer
    /// then only forgets it. Returns their ids, for the caller to emit `link_expired`.
    pub fn expire_passed(&mut self, now_unix_s: u64) -> Vec<String> {
        let passed: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, link)| link.is_expired(now_unix_s))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &passed {
            self.expire(id);
        }
        passed
    }

    /// [`admit_pending`] on this table, after [`expire_passed`](Self::expire_passed) moved the
    /// links expired by the wall clock out of `pending`.
    pub fn admit(&mut self, now_unix_s: u64, limit: usize) -> AdmitOutcome {
        let expired = self.expire_passed(now_unix_s);
        AdmitOutcome {
            expired,
            admitted: admit_pending(self.pending.len(), self.tombstones.len(), limit),
        }
    }

    /// Steps 1–3 of the claim algorithm (§D9.3) for `token` (base64url) on `transport`, at
    /// wall-clock second `now_unix_s`. A link is expired once `now_unix_s >= expires_at` even if
    /// its timer has not fired. The transport check comes before the token comparison and is not
    /// counted; a token that does not decode to 32 bytes is a mismatch and counted.
    pub fn check_claim(
        &mut self,
        id: &str,
        transport: Transport,
        token: &str,
        now_unix_s: u64,
    ) -> ClaimCheck {
        let Some(link) = self.pending.get_mut(id) else {
            return if self.tombstones.contains_key(id) {
                ClaimCheck::Tombstone
            } else {
                ClaimCheck::NotFound
            };
        };
        if link.is_expired(now_unix_s) {
            self.expire(id);
            return ClaimCheck::Expired;
        }
        if link.transport != transport {
            return ClaimCheck::WrongTransport;
        }
        if link.token.matches(token) {
            return ClaimCheck::Valid;
        }
        link.failures += 1;
        if link.failures >= MAX_FAILED_CLAIMS {
            self.discard(id);
            ClaimCheck::Burned
        } else {
            ClaimCheck::InvalidToken
        }
    }

    /// A `link_refused` for `id`: the proof is checked in constant time against the pending
    /// link's claim token, whatever its wall-clock expiry (an app whose clock runs ahead says
    /// `link_expired` before the daemon does). Never counted as a failed claim.
    pub fn check_refusal(&mut self, id: &str, reason: RefusalReason, proof: &str) -> RefusalCheck {
        let Some(link) = self.pending.get_mut(id) else {
            return RefusalCheck::Invalid;
        };
        if !verify_refusal_proof(&link.token, id, reason, proof) {
            return RefusalCheck::Invalid;
        }
        if link.refusal.is_some() {
            return RefusalCheck::AlreadyRecorded;
        }
        link.refusal = Some(reason);
        RefusalCheck::Recorded
    }

    /// Consumes a link for a successful claim (single use).
    pub fn take(&mut self, id: &str) -> Option<PendingLink> {
        self.discard(id)
    }

    /// T9: a pending link revoked by id. Later claims get `unknown_session`.
    pub fn revoke(&mut self, id: &str) -> Option<PendingLink> {
        self.discard(id)
    }

    fn discard(&mut self, id: &str) -> Option<PendingLink> {
        let mut link = self.pending.remove(id)?;
        if let Some(timer) = link.timer.take() {
            timer.abort();
        }
        Some(link)
    }

    /// Whether `id` is a tombstone (expired, not yet forgotten).
    pub fn is_tombstone(&self, id: &str) -> bool {
        self.tombstones.contains_key(id)
    }

    /// T6: the TTL elapsed; the link becomes a tombstone. `false` when it was no longer pending.
    pub fn expire(&mut self, id: &str) -> bool {
        let Some(mut link) = self.pending.remove(id) else {
            return false;
        };
        self.tombstones.insert(id.to_owned(), link.timer.take());
        true
    }

    /// T8: the tombstone window elapsed; the id is forgotten. Called by the timer itself, so
    /// the timer is not aborted.
    pub fn forget(&mut self, id: &str) -> bool {
        self.tombstones.remove(id).is_some()
    }

    /// Drops everything and stops every timer, of pending links and tombstones (shutdown).
    pub fn clear(&mut self) {
        let pending = self
            .pending
            .drain()
            .filter_map(|(_, mut link)| link.timer.take());
        let tombstones = self.tombstones.drain().filter_map(|(_, timer)| timer);
        for timer in pending.chain(tombstones) {
            timer.abort();
        }
    }
}

/// What [`LinkTable::admit`] did and decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct AdmitOutcome {
    /// Links that became tombstones by the wall clock; the caller emits `link_expired` for each.
    pub expired: Vec<String>,
    pub admitted: Result<(), TooManyPendingLinks>,
}

// ---------------------------------------------------------------------------------------------
// Minting
// ---------------------------------------------------------------------------------------------

/// A freshly minted link: its id, the table entry and the `link.create` result.
pub struct MintedLink {
    pub id: String,
    pub link: PendingLink,
    pub result: LinkCreateResult,
}

/// Leaves out `deepLinkPayload`: it carries the claim token (§D9.5, §S3.7).
impl fmt::Debug for MintedLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.result;
        f.debug_struct("MintedLink")
            .field("id", &self.id)
            .field("link", &self.link)
            .field("transport", &r.transport)
            .field("endpoint", &r.endpoint)
            .field("expires_at", &r.expires_at)
            .field("pin", &r.pin)
            .finish_non_exhaustive()
    }
}

/// Largest number of fresh ids tried before giving up (a collision is already ~2^-96).
const MAX_ID_ATTEMPTS: usize = 64;

/// Mints a link for validated `link.create` params (§C8.4, §D9.5). `is_taken` reports ids
/// that are pending, tombstoned or live; such ids and ids starting with `-` are re-rolled.
/// `default_ttl` is `linkTtlSeconds`.
pub fn mint(
    params: &LinkCreateParams,
    env: &dyn LinkEnvironment,
    default_ttl: u32,
    now_unix_ms: u64,
    is_taken: impl Fn(&str) -> bool,
) -> Result<MintedLink, LinkError> {
    let transport = params.transport();
    // §D3.2: the leaf re-mint check runs on every `link.create`, whatever the transport or
    // override, so the leaf stays current for the native links that follow.
    let advertised = env.native_address(now_unix_ms)?;
    let (address, port) = match transport {
        // Sealed links reach the plain route of the same port (PROTOCOL.md "Sealed transport").
        Transport::Native | Transport::Sealed => (
            params.address_override.unwrap_or(advertised),
            env.wss_port(),
        ),
        // Web links always carry loopback and the web port (§D5.2).
        Transport::Web => (IpAddr::V4(Ipv4Addr::LOCALHOST), env.web_port()),
    };
    let id = mint_session_id(is_taken)?;
    let token = ClaimToken::from_bytes(random_bytes::<TOKEN_BYTES>()?);
    let ttl = u64::from(params.ttl_seconds.unwrap_or(default_ttl));
    let expires_at = now_unix_ms / 1000 + ttl;
    let payload = BootstrapPayload::new(address, port, id.clone(), token.clone(), expires_at);
    let family = payload.family();
    let (deep_link_payload, sealed_key) = if transport == Transport::Sealed {
        let key = env.sealed_key();
        let sealed = SealedBootstrapPayload::new(payload, key).encode()?;
        (sealed, Some(sealed_key_text(&key)))
    } else {
        (payload.encode()?, None)
    };
    // An IPv4-mapped address travels as IPv4 (§D4.3); report what the payload holds.
    let endpoint = Endpoint::new(address.to_canonical().to_string(), port, family);
    let result = LinkCreateResult::new(
        id.clone(),
        transport,
        deep_link_payload,
        endpoint.clone(),
        expires_at,
        env.pin(),
    )
    .with_sealed_key(sealed_key);
    let link = PendingLink {
        transport,
        token,
        expires_at,
        created_at_ms: now_unix_ms,
        failures: 0,
        timer: None,
        endpoint,
        refusal: None,
    };
    Ok(MintedLink { id, link, result })
}

/// A fresh session id: 12 CSPRNG bytes, re-rolled when it starts with `-` or is taken.
pub fn mint_session_id(is_taken: impl Fn(&str) -> bool) -> Result<String, LinkError> {
    for _ in 0..MAX_ID_ATTEMPTS {
        if let Some(id) = SessionId::from_random_bytes(random_bytes::<SESSION_ID_BYTES>()?)
            && !is_taken(id.as_str())
        {
            return Ok(id.to_string());
        }
    }
    Err(LinkError::IdSpace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use appduct_protocol::bootstrap;

    /// Wall-clock second of the mint in these tests.
    const NOW_S: u64 = 1_764_493_923;

    fn params(v: serde_json::Value) -> LinkCreateParams {
        LinkCreateParams::validate(Some(&v)).unwrap()
    }

    fn minted(v: serde_json::Value) -> MintedLink {
        mint(
            &params(v),
            &StaticLinkEnv::default(),
            300,
            1_764_493_923_999,
            |_| false,
        )
        .unwrap()
    }

    fn token_of(m: &MintedLink) -> String {
        bootstrap::decode(&m.result.deep_link_payload)
            .unwrap()
            .token
            .to_base64url()
    }

    #[test]
    fn random_bytes_differ_between_calls() {
        let a = random_bytes::<32>().unwrap();
        let b = random_bytes::<32>().unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn native_link_carries_the_advertised_address_and_wss_port() {
        let m = minted(serde_json::json!({}));
        let r = &m.result;
        assert_eq!(r.session_id.len(), 16);
        assert!(SessionId::parse(&r.session_id).is_ok());
        assert_eq!(r.transport, Transport::Native);
        assert_eq!(
            r.expires_at,
            1_764_493_923 + 300,
            "floor(now_ms/1000) + ttl"
        );
        assert_eq!(r.endpoint, Endpoint::new("192.168.1.20", 8443, 4));
        assert_eq!(r.pin, StaticLinkEnv::default().pin);
        let decoded = bootstrap::decode(&r.deep_link_payload).unwrap();
        assert_eq!(decoded.session_id, r.session_id);
        assert_eq!(decoded.port, 8443);
        assert_eq!(decoded.expires_at, r.expires_at);
        assert_eq!(m.link.created_at_ms, 1_764_493_923_999);
    }

    #[test]
    fn debug_output_carries_neither_the_payload_nor_the_token() {
        let m = minted(serde_json::json!({}));
        let debug = format!("{m:?}");
        assert!(debug.contains(&m.id), "{debug}");
        assert!(debug.contains("192.168.1.20"), "{debug}");
        assert!(
            !debug.contains(&m.result.deep_link_payload),
            "the bootstrap payload carries the claim token: {debug}"
        );
        assert!(!debug.contains(&token_of(&m)), "{debug}");
    }

    #[test]
    fn override_ttl_and_web_transport() {
        let m = minted(serde_json::json!({"ttlSeconds": 5, "addressOverride": "fd00::1"}));
        assert_eq!(m.result.expires_at, 1_764_493_923 + 5);
        assert_eq!(m.result.endpoint.address, "fd00::1");
        assert_eq!(m.result.endpoint.family, 6);
        let m = minted(serde_json::json!({"addressOverride": "::ffff:10.0.0.1"}));
        assert_eq!(m.result.endpoint.address, "10.0.0.1");
        assert_eq!(m.result.endpoint.family, 4);
        let m = minted(serde_json::json!({"transport": "web"}));
        assert_eq!(m.result.transport, Transport::Web);
        assert_eq!(m.result.endpoint.address, "127.0.0.1");
        assert_eq!(m.result.endpoint.port, 53120);
        assert_eq!(m.link.transport, Transport::Web);
    }

    #[test]
    fn sealed_links_carry_the_static_key_the_wss_port_and_sealed_key() {
        let m = minted(serde_json::json!({"transport": "sealed"}));
        let r = &m.result;
        assert_eq!(r.transport, Transport::Sealed);
        assert_eq!(m.link.transport, Transport::Sealed);
        assert_eq!(r.endpoint, Endpoint::new("192.168.1.20", 8443, 4));
        assert!(
            bootstrap::decode(&r.deep_link_payload).is_err(),
            "v2 decoders refuse it"
        );
        let sealed = bootstrap::decode_sealed(&r.deep_link_payload).unwrap();
        let key = StaticLinkEnv::default().sealed_key;
        assert_eq!(sealed.static_key, key);
        assert_eq!(sealed.payload.session_id, r.session_id);
        assert_eq!(sealed.payload.port, 8443);
        assert_eq!(
            r.sealed_key.as_deref(),
            Some(sealed_key_text(&key).as_str())
        );
        // Native and web links have no sealedKey; an override applies to sealed links too.
        assert_eq!(minted(serde_json::json!({})).result.sealed_key, None);
        let m = minted(serde_json::json!({"transport": "sealed", "addressOverride": "127.0.0.1"}));
        assert_eq!(m.result.endpoint, Endpoint::new("127.0.0.1", 8443, 4));
    }

    #[test]
    fn taken_ids_are_rerolled_and_an_exhausted_space_fails() {
        let first = mint_session_id(|_| false).unwrap();
        let taken = first.clone();
        let calls = std::cell::Cell::new(0);
        let id = mint_session_id(|id| {
            calls.set(calls.get() + 1);
            calls.get() == 1 || id == taken
        })
        .unwrap();
        assert_ne!(id, first);
        assert!(calls.get() >= 2);
        assert!(!id.starts_with('-'));
        assert_eq!(mint_session_id(|_| true), Err(LinkError::IdSpace));
    }

    #[test]
    fn wrong_transport_is_not_counted_and_the_fifth_failure_burns() {
        let m = minted(serde_json::json!({}));
        let token = token_of(&m);
        let mut table = LinkTable::new();
        table.insert(m.id.clone(), m.link);
        let id = m.id.as_str();
        assert_eq!(table.pending_count(NOW_S), 1);
        for _ in 0..10 {
            assert_eq!(
                table.check_claim(id, Transport::Web, &token, NOW_S),
                ClaimCheck::WrongTransport
            );
        }
        for n in 1..MAX_FAILED_CLAIMS {
            assert_eq!(
                table.check_claim(id, Transport::Native, "not-a-token", NOW_S),
                ClaimCheck::InvalidToken
            );
            assert_eq!(table.get(id).map(PendingLink::failures), Some(n));
        }
        assert_eq!(
            table.check_claim(id, Transport::Native, &token, NOW_S),
            ClaimCheck::Valid,
            "the 1st to 4th failures leave it claimable"
        );
        assert_eq!(
            table.check_claim(id, Transport::Native, "AAAA", NOW_S),
            ClaimCheck::Burned
        );
        assert_eq!(
            table.check_claim(id, Transport::Native, &token, NOW_S),
            ClaimCheck::NotFound
        );
        assert_eq!(table.pending_count(NOW_S), 0);
        assert!(!table.knows(id));
    }

    #[test]
    fn expiry_tombstones_then_forgets() {
        let m = minted(serde_json::json!({}));
        let token = token_of(&m);
        let mut table = LinkTable::new();
        table.insert(m.id.clone(), m.link);
        assert!(table.expire(&m.id));
        assert!(!table.expire(&m.id));
        assert_eq!(
            table.pending_count(NOW_S),
            0,
            "tombstones are not pending links"
        );
        assert!(table.knows(&m.id));
        assert_eq!(
            table.check_claim(&m.id, Transport::Native, &token, NOW_S),
            ClaimCheck::Tombstone
        );
        assert!(table.forget(&m.id));
        assert_eq!(
            table.check_claim(&m.id, Transport::Native, &token, NOW_S),
            ClaimCheck::NotFound
        );
    }

    #[test]
    fn a_link_is_expired_from_its_expires_at_second_even_without_its_timer() {
        let m = minted(serde_json::json!({"ttlSeconds": 60}));
        let token = token_of(&m);
        let expires_at = m.result.expires_at;
        let mut table = LinkTable::new();
        table.insert(m.id.clone(), m.link);
        assert_eq!(table.pending_count(expires_at - 1), 1);
        assert_eq!(
            table.pending_count(expires_at),
            0,
            "now_seconds >= expires_at"
        );
        assert_eq!(
            table.check_claim(&m.id, Transport::Native, "wrong", expires_at - 1),
            ClaimCheck::InvalidToken,
            "the last second before expiresAt still counts"
        );
        assert_eq!(
            table.check_claim(&m.id, Transport::Web, &token, expires_at + 3600),
            ClaimCheck::Expired,
            "expiry is checked before the transport"
        );
        assert!(table.is_tombstone(&m.id));
        assert!(!table.is_pending(&m.id));
        assert!(!table.expire(&m.id), "the timer finds it already expired");
        assert_eq!(
            table.check_claim(&m.id, Transport::Native, &token, expires_at + 3600),
            ClaimCheck::Tombstone
        );
    }

    #[test]
    fn daemon_env_remints_the_leaf_when_the_advertised_address_changes() {
        use crate::address::StaticAddresses;
        use crate::tls::HostKey;
        let dir = tempfile::tempdir().unwrap();
        let (key, _) = HostKey::load_or_generate(&dir.path().join("key.pem"), true).unwrap();
        let now = 1_764_493_923_000;
        let first: IpAddr = "192.168.1.20".parse().unwrap();
        let tls = Arc::new(TlsState::new(key, first, now).unwrap());
        let addresses = StaticAddresses::new([first]);
        let env = DaemonLinkEnv::new(
            Arc::clone(&tls),
            Arc::new(addresses.clone()),
            None,
            8443,
            5000,
        );
        assert_eq!(env.pin(), tls.pin().to_string());
        let leaf = tls.leaf();
        let m = mint(&params(serde_json::json!({})), &env, 300, now, |_| false).unwrap();
        assert_eq!(m.result.endpoint.address, "192.168.1.20");
        assert!(Arc::ptr_eq(&leaf, &tls.leaf()), "same address: no re-mint");

        let second: IpAddr = "10.0.0.7".parse().unwrap();
        addresses.set([second]);
        // Even a link with an override re-runs the check against the advertised address.
        let m = mint(
            &params(serde_json::json!({"addressOverride": "127.0.0.1"})),
            &env,
            300,
            now,
            |_| false,
        )
        .unwrap();
        assert_eq!(m.result.endpoint.address, "127.0.0.1");
        assert_eq!(tls.leaf().advertised_ip(), second);
        assert_eq!(env.advertised().address, second);

        // A web link runs the check too, and carries loopback and the web port.
        let third: IpAddr = "10.0.0.9".parse().unwrap();
        addresses.set([third]);
        let web = mint(
            &params(serde_json::json!({"transport": "web"})),
            &env,
            300,
            now,
            |_| false,
        )
        .unwrap();
        assert_eq!(web.result.endpoint.address, "127.0.0.1");
        assert_eq!(web.result.endpoint.port, 5000);
        assert_eq!(
            tls.leaf().advertised_ip(),
            third,
            "web link.create re-mints"
        );

        // `advertisedIp` wins over detection.
        let configured = DaemonLinkEnv::new(tls, Arc::new(addresses), Some(first), 8443, 5000);
        assert_eq!(configured.native_address(now).unwrap(), first);
    }

    #[tokio::test]
    async fn clear_stops_the_timers_of_pending_links_and_tombstones() {
        let mut table = LinkTable::new();
        let (a, b) = (minted(serde_json::json!({})), minted(serde_json::json!({})));
        let (ida, idb) = (a.id.clone(), b.id.clone());
        table.insert(ida.clone(), a.link);
        table.insert(idb.clone(), b.link);
        let timer_a = tokio::spawn(std::future::pending::<()>());
        let timer_b = tokio::spawn(std::future::pending::<()>());
        table.set_timer(&ida, timer_a.abort_handle());
        table.set_timer(&idb, timer_b.abort_handle());
        // b's timer goes on to run its tombstone window.
        assert!(table.expire(&idb));
        table.clear();
        assert!(!table.knows(&ida) && !table.knows(&idb));
        let wait = std::time::Duration::from_secs(10);
        let ended_a = tokio::time::timeout(wait, timer_a)
            .await
            .expect("timer a runs on");
        let ended_b = tokio::time::timeout(wait, timer_b)
            .await
            .expect("timer b runs on");
        assert!(ended_a.unwrap_err().is_cancelled());
        assert!(ended_b.unwrap_err().is_cancelled());
    }

    #[tokio::test]
    async fn forgetting_a_tombstone_leaves_its_timer_running() {
        let mut table = LinkTable::new();
        let a = minted(serde_json::json!({}));
        let id = a.id.clone();
        table.insert(id.clone(), a.link);
        let timer = tokio::spawn(std::future::pending::<()>());
        table.set_timer(&id, timer.abort_handle());
        assert!(table.expire(&id));
        // The timer calls `forget` itself as its last step.
        assert!(table.forget(&id));
        assert!(!table.forget(&id));
        tokio::task::yield_now().await;
        assert!(!timer.is_finished());
        timer.abort();
    }

    #[test]
    fn admission_stops_at_the_limit_with_a_typed_invalid_request() {
        use appduct_protocol::limits::MAX_PENDING_LINKS;
        assert_eq!(admit_pending(0, 0, MAX_PENDING_LINKS), Ok(()));
        assert_eq!(
            admit_pending(MAX_PENDING_LINKS - 1, MAX_PENDING_LINKS, MAX_PENDING_LINKS),
            Ok(()),
            "2047 held, 1023 of them pending"
        );
        let refused = admit_pending(MAX_PENDING_LINKS, 0, MAX_PENDING_LINKS).unwrap_err();
        assert_eq!(refused, TooManyPendingLinks::Pending { limit: 1_024 });
        assert!(admit_pending(MAX_PENDING_LINKS + 1, 0, MAX_PENDING_LINKS).is_err());
        let e = ErrorObject::from(refused);
        assert_eq!(e.code, -32000);
        assert_eq!(e.error_type(), ErrorType::InvalidRequest);
        assert_eq!(
            e.details(),
            Some(&json!({"reason": "too_many_pending_links", "limit": 1024}))
        );
        assert!(e.message.contains("1024"), "{}", e.message);

        // Pending links and tombstones together: at most twice the limit, the same details.
        let held = admit_pending(10, 2 * MAX_PENDING_LINKS - 10, MAX_PENDING_LINKS).unwrap_err();
        assert_eq!(
            held,
            TooManyPendingLinks::Held {
                limit: 1_024,
                pending: 10,
                tombstones: 2_038
            }
        );
        let e = ErrorObject::from(held);
        assert_eq!(e.code, -32000);
        assert_eq!(e.error_type(), ErrorType::InvalidRequest);
        assert_eq!(
            e.details(),
            Some(&json!({"reason": "too_many_pending_links", "limit": 1024}))
        );
        assert!(e.message.contains("2038 expired"), "{}", e.message);
    }

    #[test]
    fn claimed_revoked_burned_and_expired_links_stop_counting_toward_the_cap() {
        let limit = 4;
        let mut table = LinkTable::new();
        let mut ids = Vec::new();
        while table.admit(NOW_S, limit).admitted.is_ok() {
            let m = minted(serde_json::json!({"ttlSeconds": 60}));
            ids.push(m.id.clone());
            table.insert(m.id, m.link);
        }
        assert_eq!(ids.len(), limit, "the cap stops the 5th link");

        // Claimed.
        assert!(table.take(&ids[0]).is_some());
        assert_eq!(table.pending_count(NOW_S), 3);
        assert_eq!(table.admit(NOW_S, limit).admitted, Ok(()));
        // Revoked.
        assert!(table.revoke(&ids[1]).is_some());
        // Burned by the 5th failed claim.
        for _ in 0..MAX_FAILED_CLAIMS {
            table.check_claim(&ids[2], Transport::Native, "wrong", NOW_S);
        }
        assert!(!table.is_pending(&ids[2]));
        // Expired by its timer: a tombstone, not a pending link.
        assert!(table.expire(&ids[3]));
        assert_eq!(table.pending_count(NOW_S), 0);

        // Past its `expiresAt` by the wall clock, even before its timer fires.
        let m = minted(serde_json::json!({"ttlSeconds": 60}));
        let expires_at = m.result.expires_at;
        table.insert(m.id, m.link);
        assert_eq!(table.pending_count(expires_at - 1), 1);
        assert_eq!(table.pending_count(expires_at), 0);
        let mut one = LinkTable::new();
        let m = minted(serde_json::json!({"ttlSeconds": 60}));
        one.insert(m.id, m.link);
        assert!(one.admit(expires_at - 1, 1).admitted.is_err());
        assert!(one.admit(expires_at, 1).admitted.is_ok());
    }

    /// A wall-clock jump (or a host suspend) expires links whose monotonic timers have not fired:
    /// admission turns them into tombstones, and pending links plus tombstones stay under twice
    /// the limit, so the jump cannot let another full batch be minted on top of them.
    #[test]
    fn links_expired_by_the_wall_clock_become_tombstones_that_bound_the_next_mints() {
        let limit = 4;
        let minted_at = |now_s: u64| {
            mint(
                &params(serde_json::json!({"ttlSeconds": 60})),
                &StaticLinkEnv::default(),
                300,
                now_s * 1000,
                |_| false,
            )
            .unwrap()
        };
        let mut table = LinkTable::new();
        let mut first = Vec::new();
        for _ in 0..limit {
            let admit = table.admit(NOW_S, limit);
            assert_eq!(admit.admitted, Ok(()));
            assert!(admit.expired.is_empty());
            let m = minted_at(NOW_S);
            first.push((m.id.clone(), token_of(&m)));
            table.insert(m.id, m.link);
        }
        assert_eq!(
            table.admit(NOW_S, limit).admitted,
            Err(TooManyPendingLinks::Pending { limit })
        );

        // The wall clock jumps a day ahead; no timer has fired.
        let later = NOW_S + 86_400;
        let admit = table.admit(later, limit);
        assert_eq!(admit.admitted, Ok(()), "expired links are not claimable");
        let mut expired = admit.expired;
        expired.sort();
        let mut first_ids: Vec<String> = first.iter().map(|(id, _)| id.clone()).collect();
        first_ids.sort();
        assert_eq!(
            expired, first_ids,
            "each is reported once, for link_expired"
        );
        for (id, token) in &first {
            assert!(table.is_tombstone(id));
            assert_eq!(
                table.check_claim(id, Transport::Native, token, later),
                ClaimCheck::Tombstone
            );
        }
        assert!(
            table.admit(later, limit).expired.is_empty(),
            "already tombstones"
        );

        // A second batch fills the pending cap again.
        let mut second = Vec::new();
        while table.admit(later, limit).admitted.is_ok() {
            let m = minted_at(later);
            second.push(m.id.clone());
            table.insert(m.id, m.link);
        }
        assert_eq!(second.len(), limit);

        // Another jump: the second batch expires too, and the tombstones of both now reach twice
        // the limit, so nothing more is minted although no link is claimable.
        let much_later = later + 86_400;
        let admit = table.admit(much_later, limit);
        assert_eq!(admit.expired.len(), limit);
        assert_eq!(table.pending_count(much_later), 0);
        assert_eq!(
            admit.admitted,
            Err(TooManyPendingLinks::Held {
                limit,
                pending: 0,
                tombstones: 2 * limit
            })
        );

        // Once a timer forgets a tombstone, one link may be minted again.
        assert!(table.forget(&first[0].0));
        assert_eq!(table.admit(much_later, limit).admitted, Ok(()));
    }

    #[test]
    fn take_and_revoke_consume_the_link() {
        let mut table = LinkTable::new();
        let a = minted(serde_json::json!({}));
        let b = minted(serde_json::json!({}));
        let (ida, idb) = (a.id.clone(), b.id.clone());
        table.insert(ida.clone(), a.link);
        table.insert(idb.clone(), b.link);
        assert!(table.take(&ida).is_some());
        assert!(table.take(&ida).is_none());
        assert!(table.revoke(&idb).is_some());
        assert!(!table.is_pending(&idb));
        assert!(!table.knows(&idb));
    }
}
