//! `appduct_status` connects without spawning a daemon or running the version check
//! (§M8.9).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use appduct_mcp::DaemonConnector;
use support::*;

// ---------------------------------------------------------------------------------------------
// `appduct_status` connects without spawning or checking versions
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_status_connection_neither_spawns_nor_runs_the_version_check() {
    let dir = tempfile::Builder::new()
        .prefix("adm")
        .tempdir_in("/tmp")
        .unwrap();
    // A daemon serving only daemon.status on the real socket: a daemon.hello (the version
    // check, which may replace an older daemon) would be an unregistered method.
    let fake = FakeDaemon::new(&["daemon.status"]);
    let listener = tokio::net::UnixListener::bind(dir.path().join("daemon.sock")).unwrap();
    let serving = fake.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(appduct_daemon::control_server::serve_connection(
                stream,
                serving.handler(),
                appduct_daemon::control_server::ServerOptions::default(),
            ));
        }
    });
    let mut options = appduct_client::client::ClientOptions::new(dir.path(), "appduct-mcp");
    options.version_policy.force_restart = true;
    let connector = appduct_mcp::SocketConnector::new(options);
    let client = connector.connect(false).await.unwrap();
    let status = client
        .call::<appduct_protocol::control::DaemonStatus>(Default::default())
        .await
        .unwrap();
    assert_eq!(status.wss_port, 8443);
    assert_eq!(fake.methods(), vec!["daemon.status".to_owned()]);
    fake.assert_no_unexpected();
    // Without a daemon, nothing is spawned: the state dir gains no pidfile or log.
    let empty = tempfile::Builder::new()
        .prefix("adm")
        .tempdir_in("/tmp")
        .unwrap();
    let options = appduct_client::client::ClientOptions::new(empty.path(), "appduct-mcp");
    let err = appduct_mcp::SocketConnector::new(options)
        .connect(false)
        .await
        .unwrap_err();
    assert!(
        matches!(err, appduct_client::client::ClientError::Unreachable { .. }),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
}
