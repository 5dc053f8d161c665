//! Status checks after a dispatch whose kernel validates its operands
//! (`spd.metal`): a [`StatusCheck`] command waits for the device, then
//! reads the status tags the kernel left in its output and fails the run
//! with a [`CheckError`] naming the op, as the host kernel would have.
//!
//! Tag protocol: a kernel that finds matrix `k` of its batch invalid writes
//! `STATUS_TAG | code` (a signalling-NaN bit pattern) into word 0 of that
//! matrix's output block (`k · stride` 4-byte words from the output start)
//! and, when the block has a second word, the offending value as f32 into
//! word 1. Arithmetic only ever produces quiet NaNs, and the kernels reject
//! non-finite operands (so none is copied through), so word 0 holds such a
//! pattern only when the kernel wrote the tag.

use super::plan::BufferBinding;

/// High bits of a status tag: exponent all ones, quiet bit clear (a
/// signalling NaN as f32), `0x5A` marker; the low byte is the code.
pub const STATUS_TAG: u32 = 0x7FA5_A000;

/// Mask selecting the tag bits of a word.
const TAG_MASK: u32 = 0xFFFF_FF00;

/// Code: operand `code & 0xF` holds a non-finite value (word 1: the value).
pub const CODE_NON_FINITE: u32 = 0x10;
/// Code: matrix `k` of operand `code & 0xF` is not symmetric (word 1:
/// max |x − xᵀ|).
pub const CODE_NOT_SYMMETRIC: u32 = 0x20;
/// Code: matrix `k` of operand `code & 0xF` is not positive definite (word
/// 1: its smallest eigenvalue).
pub const CODE_NOT_PD: u32 = 0x30;
/// Code: the Karcher-mean Jacobian is singular (the implicit-function
/// solve failed).
pub const CODE_NOT_SOLVED: u32 = 0x40;

/// Wait for the device and read the status tags of a validating kernel's
/// output (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct StatusCheck {
    /// Index of the thunk in the schedule.
    pub thunk: usize,
    /// The op as errors name it (`log_eig backward`).
    pub op: String,
    /// Names of the kernel's operands, by the index a non-finite code
    /// carries.
    pub operands: Vec<&'static str>,
    /// Start of the output (the first matrix's block).
    pub status: BufferBinding,
    /// 4-byte words per matrix block (≥ 1).
    pub stride: u32,
    /// Matrices.
    pub count: u32,
}

/// A failed [`StatusCheck`]: an operand the kernel found invalid.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CheckError {
    /// The kernel tagged matrix `batch` invalid.
    #[error("[spd] {op}: {what} (thunk {index}, found on the GPU)")]
    Invalid {
        /// Thunk index.
        index: usize,
        /// The op.
        op: String,
        /// What is wrong, as the host kernel words it.
        what: String,
    },
    /// The status words lie outside the buffer (plan and buffers do not
    /// belong together).
    #[error("[spd] {op}: thunk {index}'s status words lie outside the {len}-byte buffer")]
    OutOfRange {
        /// Thunk index.
        index: usize,
        /// The op.
        op: String,
        /// Bytes in the buffer.
        len: usize,
    },
}

impl StatusCheck {
    /// The first tagged matrix's error, reading the words from `buf`, the
    /// bytes of the buffer the status binding names (arena or state).
    pub fn verify(&self, buf: &[u8]) -> Result<(), CheckError> {
        let word = |w: u64| -> Option<u32> {
            let at = usize::try_from(w.checked_mul(4)?).ok()?;
            let at = at.checked_add(self.status.offset)?;
            let b = buf.get(at..at.checked_add(4)?)?;
            Some(u32::from_le_bytes(b.try_into().ok()?))
        };
        let out_of_range = || CheckError::OutOfRange {
            index: self.thunk,
            op: self.op.clone(),
            len: buf.len(),
        };
        for k in 0..u64::from(self.count) {
            let first = k * u64::from(self.stride);
            let w0 = word(first).ok_or_else(out_of_range)?;
            if w0 & TAG_MASK != STATUS_TAG {
                continue;
            }
            let detail = if self.stride >= 2 {
                word(first + 1).map(f32::from_bits)
            } else {
                None
            };
            let value =
                |label: &str| detail.map_or(String::new(), |v| format!(" ({label}{v:.3e})"));
            let code = w0 & 0xFF;
            let name = self
                .operands
                .get((code & 0xF) as usize)
                .copied()
                .unwrap_or("an operand");
            let what = match code & 0xF0 {
                CODE_NON_FINITE => match detail {
                    Some(v) => format!("{name} holds a non-finite value ({v}; matrix {k})"),
                    None => format!("{name} holds a non-finite value (matrix {k})"),
                },
                CODE_NOT_SYMMETRIC => {
                    format!("{name}[{k}] is not symmetric{}", value("max |x - xᵀ| = "))
                }
                CODE_NOT_PD => format!(
                    "{name}[{k}] is not positive definite{}",
                    value("smallest eigenvalue ")
                ),
                CODE_NOT_SOLVED => "the Karcher-mean Jacobian is singular".into(),
                _ => format!("matrix {k} is invalid (status code {code:#x})"),
            };
            return Err(CheckError::Invalid {
                index: self.thunk,
                op: self.op.clone(),
                what,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thunk::Buf;

    fn check(stride: u32, count: u32) -> StatusCheck {
        StatusCheck {
            thunk: 7,
            op: "log_eig backward".into(),
            operands: vec!["x", "dy"],
            status: BufferBinding {
                buffer: Buf::Arena,
                offset: 8,
            },
            stride,
            count,
        }
    }

    fn words(ws: &[u32]) -> Vec<u8> {
        [0u32, 0]
            .iter()
            .chain(ws)
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }

    #[test]
    fn clean_output_passes_and_quiet_nans_are_not_tags() {
        let q = f32::NAN.to_bits();
        let buf = words(&[q, q, 1.5f32.to_bits(), 0, q, q, 0, 0]);
        assert_eq!(check(4, 2).verify(&buf), Ok(()));
    }

    #[test]
    fn tags_name_the_matrix_and_reason() {
        let mut ws = vec![0u32; 12];
        ws[4] = STATUS_TAG | CODE_NOT_PD;
        ws[5] = (-0.5f32).to_bits();
        let e = check(4, 3).verify(&words(&ws)).unwrap_err().to_string();
        assert!(e.contains("log_eig backward"), "{e}");
        assert!(e.contains("x[1] is not positive definite"), "{e}");
        assert!(e.contains("-5.000e-1"), "{e}");
        ws[4] = STATUS_TAG | CODE_NON_FINITE | 1;
        ws[5] = f32::INFINITY.to_bits();
        let e = check(4, 3).verify(&words(&ws)).unwrap_err().to_string();
        assert!(
            e.contains("dy holds a non-finite value (inf; matrix 1)"),
            "{e}"
        );
        // a one-word block has no detail
        let e = check(1, 3)
            .verify(&words(&[0, STATUS_TAG | CODE_NOT_SYMMETRIC, 0]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("x[1] is not symmetric (thunk 7"), "{e}");
    }

    #[test]
    fn words_past_the_buffer_are_an_error() {
        let e = check(4, 3).verify(&words(&[0; 8])).unwrap_err();
        assert!(matches!(e, CheckError::OutOfRange { index: 7, .. }), "{e}");
    }
}
