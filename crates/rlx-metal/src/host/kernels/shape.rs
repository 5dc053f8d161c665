//! Data movement: gathers, narrow / split / concat, general strided
//! transpose-broadcast (with a cache-blocked 2-D transpose fast path),
//! reverse, scatter-add, copy and 2× nearest resize.
//!
//! Every kernel except `scatter_add` only moves elements, so they are
//! generic over any `Copy` element (f32, f16, i32, raw bytes, ...). Index
//! operands are i32 and are range-checked before any element moves.

use rayon::prelude::*;

use super::{check_len, invalid, numel, rows_per_task, Elem, KernelError, Result, PAR_MIN};

/// Marker bound for movable elements.
pub trait Pod: Copy + Send + Sync {}
impl<T: Copy + Send + Sync> Pod for T {}

/// Checks every index against `bound`.
fn check_idx(kernel: &'static str, idx: &[i32], bound: usize) -> Result<()> {
    match idx.iter().find(|&&i| i < 0 || i as usize >= bound) {
        Some(&bad) => Err(KernelError::Index {
            kernel,
            operand: "index",
            index: bad as i64,
            bound,
        }),
        None => Ok(()),
    }
}

/// Embedding lookup: `out[i, :] = table[idx[i], :]` for `table [vocab, dim]`,
/// `idx [n]`, `out [n, dim]`. Needs `table >= vocab·dim`, `idx >= n`,
/// `out >= n·dim`, every index in `0..vocab`.
pub fn gather_rows<T: Pod>(
    table: &[T],
    idx: &[i32],
    out: &mut [T],
    n: usize,
    vocab: usize,
    dim: usize,
) -> Result<()> {
    gather_impl(table, idx, out, [1, vocab, dim, n], false)
}

/// Gather along an axis: `out[o, i, :] = x[o, idx[i], :]` for
/// `x [outer, axis_dim, trailing]`, `idx [num_idx]`,
/// `out [outer, num_idx, trailing]`. Negative indices count from the end
/// (ONNX `Gather`). Needs the matching lengths and every index in
/// `-axis_dim..axis_dim`.
#[allow(clippy::too_many_arguments)]
pub fn gather_axis<T: Pod>(
    x: &[T],
    idx: &[i32],
    out: &mut [T],
    outer: usize,
    axis_dim: usize,
    trailing: usize,
    num_idx: usize,
) -> Result<()> {
    gather_impl(x, idx, out, [outer, axis_dim, trailing, num_idx], true)
}

/// Shared body of the gathers; `dims` is `[outer, axis_dim, trailing,
/// num_idx]`; `signed` admits negative indices (counted from the end).
fn gather_impl<T: Pod>(
    x: &[T],
    idx: &[i32],
    out: &mut [T],
    dims: [usize; 4],
    signed: bool,
) -> Result<()> {
    const K: &str = "gather";
    let [outer, axis_dim, trailing, num_idx] = dims;
    check_len(K, "x", x.len(), numel(K, &[outer, axis_dim, trailing])?)?;
    check_len(K, "index", idx.len(), num_idx)?;
    let total = numel(K, &[outer, num_idx, trailing])?;
    check_len(K, "out", out.len(), total)?;
    let idx = &idx[..num_idx];
    let lo = if signed { -(axis_dim as i64) } else { 0 };
    if let Some(&bad) = idx
        .iter()
        .find(|&&i| (i as i64) < lo || i as i64 >= axis_dim as i64)
    {
        return Err(KernelError::Index {
            kernel: K,
            operand: "index",
            index: bad as i64,
            bound: axis_dim,
        });
    }
    if total == 0 {
        return Ok(());
    }
    let row = |i: i32| {
        if i < 0 {
            (i as i64 + axis_dim as i64) as usize
        } else {
            i as usize
        }
    };
    out[..total]
        .par_chunks_mut(trailing)
        .enumerate()
        .with_min_len(rows_per_task(outer * num_idx, trailing))
        .for_each(|(r, o)| {
            let (oi, i) = (r / num_idx, r % num_idx);
            let s = (oi * axis_dim + row(idx[i])) * trailing;
            o.copy_from_slice(&x[s..s + trailing]);
        });
    Ok(())
}

/// `out[r, :] = x[r, start..start+len]` for `x [rows, n]`, `out [rows, len]`.
/// Needs `start + len <= n`.
pub fn narrow_last<T: Pod>(
    x: &[T],
    out: &mut [T],
    rows: usize,
    n: usize,
    start: usize,
    len: usize,
) -> Result<()> {
    const K: &str = "narrow";
    if start.checked_add(len).is_none_or(|e| e > n) {
        return Err(invalid(
            K,
            format!("range {start}..{start}+{len} outside last axis {n}"),
        ));
    }
    check_len(K, "x", x.len(), numel(K, &[rows, n])?)?;
    let total = numel(K, &[rows, len])?;
    check_len(K, "out", out.len(), total)?;
    if total == 0 {
        return Ok(());
    }
    out[..total]
        .par_chunks_mut(len)
        .enumerate()
        .with_min_len(rows_per_task(rows, len))
        .for_each(|(r, o)| {
            o.copy_from_slice(&x[r * n + start..r * n + start + len]);
        });
    Ok(())
}

/// Splits the last axis of `x [rows, n]` into consecutive segments:
/// `outs[k]` is `[rows, sizes[k]]`. Needs `Σ sizes = n` and each output
/// `>= rows·sizes[k]`.
pub fn split_last<T: Pod>(
    x: &[T],
    outs: &mut [&mut [T]],
    sizes: &[usize],
    rows: usize,
) -> Result<()> {
    const K: &str = "split";
    if outs.len() != sizes.len() {
        return Err(invalid(
            K,
            format!("{} outputs for {} sizes", outs.len(), sizes.len()),
        ));
    }
    let n: usize = sizes.iter().sum();
    check_len(K, "x", x.len(), numel(K, &[rows, n])?)?;
    let mut start = 0;
    for (o, &len) in outs.iter_mut().zip(sizes) {
        narrow_last(x, o, rows, n, start, len)?;
        start += len;
    }
    Ok(())
}

/// Concatenation along a middle axis: piece `k` is
/// `[outer, axis_sizes[k], inner]`, `out [outer, Σ axis_sizes, inner]`.
/// Needs one size per piece and matching lengths.
pub fn concat<T: Pod>(
    pieces: &[&[T]],
    axis_sizes: &[usize],
    out: &mut [T],
    outer: usize,
    inner: usize,
) -> Result<()> {
    const K: &str = "concat";
    if pieces.len() != axis_sizes.len() {
        return Err(invalid(
            K,
            format!("{} pieces for {} sizes", pieces.len(), axis_sizes.len()),
        ));
    }
    for (p, &a) in pieces.iter().zip(axis_sizes) {
        check_len(K, "piece", p.len(), numel(K, &[outer, a, inner])?)?;
    }
    let axis: usize = axis_sizes.iter().sum();
    let row = numel(K, &[axis, inner])?;
    let total = numel(K, &[outer, row])?;
    check_len(K, "out", out.len(), total)?;
    if total == 0 {
        return Ok(());
    }
    out[..total]
        .par_chunks_mut(row)
        .enumerate()
        .with_min_len(rows_per_task(outer, row))
        .for_each(|(o, orow)| {
            let mut at = 0;
            for (p, &a) in pieces.iter().zip(axis_sizes) {
                let len = a * inner;
                orow[at..at + len].copy_from_slice(&p[o * len..o * len + len]);
                at += len;
            }
        });
    Ok(())
}

/// Input offset of output row `row` over the leading output dims.
#[inline]
fn lead_offset(mut row: usize, dims: &[usize], strides: &[usize]) -> usize {
    let mut off = 0;
    for (&d, &s) in dims.iter().zip(strides).rev() {
        off += (row % d) * s;
        row /= d;
    }
    off
}

/// General strided copy: `out[idx] = x[Σ idx_k·in_strides[k]]` over every
/// index of `out_dims` (covers N-D transpose, broadcast with stride 0, and
/// their mixes). Transposes of the last two axes take a cache-blocked path.
/// Needs `out >= prod(out_dims)` and `x` to cover the strided extent.
pub fn strided_copy<T: Pod>(
    x: &[T],
    in_strides: &[usize],
    out_dims: &[usize],
    out: &mut [T],
) -> Result<()> {
    const K: &str = "transpose";
    let r = out_dims.len();
    if in_strides.len() != r {
        return Err(invalid(
            K,
            format!("{} strides for rank {r}", in_strides.len()),
        ));
    }
    let total = numel(K, out_dims)?;
    check_len(K, "out", out.len(), total)?;
    check_len(
        K,
        "x",
        x.len(),
        super::elementwise::strided_extent(out_dims, in_strides),
    )?;
    if total == 0 {
        return Ok(());
    }
    if r == 0 {
        out[0] = x[0];
        return Ok(());
    }
    let out = &mut out[..total];
    if r >= 2
        && in_strides[r - 2] == 1
        && in_strides[r - 1] > 1
        && out_dims[r - 1] > 1
        && out_dims[r - 2] > 1
    {
        transpose_tiles(x, in_strides, out_dims, out);
        return Ok(());
    }
    let (n, s) = (out_dims[r - 1], in_strides[r - 1]);
    let lead = &out_dims[..r - 1];
    out.par_chunks_mut(n)
        .enumerate()
        .with_min_len(rows_per_task(total / n, n))
        .for_each(|(row, o)| {
            let base = lead_offset(row, lead, &in_strides[..r - 1]);
            match s {
                1 => o.copy_from_slice(&x[base..base + n]),
                0 => o.fill(x[base]),
                _ => o
                    .iter_mut()
                    .enumerate()
                    .for_each(|(j, o)| *o = x[base + j * s]),
            }
        });
    Ok(())
}

/// Tiled transpose for `in_strides[r-2] == 1`: each output matrix
/// `[rows, cols]` reads `x[base + i + j·sj]`, walked in 32×32 tiles so both
/// sides stay in cache.
fn transpose_tiles<T: Pod>(x: &[T], in_strides: &[usize], out_dims: &[usize], out: &mut [T]) {
    const TB: usize = 32;
    let r = out_dims.len();
    let (rows, cols) = (out_dims[r - 2], out_dims[r - 1]);
    let sj = in_strides[r - 1];
    let (lead, lstr) = (&out_dims[..r - 2], &in_strides[..r - 2]);
    // One task per (matrix, band of TB output rows).
    out.par_chunks_mut(rows * cols)
        .enumerate()
        .for_each(|(m, mat)| {
            let base = lead_offset(m, lead, lstr);
            mat.par_chunks_mut(TB * cols)
                .enumerate()
                .with_min_len((PAR_MIN / (TB * cols)).max(1))
                .for_each(|(b, band)| {
                    let i0 = b * TB;
                    for j0 in (0..cols).step_by(TB) {
                        let j1 = (j0 + TB).min(cols);
                        for (di, orow) in band.chunks_exact_mut(cols).enumerate() {
                            let i = i0 + di;
                            for (j, o) in orow[j0..j1].iter_mut().enumerate() {
                                *o = x[base + i + (j0 + j) * sj];
                            }
                        }
                    }
                });
        });
}

/// Reverses `x [dims]` along every axis whose `rev_mask` entry is true.
/// Needs `x, out >= prod(dims)` and one mask entry per axis.
pub fn reverse<T: Pod>(x: &[T], dims: &[usize], rev_mask: &[bool], out: &mut [T]) -> Result<()> {
    const K: &str = "reverse";
    if rev_mask.len() != dims.len() {
        return Err(invalid(
            K,
            format!("{} mask entries for rank {}", rev_mask.len(), dims.len()),
        ));
    }
    let total = numel(K, dims)?;
    check_len(K, "x", x.len(), total)?;
    check_len(K, "out", out.len(), total)?;
    if total == 0 {
        return Ok(());
    }
    let r = dims.len();
    let n = if r == 0 { 1 } else { dims[r - 1] };
    let lead = &dims[..r.saturating_sub(1)];
    let rev_last = r > 0 && rev_mask[r - 1];
    out[..total]
        .par_chunks_mut(n)
        .enumerate()
        .with_min_len(rows_per_task(total / n, n))
        .for_each(|(row, o)| {
            // Map the output row's leading index to the source row.
            let (mut rem, mut src, mut stride) = (row, 0, 1);
            for (k, &d) in lead.iter().enumerate().rev() {
                let i = rem % d;
                rem /= d;
                src += if rev_mask[k] { d - 1 - i } else { i } * stride;
                stride *= d;
            }
            let xr = &x[src * n..src * n + n];
            if rev_last {
                o.iter_mut().zip(xr.iter().rev()).for_each(|(o, v)| *o = *v);
            } else {
                o.copy_from_slice(xr);
            }
        });
    Ok(())
}

/// `dst[idx[i], :] += src[i, :]` for `dst [dst_rows, n]`, `src [num, n]`;
/// duplicate indices accumulate (rows are applied in order). Needs the
/// matching lengths and every index in `0..dst_rows`.
pub fn scatter_add<T: Elem>(
    dst: &mut [T],
    idx: &[i32],
    src: &[T],
    num: usize,
    n: usize,
    dst_rows: usize,
) -> Result<()> {
    const K: &str = "scatter_add";
    check_len(K, "dst", dst.len(), numel(K, &[dst_rows, n])?)?;
    check_len(K, "src", src.len(), numel(K, &[num, n])?)?;
    check_len(K, "index", idx.len(), num)?;
    check_idx(K, &idx[..num], dst_rows)?;
    for (i, &t) in idx[..num].iter().enumerate() {
        let d = &mut dst[t as usize * n..t as usize * n + n];
        d.iter_mut()
            .zip(&src[i * n..i * n + n])
            .for_each(|(d, s)| *d = T::from_f32(d.to_f32() + s.to_f32()));
    }
    Ok(())
}

/// `dst[..n] = src[..n]`.
pub fn copy<T: Pod>(src: &[T], dst: &mut [T], n: usize) -> Result<()> {
    check_len("copy", "src", src.len(), n)?;
    check_len("copy", "dst", dst.len(), n)?;
    dst[..n]
        .par_chunks_mut(PAR_MIN)
        .zip(src[..n].par_chunks(PAR_MIN))
        .for_each(|(d, s)| d.copy_from_slice(s));
    Ok(())
}

/// Nearest-neighbour 2× upsample of `planes` images `[h, w]` into
/// `[2h, 2w]`. Needs `x >= planes·h·w`, `out >= planes·4·h·w`.
pub fn resize_nearest2x<T: Pod>(
    x: &[T],
    out: &mut [T],
    planes: usize,
    h: usize,
    w: usize,
) -> Result<()> {
    const K: &str = "resize_nearest2x";
    check_len(K, "x", x.len(), numel(K, &[planes, h, w])?)?;
    let total = numel(K, &[planes, 4, h, w])?;
    check_len(K, "out", out.len(), total)?;
    if total == 0 {
        return Ok(());
    }
    // One output row pair per task item: both rows repeat one input row.
    out[..total]
        .par_chunks_mut(4 * w)
        .enumerate()
        .with_min_len(rows_per_task(planes * h, 4 * w))
        .for_each(|(r, o)| {
            let xr = &x[r * w..r * w + w];
            let (top, bottom) = o.split_at_mut(2 * w);
            for (pair, v) in top.chunks_exact_mut(2).zip(xr) {
                pair[0] = *v;
                pair[1] = *v;
            }
            bottom.copy_from_slice(top);
        });
    Ok(())
}

#[cfg(test)]
#[path = "shape_tests.rs"]
mod tests;
