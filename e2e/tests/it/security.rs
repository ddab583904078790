//! Release security tests across processes (SECURITY.md §8): a failed explicit delivery revokes the
//! minted link (SEC-42), app-supplied strings cannot inject terminal escapes into human CLI
//! output (SEC-48), and no key material is committed (SEC-54).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use appduct_e2e::device::{Link, RawDevice, mint};
use appduct_e2e::harness::{Proc, Ran, Sandbox};
use appduct_e2e::{OrFail as _, blocking};
use serde_json::{Value, json};

const CONFIG: &str = r#"{"wssPort": 0, "advertisedIp": "127.0.0.1"}"#;
const WAIT: Duration = Duration::from_secs(10);

/// Runs `appduct --state-dir … <args>` with `bin` first on PATH.
fn run_with_path(sb: &Sandbox, bin: &Path, args: &[&str]) -> Ran {
    let mut cmd = sb.command(args);
    let path = std::env::var("PATH").unwrap_or_default();
    cmd.env("PATH", format!("{}:{path}", bin.display()));
    Proc::spawn(cmd).or_fail().finish(WAIT).or_fail()
}

/// A fake `adb` logging each argument vector (joined by `|`) to `log`: one device, a working
/// `reverse`, and an `am start` that fails like an app that is not installed.
fn fake_adb(dir: &Path, log: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).or_fail();
    let script = format!(
        "#!/bin/sh\nIFS='|'; echo \"$*\" >> '{}'\n\
         case \"$1\" in devices) printf 'List of devices attached\\nemulator-5554\\tdevice\\n';; esac\n\
         case \"$*\" in *'|shell|'*) echo 'Error: Activity not started, unable to resolve Intent' >&2; exit 1;; esac\n\
         exit 0\n",
        log.display()
    );
    let adb = bin.join("adb");
    std::fs::write(&adb, script).or_fail();
    std::fs::set_permissions(&adb, std::fs::Permissions::from_mode(0o755)).or_fail();
    bin
}

/// SEC-42: when delivery fails after `link.create`, the CLI revokes the new link: a claim with
/// its token, taken from what reached the device, gets `1008 unknown_session`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sec_42_a_failed_delivery_revokes_the_minted_link() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let log = sb.home().join("adb.log");
    let bin = fake_adb(&sb.home(), &log);
    let ran = blocking(|| {
        run_with_path(
            &sb,
            &bin,
            &[
                "--json",
                "sessions",
                "link",
                "--open",
                "android",
                "--app-id",
                "com.example.shop",
                "--scheme",
                "e2e",
            ],
        )
    });
    assert_eq!(ran.code, 70, "{ran:?}");
    let doc: Value = serde_json::from_str(&ran.stdout).or_fail();
    assert_eq!(doc["error"]["details"]["argv"][4], "am", "{doc}");
    assert_eq!(doc["error"]["details"]["exitCode"], 1, "{doc}");

    // The deep link did reach the device shell (single-quoted), so its token is known.
    let lines = std::fs::read_to_string(&log).or_fail();
    let am = lines
        .lines()
        .find(|l| l.contains("|am|start|"))
        .unwrap_or_else(|| panic!("no am start in {lines}"));
    let quoted = am
        .split('|')
        .find(|a| a.starts_with('\''))
        .unwrap_or_else(|| panic!("no quoted link in {am}"));
    let deep_link = quoted.trim_matches('\'');
    let link = Link::from_data(&json!({ "deepLink": deep_link })).or_fail();

    let status = blocking(|| sb.status()).or_fail();
    assert_eq!(status["daemon"]["pendingLinks"], 0, "{status}");
    let mut device = RawDevice::open(&link.endpoint()).await.or_fail();
    device
        .send_text(link.claim_frame(&link.token, "Attacker"))
        .await
        .or_fail();
    let closed = device
        .next_frame()
        .await
        .or_fail()
        .err()
        .unwrap_or_else(|| panic!("the undelivered link was still claimable"));
    assert_eq!(
        (closed.code, closed.reason.as_str()),
        (Some(1008), "unknown_session")
    );
}

/// Escape sequences an app could hide in its strings: an OSC title change, a screen clear,
/// and the 8-bit CSI (C1 `U+009B`).
const OSC_TITLE: &str = "\u{1b}]0;x\u{07}";
const CLEAR: &str = "\u{1b}[2J";
const C1_CSI: &str = "\u{9b}31m";

fn assert_no_escapes(what: &str, ran: &Ran) {
    for (stream, text) in [("stdout", &ran.stdout), ("stderr", &ran.stderr)] {
        for bad in ['\u{1b}', '\u{07}', '\u{9b}'] {
            assert!(
                !text.contains(bad),
                "{what}: {stream} carries U+{:04X}: {text:?}",
                bad as u32
            );
        }
    }
}

/// SEC-48: a tool description holding `ESC ] 0 ; x BEL` and `ESC [ 2 J` (and a C1 CSI) prints
/// without ESC, BEL or C1 bytes in human CLI output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sec_48_tool_descriptions_cannot_inject_terminal_escapes() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let (mut device, _ack) = RawDevice::claim(&link, "Pixel 8").await.or_fail();
    let description = format!("Sets the title {OSC_TITLE} and clears {CLEAR} the screen {C1_CSI}.");
    device
        .register(json!([{"name": "evil", "description": description}]))
        .await
        .or_fail();
    assert!(blocking(
        || sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["toolCount"] == 1)
    ));

    for args in [
        vec!["tools", "ls"],
        vec!["tools", "ls", "--full"],
        vec!["tools", "describe", "evil"],
    ] {
        let ran = blocking(|| sb.run(&args)).or_fail();
        assert_eq!(ran.code, 0, "{args:?}: {ran:?}");
        assert!(ran.stdout.contains("evil"), "{args:?}: {}", ran.stdout);
        assert!(
            ran.stdout.contains("Sets the title"),
            "{args:?}: {}",
            ran.stdout
        );
        assert_no_escapes(&args.join(" "), &ran);
    }
    // The description itself travels intact in `--json` (C0 escaped by JSON).
    let listed = blocking(|| sb.data(&["tools", "describe", "evil"])).or_fail();
    assert_eq!(listed["description"], json!(description));
}

/// SEC-54: `git ls-files '*.pem' '*.key'` is empty, and no tracked file holds a PEM private
/// key block (tests generate their keys at runtime).
#[test]
fn sec_54_no_key_material_is_committed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| panic!("no workspace root"))
        .to_path_buf();
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(args)
            .output()
            .or_fail()
    };
    let inside = git(&["rev-parse", "--is-inside-work-tree"]);
    if !inside.status.success() {
        eprintln!("skipping: {} is not a git work tree", root.display());
        return;
    }
    let keys = git(&["ls-files", "*.pem", "*.key"]);
    assert!(keys.status.success());
    assert_eq!(
        String::from_utf8_lossy(&keys.stdout),
        "",
        "key files are committed"
    );

    let files = git(&["ls-files", "-z"]);
    assert!(files.status.success());
    for name in files.stdout.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let path = root.join(String::from_utf8_lossy(name).as_ref());
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue; // binary or gone from the work tree
        };
        assert!(
            !holds_private_key_block(&text),
            "{} holds a PEM private key",
            path.display()
        );
    }
}

/// A `-----BEGIN … PRIVATE KEY-----` line followed by a line of base64 (a real key body, not a
/// label mentioned in code or docs).
fn holds_private_key_block(text: &str) -> bool {
    let mut lines = text.lines().map(str::trim);
    while let Some(line) = lines.next() {
        if line.starts_with("-----BEGIN ") && line.ends_with("PRIVATE KEY-----") {
            let body = lines.next().unwrap_or_default();
            if body.len() >= 40
                && body
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
            {
                return true;
            }
        }
    }
    false
}

#[test]
fn the_key_block_detector_finds_bodies_and_ignores_labels() {
    let body = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg";
    assert!(holds_private_key_block(&format!(
        "-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n"
    )));
    assert!(holds_private_key_block(&format!(
        "x\n  -----BEGIN EC PRIVATE KEY-----\n  {body}\n"
    )));
    assert!(!holds_private_key_block(
        "assert!(text.starts_with(\"-----BEGIN PRIVATE KEY-----\\n\"));"
    ));
    assert!(!holds_private_key_block(
        "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n"
    ));
}

/// SECURITY.md §4.13 beyond SEC-48: every other app-supplied string in human output — a tool error's
/// message, a result, an event payload — is printed without C0/C1 control characters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_errors_results_and_payloads_print_without_control_characters() {
    let sb = Sandbox::with_config(CONFIG).or_fail();
    let link = blocking(|| mint(&sb, &[])).or_fail();
    let (mut device, _ack) = RawDevice::claim(&link, "Pixel 8").await.or_fail();
    device
        .register(json!([{"name": "evil", "description": "Returns hostile strings."}]))
        .await
        .or_fail();
    assert!(blocking(
        || sb.wait_sessions(WAIT, |l| l.len() == 1 && l[0]["toolCount"] == 1)
    ));
    let hostile = format!("x {OSC_TITLE} {CLEAR} {C1_CSI}");
    for answer_with_error in [true, false] {
        let ran = std::thread::scope(|scope| {
            let cli = scope.spawn(|| sb.run(&["tools", "call", "evil"]).or_fail());
            let runtime = tokio::runtime::Handle::current();
            blocking(|| {
                runtime.block_on(async {
                    let call = device.expect_frame("tool_call").await.or_fail();
                    if answer_with_error {
                        device
                            .reply_error(&call, "tool_execution_error", &hostile)
                            .await
                            .or_fail();
                    } else {
                        device
                            .reply(&call, json!({"text": hostile}))
                            .await
                            .or_fail();
                    }
                })
            });
            cli.join().unwrap_or_else(|_| panic!("tools call panicked"))
        });
        assert_eq!(ran.code, if answer_with_error { 72 } else { 0 }, "{ran:?}");
        assert_no_escapes("tools call", &ran);
    }
    device
        .send_frame(json!({"type": "event", "name": "e", "ts": 0, "payload": {"x": hostile}}))
        .await
        .or_fail();
    let ran = blocking(|| sb.run(&["events", "since", "pixel-8", "0"])).or_fail();
    assert_eq!(ran.code, 0, "{ran:?}");
    assert_no_escapes("events since", &ran);
}
