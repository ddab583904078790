//! Injection-safe delivery helpers (SECURITY.md §4.9, §L6.4, §L6.3): every external command is an
//! argument vector for `adb` or `xcrun`, never a shell (SEC-41), and hostile app ids, serials
//! and UDIDs are refused before any command runs (SEC-40, helper level; the CLI-level proof
//! that nothing is minted is `cli/tests/security_delivery.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io;
use std::sync::Mutex;

use appduct_client::BoxFuture;
use appduct_client::command_runner::{
    CommandOutput, CommandRunner, ScriptedCommandRunner, TokioCommandRunner,
};
use appduct_client::delivery::{self, Delivery, DeliveryError, DeviceTarget, ErrorClass};
use appduct_client::project::{self, Platform, ProjectError, ResolveEnv};

/// The app ids of SEC-40: an option, a command list, whitespace and a quote.
const HOSTILE_IDS: [&str; 4] = ["-x", "a;rm -rf ~", "a b", "a'b"];
const LINK: &str = "myapp:///?appduct=AgR_AAABIPsQ&pin=sha256%2F47DEQpj8HBSa%2B%2FTImW%2B5JCeuQeRkm5NMpJWZG3hSuFU%3D";

/// Fake `adb` and `xcrun`: answer detection like the real tools (devicectl writes its JSON to
/// the file named after `--json-output`) and log every argument vector.
#[derive(Debug, Default)]
struct FakeTools {
    log: Mutex<Vec<Vec<String>>>,
}

impl FakeTools {
    fn argv(&self) -> Vec<Vec<String>> {
        self.log.lock().unwrap().clone()
    }
}

impl CommandRunner for FakeTools {
    fn run<'a>(
        &'a self,
        program: &'a str,
        args: &'a [String],
        _env: &'a [(String, String)],
    ) -> BoxFuture<'a, io::Result<CommandOutput>> {
        Box::pin(async move {
            let argv: Vec<String> = std::iter::once(program.to_owned())
                .chain(args.iter().cloned())
                .collect();
            self.log.lock().unwrap().push(argv);
            let stdout = match (program, args.first().map(String::as_str)) {
                ("adb", Some("devices")) => "List of devices attached\nemulator-5554\tdevice\n",
                ("xcrun", Some("simctl")) if args[1] == "list" => {
                    r#"{"devices":{"ios-18":[{"udid":"AAAA-1111","state":"Booted"}]}}"#
                }
                ("xcrun", Some("devicectl")) if args[1] == "list" => {
                    let at = args.iter().position(|a| a == "--json-output").unwrap();
                    std::fs::write(
                        &args[at + 1],
                        r#"{"result":{"devices":[{"hardwareProperties":{"udid":"00008030-001A2B3C4D5E802E"},
                            "connectionProperties":{"tunnelState":"connected"}}]}}"#,
                    )?;
                    ""
                }
                _ => "",
            };
            Ok(CommandOutput {
                code: Some(0),
                stdout: stdout.to_owned(),
                stderr: String::new(),
            })
        })
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// No shell anywhere: only `adb` and `xcrun` run, and no argument is a shell's `-c`.
fn assert_no_shell(argv: &[Vec<String>]) {
    for command in argv {
        assert!(
            matches!(command[0].as_str(), "adb" | "xcrun"),
            "unexpected program: {command:?}"
        );
        assert!(!command.iter().any(|a| a == "-c"), "{command:?}");
        for shell in ["sh", "bash", "/bin/sh", "zsh"] {
            assert!(!command.iter().any(|a| a == shell), "{command:?}");
        }
    }
}

/// SEC-41: detection and delivery for `android`, `ios-sim` and `ios-device` run exactly these
/// argument vectors and never `sh -c`.
#[tokio::test]
async fn sec_41_every_target_runs_argv_vectors_and_never_a_shell() {
    // android: detection, `adb reverse`, then `am start` with the link single-quoted for the
    // device shell (the only string that reaches a shell, SECURITY.md §4.9).
    let tools = FakeTools::default();
    let serial = delivery::detect(&tools, DeviceTarget::Android, None)
        .await
        .unwrap();
    let android = Delivery {
        target: DeviceTarget::Android,
        device: &serial,
        app_id: Some("com.example.shop"),
        relaunch: false,
        deep_link: LINK,
        port: 8443,
    };
    delivery::deliver(&tools, &android).await.unwrap();
    assert_eq!(
        tools.argv(),
        vec![
            strings(&["adb", "devices"]),
            strings(&[
                "adb",
                "-s",
                "emulator-5554",
                "reverse",
                "tcp:8443",
                "tcp:8443"
            ]),
            strings(&[
                "adb",
                "-s",
                "emulator-5554",
                "shell",
                "am",
                "start",
                "-a",
                "android.intent.action.VIEW",
                "-d",
                &format!("'{LINK}'"),
                "-p",
                "com.example.shop",
            ]),
        ]
    );
    assert_no_shell(&tools.argv());

    // ios-sim: detection, then `simctl openurl` with the link as one argument.
    let tools = FakeTools::default();
    let udid = delivery::detect(&tools, DeviceTarget::IosSim, None)
        .await
        .unwrap();
    let sim = Delivery {
        target: DeviceTarget::IosSim,
        device: &udid,
        app_id: None,
        ..android.clone()
    };
    delivery::deliver(&tools, &sim).await.unwrap();
    assert_eq!(
        tools.argv(),
        vec![
            strings(&["xcrun", "simctl", "list", "devices", "booted", "--json"]),
            strings(&["xcrun", "simctl", "openurl", "AAAA-1111", LINK]),
        ]
    );
    assert_no_shell(&tools.argv());

    // ios-device: detection through a temporary JSON file, then `devicectl ... launch` with
    // the bundle id last.
    let tools = FakeTools::default();
    let udid = delivery::detect(&tools, DeviceTarget::IosDevice, None)
        .await
        .unwrap();
    let device = Delivery {
        target: DeviceTarget::IosDevice,
        device: &udid,
        app_id: Some("com.example.shop"),
        relaunch: true,
        ..android.clone()
    };
    delivery::deliver(&tools, &device).await.unwrap();
    let argv = tools.argv();
    assert_eq!(argv.len(), 2);
    assert_eq!(
        argv[0][..7],
        strings(&[
            "xcrun",
            "devicectl",
            "list",
            "devices",
            "--timeout",
            "5",
            "--json-output"
        ])[..]
    );
    assert_eq!(argv[0].len(), 8, "{argv:?}");
    assert!(
        !std::path::Path::new(&argv[0][7]).exists(),
        "the detection file is removed"
    );
    assert_eq!(
        argv[1],
        strings(&[
            "xcrun",
            "devicectl",
            "device",
            "process",
            "launch",
            "--device",
            "00008030-001A2B3C4D5E802E",
            "--terminate-existing",
            "--payload-url",
            LINK,
            "com.example.shop",
        ])
    );
    assert_no_shell(&argv);
}

/// SEC-40 (helpers): the hostile app ids are refused by resolution, and even if a caller
/// skipped it, by the delivery helpers, before any command runs. Hostile serials and UDIDs
/// likewise; a link the device shell could misread is refused too.
#[tokio::test]
async fn sec_40_hostile_ids_and_links_are_refused_before_anything_runs() {
    let env = ResolveEnv {
        dir: std::env::temp_dir(),
        home: None,
        state_dir: None,
        env_scheme: None,
    };
    let runner = ScriptedCommandRunner::new();
    for id in HOSTILE_IDS {
        for platform in [Platform::Android, Platform::Ios] {
            let err = project::resolve_app_id(Some(id), platform, &env).unwrap_err();
            assert!(
                matches!(&err, ProjectError::InvalidAppId { id: got, .. } if got == id),
                "{id:?}: {err:?}"
            );
        }
        for target in [DeviceTarget::Android, DeviceTarget::IosDevice] {
            let d = Delivery {
                target,
                device: "emulator-5554",
                app_id: Some(id),
                relaunch: false,
                deep_link: LINK,
                port: 8443,
            };
            let err = delivery::deliver(&runner, &d).await.unwrap_err();
            assert!(
                matches!(err, DeliveryError::MissingAppId { .. }),
                "{id:?} on {target:?}: {err:?}"
            );
        }
    }
    for device in ["-s", "--help", "a;b", "a b", "a'b", "$(id)", ""] {
        for target in [
            DeviceTarget::Android,
            DeviceTarget::IosSim,
            DeviceTarget::IosDevice,
        ] {
            let err = delivery::check_device_shape(target, device, "--device").unwrap_err();
            assert_eq!(err.class(), ErrorClass::Argument, "{device:?}");
            let d = Delivery {
                target,
                device,
                app_id: Some("com.example.shop"),
                relaunch: false,
                deep_link: LINK,
                port: 8443,
            };
            assert!(
                delivery::deliver(&runner, &d).await.is_err(),
                "{device:?} on {target:?}"
            );
        }
    }
    for link in [
        "myapp:///?appduct=A'B",
        "myapp:///?appduct=A B",
        "myapp:///?appduct=A\nB",
    ] {
        let d = Delivery {
            target: DeviceTarget::Android,
            device: "emulator-5554",
            app_id: Some("com.example.shop"),
            relaunch: false,
            deep_link: link,
            port: 8443,
        };
        assert!(matches!(
            delivery::deliver(&runner, &d).await,
            Err(DeliveryError::UnsafeLink)
        ));
    }
    assert!(runner.invocations().is_empty(), "a command ran");
}

/// The production runner passes arguments to the program verbatim (no shell expands them).
#[tokio::test]
async fn the_production_runner_passes_hostile_arguments_verbatim() {
    let hostile = strings(&["a;rm -rf ~", "$(id)", "`id`", "a'b", "x > /tmp/y"]);
    let out = TokioCommandRunner::new()
        .run(
            "printf",
            &[vec!["%s|".to_owned()], hostile.clone()].concat(),
            &[],
        )
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, format!("{}|", hostile.join("|")));
}
