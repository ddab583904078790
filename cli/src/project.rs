//! Static deep-link scheme probes in a project directory (05 §5.3), used by `appduct init`.
//!
//! Nothing is executed (`app.config.js` / `.ts` are never run); each probe reads one kind of
//! file as text. The parsers are deliberately small and tolerant: a file they cannot read
//! yields no scheme rather than an error, and disagreement between native probes is reported,
//! never guessed.
//!
//! Architecture note: 01 §3.4 places these probes in the daemon crate's client-side `project`
//! module, shared with the MCP bridge; that module does not exist yet, so they live here with
//! pure parsers that can move unchanged.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Where a discovered scheme came from (`init`'s `source`, 05 §10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProbeSource {
    AppJson,
    AndroidGradle,
    AndroidManifest,
    IosInfoPlist,
    IosProjectYml,
}

impl ProbeSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeSource::AppJson => "app.json",
            ProbeSource::AndroidGradle => "android-gradle",
            ProbeSource::AndroidManifest => "android-manifest",
            ProbeSource::IosInfoPlist => "ios-info-plist",
            ProbeSource::IosProjectYml => "ios-project-yml",
        }
    }
}

impl fmt::Display for ProbeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One scheme found by a probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub scheme: String,
    pub source: ProbeSource,
    /// The file the probe read.
    pub origin: PathBuf,
}

/// The native probes found more than one distinct scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict(pub Vec<Found>);

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the project files name different deep-link schemes: ")?;
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|found| {
                format!(
                    "\"{}\" ({}, {})",
                    found.scheme,
                    found.source,
                    found.origin.display()
                )
            })
            .collect();
        f.write_str(&parts.join(", "))
    }
}

/// The files the probes read, for "every place tried" messages.
pub const PROBED_FILES: &str = "app.json, android/app/build.gradle(.kts), \
android/app/src/main/AndroidManifest.xml, Info.plist files, project.yml or ios/project.yml";

/// Runs the probes of 05 §5.3 in `dir` (no walk-up). `app.json` wins when it yields a scheme;
/// otherwise the native probes must agree, and the first source in table order is reported.
pub fn discover_scheme(dir: &Path) -> Result<Option<Found>, Conflict> {
    let app_json = dir.join("app.json");
    if let Some(scheme) = read(&app_json).as_deref().and_then(scheme_from_app_json) {
        return Ok(Some(Found {
            scheme,
            source: ProbeSource::AppJson,
            origin: app_json,
        }));
    }
    let mut found = Vec::new();
    let mut collect = |source, origin: PathBuf, schemes: Vec<String>| {
        for scheme in schemes {
            found.push(Found {
                scheme,
                source,
                origin: origin.clone(),
            });
        }
    };
    for name in ["build.gradle", "build.gradle.kts"] {
        let path = dir.join("android/app").join(name);
        if let Some(text) = read(&path) {
            collect(ProbeSource::AndroidGradle, path, schemes_from_gradle(&text));
        }
    }
    let manifest = dir.join("android/app/src/main/AndroidManifest.xml");
    if let Some(text) = read(&manifest) {
        collect(
            ProbeSource::AndroidManifest,
            manifest,
            schemes_from_manifest(&text),
        );
    }
    for plist in info_plists(dir) {
        if let Some(text) = read(&plist) {
            collect(
                ProbeSource::IosInfoPlist,
                plist,
                schemes_from_info_plist(&text),
            );
        }
    }
    for rel in ["project.yml", "ios/project.yml"] {
        let path = dir.join(rel);
        if let Some(text) = read(&path) {
            collect(
                ProbeSource::IosProjectYml,
                path,
                schemes_from_project_yml(&text),
            );
        }
    }
    let mut distinct: Vec<&str> = found.iter().map(|f| f.scheme.as_str()).collect();
    distinct.sort_unstable();
    distinct.dedup();
    match distinct.len() {
        0 => Ok(None),
        1 => Ok(found.into_iter().next()),
        _ => Err(Conflict(found)),
    }
}

/// A regular file's text; `None` when missing, not a regular file or not UTF-8.
fn read(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

/// `Info.plist` files at most 2 directories below `dir`, skipping `Pods`, `build`,
/// `node_modules` and `DerivedData`; symlinked directories are not followed. Sorted.
fn info_plists(dir: &Path) -> Vec<PathBuf> {
    const SKIPPED: [&str; 4] = ["Pods", "build", "node_modules", "DerivedData"];
    let mut out = Vec::new();
    let mut level = vec![dir.to_path_buf()];
    for depth in 0..=2 {
        let mut next = Vec::new();
        for d in &level {
            let plist = d.join("Info.plist");
            if plist.is_file() {
                out.push(plist);
            }
            if depth == 2 {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(d) else {
                continue;
            };
            let mut subdirs: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter(|e| !SKIPPED.iter().any(|s| e.file_name() == *s))
                .map(|e| e.path())
                .collect();
            subdirs.sort();
            next.extend(subdirs);
        }
        level = next;
    }
    out
}

/// `expo.scheme` if a string, or its first element if an array of strings.
pub fn scheme_from_app_json(text: &str) -> Option<String> {
    let value: Value = serde_json::from_str(text).ok()?;
    match value.get("expo")?.get("scheme")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) if items.iter().all(Value::is_string) => {
            items.first().and_then(Value::as_str).map(str::to_owned)
        }
        _ => None,
    }
}

/// The string value of the manifest placeholder `appductScheme` in a Gradle build file
/// (Groovy `appductScheme: "x"`, Kotlin `"appductScheme" to "x"` or
/// `manifestPlaceholders["appductScheme"] = "x"`).
pub fn schemes_from_gradle(text: &str) -> Vec<String> {
    const KEY: &str = "appductScheme";
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(KEY) {
        let after = &rest[at + KEY.len()..];
        rest = after;
        let s = after.strip_prefix(['"', '\'']).unwrap_or(after);
        let s = s.trim_start();
        let s = s.strip_prefix(']').unwrap_or(s).trim_start();
        let s = if let Some(t) = s.strip_prefix("to") {
            t
        } else if let Some(t) = s.strip_prefix([':', '=', ',']) {
            t
        } else {
            continue;
        };
        if let Some(value) = quoted(s.trim_start()) {
            push_unique(&mut out, value);
        }
    }
    out
}

/// A leading `"…"` or `'…'` literal.
fn quoted(s: &str) -> Option<String> {
    let quote = s.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let body = &s[1..];
    let end = body.find(quote)?;
    Some(body[..end].to_owned())
}

fn push_unique(out: &mut Vec<String>, value: String) {
    if !out.contains(&value) {
        out.push(value);
    }
}

/// Removes `<!-- … -->` comments.
fn strip_xml_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<!--") {
        out.push_str(&rest[..start]);
        match rest[start..].find("-->") {
            Some(end) => rest = &rest[start + end + 3..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// The value of attribute `name` in the tag text `tag`.
fn xml_attr(tag: &str, name: &str) -> Option<String> {
    let mut rest = tag;
    while let Some(at) = rest.find(name) {
        let before_ok = rest[..at]
            .chars()
            .next_back()
            .is_none_or(char::is_whitespace);
        let after = rest[at + name.len()..].trim_start();
        rest = &rest[at + name.len()..];
        if !before_ok {
            continue;
        }
        if let Some(value) = after.strip_prefix('=') {
            return quoted(value.trim_start());
        }
    }
    None
}

/// The tags named `name` (`<name …>` or `<name …/>`) in `text`, as their inner text.
fn xml_tags<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let open = format!("<{name}");
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(&open) {
        let after = &rest[at + open.len()..];
        let boundary = after
            .chars()
            .next()
            .is_some_and(|c| c.is_whitespace() || c == '>' || c == '/');
        let end = after.find('>').unwrap_or(after.len());
        if boundary {
            out.push(&after[..end]);
        }
        rest = &after[end..];
    }
    out
}

/// `android:scheme` of `<data>` in each `<intent-filter>` whose action is
/// `android.intent.action.VIEW`, ignoring `http`, `https` and `${…}` placeholders.
pub fn schemes_from_manifest(text: &str) -> Vec<String> {
    let text = strip_xml_comments(text);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("<intent-filter") {
        let block_start = &rest[start..];
        let end = block_start
            .find("</intent-filter>")
            .unwrap_or(block_start.len());
        let block = &block_start[..end];
        rest = &block_start[end..];
        let is_view = xml_tags(block, "action").iter().any(|tag| {
            xml_attr(tag, "android:name").as_deref() == Some("android.intent.action.VIEW")
        });
        if !is_view {
            continue;
        }
        for tag in xml_tags(block, "data") {
            if let Some(scheme) = xml_attr(tag, "android:scheme")
                && !scheme.eq_ignore_ascii_case("http")
                && !scheme.eq_ignore_ascii_case("https")
                && !scheme.contains("${")
            {
                push_unique(&mut out, scheme);
            }
        }
    }
    out
}

/// The `<string>` values of the `<array>` after each `<key>CFBundleURLSchemes</key>` (these
/// only occur inside `CFBundleURLTypes`), ignoring values containing `$(`.
pub fn schemes_from_info_plist(text: &str) -> Vec<String> {
    const KEY: &str = "<key>CFBundleURLSchemes</key>";
    let text = strip_xml_comments(text);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find(KEY) {
        rest = rest[at + KEY.len()..].trim_start();
        let Some(array) = rest.strip_prefix("<array>") else {
            continue;
        };
        let end = array.find("</array>").unwrap_or(array.len());
        let mut items = &array[..end];
        while let Some(s) = items.find("<string>") {
            let value_start = &items[s + "<string>".len()..];
            let Some(e) = value_start.find("</string>") else {
                break;
            };
            let value = value_start[..e].trim();
            if !value.is_empty() && !value.contains("$(") {
                push_unique(&mut out, value.to_owned());
            }
            items = &value_start[e..];
        }
    }
    out
}

/// `CFBundleURLSchemes` entries of an XcodeGen `project.yml`: a flow list
/// (`CFBundleURLSchemes: [a, b]`) or a block list of `- a` lines indented below the key.
pub fn schemes_from_project_yml(text: &str) -> Vec<String> {
    const KEY: &str = "CFBundleURLSchemes:";
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let Some(after) = trimmed
            .strip_prefix(KEY)
            .or_else(|| trimmed.strip_prefix("- ").and_then(|t| t.strip_prefix(KEY)))
        else {
            continue;
        };
        let indent = line.len() - trimmed.len();
        let after = strip_yaml_comment(after).trim();
        if let Some(flow) = after.strip_prefix('[') {
            let flow = flow.split(']').next().unwrap_or_default();
            for item in flow.split(',') {
                push_yaml_scalar(&mut out, item);
            }
            continue;
        }
        if !after.is_empty() {
            continue;
        }
        for next in &lines[i + 1..] {
            let t = next.trim_start();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let next_indent = next.len() - t.len();
            match t.strip_prefix('-') {
                Some(item) if next_indent >= indent => {
                    push_yaml_scalar(&mut out, strip_yaml_comment(item));
                }
                _ => break,
            }
        }
    }
    out
}

fn strip_yaml_comment(s: &str) -> &str {
    match s.find(" #") {
        Some(at) => &s[..at],
        None => s,
    }
}

fn push_yaml_scalar(out: &mut Vec<String>, raw: &str) {
    let raw = raw.trim();
    let value = quoted(raw).unwrap_or_else(|| raw.to_owned());
    if !value.is_empty() && !value.contains("$(") {
        push_unique(out, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_json_scheme_string_or_first_of_array() {
        assert_eq!(
            scheme_from_app_json(r#"{"expo":{"scheme":"shop"}}"#).as_deref(),
            Some("shop")
        );
        assert_eq!(
            scheme_from_app_json(r#"{"expo":{"scheme":["a","b"]}}"#).as_deref(),
            Some("a")
        );
        assert_eq!(scheme_from_app_json(r#"{"expo":{"scheme":["a",1]}}"#), None);
        assert_eq!(scheme_from_app_json(r#"{"expo":{"name":"x"}}"#), None);
        assert_eq!(scheme_from_app_json("not json"), None);
    }

    #[test]
    fn gradle_placeholder_in_groovy_and_kotlin() {
        let groovy = r#"
            defaultConfig {
                manifestPlaceholders = [appductScheme: "shop", other: "x"]
            }"#;
        assert_eq!(schemes_from_gradle(groovy), ["shop"]);
        assert_eq!(
            schemes_from_gradle(r#"manifestPlaceholders["appductScheme"] = "kts1""#),
            ["kts1"]
        );
        assert_eq!(
            schemes_from_gradle(r#"manifestPlaceholders += mapOf("appductScheme" to 'kts2')"#),
            ["kts2"]
        );
        // A mention without a string value yields nothing.
        assert!(schemes_from_gradle("// set appductScheme in gradle.properties").is_empty());
        assert!(schemes_from_gradle("appductScheme: someVariable").is_empty());
    }

    #[test]
    fn manifest_view_intent_filters_only() {
        let xml = r#"
<manifest xmlns:android="http://schemas.android.com/apk/res/android">
  <application>
    <!-- <intent-filter><action android:name="android.intent.action.VIEW"/><data android:scheme="commented"/></intent-filter> -->
    <activity android:name=".MainActivity">
      <intent-filter>
        <action android:name="android.intent.action.MAIN" />
        <data android:scheme="notview" />
      </intent-filter>
      <intent-filter>
        <action android:name="android.intent.action.VIEW" />
        <category android:name="android.intent.category.BROWSABLE" />
        <data android:scheme="https" android:host="example.com" />
        <data android:scheme="${appductScheme}" />
        <data android:scheme="shop" />
      </intent-filter>
    </activity>
  </application>
</manifest>"#;
        assert_eq!(schemes_from_manifest(xml), ["shop"]);
        assert!(schemes_from_manifest("<manifest/>").is_empty());
    }

    #[test]
    fn info_plist_url_schemes() {
        let plist = r#"<?xml version="1.0" encoding="UTF-8"?>
<plist version="1.0"><dict>
  <key>CFBundleURLTypes</key>
  <array>
    <dict>
      <key>CFBundleURLSchemes</key>
      <array>
        <string>shop</string>
        <string>$(PRODUCT_BUNDLE_IDENTIFIER)</string>
      </array>
    </dict>
  </array>
</dict></plist>"#;
        assert_eq!(schemes_from_info_plist(plist), ["shop"]);
        assert!(schemes_from_info_plist("<plist><dict/></plist>").is_empty());
    }

    #[test]
    fn project_yml_block_and_flow_lists() {
        let block = "
targets:
  App:
    info:
      properties:
        CFBundleURLTypes:
          - CFBundleURLSchemes:
              - shop # main
              - \"$(SCHEME)\"
            CFBundleURLName: x
";
        assert_eq!(schemes_from_project_yml(block), ["shop"]);
        let flow = "        CFBundleURLSchemes: [shop, 'other']\n";
        assert_eq!(schemes_from_project_yml(flow), ["shop", "other"]);
        assert!(schemes_from_project_yml("name: App\n").is_empty());
    }

    fn write(dir: &Path, rel: &str, text: &str) {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn app_json_wins_over_native_probes() {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), "app.json", r#"{"expo":{"scheme":"expo-shop"}}"#);
        write(
            tmp.path(),
            "android/app/build.gradle",
            r#"manifestPlaceholders = [appductScheme: "native"]"#,
        );
        let found = discover_scheme(tmp.path()).unwrap().unwrap();
        assert_eq!(found.scheme, "expo-shop");
        assert_eq!(found.source, ProbeSource::AppJson);
        assert_eq!(found.origin, tmp.path().join("app.json"));
    }

    #[test]
    fn agreeing_native_probes_report_the_first_source() {
        let tmp = tempfile::tempdir().unwrap();
        write(
            tmp.path(),
            "ios/App/Info.plist",
            "<key>CFBundleURLSchemes</key><array><string>shop</string></array>",
        );
        write(
            tmp.path(),
            "android/app/build.gradle.kts",
            r#"manifestPlaceholders["appductScheme"] = "shop""#,
        );
        let found = discover_scheme(tmp.path()).unwrap().unwrap();
        assert_eq!(found.source, ProbeSource::AndroidGradle);
        assert_eq!(found.scheme, "shop");
    }

    #[test]
    fn disagreeing_native_probes_are_a_conflict() {
        let tmp = tempfile::tempdir().unwrap();
        write(
            tmp.path(),
            "ios/App/Info.plist",
            "<key>CFBundleURLSchemes</key><array><string>one</string></array>",
        );
        write(tmp.path(), "project.yml", "CFBundleURLSchemes: [two]\n");
        let conflict = discover_scheme(tmp.path()).unwrap_err();
        let text = conflict.to_string();
        assert!(text.contains("\"one\" (ios-info-plist"), "{text}");
        assert!(text.contains("\"two\" (ios-project-yml"), "{text}");
    }

    #[test]
    fn plists_deeper_than_two_levels_or_in_skipped_dirs_are_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        let plist = "<key>CFBundleURLSchemes</key><array><string>deep</string></array>";
        write(tmp.path(), "a/b/c/Info.plist", plist);
        write(tmp.path(), "ios/Pods/Info.plist", plist);
        write(tmp.path(), "node_modules/x/Info.plist", plist);
        assert_eq!(discover_scheme(tmp.path()).unwrap(), None);
        write(tmp.path(), "a/b/Info.plist", plist);
        assert_eq!(
            discover_scheme(tmp.path()).unwrap().map(|f| f.scheme),
            Some("deep".to_owned())
        );
    }
}
