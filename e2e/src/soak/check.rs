//! What the soak measures of the daemon: RSS and open descriptors from `/proc/<pid>`, and the
//! audit files of the state directory matched call by call against the ledger.

use std::collections::HashMap;
use std::io::BufRead as _;
use std::path::Path;

use serde_json::Value;

use super::load::Expect;

/// Resident set size of `pid` in KiB (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Open descriptors of `pid` (entries of `/proc/<pid>/fd`).
pub fn fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// The audit files against the ledger.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AuditCheck {
    /// Lines in the audit files.
    pub records: usize,
    /// Calls the ledger expects exactly one record for.
    pub expected: usize,
    /// Expected calls with exactly one record.
    pub matched: usize,
    /// Expected calls without a record.
    pub missing: usize,
    /// Records of calls the soak never made, or of calls that must not have one.
    pub extra: usize,
    /// Records beyond the first for one callId.
    pub duplicates: usize,
    /// Records whose outcome or error type differ from the answer the caller got.
    pub mismatched: usize,
    /// Lines that are not a JSON object with a callId.
    pub unreadable: usize,
    /// The first few problems, for the report.
    pub notes: Vec<String>,
}

impl AuditCheck {
    pub fn is_exact(&self) -> bool {
        self.records == self.expected
            && self.matched == self.expected
            && self.missing == 0
            && self.extra == 0
            && self.duplicates == 0
            && self.mismatched == 0
            && self.unreadable == 0
    }

    fn note(&mut self, text: String) {
        if self.notes.len() < 10 {
            self.notes.push(text);
        }
    }
}

/// Reads every `.jsonl` day file under `state_dir/audit`, line by line, and matches each
/// record to the ledger by callId.
pub fn audit(state_dir: &Path, ledger: &HashMap<String, Expect>) -> std::io::Result<AuditCheck> {
    let mut check = AuditCheck {
        expected: ledger.values().filter(|e| **e != Expect::Unaudited).count(),
        ..AuditCheck::default()
    };
    let mut seen: HashMap<&str, u32> = HashMap::with_capacity(ledger.len());
    let mut files: Vec<_> = std::fs::read_dir(state_dir.join("audit"))?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    for file in files {
        let reader = std::io::BufReader::new(std::fs::File::open(&file)?);
        for line in reader.lines() {
            let line = line?;
            check.records += 1;
            let record: Value = match serde_json::from_str(&line) {
                Ok(v) => v,
                Err(_) => {
                    check.unreadable += 1;
                    check.note(format!("unreadable line: {line:.200}"));
                    continue;
                }
            };
            let Some(call_id) = record["callId"].as_str() else {
                check.unreadable += 1;
                continue;
            };
            let Some((key, expect)) = ledger.get_key_value(call_id) else {
                check.extra += 1;
                check.note(format!("a record of a call the soak never made: {record}"));
                continue;
            };
            let count = seen.entry(key.as_str()).or_default();
            *count += 1;
            if *count > 1 {
                check.duplicates += 1;
                check.note(format!("a second record for {call_id}: {record}"));
                continue;
            }
            match expect {
                Expect::Unaudited => {
                    check.extra += 1;
                    check.note(format!(
                        "a record of a call refused before step 3: {record}"
                    ));
                }
                Expect::Abandoned => check.matched += 1,
                Expect::Settled {
                    outcome,
                    error_type,
                } => {
                    check.matched += 1;
                    if record["outcome"] != *outcome
                        || record["errorType"].as_str() != error_type.as_deref()
                    {
                        check.mismatched += 1;
                        check.note(format!(
                            "{call_id}: answered {outcome} {error_type:?}, audited {record}"
                        ));
                    }
                }
            }
        }
    }
    for (call_id, expect) in ledger {
        if *expect != Expect::Unaudited && !seen.contains_key(call_id.as_str()) {
            check.missing += 1;
            check.note(format!("no record for {call_id} ({expect:?})"));
        }
    }
    Ok(check)
}

/// The median of `values` (0 when empty).
pub fn median(values: &mut [u64]) -> u64 {
    if values.is_empty() {
        return 0;
    }
    values.sort_unstable();
    values[values.len() / 2]
}
