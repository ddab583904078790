//! SEC-40 at the command line (SECURITY.md §4.9, §L6.3): `sessions link --open` refuses the hostile
//! app ids `-x`, `a;rm -rf ~`, `a b` and `a'b` (and hostile device ids) with exit 64 before any
//! delivery tool runs and before `link.create`: no link is pending afterwards.
#![allow(clippy::unwrap_used)]

use crate::support;

use serde_json::json;
use support::{exists, sandbox, write_script};

#[test]
fn sec_40_hostile_ids_are_refused_before_link_create() {
    let mut sb = sandbox();
    let bin = sb.root().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = sb.root().join("tools.log");
    for tool in ["adb", "xcrun"] {
        write_script(
            &bin.join(tool),
            &format!("echo \"{tool} $*\" >> '{}'\nexit 0\n", log.display()),
        );
    }
    sb.set_path_prefix(bin);

    for id in ["-x", "a;rm -rf ~", "a b", "a'b"] {
        for open in ["android", "ios-device"] {
            // `--app-id=<id>` so that `-x` reaches the validator instead of the flag parser.
            let flag = format!("--app-id={id}");
            let (code, doc) = sb.json(&[
                "sessions", "link", "--open", open, &flag, "--scheme", "myapp",
            ]);
            assert_eq!(code, 64, "{open} {id:?}: {doc}");
            assert_eq!(doc["error"]["type"], "usage_error", "{open} {id:?}: {doc}");
        }
    }
    for device in ["-s", "a;b", "a b", "a'b", "$(id)"] {
        let flag = format!("--device={device}");
        let (code, doc) = sb.json(&[
            "sessions",
            "link",
            "--open",
            "android",
            "--app-id",
            "com.example.shop",
            "--scheme",
            "myapp",
            &flag,
        ]);
        assert_eq!(code, 64, "{device:?}: {doc}");
    }
    assert!(!exists(&log), "a delivery tool ran");
    assert!(
        !exists(&sb.socket()),
        "the daemon was contacted for a refused command"
    );

    // Nothing is pending (`sessions ls` never lists pending links; the status counts them).
    assert_eq!(sb.ok(&["sessions", "ls"]), json!([]));
    assert_eq!(sb.ok(&["daemon", "status"])["daemon"]["pendingLinks"], 0);
    sb.ok(&["daemon", "stop"]);
}
