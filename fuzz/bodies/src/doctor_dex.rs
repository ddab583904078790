//! Target `doctor_dex`: the dex type-table reader of `appduct doctor`
//! (`appduct_doctor::dex::for_each_type_descriptor`).
//!
//! Input: the dex bytes. Invariants: no panic; every descriptor handed out lies within the
//! input, and a second pass hands out the same descriptors.

use appduct_doctor::dex::for_each_type_descriptor;

pub fn run(data: &[u8]) {
    let mut first = Vec::new();
    let verdict = for_each_type_descriptor(data, |d| first.push(d.to_vec()));
    for d in &first {
        assert!(d.len() <= data.len());
    }
    let mut second = Vec::new();
    let again = for_each_type_descriptor(data, |d| second.push(d.to_vec()));
    assert_eq!(verdict.is_ok(), again.is_ok());
    assert_eq!(first, second);
}
