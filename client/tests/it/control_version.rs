//! The version-drift decision of §C7 / §C7, row by row, and semver precedence.
#![allow(clippy::unwrap_used)]

use std::cmp::Ordering;

use appduct_client::client::{
    ClientError, DaemonInfo, MismatchReason, SemVer, VersionCheck, VersionDecision, VersionPolicy,
    classify, compare_versions, decide_version,
};
use appduct_protocol::errors::ErrorType;
use serde_json::json;

const CLIENT: &str = "0.3.1";

fn daemon(version: &str, sessions: u64, links: u64, calls: u64) -> DaemonInfo {
    DaemonInfo {
        version: version.into(),
        protocols: Some((1, 1)),
        features: vec!["calls.callId".into(), "events.list".into()],
        session_count: sessions,
        pending_links: links,
        pending_calls: calls,
    }
}

fn enforce() -> VersionPolicy {
    VersionPolicy::default()
}

fn forced() -> VersionPolicy {
    VersionPolicy {
        force_restart: true,
        ..VersionPolicy::default()
    }
}

fn mismatch(d: VersionDecision) -> (ClientError, MismatchReason) {
    match d {
        VersionDecision::Fail(e @ ClientError::VersionMismatch { .. }) => {
            let ClientError::VersionMismatch { reason, .. } = &e else {
                unreachable!()
            };
            let reason = reason.clone();
            (e, reason)
        }
        other => panic!("expected a version mismatch, got {other:?}"),
    }
}

#[test]
fn equal_versions_proceed_silently() {
    let d = decide_version(&daemon(CLIENT, 3, 1, 1), CLIENT, &enforce(), false);
    assert!(matches!(d, VersionDecision::Proceed), "{d:?}");
    // Build metadata is ignored.
    let d = decide_version(&daemon("0.3.1+abc", 0, 0, 0), CLIENT, &enforce(), false);
    assert!(matches!(d, VersionDecision::Proceed), "{d:?}");
}

#[test]
fn newer_daemon_proceeds_with_a_notice() {
    let d = decide_version(&daemon("0.4.0", 2, 0, 0), CLIENT, &enforce(), false);
    match d {
        VersionDecision::Notice(n) => {
            assert_eq!(n.daemon_version, "0.4.0");
            assert_eq!(n.client_version, CLIENT);
            assert!(
                n.message.contains("0.4.0") && n.message.contains(CLIENT),
                "{}",
                n.message
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn older_idle_daemon_is_replaced() {
    let d = decide_version(&daemon("0.3.0", 0, 0, 0), CLIENT, &enforce(), false);
    assert!(matches!(d, VersionDecision::Replace), "{d:?}");
    // A prerelease of our version is older.
    let d = decide_version(&daemon("0.3.1-rc.1", 0, 0, 0), CLIENT, &enforce(), false);
    assert!(matches!(d, VersionDecision::Replace), "{d:?}");
}

#[test]
fn older_busy_daemon_fails_with_counts_unless_forced() {
    // SEC-53: a daemon with a live session is replaced only when forced.
    for (s, l, c) in [(1, 0, 0), (0, 1, 0), (0, 0, 1), (2, 3, 4)] {
        let (e, reason) = mismatch(decide_version(
            &daemon("0.2.9", s, l, c),
            CLIENT,
            &enforce(),
            false,
        ));
        assert_eq!(reason, MismatchReason::DaemonBusy);
        assert_eq!(classify(&e), (ErrorType::ConnectionError, 70));
        assert_eq!(
            e.details(),
            Some(
                json!({"daemonVersion": "0.2.9", "clientVersion": CLIENT, "sessionCount": s,
                        "pendingLinkCount": l, "pendingCallCount": c})
            )
        );
        let msg = e.to_string();
        for needle in ["0.2.9", CLIENT, "appduct daemon stop", "--daemon-restart"] {
            assert!(msg.contains(needle), "{needle} missing from {msg}");
        }
        let d = decide_version(&daemon("0.2.9", s, l, c), CLIENT, &forced(), false);
        assert!(matches!(d, VersionDecision::Replace), "{d:?}");
    }
}

#[test]
fn a_replacement_that_still_differs_fails_with_its_own_message() {
    for version in ["0.3.0", "0.9.0"] {
        for policy in [enforce(), forced()] {
            let (e, reason) = mismatch(decide_version(
                &daemon(version, 0, 0, 0),
                CLIENT,
                &policy,
                true,
            ));
            assert_eq!(reason, MismatchReason::StillDifferentAfterRestart);
            assert!(
                e.to_string()
                    .contains("restarted the daemon but it still reports"),
                "{e}"
            );
        }
    }
    // After a replacement, an equal version simply proceeds.
    let d = decide_version(&daemon(CLIENT, 0, 0, 0), CLIENT, &enforce(), true);
    assert!(matches!(d, VersionDecision::Proceed));
}

#[test]
fn legacy_daemon_without_hello_counts_as_older() {
    let legacy = DaemonInfo::from_legacy_status(
        &json!({"version": CLIENT, "sessions": [], "pendingLinks": 0}),
    )
    .unwrap();
    assert_eq!(legacy.pending_calls, 0);
    assert!(matches!(
        decide_version(&legacy, CLIENT, &enforce(), false),
        VersionDecision::Replace
    ));
    let busy = DaemonInfo::from_legacy_status(
        &json!({"version": "9.0.0", "sessions": [{}], "pendingLinks": 2}),
    )
    .unwrap();
    assert_eq!((busy.session_count, busy.pending_links), (1, 2));
    let (_, reason) = mismatch(decide_version(&busy, CLIENT, &enforce(), false));
    assert_eq!(reason, MismatchReason::DaemonBusy);
    assert!(DaemonInfo::from_legacy_status(&json!({"sessions": []})).is_err());
}

#[test]
fn protocol_incompatibility_comes_before_versions() {
    let mut newer = daemon("1.0.0", 0, 0, 0);
    newer.protocols = Some((2, 3));
    let (e, reason) = mismatch(decide_version(&newer, CLIENT, &enforce(), false));
    assert_eq!(
        reason,
        MismatchReason::IncompatibleProtocol { min: 2, max: 3 }
    );
    assert!(e.to_string().contains("Upgrade appduct"), "{e}");
    // An incompatible older daemon is handled as "client newer".
    let mut older = daemon("0.1.0", 0, 0, 0);
    older.protocols = Some((2, 2));
    assert!(matches!(
        decide_version(&older, CLIENT, &enforce(), false),
        VersionDecision::Replace
    ));
}

#[test]
fn missing_required_feature_fails_naming_it() {
    let policy = VersionPolicy {
        required_features: vec!["events.list".into(), "consent.records".into()],
        ..VersionPolicy::default()
    };
    let (e, reason) = mismatch(decide_version(
        &daemon(CLIENT, 0, 0, 0),
        CLIENT,
        &policy,
        false,
    ));
    assert_eq!(
        reason,
        MismatchReason::MissingFeature("consent.records".into())
    );
    assert!(e.to_string().contains("consent.records"));
    assert_eq!(e.details().unwrap()["feature"], "consent.records");
    let mut full = daemon(CLIENT, 0, 0, 0);
    full.features.push("consent.records".into());
    assert!(matches!(
        decide_version(&full, CLIENT, &policy, false),
        VersionDecision::Proceed
    ));
}

#[test]
fn warn_only_never_replaces_and_skip_never_checks() {
    let warn = VersionPolicy {
        check: VersionCheck::WarnOnly,
        ..VersionPolicy::default()
    };
    for d in [
        daemon("0.1.0", 0, 0, 0),
        daemon("0.1.0", 5, 0, 0),
        daemon("0.9.0", 0, 0, 0),
    ] {
        assert!(matches!(
            decide_version(&d, CLIENT, &warn, false),
            VersionDecision::Notice(_)
        ));
    }
    assert!(matches!(
        decide_version(&daemon(CLIENT, 0, 0, 0), CLIENT, &warn, false),
        VersionDecision::Proceed
    ));
    let skip = VersionPolicy {
        check: VersionCheck::Skip,
        ..VersionPolicy::default()
    };
    assert!(matches!(
        decide_version(&daemon("0.1.0", 5, 0, 0), CLIENT, &skip, true),
        VersionDecision::Proceed
    ));
}

#[test]
fn semver_precedence() {
    let ordered = [
        "0.9.9",
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.1.0",
        "2.0.0",
        "10.0.0",
    ];
    for w in ordered.windows(2) {
        assert_eq!(
            compare_versions(w[0], w[1]),
            Ordering::Less,
            "{} < {}",
            w[0],
            w[1]
        );
        assert_eq!(
            compare_versions(w[1], w[0]),
            Ordering::Greater,
            "{} > {}",
            w[1],
            w[0]
        );
    }
    assert_eq!(compare_versions("1.0.0+a", "1.0.0+b"), Ordering::Equal);
    assert_eq!(
        compare_versions("1.0.0-rc.1+x", "1.0.0-rc.1"),
        Ordering::Equal
    );
    for bad in [
        "",
        "1",
        "1.0",
        "1.0.0.0",
        "v1.0.0",
        "1.0.x",
        "1.0.0-",
        "1.0.0-a..b",
        "1.0.0-é",
    ] {
        assert!(SemVer::parse(bad).is_none(), "{bad:?} must not parse");
        // Unparsable sorts below every valid version: such a daemon counts as older.
        assert_eq!(compare_versions(bad, "0.0.1"), Ordering::Less, "{bad:?}");
    }
    assert_eq!(compare_versions("weird", "weird"), Ordering::Equal);
    assert!(SemVer::parse("1.2.3-x-y.7+build.5").is_some());
}
