//! `appduct doctor <artifact>` (§L13): whether a built app carries the appduct native module.
//!
//! - Android (`.apk`, `.aab`): every `classes*.dex` (archive root, or `base/dex/` in a bundle)
//!   is parsed and its type table searched for the marker class (`android-marker-class`,
//!   decides `present`) and for any type under the appduct packages (`android-appduct-classes`,
//!   informational).
//! - iOS (`.ipa`, `.app`): the main executable named by `CFBundleExecutable` and each
//!   `Frameworks/*.framework` binary are scanned for the bytes `AppductCoreMarker`
//!   (`ios-marker-symbol`, decides `present`); `Frameworks/AppductCore.framework` is reported
//!   as `ios-appduct-framework` (informational).
//!
//! - JavaScript (issue #23, both platforms): the app's JS bundle — `assets/*.bundle` (`.apk`),
//!   `base/assets/*.bundle` (`.aab`), `main.jsbundle` (`.ipa`, `.app`), plain JS or Hermes
//!   bytecode — is scanned for the live `@appduct/sdk` core's marker
//!   [`JS_LIVE_CORE_MARKER`] (`js-live-core`, reported when the artifact has a bundle). It also
//!   decides `present`: a release build carrying the live JS SDK fails `--assert-absent`. The
//!   inert entry that production builds resolve to does not carry it.
//!
//! Anything that cannot be read completely — a missing path, a corrupt or truncated archive,
//! an unreadable dex, plist or executable, an archive over the size caps — is an
//! `inspection_error` (exit 66), never "absent". Never contacts the daemon.

use std::fs::File;
use std::io::{self, Read as _};
use std::path::{Path, PathBuf};

use appduct_protocol::errors::ErrorType;
use serde_json::{Value, json};

use clap::Args;

use super::Command;
use super::args::too_many;
use crate::error::CliError;
use crate::output::Success;
use crate::render::{self, Row, Section};
use appduct_doctor::dex::{self, DexError};
use appduct_doctor::plist::{self, PlistError};
use appduct_doctor::zip::{Limits, ZipArchive, ZipError};

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The built app: .apk, .aab, .ipa or .app
    #[arg(value_name = "ARTIFACT")]
    pub positionals: Vec<PathBuf>,
    /// Fail (exit 3) unless appduct (native module or live JS SDK) is present
    #[arg(long)]
    pub assert_present: bool,
    /// Fail (exit 3) unless appduct (native module and live JS SDK) is absent
    #[arg(long)]
    pub assert_absent: bool,
}

/// `doctor` (§L13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorRequest {
    pub artifact: PathBuf,
    pub format: ArtifactFormat,
    pub expect: Option<Expectation>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArtifactFormat {
    Apk,
    Aab,
    Ipa,
    App,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expectation {
    Present,
    Absent,
}

pub fn validate(a: DoctorArgs) -> Result<Command, CliError> {
    let mut paths = a.positionals;
    if paths.len() > 1 {
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(too_many("doctor", "one artifact", &shown));
    }
    let Some(artifact) = paths.pop() else {
        return Err(CliError::usage(
            "doctor needs an artifact: appduct doctor <artifact.apk|.aab|.ipa|.app>",
        ));
    };
    if a.assert_present && a.assert_absent {
        return Err(CliError::usage(
            "--assert-present and --assert-absent cannot be combined",
        ));
    }
    let ext = artifact
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    let format = match ext.as_deref() {
        Some("apk") => ArtifactFormat::Apk,
        Some("aab") => ArtifactFormat::Aab,
        Some("ipa") => ArtifactFormat::Ipa,
        Some("app") => ArtifactFormat::App,
        _ => {
            return Err(CliError::usage(format!(
                "doctor inspects .apk, .aab, .ipa or .app artifacts (got {})",
                artifact.display()
            )));
        }
    };
    let expect = if a.assert_present {
        Some(Expectation::Present)
    } else if a.assert_absent {
        Some(Expectation::Absent)
    } else {
        None
    };
    Ok(Command::Doctor(DoctorRequest {
        artifact,
        format,
        expect,
    }))
}

/// The Android marker class, under either package name (§L13).
pub const ANDROID_MARKERS: [&[u8]; 2] = [
    b"Lcom/callstack/appduct/AppductNativeMarker;",
    b"Lcom/callstackincubator/appduct/AppductNativeMarker;",
];
/// Type descriptor prefixes of the appduct Android packages.
pub const ANDROID_PACKAGES: [&[u8]; 2] = [
    b"Lcom/callstack/appduct/",
    b"Lcom/callstackincubator/appduct/",
];
/// The bytes the iOS native module embeds.
pub const IOS_MARKER: &[u8] = b"AppductCoreMarker";
/// The bytes the live `@appduct/sdk` core carries (`SDK_LIVE_CORE_MARKER` in
/// `sdk-ts/packages/sdk/src/core/client.ts`); the inert entry does not. ASCII, so it reads the
/// same in plain JS and in the string table of Hermes bytecode.
pub const JS_LIVE_CORE_MARKER: &[u8] = b"appduct-sdk-live-core/v1";
/// The first 8 bytes of a Hermes bytecode file (its magic number, little-endian).
pub const HERMES_BYTECODE_MAGIC: [u8; 8] = [0xC6, 0x1F, 0xBC, 0x03, 0xC1, 0x03, 0x19, 0x1F];
/// The signal of the live JS core.
pub const JS_SIGNAL: &str = "js-live-core";
/// The JS bundle of a React Native iOS app, at the `.app` root.
const IOS_JS_BUNDLE: &str = "main.jsbundle";
/// JS bundles are streamed, so this bounds time, not memory.
const MAX_JS_BUNDLE_BYTES: u64 = 1 << 30;
/// Bundles scanned in one artifact, at most.
const MAX_JS_BUNDLES: usize = 64;
/// The iOS framework reported by `ios-appduct-framework`.
pub const IOS_FRAMEWORK: &str = "AppductCore.framework";

/// A dex is held in memory to read its tables; real ones are a few MiB.
const MAX_DEX_BYTES: u64 = 256 << 20;
const MAX_PLIST_BYTES: u64 = 8 << 20;
/// Executables are streamed, so this bounds time, not memory.
const MAX_BINARY_BYTES: u64 = 4 << 30;
const MAX_FRAMEWORKS: usize = 1_000;

/// Why an artifact cannot be inspected (exit 66).
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("no such file or directory")]
    Missing,
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("it is a directory; .apk, .aab and .ipa artifacts are zip archives")]
    NotAFile,
    #[error("it is not a directory; an .app artifact is a bundle directory")]
    NotADirectory,
    #[error("{0}")]
    Zip(#[from] ZipError),
    #[error("{entry}: {source}")]
    Dex { entry: String, source: DexError },
    #[error("{entry}: {source}")]
    Plist { entry: String, source: PlistError },
    #[error("no classes*.dex found {location}")]
    NoDex { location: &'static str },
    #[error("no Payload/<Name>.app/ bundle in the archive")]
    NoAppBundle,
    #[error("several app bundles under Payload/: {}", .names.join(", "))]
    SeveralAppBundles { names: Vec<String> },
    #[error("{entry} is missing")]
    MissingEntry { entry: String },
    #[error("{entry} is not a regular file")]
    NotRegular { entry: String },
    #[error("{entry} resolves to a path outside the bundle")]
    OutsideBundle { entry: String },
    #[error("{entry} is {size} bytes; at most {max} are read")]
    TooLarge { entry: String, size: u64, max: u64 },
    #[error("{entry} is not a Mach-O binary")]
    NotMachO { entry: String },
    #[error("CFBundleExecutable {name:?} in {entry} is not a plain file name")]
    BadExecutableName { entry: String, name: String },
    #[error("more than {max} frameworks under Frameworks/")]
    TooManyFrameworks { max: usize },
    #[error("more than {max} JavaScript bundles under {location}")]
    TooManyJsBundles { max: usize, location: &'static str },
}

/// One signal of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    pub name: &'static str,
    pub found: bool,
    pub detail: Option<String>,
}

/// What `doctor` found in one artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The path as the user gave it.
    pub artifact: String,
    pub format: ArtifactFormat,
    /// Decided by the markers alone: the native module's, or the live JS core's.
    pub present: bool,
    pub signals: Vec<Signal>,
}

impl Report {
    /// Present through the live JS core alone (the native marker, the first signal, missing).
    pub fn js_only(&self) -> bool {
        let js = self.signals.iter().any(|s| s.name == JS_SIGNAL && s.found);
        js && !self.signals.first().is_some_and(|s| s.found)
    }
}

impl ArtifactFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            ArtifactFormat::Apk => "apk",
            ArtifactFormat::Aab => "aab",
            ArtifactFormat::Ipa => "ipa",
            ArtifactFormat::App => "app",
        }
    }

    pub fn platform(self) -> &'static str {
        match self {
            ArtifactFormat::Apk | ArtifactFormat::Aab => "android",
            ArtifactFormat::Ipa | ArtifactFormat::App => "ios",
        }
    }
}

impl Expectation {
    fn as_str(self) -> &'static str {
        match self {
            Expectation::Present => "present",
            Expectation::Absent => "absent",
        }
    }
}

/// Runs `doctor`: the report, or `inspection_error` (66), or `assertion_error` (3) with the
/// report in `details`.
pub fn run(req: &DoctorRequest) -> Result<Success, CliError> {
    let artifact = req.artifact.display().to_string();
    let report = inspect(&req.artifact, req.format).map_err(|e| {
        CliError::inspection(format!("Cannot inspect {artifact}: {e}"))
            .with_detail("artifact", artifact.as_str())
    })?;
    let holds = req.expect.map(|expect| match expect {
        Expectation::Present => report.present,
        Expectation::Absent => !report.present,
    });
    let data = report_json(&report, req.expect, holds);
    match (req.expect, holds) {
        (Some(expect), Some(false)) => {
            let message = match expect {
                Expectation::Present => {
                    format!("Expected the appduct native module in {artifact}, but it is absent")
                }
                Expectation::Absent if !report.js_only() => {
                    format!("Expected no appduct native module in {artifact}, but it is present")
                }
                Expectation::Absent => format!(
                    "Expected no appduct in {artifact}, but its JavaScript bundle carries the live \
                     @appduct/sdk core (build it with the inert entry)"
                ),
            };
            Err(CliError::from_wire(
                ErrorType::AssertionError.as_str(),
                message,
                Some(data),
            ))
        }
        _ => Ok(Success::new(data, render_human(&report, req.expect))),
    }
}

/// Inspects `path` as `format`.
pub fn inspect(path: &Path, format: ArtifactFormat) -> Result<Report, InspectError> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => InspectError::Missing,
        _ => InspectError::Io(e),
    })?;
    let (present, signals) = match format {
        ArtifactFormat::Apk | ArtifactFormat::Aab => {
            if meta.is_dir() {
                return Err(InspectError::NotAFile);
            }
            let mut zip = ZipArchive::open(path, Limits::default())?;
            inspect_android(&mut zip, format)?
        }
        ArtifactFormat::Ipa => {
            if meta.is_dir() {
                return Err(InspectError::NotAFile);
            }
            let mut zip = ZipArchive::open(path, Limits::default())?;
            let root = ipa_app_root(&zip)?;
            inspect_ios(&mut ZipBundle {
                zip: &mut zip,
                root,
            })?
        }
        ArtifactFormat::App => {
            if !meta.is_dir() {
                return Err(InspectError::NotADirectory);
            }
            inspect_ios(&mut DirBundle {
                root: std::fs::canonicalize(path)?,
            })?
        }
    };
    Ok(Report {
        artifact: path.display().to_string(),
        format,
        present,
        signals,
    })
}

/// The JSON `data` (§L13); `assertion` only when one was asked for.
pub fn report_json(report: &Report, expect: Option<Expectation>, holds: Option<bool>) -> Value {
    let signals: Vec<Value> = report
        .signals
        .iter()
        .map(|s| match &s.detail {
            Some(d) => json!({"name": s.name, "found": s.found, "detail": d}),
            None => json!({"name": s.name, "found": s.found}),
        })
        .collect();
    let mut data = json!({
        "artifact": report.artifact,
        "platform": report.format.platform(),
        "format": report.format.as_str(),
        "present": report.present,
        "signals": signals,
    });
    if let (Some(expect), Some(holds), Some(map)) = (expect, holds, data.as_object_mut()) {
        map.insert(
            "assertion".into(),
            json!({"expected": expect.as_str(), "holds": holds}),
        );
    }
    data
}

/// The human block (§L13).
pub fn render_human(report: &Report, expect: Option<Expectation>) -> String {
    let table: Vec<Vec<String>> = report
        .signals
        .iter()
        .map(|s| {
            let mut row = vec![
                if s.found { "found" } else { "missing" }.to_owned(),
                s.name.to_owned(),
            ];
            // Details name entries of the artifact, which the app's build chose (SECURITY.md §4.13).
            row.extend(s.detail.as_deref().map(render::clean_line));
            row
        })
        .collect();
    let mut rows = vec![
        Row::field("Appduct", if report.present { "present" } else { "absent" }),
        Row::block("Signals", render::table(&table)),
    ];
    if let Some(expect) = expect {
        let holds = match expect {
            Expectation::Present => report.present,
            Expectation::Absent => !report.present,
        };
        rows.push(Row::field(
            "Assertion",
            format!(
                "{}, {}",
                expect.as_str(),
                if holds { "holds" } else { "fails" }
            ),
        ));
    }
    render::sections(&[Section::new(
        format!(
            "Artifact: {} ({}, {})",
            report.artifact,
            report.format.platform(),
            report.format.as_str()
        ),
        rows,
    )])
}

// ---------------------------------------------------------------------------------------------
// Android
// ---------------------------------------------------------------------------------------------

fn inspect_android(
    zip: &mut ZipArchive,
    format: ArtifactFormat,
) -> Result<(bool, Vec<Signal>), InspectError> {
    let (dir, location) = match format {
        ArtifactFormat::Aab => ("base/dex/", "in base/dex/"),
        _ => ("", "at the archive root"),
    };
    let mut dexes: Vec<(usize, String)> = zip
        .entries()
        .iter()
        .enumerate()
        .filter(|(_, e)| {
            e.name.strip_prefix(dir).is_some_and(|file| {
                !file.contains('/') && file.starts_with("classes") && file.ends_with(".dex")
            })
        })
        .map(|(i, e)| (i, e.name.clone()))
        .collect();
    if dexes.is_empty() {
        return Err(InspectError::NoDex { location });
    }
    dexes.sort_by_key(|(_, name)| dex_order(&name[dir.len()..]));

    let mut marker_in = Vec::new();
    let mut package_types = 0u64;
    let mut package_in = Vec::new();
    for (index, name) in &dexes {
        let bytes = zip.read_to_vec(*index, MAX_DEX_BYTES)?;
        let (mut marker, mut types) = (false, 0u64);
        dex::for_each_type_descriptor(&bytes, |d| {
            marker |= ANDROID_MARKERS.contains(&d);
            if ANDROID_PACKAGES.iter().any(|p| d.starts_with(p)) {
                types += 1;
            }
        })
        .map_err(|source| InspectError::Dex {
            entry: name.clone(),
            source,
        })?;
        if marker {
            marker_in.push(name.clone());
        }
        if types > 0 {
            package_types += types;
            package_in.push(name.clone());
        }
    }
    let scanned: Vec<&str> = dexes.iter().map(|(_, n)| n.as_str()).collect();
    let marker = Signal {
        name: "android-marker-class",
        found: !marker_in.is_empty(),
        detail: Some(if marker_in.is_empty() {
            format!("scanned {}", scanned.join(", "))
        } else {
            format!("found in {}", marker_in.join(", "))
        }),
    };
    let classes = Signal {
        name: "android-appduct-classes",
        found: package_types > 0,
        detail: (package_types > 0).then(|| {
            format!(
                "{package_types} {} in {}",
                if package_types == 1 { "type" } else { "types" },
                package_in.join(", ")
            )
        }),
    };
    let mut signals = vec![marker, classes];
    let bundles = android_js_bundles(zip, format)?;
    let js = scan_js_bundles(&bundles, |name, each| match zip.find(name) {
        Some(index) => {
            zip.for_each_chunk(index, MAX_JS_BUNDLE_BYTES, each)?;
            Ok(true)
        }
        None => Ok(false),
    })?;
    let present = signals[0].found || js.as_ref().is_some_and(|s| s.found);
    signals.extend(js);
    Ok((present, signals))
}

/// The JS bundles of an Android artifact: files directly in `assets/` (`base/assets/` in a
/// bundle) named `*.bundle` or `*.hbc`, by name.
fn android_js_bundles(
    zip: &ZipArchive,
    format: ArtifactFormat,
) -> Result<Vec<String>, InspectError> {
    let (dir, location) = match format {
        ArtifactFormat::Aab => ("base/assets/", "base/assets/"),
        _ => ("assets/", "assets/"),
    };
    let mut names: Vec<String> = zip
        .entries()
        .iter()
        .filter(|e| !e.is_dir())
        .filter(|e| {
            e.name.strip_prefix(dir).is_some_and(|file| {
                !file.contains('/') && (file.ends_with(".bundle") || file.ends_with(".hbc"))
            })
        })
        .map(|e| e.name.clone())
        .collect();
    if names.len() > MAX_JS_BUNDLES {
        return Err(InspectError::TooManyJsBundles {
            max: MAX_JS_BUNDLES,
            location,
        });
    }
    names.sort();
    Ok(names)
}

/// What one JS bundle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BundleKind {
    Hermes,
    PlainJs,
}

impl BundleKind {
    fn of(head: &[u8]) -> Self {
        if head.starts_with(&HERMES_BYTECODE_MAGIC) {
            Self::Hermes
        } else {
            Self::PlainJs
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Hermes => "Hermes bytecode",
            Self::PlainJs => "plain JS",
        }
    }
}

/// Streams each bundle through `stream(name, each)` (`false`: it does not exist) and looks for
/// [`JS_LIVE_CORE_MARKER`]. `None` when no bundle exists: the signal is left out.
fn scan_js_bundles(
    names: &[String],
    mut stream: impl FnMut(&str, &mut dyn FnMut(&[u8])) -> Result<bool, InspectError>,
) -> Result<Option<Signal>, InspectError> {
    let (mut found_in, mut scanned) = (Vec::new(), Vec::new());
    for name in names {
        let mut finder = Finder::new(JS_LIVE_CORE_MARKER);
        let mut head = Vec::with_capacity(HERMES_BYTECODE_MAGIC.len());
        let exists = stream(name, &mut |chunk| {
            if head.len() < HERMES_BYTECODE_MAGIC.len() {
                let take = (HERMES_BYTECODE_MAGIC.len() - head.len()).min(chunk.len());
                head.extend_from_slice(&chunk[..take]);
            }
            finder.feed(chunk);
        })?;
        if !exists {
            continue;
        }
        let described = format!("{name} ({})", BundleKind::of(&head).as_str());
        if finder.found {
            found_in.push(described);
        } else {
            scanned.push(described);
        }
    }
    if found_in.is_empty() && scanned.is_empty() {
        return Ok(None);
    }
    Ok(Some(Signal {
        name: JS_SIGNAL,
        found: !found_in.is_empty(),
        detail: Some(if found_in.is_empty() {
            format!("scanned {}", scanned.join(", "))
        } else {
            format!("found in {}", found_in.join(", "))
        }),
    }))
}

/// `classes.dex` first, then `classes2.dex`, `classes3.dex`, … numerically, then anything else
/// by name.
fn dex_order(file: &str) -> (u64, String) {
    let middle = &file["classes".len()..file.len() - ".dex".len()];
    let n = if middle.is_empty() {
        1
    } else if middle.bytes().all(|b| b.is_ascii_digit()) {
        middle.parse().unwrap_or(u64::MAX)
    } else {
        u64::MAX
    };
    (n, file.to_owned())
}

// ---------------------------------------------------------------------------------------------
// iOS
// ---------------------------------------------------------------------------------------------

/// Read access to an iOS app bundle; paths are relative to the `.app` root and built only
/// from single path components this module checked.
trait Bundle {
    /// The whole file, at most `cap` bytes; `None` when it does not exist.
    fn read(&mut self, rel: &str, cap: u64) -> Result<Option<Vec<u8>>, InspectError>;
    /// Streams the file through `each`; `false` when it does not exist.
    fn stream(
        &mut self,
        rel: &str,
        cap: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, InspectError>;
    /// The names of the directories directly inside `rel` (none when it does not exist).
    fn subdirs(&mut self, rel: &str) -> Result<Vec<String>, InspectError>;
}

fn inspect_ios(bundle: &mut dyn Bundle) -> Result<(bool, Vec<Signal>), InspectError> {
    let main = executable_of(bundle, "")?;
    let mut binaries = vec![main];
    let mut frameworks: Vec<String> = bundle
        .subdirs("Frameworks")?
        .into_iter()
        .filter(|d| d.ends_with(".framework"))
        .collect();
    if frameworks.len() > MAX_FRAMEWORKS {
        return Err(InspectError::TooManyFrameworks {
            max: MAX_FRAMEWORKS,
        });
    }
    frameworks.sort();
    for framework in &frameworks {
        binaries.push(executable_of(bundle, &format!("Frameworks/{framework}/"))?);
    }

    let mut marker_in = Vec::new();
    for binary in &binaries {
        let mut finder = Finder::new(IOS_MARKER);
        let mut magic = Vec::with_capacity(4);
        let exists = bundle.stream(binary, MAX_BINARY_BYTES, &mut |chunk| {
            if magic.len() < 4 {
                let take = (4 - magic.len()).min(chunk.len());
                magic.extend_from_slice(&chunk[..take]);
            }
            finder.feed(chunk);
        })?;
        if !exists {
            return Err(InspectError::MissingEntry {
                entry: binary.clone(),
            });
        }
        if !is_mach_o(&magic) {
            return Err(InspectError::NotMachO {
                entry: binary.clone(),
            });
        }
        if finder.found {
            marker_in.push(binary.clone());
        }
    }
    let marker = Signal {
        name: "ios-marker-symbol",
        found: !marker_in.is_empty(),
        detail: Some(if marker_in.is_empty() {
            format!("scanned {}", binaries.join(", "))
        } else {
            format!("found in {}", marker_in.join(", "))
        }),
    };
    let has_framework = frameworks.iter().any(|f| f == IOS_FRAMEWORK);
    let framework = Signal {
        name: "ios-appduct-framework",
        found: has_framework,
        detail: has_framework.then(|| format!("Frameworks/{IOS_FRAMEWORK}")),
    };
    let mut signals = vec![marker, framework];
    let js = scan_js_bundles(&[IOS_JS_BUNDLE.to_owned()], |name, each| {
        bundle.stream(name, MAX_JS_BUNDLE_BYTES, each)
    })?;
    let present = signals[0].found || js.as_ref().is_some_and(|s| s.found);
    signals.extend(js);
    Ok((present, signals))
}

/// The binary of the bundle at `dir` (`""` for the app, `Frameworks/X.framework/` for a
/// framework): its `Info.plist`'s `CFBundleExecutable`. A framework without an `Info.plist`
/// falls back to the framework's own name, as Xcode names it.
fn executable_of(bundle: &mut dyn Bundle, dir: &str) -> Result<String, InspectError> {
    let plist_path = format!("{dir}Info.plist");
    let name = match bundle.read(&plist_path, MAX_PLIST_BYTES)? {
        Some(bytes) => plist::bundle_executable(&bytes).map_err(|source| InspectError::Plist {
            entry: plist_path.clone(),
            source,
        })?,
        None => match dir
            .strip_prefix("Frameworks/")
            .and_then(|d| d.strip_suffix(".framework/"))
        {
            Some(framework) => framework.to_owned(),
            None => return Err(InspectError::MissingEntry { entry: plist_path }),
        },
    };
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']) {
        return Err(InspectError::BadExecutableName {
            entry: plist_path,
            name,
        });
    }
    Ok(format!("{dir}{name}"))
}

/// Mach-O thin (32/64-bit, either byte order) or universal (fat) binaries.
fn is_mach_o(magic: &[u8]) -> bool {
    matches!(
        magic,
        [0xCF, 0xFA, 0xED, 0xFE]
            | [0xCE, 0xFA, 0xED, 0xFE]
            | [0xFE, 0xED, 0xFA, 0xCF]
            | [0xFE, 0xED, 0xFA, 0xCE]
            | [0xCA, 0xFE, 0xBA, 0xBE]
            | [0xCA, 0xFE, 0xBA, 0xBF]
    )
}

/// Finds a byte string in data that arrives in chunks, across chunk boundaries.
#[derive(Debug)]
pub struct Finder {
    needle: &'static [u8],
    /// The last `needle.len() - 1` bytes seen.
    carry: Vec<u8>,
    pub found: bool,
}

impl Finder {
    pub fn new(needle: &'static [u8]) -> Self {
        Self {
            needle,
            carry: Vec::with_capacity(needle.len()),
            found: false,
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        if self.found || self.needle.is_empty() {
            self.found = true;
            return;
        }
        let keep = self.needle.len() - 1;
        // A match straddling the previous chunk and this one.
        let mut seam = self.carry.clone();
        seam.extend_from_slice(&chunk[..keep.min(chunk.len())]);
        if contains(&seam, self.needle) || contains(chunk, self.needle) {
            self.found = true;
            return;
        }
        self.carry.extend_from_slice(chunk);
        let excess = self.carry.len().saturating_sub(keep);
        self.carry.drain(..excess);
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    let Some(&first) = needle.first() else {
        return true;
    };
    let mut from = 0;
    while let Some(p) = haystack[from..].iter().position(|&b| b == first) {
        let at = from + p;
        if haystack[at..].starts_with(needle) {
            return true;
        }
        from = at + 1;
    }
    false
}

/// The single `Payload/<Name>.app/` of an `.ipa`.
fn ipa_app_root(zip: &ZipArchive) -> Result<String, InspectError> {
    let mut apps: Vec<String> = zip
        .entries()
        .iter()
        .filter_map(|e| {
            let rest = e.name.strip_prefix("Payload/")?;
            let (dir, _) = rest.split_once('/')?;
            (dir.ends_with(".app") && dir.len() > ".app".len()).then(|| dir.to_owned())
        })
        .collect();
    apps.sort();
    apps.dedup();
    match apps.as_slice() {
        [] => Err(InspectError::NoAppBundle),
        [one] => Ok(format!("Payload/{one}/")),
        _ => Err(InspectError::SeveralAppBundles { names: apps }),
    }
}

/// An app bundle inside an `.ipa`.
struct ZipBundle<'a> {
    zip: &'a mut ZipArchive,
    /// `Payload/<Name>.app/`.
    root: String,
}

impl ZipBundle<'_> {
    fn file(&self, rel: &str) -> Result<Option<usize>, InspectError> {
        let name = format!("{}{rel}", self.root);
        match self.zip.find(&name) {
            Some(i) if self.zip.entries()[i].is_dir() => Err(InspectError::NotRegular {
                entry: rel.to_owned(),
            }),
            Some(i) => Ok(Some(i)),
            None if self.zip.find(&format!("{name}/")).is_some() => Err(InspectError::NotRegular {
                entry: rel.to_owned(),
            }),
            None => Ok(None),
        }
    }
}

impl Bundle for ZipBundle<'_> {
    fn read(&mut self, rel: &str, cap: u64) -> Result<Option<Vec<u8>>, InspectError> {
        match self.file(rel)? {
            Some(i) => Ok(Some(self.zip.read_to_vec(i, cap)?)),
            None => Ok(None),
        }
    }

    fn stream(
        &mut self,
        rel: &str,
        cap: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, InspectError> {
        match self.file(rel)? {
            Some(i) => {
                self.zip.for_each_chunk(i, cap, each)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn subdirs(&mut self, rel: &str) -> Result<Vec<String>, InspectError> {
        let prefix = format!("{}{rel}/", self.root);
        let mut dirs: Vec<String> = self
            .zip
            .entries()
            .iter()
            .filter_map(|e| {
                let rest = e.name.strip_prefix(&prefix)?;
                let (dir, _) = rest.split_once('/')?;
                (!dir.is_empty()).then(|| dir.to_owned())
            })
            .collect();
        dirs.sort();
        dirs.dedup();
        Ok(dirs)
    }
}

/// An unpacked `.app` directory. Every file read must resolve (after symlinks) inside it and
/// be a regular file, so a hostile bundle cannot point `doctor` at a device or another tree.
struct DirBundle {
    /// Canonical.
    root: PathBuf,
}

impl DirBundle {
    /// The canonical path of `rel` with its size; `None` when it does not exist.
    fn resolve(&self, rel: &str) -> Result<Option<(PathBuf, u64)>, InspectError> {
        let path = match std::fs::canonicalize(self.root.join(rel)) {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if !path.starts_with(&self.root) {
            return Err(InspectError::OutsideBundle {
                entry: rel.to_owned(),
            });
        }
        let meta = std::fs::metadata(&path)?;
        if !meta.is_file() {
            return Err(InspectError::NotRegular {
                entry: rel.to_owned(),
            });
        }
        Ok(Some((path, meta.len())))
    }

    fn open(&self, rel: &str, cap: u64) -> Result<Option<(File, u64)>, InspectError> {
        let Some((path, size)) = self.resolve(rel)? else {
            return Ok(None);
        };
        if size > cap {
            return Err(InspectError::TooLarge {
                entry: rel.to_owned(),
                size,
                max: cap,
            });
        }
        Ok(Some((File::open(path)?, size)))
    }
}

impl Bundle for DirBundle {
    fn read(&mut self, rel: &str, cap: u64) -> Result<Option<Vec<u8>>, InspectError> {
        let Some((file, size)) = self.open(rel, cap)? else {
            return Ok(None);
        };
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        // The file may have grown since it was measured.
        file.take(cap).read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    }

    fn stream(
        &mut self,
        rel: &str,
        cap: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, InspectError> {
        let Some((file, _)) = self.open(rel, cap)? else {
            return Ok(false);
        };
        let mut file = file.take(cap);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                return Ok(true);
            }
            each(&buf[..n]);
        }
    }

    fn subdirs(&mut self, rel: &str) -> Result<Vec<String>, InspectError> {
        let dir = self.root.join(rel);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut dirs = Vec::new();
        for entry in entries {
            let entry = entry?;
            // Follows symlinks; where they lead is checked when a file is read.
            if std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir()) {
                dirs.push(entry.file_name().to_string_lossy().into_owned());
                if dirs.len() > MAX_FRAMEWORKS {
                    return Err(InspectError::TooManyFrameworks {
                        max: MAX_FRAMEWORKS,
                    });
                }
            }
        }
        dirs.sort();
        Ok(dirs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finder_matches_inside_and_across_chunks() {
        let mut f = Finder::new(IOS_MARKER);
        f.feed(b"xxAppductCoreMarkeryy");
        assert!(f.found);
        for split in 1..IOS_MARKER.len() {
            let mut f = Finder::new(IOS_MARKER);
            f.feed(b"0123");
            f.feed(&IOS_MARKER[..split]);
            f.feed(&IOS_MARKER[split..]);
            assert!(f.found, "split at {split}");
        }
        // One byte at a time.
        let mut f = Finder::new(IOS_MARKER);
        for b in b"..AppductCoreMarker".iter() {
            f.feed(std::slice::from_ref(b));
        }
        assert!(f.found);
        let mut f = Finder::new(IOS_MARKER);
        f.feed(b"AppductCoreMarke");
        f.feed(b"");
        f.feed(b"x AppductCore Marker AppductCoreMarkeR");
        assert!(!f.found);
    }

    #[test]
    fn dex_files_are_ordered_numerically() {
        let mut names = vec![
            "classes10.dex",
            "classes2.dex",
            "classes.dex",
            "classes-x.dex",
        ];
        names.sort_by_key(|n| dex_order(n));
        assert_eq!(
            names,
            [
                "classes.dex",
                "classes2.dex",
                "classes10.dex",
                "classes-x.dex"
            ]
        );
    }

    #[test]
    fn mach_o_magics() {
        assert!(is_mach_o(&[0xCF, 0xFA, 0xED, 0xFE]));
        assert!(is_mach_o(&[0xCA, 0xFE, 0xBA, 0xBE]));
        assert!(!is_mach_o(b"\x7fELF"));
        assert!(!is_mach_o(&[0xCF, 0xFA]));
    }

    fn report(present: bool, signals: Vec<Signal>) -> Report {
        Report {
            artifact: "app-release.apk".into(),
            format: ArtifactFormat::Apk,
            present,
            signals,
        }
    }

    #[test]
    fn json_and_human_match_the_spec_example() {
        let r = report(
            false,
            vec![
                Signal {
                    name: "android-marker-class",
                    found: false,
                    detail: Some("scanned classes.dex, classes2.dex".into()),
                },
                Signal {
                    name: "android-appduct-classes",
                    found: false,
                    detail: None,
                },
            ],
        );
        let data = report_json(&r, Some(Expectation::Absent), Some(true));
        assert_eq!(
            data.to_string(),
            r#"{"artifact":"app-release.apk","platform":"android","format":"apk","present":false,"signals":[{"name":"android-marker-class","found":false,"detail":"scanned classes.dex, classes2.dex"},{"name":"android-appduct-classes","found":false}],"assertion":{"expected":"absent","holds":true}}"#
        );
        assert_eq!(
            render_human(&r, Some(Expectation::Absent)),
            "\
Artifact: app-release.apk (android, apk)
  Appduct:    absent
  Signals:
    missing  android-marker-class     scanned classes.dex, classes2.dex
    missing  android-appduct-classes
  Assertion:  absent, holds
"
        );
        assert!(report_json(&r, None, None).get("assertion").is_none());
    }

    #[test]
    fn signal_details_from_the_artifact_print_without_control_characters() {
        let r = report(
            true,
            vec![Signal {
                name: "ios-framework",
                found: true,
                detail: Some("Payload/x\u{1b}[2J\u{9b}.app/".into()),
            }],
        );
        let human = render_human(&r, None);
        assert!(
            !human.chars().any(|c| c.is_control() && c != '\n'),
            "{human:?}"
        );
        assert!(human.contains("Payload/x[2J.app/"), "{human}");
        assert_eq!(
            report_json(&r, None, None)["signals"][0]["detail"],
            "Payload/x\u{1b}[2J\u{9b}.app/"
        );
    }
}
