//! Link delivery for `sessions link --open android | ios-sim | ios-device` (05 §6.3, 02 §7):
//! device detection and the delivery commands, run as argument vectors through the
//! [`CommandRunner`] seam (30 s timeout, trimmed stderr), never through a shell.
//!
//! Architecture note: 02 §7 places these helpers in `appduct-daemon::delivery`, shared with the
//! MCP bridge; that module does not exist yet, so they live here as plain functions over the
//! daemon's `CommandRunner` seam and can move unchanged.

use std::io;
use std::path::PathBuf;

use appduct_daemon::seams::{CommandOutput, CommandRunner};
use serde_json::{Value, json};

use crate::command::OpenTarget;
use crate::error::CliError;

pub const ADB: &str = "adb";
pub const XCRUN: &str = "xcrun";

/// `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$` (02 §7).
pub fn is_valid_serial(s: &str) -> bool {
    let mut b = s.bytes();
    s.len() <= 128
        && b.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && b.all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-'))
}

/// `^[A-Za-z0-9][A-Za-z0-9-]{0,63}$` (02 §7).
pub fn is_valid_udid(s: &str) -> bool {
    let mut b = s.bytes();
    s.len() <= 64
        && b.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'-')
}

/// Checks a `--device` (or `ANDROID_SERIAL`) value against the target's shape; exit 64.
pub fn check_device_shape(target: OpenTarget, device: &str, origin: &str) -> Result<(), CliError> {
    let (ok, rule) = match target {
        OpenTarget::Android => (
            is_valid_serial(device),
            "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$",
        ),
        _ => (is_valid_udid(device), "^[A-Za-z0-9][A-Za-z0-9-]{0,63}$"),
    };
    if ok {
        Ok(())
    } else {
        Err(CliError::usage(format!(
            "{origin} \"{device}\" is not a valid device id for --open {}: it must match {rule}",
            target.as_str()
        )))
    }
}

/// The link passed to the device shell is single-quoted there, so it must hold no quote,
/// whitespace or control character (impossible for a composed link; defence in depth).
pub fn is_shell_safe_link(link: &str) -> bool {
    !link
        .chars()
        .any(|c| c == '\'' || c.is_whitespace() || c.is_control())
}

fn argv_of(program: &str, args: &[String]) -> Vec<String> {
    std::iter::once(program.to_owned())
        .chain(args.iter().cloned())
        .collect()
}

/// A command that exited non-zero: `connection_error` with `{argv, exitCode, stderr}`.
fn command_failed(program: &str, args: &[String], output: &CommandOutput) -> CliError {
    let argv = argv_of(program, args);
    let shown = argv.join(" ");
    let code = output
        .code
        .map_or_else(|| "a signal".to_owned(), |c| format!("status {c}"));
    CliError::connection(format!("`{shown}` failed with {code}"))
        .with_detail("argv", argv)
        .with_detail("exitCode", output.code.map_or(Value::Null, Value::from))
        .with_detail("stderr", output.stderr.as_str())
}

/// Runs one command; a missing executable or a timeout is a `connection_error` (exit 70).
async fn run(
    runner: &dyn CommandRunner,
    program: &str,
    args: Vec<String>,
) -> Result<CommandOutput, CliError> {
    runner.run(program, &args, &[]).await.map_err(|e| {
        let argv = argv_of(program, &args);
        let err = CliError::connection(format!("cannot run `{}`: {e}", argv.join(" ")))
            .with_detail("argv", argv);
        if e.kind() == io::ErrorKind::NotFound {
            let tool = match program {
                ADB => "adb (Android platform tools)",
                _ => "xcrun (Xcode command line tools)",
            };
            err.with_hint(format!(
                "Install {tool} and make sure `{program}` is on PATH."
            ))
        } else {
            err
        }
    })
}

/// Runs a command that must succeed.
async fn run_ok(
    runner: &dyn CommandRunner,
    program: &str,
    args: Vec<String>,
) -> Result<CommandOutput, CliError> {
    let output = run(runner, program, args.clone()).await?;
    if output.success() {
        Ok(output)
    } else {
        Err(command_failed(program, &args, &output))
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// Serials of `adb devices` lines in state `device`.
pub fn parse_adb_devices(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| !l.starts_with("List of devices") && !l.starts_with('*'))
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            match (parts.next(), parts.next()) {
                (Some(serial), Some("device")) if is_valid_serial(serial) => {
                    Some(serial.to_owned())
                }
                _ => None,
            }
        })
        .collect()
}

/// UDIDs of booted simulators in `xcrun simctl list devices booted --json`.
pub fn parse_simctl(stdout: &str) -> Vec<String> {
    let Ok(json) = serde_json::from_str::<Value>(stdout) else {
        return Vec::new();
    };
    let Some(runtimes) = json.get("devices").and_then(Value::as_object) else {
        return Vec::new();
    };
    runtimes
        .values()
        .filter_map(Value::as_array)
        .flatten()
        .filter(|d| d.get("state").and_then(Value::as_str) == Some("Booted"))
        .filter_map(|d| d.get("udid").and_then(Value::as_str))
        .filter(|u| is_valid_udid(u))
        .map(str::to_owned)
        .collect()
}

/// UDIDs of connected devices in the `devicectl list devices --json-output` document.
pub fn parse_devicectl(text: &str) -> Vec<String> {
    let Ok(json) = serde_json::from_str::<Value>(text) else {
        return Vec::new();
    };
    let Some(devices) = json.pointer("/result/devices").and_then(Value::as_array) else {
        return Vec::new();
    };
    devices
        .iter()
        .filter(|d| {
            d.pointer("/connectionProperties/tunnelState")
                .and_then(Value::as_str)
                != Some("unavailable")
        })
        .filter_map(|d| {
            d.pointer("/hardwareProperties/udid")
                .and_then(Value::as_str)
        })
        .filter(|u| is_valid_udid(u))
        .map(str::to_owned)
        .collect()
}

fn devicectl_output_path() -> PathBuf {
    let nonce = appduct_daemon::random::random_bytes::<8>()
        .map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>())
        .unwrap_or_default();
    std::env::temp_dir().join(format!(
        "appduct-devicectl-{}-{nonce}.json",
        std::process::id()
    ))
}

/// The detection command of `target`, as shown in messages.
pub fn detection_command(target: OpenTarget) -> &'static str {
    match target {
        OpenTarget::Android => "adb devices",
        OpenTarget::IosSim => "xcrun simctl list devices booted --json",
        _ => "xcrun devicectl list devices --timeout 5 --json-output <file>",
    }
}

/// Detects the candidate devices of `target` and picks one (05 §6.3 step 5): `requested`
/// (`--device`, else `ANDROID_SERIAL` for Android) when it is a candidate, else the only one.
pub async fn detect(
    runner: &dyn CommandRunner,
    target: OpenTarget,
    requested: Option<&str>,
) -> Result<String, CliError> {
    let candidates = match target {
        OpenTarget::Android => {
            let out = run_ok(runner, ADB, strings(&["devices"])).await?;
            parse_adb_devices(&out.stdout)
        }
        OpenTarget::IosSim => {
            let out = run_ok(
                runner,
                XCRUN,
                strings(&["simctl", "list", "devices", "booted", "--json"]),
            )
            .await?;
            parse_simctl(&out.stdout)
        }
        OpenTarget::IosDevice => {
            let path = devicectl_output_path();
            let mut args = strings(&["devicectl", "list", "devices", "--timeout", "5"]);
            args.push("--json-output".into());
            args.push(path.display().to_string());
            let result = run_ok(runner, XCRUN, args).await;
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let _ = std::fs::remove_file(&path);
            result?;
            parse_devicectl(&text)
        }
        OpenTarget::Web => return Err(CliError::internal("web links have no device")),
    };
    let command = detection_command(target);
    if candidates.is_empty() {
        return Err(CliError::connection(format!(
            "No {} device found by `{command}`",
            target.as_str()
        ))
        .with_detail("command", command));
    }
    let listing = |message: String| {
        CliError::usage(message)
            .with_detail("devices", candidates.clone())
            .with_hint("Pass --device <id> with one of the detected devices.")
    };
    match requested {
        Some(id) if candidates.iter().any(|c| c == id) => Ok(id.to_owned()),
        Some(id) => Err(listing(format!(
            "Device \"{id}\" is not among the detected {} devices: {}",
            target.as_str(),
            candidates.join(", ")
        ))),
        None if candidates.len() == 1 => Ok(candidates[0].clone()),
        None => Err(listing(format!(
            "Several {} devices are available ({}); choose one with --device",
            target.as_str(),
            candidates.join(", ")
        ))),
    }
}

/// What a delivery needs once the link exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery<'a> {
    pub target: OpenTarget,
    pub device: &'a str,
    /// Android application id or iOS bundle id.
    pub app_id: Option<&'a str>,
    pub relaunch: bool,
    pub deep_link: &'a str,
    /// The link's endpoint port (wss, or web for a web-transport link).
    pub port: u16,
}

/// The argument vectors of a delivery, in order (05 §6.3 table).
pub fn delivery_commands(d: &Delivery<'_>) -> Result<Vec<(&'static str, Vec<String>)>, CliError> {
    let app_id = || {
        d.app_id
            .ok_or_else(|| CliError::internal("delivery needs an app id"))
            .map(str::to_owned)
    };
    match d.target {
        OpenTarget::Android => {
            if !is_shell_safe_link(d.deep_link) {
                return Err(CliError::internal(
                    "the deep link holds a quote, whitespace or control character",
                ));
            }
            let tcp = format!("tcp:{}", d.port);
            Ok(vec![
                (
                    ADB,
                    vec![
                        "-s".into(),
                        d.device.into(),
                        "reverse".into(),
                        tcp.clone(),
                        tcp,
                    ],
                ),
                (
                    ADB,
                    vec![
                        "-s".into(),
                        d.device.into(),
                        "shell".into(),
                        "am".into(),
                        "start".into(),
                        "-a".into(),
                        "android.intent.action.VIEW".into(),
                        "-d".into(),
                        format!("'{}'", d.deep_link),
                        "-p".into(),
                        app_id()?,
                    ],
                ),
            ])
        }
        OpenTarget::IosSim => Ok(vec![(
            XCRUN,
            strings(&["simctl", "openurl", d.device, d.deep_link]),
        )]),
        OpenTarget::IosDevice => {
            let mut args = strings(&[
                "devicectl",
                "device",
                "process",
                "launch",
                "--device",
                d.device,
            ]);
            if d.relaunch {
                args.push("--terminate-existing".into());
            }
            args.push("--payload-url".into());
            args.push(d.deep_link.into());
            args.push(app_id()?);
            Ok(vec![(XCRUN, args)])
        }
        OpenTarget::Web => Ok(Vec::new()),
    }
}

/// Runs the delivery commands; the first failure stops it.
pub async fn deliver(runner: &dyn CommandRunner, d: &Delivery<'_>) -> Result<(), CliError> {
    for (program, args) in delivery_commands(d)? {
        run_ok(runner, program, args).await?;
    }
    Ok(())
}

/// `details` of a delivery failure always carry `argv`, `exitCode` and `stderr` (05 §6.3).
pub fn delivery_failure(err: CliError) -> CliError {
    let details = err.details.clone().unwrap_or_else(|| json!({}));
    let mut err = err;
    if details.get("exitCode").is_none() {
        err = err.with_detail("exitCode", Value::Null);
    }
    if details.get("stderr").is_none() {
        err = err.with_detail("stderr", "");
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;
    use appduct_daemon::seams::ScriptedCommandRunner;

    fn ok(stdout: &str) -> CommandOutput {
        CommandOutput {
            code: Some(0),
            stdout: stdout.into(),
            stderr: String::new(),
        }
    }

    fn block<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn id_shapes() {
        assert!(is_valid_serial("emulator-5554"));
        assert!(is_valid_serial("192.168.1.5:5555"));
        assert!(!is_valid_serial("-s"));
        assert!(!is_valid_serial("a b"));
        assert!(is_valid_udid("00008030-001A2B3C4D5E802E"));
        assert!(!is_valid_udid("a.b"));
        assert!(!is_valid_udid(""));
        assert!(check_device_shape(OpenTarget::Android, "--help", "--device").is_err());
        assert_eq!(
            check_device_shape(OpenTarget::IosSim, "x:y", "--device")
                .unwrap_err()
                .exit_code(),
            64
        );
    }

    #[test]
    fn parsers_keep_ready_devices_only() {
        let adb = "List of devices attached\nemulator-5554\tdevice\nR58M\tunauthorized\n\n";
        assert_eq!(parse_adb_devices(adb), vec!["emulator-5554"]);
        let sim = r#"{"devices":{"ios-18":[{"udid":"AAAA-1","state":"Booted"},{"udid":"B","state":"Shutdown"}]}}"#;
        assert_eq!(parse_simctl(sim), vec!["AAAA-1"]);
        assert!(parse_simctl("not json").is_empty());
        let ctl = r#"{"result":{"devices":[
            {"hardwareProperties":{"udid":"0001-A"},"connectionProperties":{"tunnelState":"connected"}},
            {"hardwareProperties":{"udid":"0002-B"},"connectionProperties":{"tunnelState":"unavailable"}}]}}"#;
        assert_eq!(parse_devicectl(ctl), vec!["0001-A"]);
    }

    #[test]
    fn detection_picks_the_requested_or_only_device() {
        let runner = ScriptedCommandRunner::new();
        runner.push_output(ok("List of devices attached\nemulator-5554\tdevice\n"));
        let got = block(detect(&runner, OpenTarget::Android, None)).unwrap();
        assert_eq!(got, "emulator-5554");
        assert_eq!(runner.invocations()[0].args, vec!["devices"]);

        let runner = ScriptedCommandRunner::new();
        runner.push_output(ok("List of devices attached\na\tdevice\nb\tdevice\n"));
        let e = block(detect(&runner, OpenTarget::Android, None)).unwrap_err();
        assert_eq!(e.exit_code(), 64);
        assert_eq!(e.details.clone().unwrap()["devices"], json!(["a", "b"]));

        let runner = ScriptedCommandRunner::new();
        runner.push_output(ok("List of devices attached\na\tdevice\n"));
        let e = block(detect(&runner, OpenTarget::Android, Some("zz"))).unwrap_err();
        assert_eq!(e.exit_code(), 64);

        let runner = ScriptedCommandRunner::new();
        runner.push_output(ok("List of devices attached\n"));
        let e = block(detect(&runner, OpenTarget::Android, None)).unwrap_err();
        assert_eq!(e.exit_code(), 70);
        assert!(e.message.contains("adb devices"));

        let runner = ScriptedCommandRunner::new();
        runner.push_error(io::ErrorKind::NotFound, "no such file");
        let e = block(detect(&runner, OpenTarget::IosSim, None)).unwrap_err();
        assert_eq!(e.exit_code(), 70);
        assert!(e.hint().unwrap().contains("xcrun"));
    }

    #[test]
    fn delivery_argument_vectors() {
        let link = "myapp:///?appduct=AAA&pin=sha256%2Fx";
        let android = Delivery {
            target: OpenTarget::Android,
            device: "emulator-5554",
            app_id: Some("com.example"),
            relaunch: false,
            deep_link: link,
            port: 8443,
        };
        let cmds = delivery_commands(&android).unwrap();
        assert_eq!(
            cmds[0].1,
            vec!["-s", "emulator-5554", "reverse", "tcp:8443", "tcp:8443"]
        );
        assert_eq!(
            cmds[1].1,
            vec![
                "-s",
                "emulator-5554",
                "shell",
                "am",
                "start",
                "-a",
                "android.intent.action.VIEW",
                "-d",
                "'myapp:///?appduct=AAA&pin=sha256%2Fx'",
                "-p",
                "com.example"
            ]
        );
        let sim = Delivery {
            target: OpenTarget::IosSim,
            app_id: None,
            device: "AAAA-1",
            ..android.clone()
        };
        assert_eq!(
            delivery_commands(&sim).unwrap()[0].1,
            vec!["simctl", "openurl", "AAAA-1", link]
        );
        let dev = Delivery {
            target: OpenTarget::IosDevice,
            device: "0001-A",
            relaunch: true,
            ..android.clone()
        };
        assert_eq!(
            delivery_commands(&dev).unwrap()[0].1,
            vec![
                "devicectl",
                "device",
                "process",
                "launch",
                "--device",
                "0001-A",
                "--terminate-existing",
                "--payload-url",
                link,
                "com.example"
            ]
        );
        let unsafe_link = Delivery {
            deep_link: "x:///?a='b'",
            ..android
        };
        assert!(delivery_commands(&unsafe_link).is_err());
    }

    #[test]
    fn a_failed_command_reports_argv_exit_code_and_stderr() {
        let runner = ScriptedCommandRunner::new();
        runner.push_output(CommandOutput {
            code: Some(1),
            stdout: String::new(),
            stderr: "error: device offline".into(),
        });
        let d = Delivery {
            target: OpenTarget::IosSim,
            device: "AAAA-1",
            app_id: None,
            relaunch: false,
            deep_link: "myapp:///?appduct=A",
            port: 1,
        };
        let e = block(deliver(&runner, &d)).unwrap_err();
        assert_eq!(e.exit_code(), 70);
        let details = e.details.clone().unwrap();
        assert_eq!(details["argv"][0], "xcrun");
        assert_eq!(details["exitCode"], 1);
        assert_eq!(details["stderr"], "error: device offline");
    }
}
