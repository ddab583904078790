//! Target `doctor_plist`: the `Info.plist` reader of `appduct doctor`
//! (`appduct_doctor::plist::bundle_executable`), binary (`bplist00`) and XML.
//!
//! Input: the plist bytes. Invariants: no panic and no stack exhaustion on any nesting; an
//! accepted value is a non-empty string; the verdict does not depend on a UTF-8 byte-order
//! mark in front of an XML plist.

use appduct_doctor::plist::bundle_executable;

pub fn run(data: &[u8]) {
    let verdict = bundle_executable(data);
    if let Ok(name) = &verdict {
        assert!(!name.is_empty());
    }
    if !data.starts_with(b"bplist00") && !data.starts_with("\u{feff}".as_bytes()) {
        let mut with_bom = "\u{feff}".as_bytes().to_vec();
        with_bom.extend_from_slice(data);
        assert_eq!(bundle_executable(&with_bom), verdict);
    }
}
