//! Tests of the Metal plan's decode fusion on hand-built schedules.
use super::*;

#[test]
fn nothing_fuses_without_a_decode_gemv() {
    assert!(groups(&[]).is_empty());
}
