//! Client side: link delivery to a device (§L6.4, §L6.3, §M8.1), shared by
//! `appduct sessions link --open` and `appduct_connect`: device detection, the loopback address
//! rule, the composed deep link of a minted link, and the delivery commands, run as argument
//! vectors through the [`CommandRunner`] seam (30 s timeout, trimmed stderr), never through a
//! shell. Everything runs in the caller's process, never in the daemon.
//!
//! Order of work is the caller's (every input validated before `link.create`, revoke on a
//! failed delivery); these helpers are the steps, so both frontends run the same argv.
//! Failures are [`DeliveryError`]s; [`DeliveryError::class`] tells a frontend how to report one
//! (CLI exit 64/70, bridge `invalid_request`/`tool_execution_error`).

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use appduct_protocol::control::{LinkCreateResult, Transport};
use appduct_protocol::link::{ComposeError, compose_deep_link, compose_sealed_deep_link};
use appduct_protocol::pin::{PinError, SpkiPin};
use serde_json::{Value, json};

use crate::command_runner::{CommandOutput, CommandRunner};
use crate::project::is_valid_app_id;

pub const ADB: &str = "adb";
pub const XCRUN: &str = "xcrun";
/// Android serial rule (§L6.4, project decision), as shown in messages.
pub const SERIAL_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$";
/// Device UDID rule (§L6.4, project decision), as shown in messages.
pub const UDID_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9-]{0,63}$";
/// The variable naming the default Android device (§L2.2, §L6.4).
pub const ANDROID_SERIAL_ENV: &str = "ANDROID_SERIAL";

/// A target that delivery opens a link on (`web` and QR results run no command).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceTarget {
    Android,
    IosSim,
    /// Experimental: a physical iOS device through `devicectl`; never auto-detected.
    IosDevice,
}

impl DeviceTarget {
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceTarget::Android => "android",
            DeviceTarget::IosSim => "ios-sim",
            DeviceTarget::IosDevice => "ios-device",
        }
    }

    /// `android`, `ios-sim` or `ios-device`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "android" => Some(DeviceTarget::Android),
            "ios-sim" => Some(DeviceTarget::IosSim),
            "ios-device" => Some(DeviceTarget::IosDevice),
            _ => None,
        }
    }

    /// The detection command, as shown in messages.
    pub fn detection_command(self) -> &'static str {
        match self {
            DeviceTarget::Android => "adb devices",
            DeviceTarget::IosSim => "xcrun simctl list devices booted --json",
            DeviceTarget::IosDevice => {
                "xcrun devicectl list devices --timeout 5 --json-output <file>"
            }
        }
    }

    /// Whether the device reaches the host's loopback (emulator via `adb reverse`, simulator
    /// directly), so a native link is minted for `127.0.0.1` (§L6.4).
    pub fn reaches_loopback(self) -> bool {
        matches!(self, DeviceTarget::Android | DeviceTarget::IosSim)
    }

    /// The device-id rule of this target.
    pub fn device_pattern(self) -> &'static str {
        match self {
            DeviceTarget::Android => SERIAL_PATTERN,
            _ => UDID_PATTERN,
        }
    }

    /// Whether `device` has this target's serial or UDID shape.
    pub fn is_valid_device(self, device: &str) -> bool {
        match self {
            DeviceTarget::Android => is_valid_serial(device),
            _ => is_valid_udid(device),
        }
    }

    /// The app id delivery needs: Android application id, iOS bundle id, none for a simulator
    /// (`openurl` needs no app id and one is refused, §L6.4).
    pub fn app_id_platform(self) -> Option<crate::project::Platform> {
        match self {
            DeviceTarget::Android => Some(crate::project::Platform::Android),
            DeviceTarget::IosSim => None,
            DeviceTarget::IosDevice => Some(crate::project::Platform::Ios),
        }
    }
}

/// `addressOverride` of `link.create` (§D2.6, §L6.4): `127.0.0.1` for a native or sealed link to a
/// target that reaches the host's loopback (both listen on the wss port); nothing for a
/// web-transport link (the daemon refuses the pair) or a link that keeps the advertised LAN
/// address (`ios-device`, QR).
pub fn address_override(target: Option<DeviceTarget>, transport: Transport) -> Option<IpAddr> {
    (transport != Transport::Web && target.is_some_and(DeviceTarget::reaches_loopback))
        .then_some(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// Whether an advertised address is loopback, which a physical device cannot reach (`ios-device`
/// is refused before minting, §L6.3 step 4).
pub fn is_loopback_address(address: &str) -> bool {
    address.parse::<IpAddr>().is_ok_and(|a| a.is_loopback())
}

/// Why the deep link of a minted link could not be composed (a daemon bug, never the user's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeepLinkError {
    #[error("the daemon sent an invalid pin \"{pin}\": {error}")]
    Pin { pin: String, error: PinError },
    #[error("cannot compose the deep link: {0}")]
    Compose(#[from] ComposeError),
}

/// The deep link of a minted link (§D5.1) with the one shared composer: the pin for the
/// native transport, none for web and sealed (the sealed payload carries the daemon's key). Both frontends call this, so their links are byte-identical
/// for the same `link.create` result and scheme.
pub fn deep_link(scheme: &str, link: &LinkCreateResult) -> Result<String, DeepLinkError> {
    let pin = match link.transport {
        Transport::Native => {
            Some(
                SpkiPin::parse(&link.pin).map_err(|error| DeepLinkError::Pin {
                    pin: link.pin.clone(),
                    error,
                })?,
            )
        }
        Transport::Web => None,
        // The sealed payload carries the daemon's key; no pin (PROTOCOL.md "Sealed transport").
        Transport::Sealed => {
            return Ok(compose_sealed_deep_link(scheme, &link.deep_link_payload)?);
        }
    };
    Ok(compose_deep_link(
        scheme,
        &link.deep_link_payload,
        pin.as_ref(),
    )?)
}

/// `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$` (§L6.4).
pub fn is_valid_serial(s: &str) -> bool {
    let mut b = s.bytes();
    s.len() <= 128
        && b.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && b.all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-'))
}

/// `^[A-Za-z0-9][A-Za-z0-9-]{0,63}$` (§L6.4).
pub fn is_valid_udid(s: &str) -> bool {
    let mut b = s.bytes();
    s.len() <= 64
        && b.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'-')
}

/// Checks a requested device against the target's shape; `origin` names where it came from
/// (`--device`, `"device"`, `ANDROID_SERIAL`).
pub fn check_device_shape(
    target: DeviceTarget,
    device: &str,
    origin: &str,
) -> Result<(), DeliveryError> {
    if target.is_valid_device(device) {
        Ok(())
    } else {
        Err(DeliveryError::InvalidDevice {
            target,
            device: device.to_owned(),
            origin: origin.to_owned(),
        })
    }
}

/// The link passed to the device shell is single-quoted there, so it must hold no quote,
/// whitespace or control character (impossible for a composed link; defence in depth).
pub fn is_shell_safe_link(link: &str) -> bool {
    !link
        .chars()
        .any(|c| c == '\'' || c.is_whitespace() || c.is_control())
}

/// How a frontend reports a [`DeliveryError`] (§L6.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The caller's arguments (device shape, several or unknown candidates): CLI exit 64,
    /// bridge `invalid_request` listing the candidates.
    Argument,
    /// Detection found no device: CLI `connection_error` (70), bridge `tool_execution_error`,
    /// both naming the detection command.
    NoDevice,
    /// A command could not run or failed: CLI `connection_error` (70), bridge
    /// `tool_execution_error`, with `details: {argv, exitCode, stderr}`.
    Command,
    /// A broken invariant of the caller (no app id, an unquotable link).
    Internal,
}

/// A failed detection or delivery step.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error(
        "{origin} \"{device}\" is not a valid device id for {target}: it must match {pattern}",
        target = target.as_str(),
        pattern = target.device_pattern()
    )]
    InvalidDevice {
        target: DeviceTarget,
        device: String,
        origin: String,
    },
    #[error("No {} device found by `{}`", target.as_str(), target.detection_command())]
    NoDevice { target: DeviceTarget },
    #[error(
        "Several {} devices are available ({}); choose one",
        target.as_str(),
        candidates.join(", ")
    )]
    SeveralDevices {
        target: DeviceTarget,
        candidates: Vec<String>,
    },
    #[error(
        "Device \"{device}\" is not among the detected {} devices: {}",
        target.as_str(),
        candidates.join(", ")
    )]
    UnknownDevice {
        target: DeviceTarget,
        device: String,
        candidates: Vec<String>,
    },
    #[error("cannot run `{}`: {source}", argv.join(" "))]
    CannotRun {
        argv: Vec<String>,
        source: io::Error,
    },
    #[error("`{}` failed with {}", argv.join(" "), exit_text(*exit_code))]
    CommandFailed {
        argv: Vec<String>,
        exit_code: Option<i32>,
        /// Already trimmed to at most 4096 characters by the runner.
        stderr: String,
    },
    #[error("delivery to {} needs an app id", target.as_str())]
    MissingAppId { target: DeviceTarget },
    #[error("the deep link holds a quote, whitespace or control character")]
    UnsafeLink,
}

fn exit_text(code: Option<i32>) -> String {
    code.map_or_else(|| "a signal".to_owned(), |c| format!("status {c}"))
}

impl DeliveryError {
    pub fn class(&self) -> ErrorClass {
        match self {
            DeliveryError::InvalidDevice { .. }
            | DeliveryError::SeveralDevices { .. }
            | DeliveryError::UnknownDevice { .. } => ErrorClass::Argument,
            DeliveryError::NoDevice { .. } => ErrorClass::NoDevice,
            DeliveryError::CannotRun { .. } | DeliveryError::CommandFailed { .. } => {
                ErrorClass::Command
            }
            DeliveryError::MissingAppId { .. } | DeliveryError::UnsafeLink => ErrorClass::Internal,
        }
    }

    /// Machine-readable `details` (without a hint): the candidates as `devices`, the
    /// detection `command`, or a command's `{argv, exitCode, stderr}` (§L6.3 step 7).
    pub fn details(&self) -> Option<Value> {
        match self {
            DeliveryError::InvalidDevice { target, device, .. } => Some(json!({
                "target": target.as_str(), "device": device, "pattern": target.device_pattern(),
            })),
            DeliveryError::NoDevice { target } => Some(json!({
                "target": target.as_str(), "command": target.detection_command(),
            })),
            DeliveryError::SeveralDevices { target, candidates } => Some(json!({
                "target": target.as_str(), "devices": candidates,
            })),
            DeliveryError::UnknownDevice {
                target,
                device,
                candidates,
            } => Some(json!({
                "target": target.as_str(), "device": device, "devices": candidates,
            })),
            DeliveryError::CannotRun { argv, .. } => Some(json!({
                "argv": argv, "exitCode": null, "stderr": "",
            })),
            DeliveryError::CommandFailed {
                argv,
                exit_code,
                stderr,
            } => Some(json!({
                "argv": argv, "exitCode": exit_code, "stderr": stderr,
            })),
            DeliveryError::MissingAppId { .. } | DeliveryError::UnsafeLink => None,
        }
    }

    /// A missing `adb` or `xcrun` names the tool to install (§L6.3).
    pub fn hint(&self) -> Option<String> {
        let DeliveryError::CannotRun { argv, source } = self else {
            return None;
        };
        if source.kind() != io::ErrorKind::NotFound {
            return None;
        }
        let program = argv.first().map(String::as_str).unwrap_or_default();
        let tool = match program {
            ADB => "adb (Android platform tools)",
            _ => "xcrun (Xcode command line tools)",
        };
        Some(format!(
            "Install {tool} and make sure `{program}` is on PATH."
        ))
    }

    /// The candidate devices of an argument error, for frontends that list them.
    pub fn candidates(&self) -> &[String] {
        match self {
            DeliveryError::SeveralDevices { candidates, .. }
            | DeliveryError::UnknownDevice { candidates, .. } => candidates,
            _ => &[],
        }
    }
}

fn argv_of(program: &str, args: &[String]) -> Vec<String> {
    std::iter::once(program.to_owned())
        .chain(args.iter().cloned())
        .collect()
}

/// Runs a command that must succeed.
async fn run_ok(
    runner: &dyn CommandRunner,
    program: &str,
    args: Vec<String>,
) -> Result<CommandOutput, DeliveryError> {
    let output =
        runner
            .run(program, &args, &[])
            .await
            .map_err(|source| DeliveryError::CannotRun {
                argv: argv_of(program, &args),
                source,
            })?;
    if output.success() {
        Ok(output)
    } else {
        Err(DeliveryError::CommandFailed {
            argv: argv_of(program, &args),
            exit_code: output.code,
            stderr: output.stderr,
        })
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
    let nonce = crate::random::random_bytes::<8>()
        .map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>())
        .unwrap_or_default();
    std::env::temp_dir().join(format!(
        "appduct-devicectl-{}-{nonce}.json",
        std::process::id()
    ))
}

/// Runs the detection command of `target` and returns the ready devices, in its order.
pub async fn detect_candidates(
    runner: &dyn CommandRunner,
    target: DeviceTarget,
) -> Result<Vec<String>, DeliveryError> {
    Ok(match target {
        DeviceTarget::Android => {
            let out = run_ok(runner, ADB, strings(&["devices"])).await?;
            parse_adb_devices(&out.stdout)
        }
        DeviceTarget::IosSim => {
            let args = strings(&["simctl", "list", "devices", "booted", "--json"]);
            parse_simctl(&run_ok(runner, XCRUN, args).await?.stdout)
        }
        DeviceTarget::IosDevice => {
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
    })
}

/// Picks the device (§L6.3 step 5): `requested` when it is a candidate, else the only one.
pub fn choose_device(
    target: DeviceTarget,
    candidates: Vec<String>,
    requested: Option<&str>,
) -> Result<String, DeliveryError> {
    match (requested, candidates.as_slice()) {
        (_, []) => Err(DeliveryError::NoDevice { target }),
        (Some(id), _) if candidates.iter().any(|c| c == id) => Ok(id.to_owned()),
        (Some(id), _) => Err(DeliveryError::UnknownDevice {
            target,
            device: id.to_owned(),
            candidates,
        }),
        (None, [one]) => Ok(one.clone()),
        (None, _) => Err(DeliveryError::SeveralDevices { target, candidates }),
    }
}

/// Detects the devices of `target` and picks one: `requested` (`--device`, the bridge's
/// `device`, else `ANDROID_SERIAL` for Android) when it is a candidate, else the only one. The
/// detection command always runs, so a named device is checked too (§L6.4).
pub async fn detect(
    runner: &dyn CommandRunner,
    target: DeviceTarget,
    requested: Option<&str>,
) -> Result<String, DeliveryError> {
    let candidates = detect_candidates(runner, target).await?;
    choose_device(target, candidates, requested)
}

/// What a delivery needs once the link exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery<'a> {
    pub target: DeviceTarget,
    pub device: &'a str,
    /// Android application id or iOS bundle id (none for a simulator).
    pub app_id: Option<&'a str>,
    /// `ios-device` only: `--terminate-existing`.
    pub relaunch: bool,
    pub deep_link: &'a str,
    /// The link's endpoint port (wss, or web for a web-transport link).
    pub port: u16,
}

/// One command of a delivery: program and arguments.
pub type Command = (&'static str, Vec<String>);

/// The argument vectors of a delivery, in order (§L6.4, §L6.3 table).
pub fn delivery_commands(d: &Delivery<'_>) -> Result<Vec<Command>, DeliveryError> {
    let app_id = || match d.app_id {
        Some(id) if is_valid_app_id(id) => Ok(id.to_owned()),
        _ => Err(DeliveryError::MissingAppId { target: d.target }),
    };
    if !d.target.is_valid_device(d.device) {
        return Err(DeliveryError::InvalidDevice {
            target: d.target,
            device: d.device.to_owned(),
            origin: "device".into(),
        });
    }
    match d.target {
        DeviceTarget::Android => {
            if !is_shell_safe_link(d.deep_link) {
                return Err(DeliveryError::UnsafeLink);
            }
            let tcp = format!("tcp:{}", d.port);
            let serial = d.device.to_owned();
            Ok(vec![
                (
                    ADB,
                    vec![
                        "-s".into(),
                        serial.clone(),
                        "reverse".into(),
                        tcp.clone(),
                        tcp,
                    ],
                ),
                (
                    ADB,
                    vec![
                        "-s".into(),
                        serial,
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
        DeviceTarget::IosSim => Ok(vec![(
            XCRUN,
            strings(&["simctl", "openurl", d.device, d.deep_link]),
        )]),
        DeviceTarget::IosDevice => {
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
    }
}

/// Runs the delivery commands; the first failure stops it. The caller revokes the link when
/// this fails (§L6.4).
pub async fn deliver(runner: &dyn CommandRunner, d: &Delivery<'_>) -> Result<(), DeliveryError> {
    for (program, args) in delivery_commands(d)? {
        run_ok(runner, program, args).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command_runner::ScriptedCommandRunner;

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
        assert!(!is_valid_serial(&"a".repeat(129)));
        assert!(is_valid_udid("00008030-001A2B3C4D5E802E"));
        assert!(!is_valid_udid("a.b"));
        assert!(!is_valid_udid(""));
        assert!(check_device_shape(DeviceTarget::Android, "emulator-5554", "--device").is_ok());
        let e = check_device_shape(DeviceTarget::Android, "--help", "--device").unwrap_err();
        assert_eq!(e.class(), ErrorClass::Argument);
        let e = check_device_shape(DeviceTarget::IosSim, "x:y", "\"device\"").unwrap_err();
        assert_eq!(e.class(), ErrorClass::Argument);
        assert!(
            e.to_string()
                .starts_with("\"device\" \"x:y\" is not a valid device id for ios-sim"),
            "{e}"
        );
    }

    #[test]
    fn targets_parse_and_only_local_native_links_use_loopback() {
        for t in [
            DeviceTarget::Android,
            DeviceTarget::IosSim,
            DeviceTarget::IosDevice,
        ] {
            assert_eq!(DeviceTarget::parse(t.as_str()), Some(t));
        }
        assert_eq!(DeviceTarget::parse("web"), None);
        let lo = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(
            address_override(Some(DeviceTarget::Android), Transport::Native),
            lo
        );
        assert_eq!(
            address_override(Some(DeviceTarget::IosSim), Transport::Native),
            lo
        );
        assert_eq!(
            address_override(Some(DeviceTarget::IosDevice), Transport::Native),
            None
        );
        assert_eq!(address_override(None, Transport::Native), None);
        assert_eq!(
            address_override(Some(DeviceTarget::Android), Transport::Web),
            None
        );
        assert!(is_loopback_address("127.0.0.1"));
        assert!(is_loopback_address("::1"));
        assert!(!is_loopback_address("192.168.1.20"));
        assert!(!is_loopback_address("not an ip"));
    }

    #[test]
    fn deep_links_carry_the_pin_only_for_the_native_transport() {
        use appduct_protocol::bootstrap::{BootstrapPayload, Decoded};
        use appduct_protocol::control::Endpoint;
        let payload = BootstrapPayload::try_from(&Decoded::new(
            4,
            "127.0.0.1",
            8443,
            "Zk3pQ0mX8sL1vB2n",
            "A".repeat(43),
            1_764_494_223,
        ))
        .unwrap()
        .encode()
        .unwrap();
        let pin = "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=";
        let mut link = LinkCreateResult::new(
            "Zk3pQ0mX8sL1vB2n",
            Transport::Native,
            payload.clone(),
            Endpoint::new("127.0.0.1", 8443, 4),
            1_764_494_223,
            pin,
        );
        assert_eq!(
            deep_link("myapp", &link).unwrap(),
            format!(
                "myapp:///?appduct={payload}&pin=sha256%2F47DEQpj8HBSa%2B%2FTImW%2B5JCeuQeRkm5NMpJWZG3hSuFU%3D"
            )
        );
        link.transport = Transport::Web;
        assert_eq!(
            deep_link("myapp", &link).unwrap(),
            format!("myapp:///?appduct={payload}")
        );
        link.transport = Transport::Native;
        link.pin = "sha1/x".into();
        assert!(matches!(
            deep_link("myapp", &link),
            Err(DeepLinkError::Pin { .. })
        ));
        link.pin = pin.into();
        assert!(matches!(
            deep_link("http", &link),
            Err(DeepLinkError::Compose(_))
        ));
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
        let got = block(detect(&runner, DeviceTarget::Android, None)).unwrap();
        assert_eq!(got, "emulator-5554");
        assert_eq!(runner.invocations()[0].program, "adb");
        assert_eq!(runner.invocations()[0].args, vec!["devices"]);

        let runner = ScriptedCommandRunner::new();
        runner.push_output(ok("List of devices attached\na\tdevice\nb\tdevice\n"));
        let e = block(detect(&runner, DeviceTarget::Android, None)).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Argument);
        assert_eq!(e.details().unwrap()["devices"], json!(["a", "b"]));
        assert_eq!(e.candidates(), ["a", "b"]);

        let runner = ScriptedCommandRunner::new();
        runner.push_output(ok("List of devices attached\na\tdevice\n"));
        let e = block(detect(&runner, DeviceTarget::Android, Some("zz"))).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Argument);
        assert_eq!(e.details().unwrap()["devices"], json!(["a"]));

        let runner = ScriptedCommandRunner::new();
        runner.push_output(ok("List of devices attached\n"));
        let e = block(detect(&runner, DeviceTarget::Android, Some("a"))).unwrap_err();
        assert_eq!(e.class(), ErrorClass::NoDevice);
        assert!(e.to_string().contains("`adb devices`"), "{e}");
        assert_eq!(e.details().unwrap()["command"], "adb devices");

        let runner = ScriptedCommandRunner::new();
        runner.push_error(io::ErrorKind::NotFound, "no such file");
        let e = block(detect(&runner, DeviceTarget::IosSim, None)).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Command);
        assert!(e.hint().unwrap().contains("xcrun"));
        assert_eq!(
            runner.invocations()[0].args,
            vec!["simctl", "list", "devices", "booted", "--json"]
        );

        let runner = ScriptedCommandRunner::new();
        runner.push_error(io::ErrorKind::TimedOut, "did not finish");
        let e = block(detect(&runner, DeviceTarget::Android, None)).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Command);
        assert_eq!(e.hint(), None);
    }

    #[test]
    fn devicectl_detection_reads_its_json_output_file() {
        let runner = ScriptedCommandRunner::new();
        runner.push_output(ok(""));
        // The scripted runner writes no file, so nothing is found; the argv is what matters.
        let e = block(detect(&runner, DeviceTarget::IosDevice, None)).unwrap_err();
        assert_eq!(e.class(), ErrorClass::NoDevice);
        let args = &runner.invocations()[0].args;
        assert_eq!(
            args[..6],
            [
                "devicectl",
                "list",
                "devices",
                "--timeout",
                "5",
                "--json-output"
            ]
        );
        assert!(args[6].contains("appduct-devicectl-"), "{args:?}");
    }

    #[test]
    fn delivery_argument_vectors() {
        let link = "myapp:///?appduct=AAA&pin=sha256%2Fx";
        let android = Delivery {
            target: DeviceTarget::Android,
            device: "emulator-5554",
            app_id: Some("com.example"),
            relaunch: false,
            deep_link: link,
            port: 8443,
        };
        let cmds = delivery_commands(&android).unwrap();
        assert_eq!(cmds[0].0, "adb");
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
            target: DeviceTarget::IosSim,
            app_id: None,
            device: "AAAA-1",
            ..android.clone()
        };
        let cmds = delivery_commands(&sim).unwrap();
        assert_eq!(cmds[0].0, "xcrun");
        assert_eq!(cmds[0].1, vec!["simctl", "openurl", "AAAA-1", link]);
        let dev = Delivery {
            target: DeviceTarget::IosDevice,
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
        let no_relaunch = Delivery {
            relaunch: false,
            ..dev.clone()
        };
        assert!(
            !delivery_commands(&no_relaunch).unwrap()[0]
                .1
                .contains(&"--terminate-existing".to_owned())
        );
        let unsafe_link = Delivery {
            deep_link: "x:///?a='b'",
            ..android.clone()
        };
        assert!(matches!(
            delivery_commands(&unsafe_link),
            Err(DeliveryError::UnsafeLink)
        ));
        let no_app = Delivery {
            app_id: None,
            ..android.clone()
        };
        assert_eq!(
            delivery_commands(&no_app).unwrap_err().class(),
            ErrorClass::Internal
        );
        let bad_device = Delivery {
            device: "-s",
            ..android
        };
        assert_eq!(
            delivery_commands(&bad_device).unwrap_err().class(),
            ErrorClass::Argument
        );
    }

    #[test]
    fn a_failed_command_reports_argv_exit_code_and_stderr_and_stops_the_delivery() {
        let runner = ScriptedCommandRunner::new();
        runner.push_output(CommandOutput {
            code: Some(1),
            stdout: String::new(),
            stderr: "error: device offline".into(),
        });
        let d = Delivery {
            target: DeviceTarget::Android,
            device: "emulator-5554",
            app_id: Some("com.x"),
            relaunch: false,
            deep_link: "myapp:///?appduct=A",
            port: 1,
        };
        let e = block(deliver(&runner, &d)).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Command);
        assert_eq!(
            e.details().unwrap(),
            json!({"argv": ["adb", "-s", "emulator-5554", "reverse", "tcp:1", "tcp:1"],
                   "exitCode": 1, "stderr": "error: device offline"})
        );
        assert_eq!(runner.invocations().len(), 1, "am start never ran");

        let runner = ScriptedCommandRunner::new();
        runner.push_error(io::ErrorKind::NotFound, "No such file or directory");
        let e = block(deliver(&runner, &d)).unwrap_err();
        assert_eq!(e.details().unwrap()["exitCode"], Value::Null);
        assert_eq!(e.details().unwrap()["stderr"], "");
        assert!(e.hint().unwrap().contains("adb (Android platform tools)"));
    }
}
