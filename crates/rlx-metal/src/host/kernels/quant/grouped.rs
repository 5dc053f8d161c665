//! Grouped (mixture-of-experts) quantised matmul: row `i` of `x [m, k]`
//! against expert `expert_idx[i]` of a packed stack `w [experts, n,
//! row_bytes(k)]`. Only the chosen experts' rows are read.
//!
//! - Few rows (`m ≤ 8`: a decode step's `top_k` rows) on a CPU where the
//!   integer-dot GEMV does not pay for them (no VNNI, int8 activations
//!   off, or AMD: `vnni::decode_rows_pay`): one parallel region of
//!   f32-activation GEMVs (the driver's AVX2 row dots) split by (row,
//!   chunk of output rows), so all threads stream packed rows however few
//!   experts are active (`driver::grouped_gemv`). On an AMD EPYC (AVX-512
//!   VNNI, two threads) these row dots decoded a Mixtral-style Q8_0 step's
//!   experts in ~12–14 ms against ~18–21 ms for the integer-dot GEMV; on
//!   the Intel Xeon it is the other way round (BENCHMARKS.md, MoE).
//! - Otherwise the rows are sorted by expert and every chosen expert runs
//!   once as a dense product of its rows ([`super::matmul_checked`]: the
//!   integer-dot GEMV / GEMM or the f32 drivers, exactly as
//!   [`super::dequant_matmul`] would for that expert alone), then scattered
//!   back.

use super::super::matmul::check_grouped;
use super::super::{numel, Result};
use super::{driver, float, kquants, legacy, matmul_checked, row_bytes, seed, Blocks, Out};
use rlx_ir::GgmlType;

/// Most rows (a decode step's `top_k`, or a few batched steps') that run
/// as per-row GEMVs in one parallel region; more go expert by expert.
const DECODE_ROWS: usize = 8;

/// Whether the decode rows take the integer-dot GEMV expert by expert
/// (`vnni::decode_rows_pay`) rather than the f32 row dots.
pub(super) fn int8_decode_rows() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::vnni::decode_rows_pay()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Grouped (MoE) variant of [`super::dequant_matmul`]: row `i` of `x [m,
/// k]` against expert `expert_idx[i]` of the packed stack `w [experts, n,
/// row_bytes(k)]`; an id outside `0..experts` gives a zero row. f32 in and
/// out.
#[allow(clippy::too_many_arguments)]
pub fn dequant_grouped_matmul(
    ty: GgmlType,
    x: &[f32],
    w: &[u8],
    expert_idx: &[i32],
    out: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
    experts: usize,
) -> Result<()> {
    const K: &str = "dequant_grouped_matmul_gguf";
    let rb = row_bytes(K, ty, k)?;
    let per_expert = numel(K, &[n, rb])?;
    let ops = [
        ("input", x.len()),
        ("w", w.len()),
        ("expert_idx", expert_idx.len()),
        ("dst", out.len()),
    ];
    check_grouped(K, [m, k, n, experts], per_expert, ops)?;
    let out = &mut out[..m * n];
    out.fill(0.0);
    if m == 0 || n == 0 || k == 0 {
        return Ok(());
    }
    let expert_of = |i: usize| usize::try_from(expert_idx[i]).ok().filter(|&e| e < experts);
    let chosen: Vec<(usize, usize)> = (0..m).filter_map(|i| Some((i, expert_of(i)?))).collect();
    if m <= DECODE_ROWS && !int8_decode_rows() {
        with_fmt!(ty, F => driver::grouped_gemv::<F>(x, w, &chosen, out, rb, k, n));
        return Ok(());
    }
    let mut order = chosen;
    order.sort_by_key(|&(_, e)| e);
    let (mut xg, mut og) = (Vec::new(), Vec::new());
    for group in order.chunk_by(|a, b| a.1 == b.1) {
        let e = group[0].1;
        let we = &w[e * per_expert..(e + 1) * per_expert];
        xg.clear();
        for &(i, _) in group {
            xg.extend_from_slice(&x[i * k..(i + 1) * k]);
        }
        og.clear();
        og.resize(group.len() * n, 0f32);
        matmul_checked(ty, &xg, we, rb, Out::F32(&mut og), group.len(), k, n);
        for (&(i, _), orow) in group.iter().zip(og.chunks_exact(n)) {
            out[i * n..(i + 1) * n].copy_from_slice(orow);
        }
    }
    Ok(())
}
