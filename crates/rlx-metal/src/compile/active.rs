//! Active extent: run a schedule compiled for `full` token rows on only its
//! first `active` rows, so a prompt bucket compiled once serves every
//! shorter prompt without computing the padding.
//!
//! The caller names the *token inputs*: inputs whose leading axis is the
//! token axis (embeddings, RoPE tables, cache slots). [`ActivePlan::new`]
//! follows them through the schedule by exact byte ranges: a thunk that
//! reads a token-major tensor is *token-dependent*, and must be one whose
//! work is row-wise along a leading token axis (elementwise, norms, GGUF
//! matmuls, RoPE, attention in `[b=1, s, h, d]` layout, …); its outputs are
//! token-major too. Two thunks read token rows but produce token-free
//! values: a `Gather` of a token-major table by token-free indices (the
//! last-row select of a decoder; its indices must be < `active`), and an
//! in-place ScatterND of token rows into a state buffer (the KV cache,
//! addressed by the slots input). Any other token-dependent thunk, or a
//! read that covers only part of a token-major tensor, makes the plan fail
//! with an error naming the thunk; callers then keep padding instead.
//!
//! [`ActivePlan::schedule`] gives the schedule for one active length: each
//! token-dependent thunk with its token count scaled by `active / full`,
//! every other thunk unchanged. Rows past `active` of token-major outputs
//! are left unspecified. Each scaled thunk is checked against its original
//! through `io()`: every range it touches is either unchanged (weights,
//! token-free operands) or the original's prefix in the exact ratio.

use crate::thunk::indexing::IndexingThunk;
use crate::thunk::io::ByteRange;
use crate::thunk::{is_state, Thunk, ThunkSchedule};
use thiserror::Error;

/// Why a schedule cannot run on a prefix of its token rows.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ActiveError {
    /// A token-dependent thunk that has no prefix form.
    #[error("[active extent] thunk {index} ({thunk}) reads token rows but cannot run on a prefix: {why}")]
    Unsupported {
        /// Schedule index.
        index: usize,
        /// Thunk name.
        thunk: &'static str,
        /// What is in the way.
        why: String,
    },
    /// A bad request (`full` of 0, `active` out of range, unknown input).
    #[error("[active extent] {0}")]
    Invalid(String),
}

/// What the plan does with one thunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Token-free: runs as compiled.
    Keep,
    /// Token-dependent: its token count is scaled.
    Scale,
}

/// The token-dependent thunks of a schedule compiled for `full` rows.
#[derive(Clone, Debug)]
pub struct ActivePlan {
    full: u32,
    roles: Vec<Role>,
}

/// `x · active / full` when `x` is a whole multiple of `full`.
fn sc(x: u32, full: u32, active: u32) -> Option<u32> {
    x.is_multiple_of(full).then(|| x / full * active)
}

/// The thunk with its token count scaled, for the kinds that work row by
/// row along a leading token axis; `Err` says why not.
fn scale(t: &Thunk, full: u32, a: u32) -> Result<Thunk, String> {
    let bad = || format!("its token extent is not a multiple of {full}");
    let mut t = t.clone();
    match &mut t {
        Thunk::BinaryFull(b) => b.len = sc(b.len, full, a).ok_or_else(bad)?,
        Thunk::BinaryBroadcast(b) => {
            let axis = b.out_dims.iter().position(|&d| d != 1).ok_or_else(bad)?;
            b.out_dims[axis] = sc(b.out_dims[axis], full, a).ok_or_else(bad)?;
            b.len = sc(b.len, full, a).ok_or_else(bad)?;
        }
        Thunk::FusedBinaryActivation(b) => b.len = sc(b.len, full, a).ok_or_else(bad)?,
        Thunk::FusedTernaryActivation(b) => b.len = sc(b.len, full, a).ok_or_else(bad)?,
        Thunk::Compare(b) => b.len = sc(b.len, full, a).ok_or_else(bad)?,
        Thunk::Where(b) => b.len = sc(b.len, full, a).ok_or_else(bad)?,
        Thunk::Fma(b) => b.len = sc(b.len, full, a).ok_or_else(bad)?,
        Thunk::BiasAdd(b) => b.m = sc(b.m, full, a).ok_or_else(bad)?,
        Thunk::FusedMmBiasAct(x) => x.m = sc(x.m, full, a).ok_or_else(bad)?,
        Thunk::Sgemm(x) => x.m = sc(x.m, full, a).ok_or_else(bad)?,
        Thunk::SplitLastAxis(x) => x.outer = sc(x.outer, full, a).ok_or_else(bad)?,
        Thunk::ElementwiseRegion(r) => {
            if r.prologue != 0 {
                return Err("a region with a layout prologue".into());
            }
            // dense inputs shrink with `len`; scalar and trailing-broadcast
            // inputs (weights) are read whole, as `io()` says
            r.len = sc(r.len, full, a).ok_or_else(bad)?;
        }
        Thunk::BatchElementwiseRegion(r) => {
            // every slice shrinks; the slice stride stays
            r.slice_len = sc(r.slice_len, full, a).ok_or_else(bad)?;
        }
        Thunk::ActivationOut(x) => x.len = sc(x.len, full, a).ok_or_else(bad)?,
        Thunk::ActivationInPlace(x) => x.len = sc(x.len, full, a).ok_or_else(bad)?,
        Thunk::GeluApproxOut(x) => x.len = sc(x.len, full, a).ok_or_else(bad)?,
        Thunk::GeluApproxHost(x) => x.len = sc(x.len, full, a).ok_or_else(bad)?,
        Thunk::Cast(x) => x.len = sc(x.len, full, a).ok_or_else(bad)?,
        Thunk::CastTruncF32(x) => x.len = sc(x.len, full, a).ok_or_else(bad)?,
        Thunk::Copy(x) => x.len = sc(x.len, full, a).ok_or_else(bad)?,
        Thunk::FusedSwiGLU(x) => x.total = sc(x.total, full, a).ok_or_else(bad)?,
        Thunk::RmsNorm(x) => x.rows = sc(x.rows, full, a).ok_or_else(bad)?,
        Thunk::LayerNorm(x) => x.rows = sc(x.rows, full, a).ok_or_else(bad)?,
        Thunk::FusedResidualRmsNorm(x) => x.rows = sc(x.rows, full, a).ok_or_else(bad)?,
        Thunk::FusedResidualLN(x) => x.rows = sc(x.rows, full, a).ok_or_else(bad)?,
        Thunk::Softmax(x) => x.rows = sc(x.rows, full, a).ok_or_else(bad)?,
        Thunk::DequantMatMulGguf(x) => x.m = sc(x.m, full, a).ok_or_else(bad)?,
        Thunk::Rope(x) => {
            if x.batch != 1 {
                return Err(format!("batch {} (needs 1)", x.batch));
            }
            x.seq = sc(x.seq, full, a).ok_or_else(bad)?;
        }
        Thunk::Attention(x) => {
            if x.batch != 1 || x.bhsd != 0 {
                return Err("needs batch 1 in [b, s, h, d] layout".into());
            }
            if x.mask_kind == crate::thunk::attention::MASK_BIAS {
                return Err("a per-head bias mask is not token-major".into());
            }
            x.seq = sc(x.seq, full, a).ok_or_else(bad)?;
        }
        // causal scans: the first `a` rows' outputs and the state after
        // them depend on those rows only
        Thunk::GatedDeltaNet(x) => {
            one_batch(x.batch)?;
            x.seq = sc(x.seq, full, a).ok_or_else(bad)?;
        }
        Thunk::SelectiveScan(x) => {
            one_batch(x.batch)?;
            x.seq = sc(x.seq, full, a).ok_or_else(bad)?;
        }
        Thunk::Mamba2(x) => {
            one_batch(x.batch)?;
            x.seq = sc(x.seq, full, a).ok_or_else(bad)?;
        }
        Thunk::Lstm(x) => {
            causal_rnn(x.batch, x.bidirectional, x.carry)?;
            x.seq = sc(x.seq, full, a).ok_or_else(bad)?;
        }
        Thunk::Gru(x) => {
            causal_rnn(x.batch, x.bidirectional, x.carry)?;
            x.seq = sc(x.seq, full, a).ok_or_else(bad)?;
        }
        Thunk::Rnn(x) => {
            causal_rnn(x.batch, x.bidirectional, x.carry)?;
            x.seq = sc(x.seq, full, a).ok_or_else(bad)?;
        }
        Thunk::CpuIndexing(c) => match &mut c.thunk {
            IndexingThunk::ScatterNd {
                data,
                dst,
                indices_dims,
                ..
            } if data == dst && is_state(*dst) => {
                let lead = indices_dims.first_mut().ok_or_else(bad)?;
                let n = u32::try_from(*lead).map_err(|_| bad())?;
                *lead = sc(n, full, a).ok_or_else(bad)? as usize;
            }
            _ => return Err("only an in-place ScatterND into a state has a prefix form".into()),
        },
        _ => return Err("no prefix form for this kind".into()),
    }
    Ok(t)
}

/// Scans have a prefix form only with one sequence (the token axis is
/// the leading axis of the active extent).
fn one_batch(batch: u32) -> Result<(), String> {
    if batch == 1 {
        Ok(())
    } else {
        Err(format!("batch {batch} (needs 1)"))
    }
}

/// A recurrent net runs on a prefix when it is causal (one direction) and
/// appends no final-state rows (those sit after the token rows).
fn causal_rnn(batch: u32, bidirectional: bool, carry: bool) -> Result<(), String> {
    one_batch(batch)?;
    if bidirectional {
        return Err("a bidirectional recurrence reads every row".into());
    }
    if carry {
        return Err("carry rows follow the token rows".into());
    }
    Ok(())
}

/// True when `new` is `old` or its prefix in the ratio `a / full`.
fn prefix_of(old: &ByteRange, new: &ByteRange, full: u32, a: u32) -> bool {
    new.offset == old.offset
        && (new.len == old.len || new.len as u128 * full as u128 == old.len as u128 * a as u128)
}

/// Token-major ranges, as exact `(offset, len)` tensors, and the remnants
/// of token-major tensors a token-free write covered only in part.
#[derive(Default)]
struct Taint {
    /// Whole token-major tensors.
    whole: Vec<ByteRange>,
    /// What is left of a token-major tensor after a write into part of it:
    /// no longer a tensor any thunk may read as token-free or token-major,
    /// so any read touching it is refused (a later read of the whole
    /// original tensor included).
    remnants: Vec<ByteRange>,
}

/// The parts of `t` outside `w` (same buffer, overlapping): up to two.
fn outside(t: &ByteRange, w: &ByteRange) -> impl Iterator<Item = ByteRange> {
    let (t0, t1) = (t.offset, t.offset + t.len);
    let (w0, w1) = (w.offset, w.offset.saturating_add(w.len));
    let left = (t0 < w0).then(|| ByteRange::new(t0, w0 - t0));
    let right = (w1 < t1).then(|| ByteRange::new(w1, t1 - w1));
    left.into_iter().chain(right)
}

impl Taint {
    /// `Ok(true)` when `r` is exactly a token-major tensor, `Ok(false)`
    /// when it touches none, `Err(hit)` when it covers part of one (or a
    /// remnant).
    fn classify(&self, r: &ByteRange) -> Result<bool, ByteRange> {
        if let Some(hit) = self.remnants.iter().find(|t| t.overlaps(r)) {
            return Err(*hit);
        }
        if self.whole.contains(r) {
            return Ok(true);
        }
        self.whole
            .iter()
            .find(|t| t.overlaps(r))
            .map_or(Ok(false), |t| Err(*t))
    }
    /// Forget the tensors a write fully replaces; a tensor it replaces in
    /// part leaves remnants. (A dead tensor's arena range reused in part
    /// by a smaller token-free tensor — the last row a gather selects —
    /// is the common case: before, the part left over kept the whole
    /// range marked and the next read of the new tensor was refused.)
    fn overwrite(&mut self, w: &ByteRange) {
        let mut remnants = Vec::new();
        for list in [&mut self.whole, &mut self.remnants] {
            list.retain(|t| {
                if !t.overlaps(w) {
                    return true;
                }
                remnants.extend(outside(t, w));
                false
            });
        }
        self.remnants.extend(remnants);
    }
    fn add(&mut self, w: &ByteRange) {
        if w.len > 0 && !self.whole.contains(w) {
            self.whole.push(*w);
        }
    }
}

impl ActivePlan {
    /// Plan `thunks` (compiled for `full` token rows) for running on a
    /// prefix, with `token_inputs` the byte ranges of the inputs whose
    /// leading axis is the token axis.
    pub fn new(
        thunks: &[Thunk],
        token_inputs: &[ByteRange],
        full: u32,
    ) -> Result<Self, ActiveError> {
        if full == 0 {
            return Err(ActiveError::Invalid("a bucket of 0 rows".into()));
        }
        let mut taint = Taint::default();
        for r in token_inputs {
            taint.add(r);
        }
        let mut roles = Vec::with_capacity(thunks.len());
        for (index, t) in thunks.iter().enumerate() {
            let io = t.io();
            let unsupported = |why: String| ActiveError::Unsupported {
                index,
                thunk: t.name(),
                why,
            };
            let mut token_reads = Vec::new();
            for r in &io.reads {
                match taint.classify(r) {
                    Ok(true) => token_reads.push(*r),
                    Ok(false) => {}
                    Err(hit) => {
                        return Err(unsupported(format!(
                            "it reads {} bytes at {:#x}, part of a token-major tensor of {} bytes at {:#x}",
                            r.len, r.offset, hit.len, hit.offset
                        )))
                    }
                }
            }
            if token_reads.is_empty() {
                roles.push(Role::Keep);
                io.writes.iter().for_each(|w| taint.overwrite(w));
                continue;
            }
            // the last-row select: token-major table, token-free indices
            if let Thunk::Gather(g) = t {
                if !token_reads.iter().any(|r| r.offset == g.idx) {
                    roles.push(Role::Keep);
                    io.writes.iter().for_each(|w| taint.overwrite(w));
                    continue;
                }
            }
            let scaled = scale(t, full, 1).map_err(unsupported)?;
            let sio = scaled.io();
            let same_shape =
                sio.reads.len() == io.reads.len() && sio.writes.len() == io.writes.len();
            // a token-major operand must shrink with the rows; a token-free
            // one may stay whole (weights, broadcast rows) or shrink with
            // them (a same-shape operand of an elementwise op)
            let reads_ok = io.reads.iter().zip(&sio.reads).all(|(o, n)| {
                let token = token_reads.contains(o);
                prefix_of(o, n, full, 1) && !(token && n.len == o.len && o.len > 0 && full > 1)
            });
            // a write into a state (KV cache, recurrent state) keeps its
            // range; any other write is token-major and must shrink
            let writes_ok = io.writes.iter().zip(&sio.writes).all(|(o, n)| {
                prefix_of(o, n, full, 1) && (is_state(o.offset) || n.len < o.len || o.len == 0)
            });
            if !(same_shape && reads_ok && writes_ok) {
                return Err(unsupported(
                    "its scaled byte ranges are not prefixes of the compiled ones".into(),
                ));
            }
            roles.push(Role::Scale);
            for w in &io.writes {
                taint.overwrite(w);
                if !is_state(w.offset) {
                    taint.add(w);
                }
            }
        }
        Ok(ActivePlan { full, roles })
    }

    /// Rows the schedule was compiled for.
    pub fn full(&self) -> u32 {
        self.full
    }

    /// How many thunks are scaled.
    pub fn scaled(&self) -> usize {
        self.roles.iter().filter(|r| **r == Role::Scale).count()
    }

    /// The scaled thunks for `active` rows (1 ≤ active ≤ full), as
    /// `(index, thunk)` in schedule order; every other thunk runs as
    /// compiled. Cheap (one clone per scaled thunk), so callers make it per
    /// run instead of keeping a schedule copy per active length.
    pub fn overlay(
        &self,
        s: &ThunkSchedule,
        active: u32,
    ) -> Result<Vec<(usize, Thunk)>, ActiveError> {
        if active == 0 || active > self.full {
            return Err(ActiveError::Invalid(format!(
                "{active} active rows of a {}-row bucket",
                self.full
            )));
        }
        if s.thunks.len() != self.roles.len() {
            return Err(ActiveError::Invalid(
                "the plan was made for another schedule".into(),
            ));
        }
        let mut out = Vec::with_capacity(self.scaled());
        for (index, (t, role)) in s.thunks.iter().zip(&self.roles).enumerate() {
            if *role == Role::Scale {
                let scaled =
                    scale(t, self.full, active).map_err(|why| ActiveError::Unsupported {
                        index,
                        thunk: t.name(),
                        why,
                    })?;
                out.push((index, scaled));
            }
        }
        Ok(out)
    }

    /// The whole schedule for `active` rows: [`ActivePlan::overlay`]
    /// applied to a copy of `s`.
    pub fn schedule(&self, s: &ThunkSchedule, active: u32) -> Result<ThunkSchedule, ActiveError> {
        let overlay = self.overlay(s, active)?;
        let mut out = s.clone();
        for (index, t) in overlay {
            out.thunks[index] = t;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::thunk::binary::BinaryFull;
    use crate::thunk::elementwise::ActivationOut;
    use crate::thunk::norm::RmsNorm;
    use crate::thunk::reduce::Softmax;
    use crate::thunk::shape::Transpose;
    use crate::thunk::{tag_weight, HalfFlag};
    use rlx_ir::op::{Activation, BinaryOp};

    const S: u32 = 8;
    const H: u32 = 4;
    const T: usize = (S * H) as usize * 4;

    fn rms(src: usize, dst: usize, rows: u32) -> Thunk {
        Thunk::RmsNorm(RmsNorm {
            src,
            g: tag_weight(0),
            b: tag_weight(64),
            dst,
            rows,
            h: H,
            eps: 1e-6,
            dt: HalfFlag::F32,
        })
    }

    fn add(lhs: usize, rhs: usize, dst: usize, len: u32) -> Thunk {
        Thunk::BinaryFull(BinaryFull {
            lhs,
            rhs,
            dst,
            len,
            op: BinaryOp::Add,
            dt: HalfFlag::F32,
        })
    }

    fn silu(src: usize, dst: usize, len: u32) -> Thunk {
        Thunk::ActivationOut(ActivationOut {
            src,
            dst,
            len,
            act: Activation::Silu,
            dt: HalfFlag::F32,
        })
    }

    fn schedule(thunks: Vec<Thunk>) -> ThunkSchedule {
        ThunkSchedule {
            thunks,
            ..ThunkSchedule::default()
        }
    }

    #[test]
    fn row_wise_chain_scales_and_token_free_thunks_stay() {
        // x (token input) → norm → + weight → silu; a token-free add of two
        // weights into a scratch range is left as compiled
        let w = tag_weight(128);
        let s = schedule(vec![
            rms(0, T, S),
            add(T, w, 2 * T, S * H),
            silu(2 * T, 3 * T, S * H),
            add(w, w, 4 * T, S * H),
        ]);
        let plan = ActivePlan::new(&s.thunks, &[ByteRange::new(0, T)], S).unwrap();
        assert_eq!(plan.scaled(), 3);
        let a = plan.schedule(&s, 3).unwrap();
        assert!(matches!(&a.thunks[0], Thunk::RmsNorm(n) if n.rows == 3));
        assert!(matches!(&a.thunks[1], Thunk::BinaryFull(b) if b.len == 3 * H));
        assert!(matches!(&a.thunks[2], Thunk::ActivationOut(x) if x.len == 3 * H));
        assert_eq!(a.thunks[3], s.thunks[3]);
        assert_eq!(plan.schedule(&s, S).unwrap(), s);
    }

    #[test]
    fn a_token_dependent_thunk_without_prefix_form_is_named() {
        // a transpose that moves the token axis: no prefix of its output is
        // a prefix of its input
        let s = schedule(vec![
            rms(0, T, S),
            Thunk::Transpose(Transpose {
                src: T,
                dst: 2 * T,
                total: S * H,
                out_dims: vec![H, S],
                in_strides: vec![1, H],
            }),
        ]);
        let err = ActivePlan::new(&s.thunks, &[ByteRange::new(0, T)], S).unwrap_err();
        assert!(
            matches!(err, ActiveError::Unsupported { index: 1, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("(transpose)"), "{err}");
    }

    #[test]
    fn reading_part_of_a_token_tensor_is_refused() {
        // a silu over the first half of the token rows: a static slice of
        // the token axis, whose prefix form would be a different slice
        let s = schedule(vec![rms(0, T, S), silu(T, 2 * T, S * H / 2)]);
        let err = ActivePlan::new(&s.thunks, &[ByteRange::new(0, T)], S).unwrap_err();
        assert!(
            err.to_string().contains("part of a token-major tensor"),
            "{err}"
        );
    }

    #[test]
    fn overwritten_ranges_lose_their_token_mark() {
        // the norm's output range is rewritten by a token-free add before the
        // softmax reads it, so the softmax is token-free and the plan holds
        let w = tag_weight(128);
        let s = schedule(vec![
            rms(0, T, S),
            add(w, w, T, S * H),
            Thunk::Softmax(Softmax {
                data: T,
                rows: S,
                cols: H,
                dt: HalfFlag::F32,
            }),
        ]);
        let plan = ActivePlan::new(&s.thunks, &[ByteRange::new(0, T)], S).unwrap();
        assert_eq!(plan.scaled(), 1);
    }

    #[test]
    fn a_token_free_write_into_part_of_a_dead_token_tensor_frees_it() {
        // a decoder's last-row select: one token-free row written at the
        // start of a dead token-major tensor's range, then normed — the
        // norm reads only the new row, so the plan holds
        let w = tag_weight(128);
        let row = H * 4;
        let s = schedule(vec![
            rms(0, T, S),
            add(w, w, T, H),
            rms(T, 2 * T, 1),
            silu(T + row as usize, 3 * T, H),
        ]);
        let err = ActivePlan::new(&s.thunks, &[ByteRange::new(0, T)], S).unwrap_err();
        // what is left of the old tensor is no tensor: reading it is refused
        assert!(
            matches!(err, ActiveError::Unsupported { index: 3, .. }),
            "{err}"
        );
        let plan = ActivePlan::new(&s.thunks[..3], &[ByteRange::new(0, T)], S).unwrap();
        assert_eq!(plan.scaled(), 1);
        // and so is a read of the whole old range after the partial write
        let whole = schedule(vec![rms(0, T, S), add(w, w, T, H), silu(T, 2 * T, S * H)]);
        let err = ActivePlan::new(&whole.thunks, &[ByteRange::new(0, T)], S).unwrap_err();
        assert!(
            matches!(err, ActiveError::Unsupported { index: 2, .. }),
            "{err}"
        );
    }

    #[test]
    fn active_rows_out_of_range_are_errors() {
        let s = schedule(vec![rms(0, T, S)]);
        let plan = ActivePlan::new(&s.thunks, &[ByteRange::new(0, T)], S).unwrap();
        for bad in [0, S + 1] {
            assert!(matches!(
                plan.schedule(&s, bad),
                Err(ActiveError::Invalid(_))
            ));
        }
        assert!(ActivePlan::new(&s.thunks, &[], 0).is_err());
    }
}
