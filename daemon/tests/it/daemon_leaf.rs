//! Leaf certificate upkeep in the composed daemon (§D3.2, §S3.5 step 10, §C8.4): a
//! detected address change re-mints before `link.create`, and the hourly check renews a leaf
//! close to expiry. The pin never changes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::daemon_support;

use std::net::IpAddr;
use std::time::Duration;

use appduct_daemon::address::StaticAddresses;
use appduct_daemon::clock::{Clock, ManualClock, SystemClock};
use appduct_daemon::daemon::{Daemon, DaemonOptions, LEAF_RENEWAL_INTERVAL};
use appduct_protocol::control::{
    AddressSource, DaemonStatus, LinkCreate, LinkCreateParams, NoParams,
};
use appduct_protocol::limits::{LEAF_RENEW_BEFORE_S, LEAF_VALIDITY_S};
use daemon_support::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[tokio::test]
async fn a_detected_address_change_re_mints_the_leaf_before_link_create() {
    let dir = state_dir();
    let addresses = StaticAddresses::new([ip("192.168.1.20")]);
    let daemon = Daemon::start(
        DaemonOptions::for_tests(dir.path())
            .addresses(addresses.clone())
            .detect_address(),
    )
    .await
    .unwrap();
    let client = memory_client(&daemon);
    let status = client.call::<DaemonStatus>(NoParams {}).await.unwrap();
    assert_eq!(status.advertised_address.address, "192.168.1.20");
    assert_eq!(status.advertised_address.source, AddressSource::Detected);
    let first_leaf = daemon.leaf_der();

    let link = client
        .call::<LinkCreate>(LinkCreateParams::default())
        .await
        .unwrap();
    assert_eq!(link.endpoint.address, "192.168.1.20");
    assert_eq!(daemon.leaf_der(), first_leaf, "same address: no re-mint");

    addresses.set([ip("192.168.1.30")]);
    let link = client
        .call::<LinkCreate>(LinkCreateParams::default())
        .await
        .unwrap();
    assert_eq!(link.endpoint.address, "192.168.1.30");
    assert_ne!(
        daemon.leaf_der(),
        first_leaf,
        "re-minted for the new address"
    );
    assert_eq!(link.pin, daemon.pin().to_string(), "the pin never changes");
    daemon.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_hourly_check_renews_a_leaf_close_to_expiry() {
    let dir = state_dir();
    let clock = ManualClock::new(SystemClock.now_unix_ms());
    let daemon = Daemon::start(DaemonOptions::for_tests(dir.path()).clock(clock.clone()))
        .await
        .unwrap();
    let first_leaf = daemon.leaf_der();
    let pin = daemon.pin();

    // More than a day of validity left: the first check keeps the leaf.
    tokio::time::advance(LEAF_RENEWAL_INTERVAL).await;
    settle().await;
    assert_eq!(daemon.leaf_der(), first_leaf);

    // Less than a day left: the next hourly check mints a new one.
    clock.advance(Duration::from_secs(LEAF_VALIDITY_S - LEAF_RENEW_BEFORE_S));
    tokio::time::advance(LEAF_RENEWAL_INTERVAL).await;
    until(|| daemon.leaf_der() != first_leaf).await;
    assert_eq!(daemon.pin(), pin);
    daemon.shutdown().await;
}

/// Lets every ready task run without moving the clock.
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}
