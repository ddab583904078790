//! MRTR consent records (§C8.14): create/take, single use, expiry, eviction, unknown sessions.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use appduct_daemon::consent::{ConsentStore, HANDLE_PREFIX};
use appduct_protocol::control::{ConsentCreateParams, ConsentRecord};
use appduct_protocol::errors::ErrorType;
use appduct_protocol::jsonrpc::ErrorObject;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::json;

/// 2026-11-30T09:14:22.518Z
const NOW_MS: u64 = 1_796_030_062_518;
const SESSION: &str = "q3VfZ0xkR2ptTnB4";
const SHA: &str = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";

fn params(name: &str, ttl_ms: Option<u64>) -> ConsentCreateParams {
    ConsentCreateParams::new(SESSION, name, SHA).with_ttl_ms(ttl_ms)
}

fn live(id: &str) -> bool {
    id == SESSION
}

fn assert_expired(result: Result<ConsentRecord, ErrorObject>) {
    let error = result.unwrap_err();
    assert_eq!(error.code, -32000);
    assert_eq!(error.error_type(), ErrorType::InvalidRequest);
    assert_eq!(error.details(), Some(&json!({"reason": "expired"})));
}

#[tokio::test]
async fn create_answers_a_handle_and_expires_at_in_unix_seconds() {
    let store = ConsentStore::new();
    let created = store
        .create(&params("reset_counter", Some(1_500)), NOW_MS, live)
        .unwrap();
    // floor((1796030062518 + 1500) / 1000)
    assert_eq!(created.expires_at, 1_796_030_064);

    let body = created.handle.strip_prefix(HANDLE_PREFIX).unwrap();
    assert_eq!(body.len(), 43);
    assert_eq!(URL_SAFE_NO_PAD.decode(body).unwrap().len(), 32);

    // Absent ttlMs is 600000.
    let default_ttl = store
        .create(&params("reset_counter", None), NOW_MS, live)
        .unwrap();
    assert_eq!(default_ttl.expires_at, 1_796_030_662);
    assert_ne!(default_ttl.handle, created.handle);

    // The wire shape of the result.
    let v = serde_json::to_value(&created).unwrap();
    assert_eq!(v["expiresAt"], 1_796_030_064_u64);
    assert!(v["handle"].as_str().unwrap().starts_with("cr_"));
}

#[tokio::test]
async fn take_returns_the_record_once() {
    let store = ConsentStore::new();
    let mut p = params("reset_counter", Some(600_000));
    p.selector = Some("pixel-8".into());
    p.timeout_ms = Some(5_000);
    let created = store.create(&p, NOW_MS, live).unwrap();
    assert_eq!(store.len(), 1);

    let record = store.take(&created.handle).unwrap();
    assert_eq!(
        serde_json::to_value(&record).unwrap(),
        json!({"sessionId": SESSION, "name": "reset_counter", "argsSha256": SHA,
               "selector": "pixel-8", "timeoutMs": 5000})
    );
    assert!(store.is_empty());
    assert_expired(store.take(&created.handle));
}

#[tokio::test]
async fn absent_optional_fields_stay_absent() {
    let store = ConsentStore::new();
    let created = store.create(&params("t", None), NOW_MS, live).unwrap();
    let record = store.take(&created.handle).unwrap();
    assert_eq!(
        serde_json::to_value(&record).unwrap(),
        json!({"sessionId": SESSION, "name": "t", "argsSha256": SHA})
    );
}

#[tokio::test]
async fn unknown_and_malformed_handles_are_expired() {
    let store = ConsentStore::new();
    let created = store.create(&params("t", None), NOW_MS, live).unwrap();
    let mut near_miss = created.handle.clone();
    let last = near_miss.pop().unwrap();
    near_miss.push(if last == 'A' { 'B' } else { 'A' });
    for handle in [
        near_miss.as_str(),
        "cr_",
        "x",
        &created.handle[HANDLE_PREFIX.len()..],
    ] {
        assert_expired(store.take(handle));
    }
    // Failed lookups consume nothing.
    assert!(store.take(&created.handle).is_ok());
}

#[tokio::test]
async fn a_session_that_is_not_live_is_unknown_session() {
    let store = ConsentStore::new();
    let mut p = params("t", None);
    p.session_id = "AAAAAAAAAAAAAAAA".into();
    let mut asked = None;
    let error = store
        .create(&p, NOW_MS, |id| {
            asked = Some(id.to_owned());
            false
        })
        .unwrap_err();
    assert_eq!(asked.as_deref(), Some("AAAAAAAAAAAAAAAA"));
    assert_eq!(error.code, -32000);
    assert_eq!(error.error_type(), ErrorType::UnknownSession);
    assert_eq!(
        error.details(),
        Some(&json!({"sessionId": "AAAAAAAAAAAAAAAA"}))
    );
    assert!(store.is_empty());
}

#[tokio::test(start_paused = true)]
async fn records_expire_ttl_ms_after_creation() {
    let store = ConsentStore::new();
    let first = store
        .create(&params("a", Some(1_000)), NOW_MS, live)
        .unwrap();
    let second = store
        .create(&params("b", Some(1_000)), NOW_MS, live)
        .unwrap();

    tokio::time::advance(Duration::from_millis(999)).await;
    assert_eq!(store.take(&first.handle).unwrap().name, "a");

    tokio::time::advance(Duration::from_millis(1)).await;
    assert_expired(store.take(&second.handle));
    assert!(store.is_empty());
}

#[tokio::test(start_paused = true)]
async fn expired_records_do_not_count_against_the_cap() {
    let store = ConsentStore::with_capacity(2);
    let short = store
        .create(&params("short", Some(1_000)), NOW_MS, live)
        .unwrap();
    let long = store
        .create(&params("long", Some(600_000)), NOW_MS, live)
        .unwrap();
    tokio::time::advance(Duration::from_millis(1_000)).await;
    assert_eq!(store.len(), 1);

    let third = store.create(&params("third", None), NOW_MS, live).unwrap();
    assert_expired(store.take(&short.handle));
    assert_eq!(store.take(&long.handle).unwrap().name, "long");
    assert_eq!(store.take(&third.handle).unwrap().name, "third");
}

#[tokio::test]
async fn the_257th_record_evicts_the_oldest() {
    let store = ConsentStore::new();
    let handles: Vec<String> = (0..257)
        .map(|i| {
            store
                .create(&params(&format!("t{i}"), None), NOW_MS, live)
                .unwrap()
                .handle
        })
        .collect();
    assert_eq!(store.len(), 256);
    assert_expired(store.take(&handles[0]));
    for (i, handle) in handles.iter().enumerate().skip(1) {
        assert_eq!(store.take(handle).unwrap().name, format!("t{i}"));
    }
    assert!(store.is_empty());
}

#[tokio::test]
async fn taking_a_record_frees_its_slot() {
    let store = ConsentStore::with_capacity(2);
    let a = store.create(&params("a", None), NOW_MS, live).unwrap();
    let b = store.create(&params("b", None), NOW_MS, live).unwrap();
    store.take(&a.handle).unwrap();
    let c = store.create(&params("c", None), NOW_MS, live).unwrap();
    // b survives: only one record was open when c arrived.
    assert_eq!(store.take(&b.handle).unwrap().name, "b");
    assert_eq!(store.take(&c.handle).unwrap().name, "c");
}

#[tokio::test]
async fn debug_output_reveals_no_handle_or_record() {
    let store = ConsentStore::new();
    let created = store
        .create(&params("reset_counter", None), NOW_MS, live)
        .unwrap();
    let shown = format!("{store:?}");
    assert!(shown.contains("open: 1"), "{shown}");
    for secret in [
        created.handle.as_str(),
        &created.handle[HANDLE_PREFIX.len()..],
        SESSION,
        SHA,
        "reset_counter",
    ] {
        assert!(!shown.contains(secret), "{shown}");
    }
}
