//! `appduct doctor <artifact>` (§L13) against the built binary, with `.apk`, `.aab`, `.ipa`
//! and `.app` artifacts built on the fly: each signal found and missing, assertions both ways,
//! wrong and unsupported inputs, and corrupt or hostile archives that must exit 66 — never be
//! reported as absent. The zip reader's own caps are exercised through its library API.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::path::Path;

use appduct_doctor::zip::{Crc32, Limits, ZipArchive, ZipError};
use serde_json::{Value, json};
use support::archive::{
    self, APPDUCT_MODULE_CLASS, MARKER_CLASS, MARKER_CLASS_INCUBATOR, Method, RawEntry, ZipWriter,
};
use support::{Sandbox, exists, sandbox};

fn write(sb: &Sandbox, name: &str, bytes: &[u8]) {
    std::fs::write(sb.cwd().join(name), bytes).unwrap();
}

/// `doctor --json <args>`: (exit code, envelope), after checking the stream rules.
fn doctor(sb: &Sandbox, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["--json", "doctor"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = sb.output(&all);
    assert_eq!(stderr, "", "no stderr prose under --json");
    assert_eq!(stdout.matches('\n').count(), 1, "{stdout}");
    // Never contacts, so never spawns, a daemon.
    assert!(!exists(&sb.socket()));
    (code, serde_json::from_str(&stdout).unwrap())
}

fn ok(sb: &Sandbox, args: &[&str]) -> Value {
    let (code, doc) = doctor(sb, args);
    assert_eq!(code, 0, "{doc}");
    doc["data"].clone()
}

/// Exit 66 with an `inspection_error` whose message contains `needle`.
fn inspection_error(sb: &Sandbox, args: &[&str], needle: &str) {
    let (code, doc) = doctor(sb, args);
    assert_eq!(code, 66, "{doc}");
    assert_eq!(doc["error"]["type"], "inspection_error", "{doc}");
    let message = doc["error"]["message"].as_str().unwrap();
    assert!(message.contains(needle), "{needle:?} not in {message:?}");
    assert_eq!(doc["error"]["details"]["artifact"], args[0]);
}

fn signal<'a>(data: &'a Value, name: &str) -> &'a Value {
    data["signals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no signal {name} in {data}"))
}

fn apk(dexes: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut zip = ZipWriter::new()
        .deflated("AndroidManifest.xml", b"<manifest/>")
        .dir("res/");
    for (name, bytes) in dexes {
        zip = zip.deflated(name, bytes);
    }
    zip.finish()
}

// ---------------------------------------------------------------------------------------------
// Android
// ---------------------------------------------------------------------------------------------

#[test]
fn apk_with_the_marker_class_is_present() {
    let sb = sandbox();
    write(
        &sb,
        "app-release.apk",
        &apk(&[
            ("classes.dex", archive::dex(&["Lcom/example/Main;"], &[])),
            (
                "classes2.dex",
                archive::dex(&[APPDUCT_MODULE_CLASS, MARKER_CLASS, "I"], &[]),
            ),
        ]),
    );
    let data = ok(&sb, &["app-release.apk", "--assert-present"]);
    assert_eq!(
        data,
        json!({
            "artifact": "app-release.apk", "platform": "android", "format": "apk", "present": true,
            "signals": [
                {"name": "android-marker-class", "found": true, "detail": "found in classes2.dex"},
                {"name": "android-appduct-classes", "found": true, "detail": "2 types in classes2.dex"}
            ],
            "assertion": {"expected": "present", "holds": true}
        })
    );
    // No assertion asked: no `assertion` key.
    assert!(ok(&sb, &["app-release.apk"]).get("assertion").is_none());

    let (code, doc) = doctor(&sb, &["app-release.apk", "--assert-absent"]);
    assert_eq!(code, 3, "{doc}");
    assert_eq!(doc["error"]["type"], "assertion_error");
    let details = &doc["error"]["details"];
    assert_eq!(details["present"], true);
    assert_eq!(
        details["assertion"],
        json!({"expected": "absent", "holds": false})
    );
    assert_eq!(details["signals"], data["signals"]);

    let (code, stdout, stderr) = sb.output(&[
        "--no-color",
        "doctor",
        "app-release.apk",
        "--assert-present",
    ]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    insta::assert_snapshot!("doctor_apk_present", stdout);
}

#[test]
fn the_incubator_package_marker_counts_too() {
    let sb = sandbox();
    write(
        &sb,
        "a.APK",
        &apk(&[("classes.dex", archive::dex(&[MARKER_CLASS_INCUBATOR], &[]))]),
    );
    let data = ok(&sb, &["a.APK"]);
    assert_eq!(data["present"], true);
    assert_eq!(data["format"], "apk");
}

#[test]
fn a_stub_without_the_marker_is_absent() {
    let sb = sandbox();
    // Appduct classes, but not the marker (a no-op stub); the marker's name only as a string
    // constant, which is no type.
    write(
        &sb,
        "stub.apk",
        &apk(&[
            (
                "classes.dex",
                archive::dex(&[APPDUCT_MODULE_CLASS], &[MARKER_CLASS]),
            ),
            ("classes2.dex", archive::dex(&["La;"], &[])),
        ]),
    );
    let data = ok(&sb, &["stub.apk", "--assert-absent"]);
    assert_eq!(data["present"], false);
    assert_eq!(
        signal(&data, "android-marker-class"),
        &json!({"name": "android-marker-class", "found": false, "detail": "scanned classes.dex, classes2.dex"})
    );
    assert_eq!(
        signal(&data, "android-appduct-classes"),
        &json!({"name": "android-appduct-classes", "found": true, "detail": "1 type in classes.dex"})
    );
    assert_eq!(data["assertion"]["holds"], true);

    let (code, doc) = doctor(&sb, &["stub.apk", "--assert-present"]);
    assert_eq!(code, 3, "{doc}");
    assert_eq!(doc["error"]["type"], "assertion_error");
    assert_eq!(doc["error"]["details"]["assertion"]["holds"], false);

    // Human: the failure is the error block on stderr, nothing on stdout.
    let (code, stdout, stderr) = sb.output(&["doctor", "stub.apk", "--assert-present"]);
    assert_eq!((code, stdout.as_str()), (3, ""));
    assert!(stderr.starts_with("Command failed\n  Type:     assertion_error\n"));

    write(
        &sb,
        "plain.apk",
        &apk(&[("classes.dex", archive::dex(&["Lcom/example/Main;"], &[]))]),
    );
    let (code, stdout, _) = sb.output(&["--no-color", "doctor", "plain.apk", "--assert-absent"]);
    assert_eq!(code, 0);
    insta::assert_snapshot!("doctor_apk_absent", stdout);
}

#[test]
fn dex_files_outside_the_scanned_places_do_not_count() {
    let sb = sandbox();
    // A marker in assets/ or a nested directory is not code the app loads.
    write(
        &sb,
        "nested.apk",
        &ZipWriter::new()
            .deflated("classes.dex", &archive::dex(&["La;"], &[]))
            .deflated("assets/classes2.dex", &archive::dex(&[MARKER_CLASS], &[]))
            .finish(),
    );
    assert_eq!(ok(&sb, &["nested.apk"])["present"], false);
}

#[test]
fn aab_dex_files_live_in_base_dex() {
    let sb = sandbox();
    write(
        &sb,
        "app.aab",
        &ZipWriter::new()
            .deflated("base/manifest/AndroidManifest.xml", b"\x03\x00")
            .deflated("base/dex/classes.dex", &archive::dex(&["La;"], &[]))
            .file(
                "base/dex/classes2.dex",
                &archive::dex(&[MARKER_CLASS], &[]),
                Method::Stored,
            )
            .finish(),
    );
    let data = ok(&sb, &["app.aab"]);
    assert_eq!(
        (data["platform"].clone(), data["format"].clone()),
        (json!("android"), json!("aab"))
    );
    assert_eq!(
        signal(&data, "android-marker-class")["detail"],
        "found in base/dex/classes2.dex"
    );
    // An .aab with dex files only at the root has nothing to scan where the doctor looks.
    write(
        &sb,
        "rooted.aab",
        &apk(&[("classes.dex", archive::dex(&[MARKER_CLASS], &[]))]),
    );
    inspection_error(&sb, &["rooted.aab"], "no classes*.dex found in base/dex/");
}

#[test]
fn an_archive_without_dex_or_with_an_unreadable_dex_is_not_absent() {
    let sb = sandbox();
    write(&sb, "empty.apk", &apk(&[]));
    inspection_error(
        &sb,
        &["empty.apk"],
        "no classes*.dex found at the archive root",
    );

    write(
        &sb,
        "bad.apk",
        &apk(&[
            ("classes.dex", archive::dex(&["La;"], &[])),
            ("classes2.dex", b"dex\n035\0 but not really".to_vec()),
        ]),
    );
    inspection_error(
        &sb,
        &["bad.apk"],
        "classes2.dex: the dex header is cut short",
    );

    let mut future = archive::dex(&[MARKER_CLASS], &[]);
    future[4..7].copy_from_slice(b"041");
    write(&sb, "future.apk", &apk(&[("classes.dex", future)]));
    inspection_error(&sb, &["future.apk"], "dex version 041 is not supported");
}

// ---------------------------------------------------------------------------------------------
// Archives that are damaged or hostile
// ---------------------------------------------------------------------------------------------

fn marker_apk() -> Vec<u8> {
    apk(&[("classes.dex", archive::dex(&[MARKER_CLASS], &[]))])
}

#[test]
fn corrupt_and_truncated_archives_exit_66() {
    let sb = sandbox();
    let good = marker_apk();

    write(&sb, "text.apk", b"this is not a zip archive at all");
    inspection_error(&sb, &["text.apk"], "not a zip archive, or truncated");
    write(&sb, "zero.apk", b"");
    inspection_error(&sb, &["zero.apk"], "not a zip archive");
    // Cut anywhere: the end record or the data goes missing.
    for cut in [good.len() / 3, good.len() / 2, good.len() - 10] {
        write(&sb, "cut.apk", &good[..cut]);
        let (code, doc) = doctor(&sb, &["cut.apk"]);
        assert_eq!(code, 66, "cut at {cut}: {doc}");
    }
    // The central directory moved past the end of the file.
    let mut moved = good.clone();
    let n = moved.len();
    moved[n - 6..n - 2].copy_from_slice(&(n as u32).to_le_bytes());
    write(&sb, "moved.apk", &moved);
    inspection_error(&sb, &["moved.apk"], "truncated");

    // A flipped byte inside the compressed dex: bad deflate data or a CRC mismatch.
    let dex_at = good
        .windows(b"classes.dex".len())
        .position(|w| w == b"classes.dex")
        .unwrap()
        + b"classes.dex".len();
    let mut flipped = good.clone();
    flipped[dex_at + 20] ^= 0xFF;
    write(&sb, "flipped.apk", &flipped);
    inspection_error(&sb, &["flipped.apk"], "classes.dex");

    let wrong_crc = ZipWriter::new()
        .raw_entry(RawEntry {
            name: "classes.dex".into(),
            data: archive::dex(&[MARKER_CLASS], &[]),
            method: 0,
            flags: 0,
            crc: 0x1234_5678,
            declared_size: archive::dex(&[MARKER_CLASS], &[]).len() as u32,
        })
        .finish();
    write(&sb, "crc.apk", &wrong_crc);
    inspection_error(&sb, &["crc.apk"], "CRC-32 mismatch");
}

#[test]
fn hostile_archives_exit_66() {
    let sb = sandbox();
    let dex = archive::dex(&[MARKER_CLASS], &[]);

    // A bomb: declares a few bytes, inflates to far more.
    let big = vec![0u8; 4 << 20];
    write(
        &sb,
        "bomb.apk",
        &ZipWriter::new()
            .raw_entry(RawEntry {
                name: "classes.dex".into(),
                data: miniz_oxide::deflate::compress_to_vec(&big, 9),
                method: 8,
                flags: 0,
                crc: Crc32::of(&big),
                declared_size: 1024,
            })
            .finish(),
    );
    inspection_error(&sb, &["bomb.apk"], "inflates past its declared size");

    // Declares more than the dex cap: refused before inflating anything.
    write(
        &sb,
        "huge.apk",
        &ZipWriter::new()
            .raw_entry(RawEntry {
                name: "classes.dex".into(),
                data: miniz_oxide::deflate::compress_to_vec(b"x", 9),
                method: 8,
                flags: 0,
                crc: 0,
                declared_size: u32::MAX - 1,
            })
            .finish(),
    );
    inspection_error(&sb, &["huge.apk"], "at most 268435456 are read");

    // An end record claiming far more entries than the directory holds.
    write(
        &sb,
        "claims.apk",
        &ZipWriter::new()
            .deflated("classes.dex", &dex)
            .finish_claiming(60_000),
    );
    inspection_error(&sb, &["claims.apk"], "cannot fit in a central directory");

    // Two entries with one name: different readers could see different files.
    write(
        &sb,
        "dup.apk",
        &ZipWriter::new()
            .deflated("classes.dex", &archive::dex(&["La;"], &[]))
            .deflated("classes.dex", &dex)
            .finish(),
    );
    inspection_error(&sb, &["dup.apk"], "appears more than once");

    let raw = |method, flags| RawEntry {
        name: "classes.dex".into(),
        data: dex.clone(),
        method,
        flags,
        crc: Crc32::of(&dex),
        declared_size: dex.len() as u32,
    };
    write(
        &sb,
        "bzip.apk",
        &ZipWriter::new().raw_entry(raw(12, 0)).finish(),
    );
    inspection_error(&sb, &["bzip.apk"], "compression method 12");
    write(
        &sb,
        "enc.apk",
        &ZipWriter::new().raw_entry(raw(0, 1)).finish(),
    );
    inspection_error(&sb, &["enc.apk"], "is encrypted");

    // Path names are only matched, never used on the filesystem.
    write(
        &sb,
        "names.apk",
        &ZipWriter::new()
            .deflated("../../classes.dex", &dex)
            .deflated("/classes.dex", &dex)
            .deflated("classes.dex", &archive::dex(&["La;"], &[]))
            .finish(),
    );
    assert_eq!(ok(&sb, &["names.apk"])["present"], false);
}

#[test]
fn zip64_archives_are_read() {
    let sb = sandbox();
    write(
        &sb,
        "z64.apk",
        &ZipWriter::new()
            .deflated("classes.dex", &archive::dex(&[MARKER_CLASS], &[]))
            .finish_zip64(),
    );
    assert_eq!(ok(&sb, &["z64.apk"])["present"], true);
}

#[test]
fn the_reader_caps_entries_and_total_inflated_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.zip");
    let data = vec![7u8; 10_000];
    std::fs::write(
        &path,
        ZipWriter::new()
            .deflated("a", &data)
            .deflated("b", &data)
            .deflated("c/", b"")
            .finish(),
    )
    .unwrap();

    let few = Limits {
        max_entries: 2,
        ..Limits::default()
    };
    assert!(matches!(
        ZipArchive::open(&path, few),
        Err(ZipError::TooManyEntries { count: 3, max: 2 })
    ));
    let small_cd = Limits {
        max_central_directory: 40,
        ..Limits::default()
    };
    assert!(matches!(
        ZipArchive::open(&path, small_cd),
        Err(ZipError::CentralDirectoryTooLarge { .. })
    ));

    let budget = Limits {
        max_total_inflated: 15_000,
        ..Limits::default()
    };
    let mut zip = ZipArchive::open(&path, budget).unwrap();
    assert_eq!(zip.entries().len(), 3);
    assert!(zip.entries()[2].is_dir());
    let a = zip.find("a").unwrap();
    assert_eq!(zip.read_to_vec(a, 10_000).unwrap(), data);
    let b = zip.find("b").unwrap();
    assert!(matches!(
        zip.read_to_vec(b, 10_000),
        Err(ZipError::TotalTooLarge { .. })
    ));
    assert!(matches!(
        zip.read_to_vec(a, 9_999),
        Err(ZipError::EntryTooLarge {
            size: 10_000,
            max: 9_999,
            ..
        })
    ));
    let mut chunks = 0;
    let mut zip = ZipArchive::open(&path, Limits::default()).unwrap();
    zip.for_each_chunk(b, 10_000, |c| {
        assert!(c.iter().all(|&x| x == 7));
        chunks += c.len();
    })
    .unwrap();
    assert_eq!(chunks, 10_000);
}

/// Opens the archive and reads every entry; errors are fine, panics and hangs are not.
fn read_everything(path: &Path) -> Result<usize, ZipError> {
    let mut zip = ZipArchive::open(path, Limits::default())?;
    let mut read = 0;
    for i in 0..zip.entries().len() {
        if zip.read_to_vec(i, 1 << 20).is_ok() {
            read += 1;
        }
    }
    Ok(read)
}

#[test]
fn no_corruption_or_cut_makes_the_reader_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.apk");
    let good = ZipWriter::new()
        .deflated("classes.dex", &archive::dex(&[MARKER_CLASS], &[]))
        .file("a.txt", b"stored text", Method::Stored)
        .finish();
    std::fs::write(&path, &good).unwrap();
    assert_eq!(read_everything(&path).unwrap(), 2);
    let zip64 = ZipWriter::new()
        .deflated("classes.dex", &archive::dex(&[MARKER_CLASS], &[]))
        .finish_zip64();
    for original in [good, zip64] {
        for i in 0..original.len() {
            for v in [0x00, 0xFF] {
                let mut bad = original.clone();
                bad[i] = v;
                std::fs::write(&path, &bad).unwrap();
                let _ = read_everything(&path);
            }
            std::fs::write(&path, &original[..i]).unwrap();
            assert!(read_everything(&path).is_err(), "cut at {i} still opened");
        }
    }
}

#[test]
fn crc32_known_answer() {
    assert_eq!(Crc32::of(b"123456789"), 0xCBF4_3926);
    assert_eq!(Crc32::of(b""), 0);
}

// ---------------------------------------------------------------------------------------------
// iOS
// ---------------------------------------------------------------------------------------------

/// An `.ipa` with `Payload/Shop.app/`: Info.plist naming `Shop`, the executable, and the
/// given frameworks (name, binary).
fn ipa(main: &[u8], frameworks: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut zip = ZipWriter::new()
        .dir("Payload/")
        .dir("Payload/Shop.app/")
        .deflated(
            "Payload/Shop.app/Info.plist",
            &archive::binary_info_plist("Shop"),
        )
        .deflated("Payload/Shop.app/Shop", main)
        .deflated("Payload/Shop.app/Assets.car", b"assets");
    for (name, binary) in frameworks {
        let base = format!("Payload/Shop.app/Frameworks/{name}.framework");
        zip = zip
            .deflated(&format!("{base}/Info.plist"), &archive::info_plist(name))
            .deflated(&format!("{base}/{name}"), binary);
    }
    zip.finish()
}

#[test]
fn ipa_marker_in_a_framework_is_present() {
    let sb = sandbox();
    write(
        &sb,
        "Shop.ipa",
        &ipa(
            &archive::mach_o(b"main code"),
            &[
                ("AppductCore", archive::mach_o(b"..AppductCoreMarker..")),
                ("hermes", archive::mach_o(b"js")),
            ],
        ),
    );
    let data = ok(&sb, &["Shop.ipa", "--assert-present"]);
    assert_eq!(
        data,
        json!({
            "artifact": "Shop.ipa", "platform": "ios", "format": "ipa", "present": true,
            "signals": [
                {"name": "ios-marker-symbol", "found": true, "detail": "found in Frameworks/AppductCore.framework/AppductCore"},
                {"name": "ios-appduct-framework", "found": true, "detail": "Frameworks/AppductCore.framework"}
            ],
            "assertion": {"expected": "present", "holds": true}
        })
    );
    let (code, stdout, _) = sb.output(&["--no-color", "doctor", "Shop.ipa"]);
    assert_eq!(code, 0);
    insta::assert_snapshot!("doctor_ipa_present", stdout);
}

#[test]
fn ipa_marker_in_the_main_executable_is_present() {
    let sb = sandbox();
    // Statically linked: no framework, the marker in the app binary, across the chunk size.
    let mut body = vec![0u8; 64 * 1024 - 4096 - 4 - 5];
    body.extend_from_slice(b"AppductCoreMarker");
    write(&sb, "Static.ipa", &ipa(&archive::mach_o(&body), &[]));
    let data = ok(&sb, &["Static.ipa"]);
    assert_eq!(data["present"], true);
    assert_eq!(
        signal(&data, "ios-marker-symbol")["detail"],
        "found in Shop"
    );
    assert_eq!(
        signal(&data, "ios-appduct-framework"),
        &json!({"name": "ios-appduct-framework", "found": false})
    );
}

#[test]
fn ipa_framework_without_the_marker_is_absent() {
    let sb = sandbox();
    write(
        &sb,
        "Stub.ipa",
        &ipa(
            &archive::mach_o(b"main"),
            &[("AppductCore", archive::mach_o(b"AppductCore stub"))],
        ),
    );
    let data = ok(&sb, &["Stub.ipa", "--assert-absent"]);
    assert_eq!(data["present"], false);
    assert_eq!(
        signal(&data, "ios-marker-symbol")["detail"],
        "scanned Shop, Frameworks/AppductCore.framework/AppductCore"
    );
    assert_eq!(signal(&data, "ios-appduct-framework")["found"], true);
    let (code, doc) = doctor(&sb, &["Stub.ipa", "--assert-present"]);
    assert_eq!(code, 3, "{doc}");
}

#[test]
fn ipa_that_cannot_be_read_exits_66() {
    let sb = sandbox();
    let main = archive::mach_o(b"AppductCoreMarker");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "no-payload.ipa",
            ZipWriter::new().deflated("Shop.app/Shop", &main).finish(),
            "no Payload/<Name>.app/ bundle",
        ),
        (
            "two.ipa",
            ZipWriter::new()
                .deflated("Payload/A.app/Info.plist", &archive::info_plist("A"))
                .deflated("Payload/B.app/Info.plist", &archive::info_plist("B"))
                .finish(),
            "several app bundles under Payload/: A.app, B.app",
        ),
        (
            "no-plist.ipa",
            ZipWriter::new()
                .deflated("Payload/Shop.app/Shop", &main)
                .finish(),
            "Info.plist is missing",
        ),
        (
            "bad-plist.ipa",
            ZipWriter::new()
                .deflated("Payload/Shop.app/Info.plist", b"<plist><dict><key>x</key>")
                .deflated("Payload/Shop.app/Shop", &main)
                .finish(),
            "Info.plist: malformed property list",
        ),
        (
            "no-exe.ipa",
            ZipWriter::new()
                .deflated("Payload/Shop.app/Info.plist", &archive::info_plist("Shop"))
                .finish(),
            "Shop is missing",
        ),
        (
            "escape.ipa",
            ZipWriter::new()
                .deflated(
                    "Payload/Shop.app/Info.plist",
                    &archive::info_plist("../../Shop"),
                )
                .deflated("Shop", &main)
                .finish(),
            "is not a plain file name",
        ),
        (
            "elf.ipa",
            ZipWriter::new()
                .deflated("Payload/Shop.app/Info.plist", &archive::info_plist("Shop"))
                .deflated("Payload/Shop.app/Shop", b"\x7fELF AppductCoreMarker")
                .finish(),
            "Shop is not a Mach-O binary",
        ),
        (
            "fw-missing.ipa",
            ZipWriter::new()
                .deflated("Payload/Shop.app/Info.plist", &archive::info_plist("Shop"))
                .deflated("Payload/Shop.app/Shop", &archive::mach_o(b""))
                .deflated(
                    "Payload/Shop.app/Frameworks/Lib.framework/Info.plist",
                    &archive::info_plist("Lib"),
                )
                .finish(),
            "Frameworks/Lib.framework/Lib is missing",
        ),
    ];
    for (name, bytes, needle) in cases {
        write(&sb, name, &bytes);
        inspection_error(&sb, &[name], needle);
    }
}

fn app_dir(root: &Path, main: &[u8], frameworks: &[(&str, Vec<u8>)]) {
    std::fs::create_dir_all(root).unwrap();
    std::fs::write(root.join("Info.plist"), archive::info_plist("Shop")).unwrap();
    std::fs::write(root.join("Shop"), main).unwrap();
    for (name, binary) in frameworks {
        let fw = root.join("Frameworks").join(format!("{name}.framework"));
        std::fs::create_dir_all(&fw).unwrap();
        // No Info.plist: the binary is named after the framework.
        std::fs::write(fw.join(name), binary).unwrap();
    }
}

#[test]
fn app_directory_present_and_absent() {
    let sb = sandbox();
    app_dir(
        &sb.cwd().join("Shop.app"),
        &archive::mach_o(b"main"),
        &[("AppductCore", archive::mach_o(b"AppductCoreMarker"))],
    );
    let data = ok(&sb, &["Shop.app", "--assert-present"]);
    assert_eq!(
        (data["platform"].clone(), data["format"].clone()),
        (json!("ios"), json!("app"))
    );
    assert_eq!(data["present"], true);
    // A trailing slash is still an .app.
    assert_eq!(ok(&sb, &["Shop.app/"])["present"], true);

    app_dir(&sb.cwd().join("Plain.app"), &archive::mach_o(b"main"), &[]);
    let data = ok(&sb, &["Plain.app", "--assert-absent"]);
    assert_eq!(data["present"], false);
    assert_eq!(signal(&data, "ios-marker-symbol")["detail"], "scanned Shop");
}

#[test]
fn app_directory_that_cannot_be_read_exits_66() {
    let sb = sandbox();
    // A symlink leading out of the bundle is refused, even to a file with the marker.
    let outside = sb.cwd().join("outside");
    std::fs::write(&outside, archive::mach_o(b"AppductCoreMarker")).unwrap();
    let root = sb.cwd().join("Link.app");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("Info.plist"), archive::info_plist("Shop")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("Shop")).unwrap();
    inspection_error(&sb, &["Link.app"], "resolves to a path outside the bundle");

    // The executable is a directory.
    let root = sb.cwd().join("Dir.app");
    std::fs::create_dir_all(root.join("Shop")).unwrap();
    std::fs::write(root.join("Info.plist"), archive::info_plist("Shop")).unwrap();
    inspection_error(&sb, &["Dir.app"], "Shop is not a regular file");

    // No Info.plist.
    std::fs::create_dir_all(sb.cwd().join("Empty.app")).unwrap();
    inspection_error(&sb, &["Empty.app"], "Info.plist is missing");
}

// ---------------------------------------------------------------------------------------------
// Arguments and inputs
// ---------------------------------------------------------------------------------------------

#[test]
fn wrong_types_and_missing_paths() {
    let sb = sandbox();
    for args in [
        &["x.zip"][..],
        &["x.apk.bak"],
        &["noextension"],
        &["x.apk", "--assert-present", "--assert-absent"],
        &["a.apk", "b.apk"],
        &[],
    ] {
        let (code, doc) = doctor(&sb, args);
        assert_eq!(code, 64, "{args:?}: {doc}");
        assert_eq!(doc["error"]["type"], "usage_error");
    }
    inspection_error(&sb, &["missing.apk"], "no such file or directory");
    inspection_error(&sb, &["missing.app"], "no such file or directory");
    std::fs::create_dir_all(sb.cwd().join("dir.apk")).unwrap();
    inspection_error(&sb, &["dir.apk"], "is a directory");
    std::fs::create_dir_all(sb.cwd().join("dir.ipa")).unwrap();
    inspection_error(&sb, &["dir.ipa"], "is a directory");
    write(&sb, "file.app", b"not a directory");
    inspection_error(&sb, &["file.app"], "is not a directory");

    // Human failures go to stderr as the error block.
    let (code, stdout, stderr) = sb.output(&["--no-color", "doctor", "missing.apk"]);
    assert_eq!((code, stdout.as_str()), (66, ""));
    insta::assert_snapshot!("doctor_missing_human_error", stderr);
}

// ---------------------------------------------------------------------------------------------
// JavaScript bundles (issue #23): the live @appduct/sdk core, plain JS and Hermes bytecode
// ---------------------------------------------------------------------------------------------

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/doctor");

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(FIXTURES).join(name)).unwrap()
}

/// An `.apk` whose only dex is a stub, with `assets/index.android.bundle` = `bundle`.
fn rn_apk(bundle: &[u8]) -> Vec<u8> {
    ZipWriter::new()
        .deflated("AndroidManifest.xml", b"<manifest/>")
        .deflated(
            "classes.dex",
            &archive::dex(&["Lcom/example/MainActivity;"], &[]),
        )
        .deflated("assets/index.android.bundle", bundle)
        .finish()
}

#[test]
fn the_marker_the_doctor_looks_for_is_the_one_the_sdk_core_stores() {
    let marker = std::str::from_utf8(appduct_cli::commands::doctor::JS_LIVE_CORE_MARKER).unwrap();
    let core = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sdk-ts/packages/sdk/src/core/client.ts"
    ))
    .unwrap();
    assert!(
        core.contains(&format!("SDK_LIVE_CORE_MARKER = \"{marker}\"")),
        "the TS session core no longer stores {marker:?}"
    );
    // The fixtures are what they claim to be.
    assert!(
        fixture("live-core.hbc").starts_with(&appduct_cli::commands::doctor::HERMES_BYTECODE_MAGIC)
    );
    assert!(
        fixture("inert.hbc").starts_with(&appduct_cli::commands::doctor::HERMES_BYTECODE_MAGIC)
    );
}

#[test]
fn an_apk_carrying_the_live_js_core_is_present_plain_js_or_hermes() {
    let sb = sandbox();
    for (name, bundle, kind) in [
        ("plain.apk", fixture("live-core.js"), "plain JS"),
        ("hermes.apk", fixture("live-core.hbc"), "Hermes bytecode"),
    ] {
        write(&sb, name, &rn_apk(&bundle));
        let data = ok(&sb, &[name]);
        assert_eq!(data["present"], true, "{name}: {data}");
        assert_eq!(
            signal(&data, "js-live-core"),
            &json!({"name": "js-live-core", "found": true,
                    "detail": format!("found in assets/index.android.bundle ({kind})")})
        );
        assert_eq!(signal(&data, "android-marker-class")["found"], false);
        // The release check that used to pass now fails.
        let (code, doc) = doctor(&sb, &[name, "--assert-absent"]);
        assert_eq!(code, 3, "{doc}");
        assert_eq!(doc["error"]["type"], "assertion_error");
        let message = doc["error"]["message"].as_str().unwrap();
        assert!(message.contains("live @appduct/sdk core"), "{message}");
    }
}

#[test]
fn an_inert_bundle_is_absent_and_reported_as_scanned() {
    let sb = sandbox();
    for (name, bundle, kind) in [
        ("plain.apk", fixture("inert.js"), "plain JS"),
        ("hermes.apk", fixture("inert.hbc"), "Hermes bytecode"),
    ] {
        write(&sb, name, &rn_apk(&bundle));
        let data = ok(&sb, &[name, "--assert-absent"]);
        assert_eq!(data["present"], false, "{name}: {data}");
        assert_eq!(
            signal(&data, "js-live-core"),
            &json!({"name": "js-live-core", "found": false,
                    "detail": format!("scanned assets/index.android.bundle ({kind})")})
        );
    }
    // Without any bundle the signal is left out (a native app's report is unchanged).
    write(&sb, "native.apk", &marker_apk());
    let data = ok(&sb, &["native.apk"]);
    assert!(
        data["signals"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["name"] != "js-live-core"),
        "{data}"
    );
}

#[test]
fn a_marker_split_across_read_chunks_is_found() {
    let sb = sandbox();
    // The zip reader streams in 64 KiB chunks: put the marker across the first boundary.
    let mut bundle = b"var a=\"".to_vec();
    bundle.resize(64 * 1024 - 10, b'x');
    bundle.extend_from_slice(b"appduct-sdk-live-core/v1\";");
    write(&sb, "split.apk", &rn_apk(&bundle));
    assert_eq!(ok(&sb, &["split.apk"])["present"], true);
}

#[test]
fn aab_bundles_live_in_base_assets_and_ipa_bundles_are_main_jsbundle() {
    let sb = sandbox();
    let aab = ZipWriter::new()
        .deflated("base/manifest/AndroidManifest.xml", b"<manifest/>")
        .deflated(
            "base/dex/classes.dex",
            &archive::dex(&["Lcom/example/A;"], &[]),
        )
        .deflated(
            "base/assets/index.android.bundle",
            &fixture("live-core.hbc"),
        )
        // Not where the app's bundle lives: ignored.
        .deflated("assets/index.android.bundle", &fixture("inert.js"))
        .finish();
    write(&sb, "app.aab", &aab);
    let data = ok(&sb, &["app.aab"]);
    assert_eq!(data["present"], true, "{data}");
    assert_eq!(
        signal(&data, "js-live-core")["detail"],
        "found in base/assets/index.android.bundle (Hermes bytecode)"
    );

    // An .ipa: Payload/Shop.app/main.jsbundle next to the executable.
    let with_bundle = |bundle: &[u8]| {
        ZipWriter::new()
            .dir("Payload/")
            .dir("Payload/Shop.app/")
            .deflated(
                "Payload/Shop.app/Info.plist",
                &archive::binary_info_plist("Shop"),
            )
            .deflated("Payload/Shop.app/Shop", &archive::mach_o(b"main code"))
            .deflated("Payload/Shop.app/main.jsbundle", bundle)
            .finish()
    };
    write(&sb, "Live.ipa", &with_bundle(&fixture("live-core.hbc")));
    let data = ok(&sb, &["Live.ipa", "--assert-present"]);
    assert_eq!(
        signal(&data, "js-live-core")["detail"],
        "found in main.jsbundle (Hermes bytecode)"
    );
    assert_eq!(signal(&data, "ios-marker-symbol")["found"], false);
    write(&sb, "Inert.ipa", &with_bundle(&fixture("inert.js")));
    let data = ok(&sb, &["Inert.ipa", "--assert-absent"]);
    assert_eq!(data["present"], false);
    assert_eq!(
        signal(&data, "js-live-core")["detail"],
        "scanned main.jsbundle (plain JS)"
    );
    // An unpacked .app reads the same file.
    let app = sb.cwd().join("Shop.app");
    app_dir(&app, &archive::mach_o(b"main"), &[]);
    std::fs::write(app.join("main.jsbundle"), fixture("live-core.js")).unwrap();
    let data = ok(&sb, &["Shop.app"]);
    assert_eq!(data["present"], true, "{data}");
    assert_eq!(
        signal(&data, "js-live-core")["detail"],
        "found in main.jsbundle (plain JS)"
    );
}
