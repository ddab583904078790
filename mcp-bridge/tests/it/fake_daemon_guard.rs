//! The fake daemon's guard: a daemon method a test did not register fails that test, on the
//! test's own thread (§M1).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::panic::AssertUnwindSafe;

use rmcp::model::ProtocolVersion;
use serde_json::json;
use support::*;

fn v2025() -> TestClient {
    TestClient::new(ProtocolVersion::V_2025_11_25, None)
}

// ---------------------------------------------------------------------------------------------
// An unregistered daemon method fails the test
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_unregistered_daemon_method_fails_the_test_on_its_own_thread() {
    // `sessions.describe` is not registered: the fake answers -32601 and records it.
    let fake = FakeDaemon::new(&[]);
    let h = start(fake.clone(), v2025()).await;
    let r = h.call("appduct_list_tools", json!({})).await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(fake.unexpected(), vec!["sessions.describe".to_owned()]);
    // Dropping the harness (as the end of a test does) panics here, on the test thread.
    let dropped = std::panic::catch_unwind(AssertUnwindSafe(|| drop(h)));
    assert!(
        dropped.is_err(),
        "the harness must fail the test that reached an unregistered method"
    );
    let raw = RawClient::start(fake);
    let dropped = std::panic::catch_unwind(AssertUnwindSafe(|| drop(raw)));
    assert!(dropped.is_err(), "the raw client checks the record too");
}
