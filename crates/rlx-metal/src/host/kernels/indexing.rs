//! ONNX indexing kernels: ScatterND, ScatterElements (replace), GatherND and
//! GatherElements over raw element words (`u8`/`u16`/`u32`/`u64`: values
//! move bit-exactly, whatever their dtype).
//!
//! Indices are i32; a negative index counts from the end of its axis (ONNX).
//! Every index is checked before anything is written, so an out-of-range
//! index leaves the output untouched and returns [`KernelError::Index`]
//! naming the kernel and the index. Scatters copy `data` into `dst` first
//! unless `data` is `None`, which means the scatter is in place (`dst`
//! already holds the data: a KV-cache row write touches only its rows).
//! Later duplicates of a scatter index win, as in the reference.

use super::{check_len, invalid, numel, KernelError, Result};

/// Most dims an operand may have.
const MAX_RANK: usize = 16;

/// `idx` wrapped into `0..bound` (negative counts from the end), or an
/// index error.
#[inline]
fn wrap(kernel: &'static str, idx: i32, bound: usize) -> Result<usize> {
    let i = i64::from(idx);
    let b = bound as i64;
    let w = if i < 0 { i + b } else { i };
    if w < 0 || w >= b {
        return Err(KernelError::Index {
            kernel,
            operand: "indices",
            index: i,
            bound,
        });
    }
    Ok(w as usize)
}

fn rank_ok(kernel: &'static str, dims: &[usize]) -> Result<()> {
    if dims.len() > MAX_RANK {
        return Err(invalid(
            kernel,
            format!("rank {} exceeds {MAX_RANK}", dims.len()),
        ));
    }
    Ok(())
}

/// Row-major strides of `dims` (elements).
fn strides(dims: &[usize]) -> [usize; MAX_RANK] {
    let mut st = [0usize; MAX_RANK];
    let mut acc = 1usize;
    for (s, &d) in st[..dims.len()].iter_mut().zip(dims).rev() {
        *s = acc;
        acc = acc.saturating_mul(d);
    }
    st
}

/// Element offset into a `data_dims[..q]` prefix of the `q`-tuple `tuple`,
/// times the prefix strides `st`.
#[inline]
fn prefix_offset(
    kernel: &'static str,
    tuple: &[i32],
    data_dims: &[usize],
    st: &[usize],
) -> Result<usize> {
    let mut off = 0usize;
    for ((&t, &d), &s) in tuple.iter().zip(data_dims).zip(st) {
        off += wrap(kernel, t, d)? * s;
    }
    Ok(off)
}

/// ONNX ScatterND: `dst = data; dst[indices[i]] = updates[i]` where each
/// index tuple (last dim `q` of `indices`) addresses a block of
/// `prod(data_dims[q..])` elements. Needs `dst (and data) >= prod(data_dims)`,
/// `indices >= prod(indices_dims)`, `updates >= tuples · block`.
pub fn scatter_nd<T: Copy>(
    data: Option<&[T]>,
    indices: &[i32],
    updates: &[T],
    dst: &mut [T],
    data_dims: &[usize],
    indices_dims: &[usize],
) -> Result<()> {
    scatter_nd_with(
        data,
        indices,
        updates,
        dst,
        data_dims,
        indices_dims,
        |d, u| d.copy_from_slice(u),
    )
}

/// [`scatter_nd`] with updates of another element type: `put(dst_block,
/// update_block)` writes each update block (of equal length) into its
/// place, e.g. converting f32 rows into an f16 KV cache. Every index is
/// checked before anything is written.
pub fn scatter_nd_with<T: Copy, U>(
    data: Option<&[T]>,
    indices: &[i32],
    updates: &[U],
    dst: &mut [T],
    data_dims: &[usize],
    indices_dims: &[usize],
    put: impl Fn(&mut [T], &[U]),
) -> Result<()> {
    const K: &str = "scatter_nd";
    rank_ok(K, data_dims)?;
    let (&q, lead) = indices_dims
        .split_last()
        .ok_or_else(|| invalid(K, "indices must have rank >= 1"))?;
    if q > data_dims.len() {
        return Err(invalid(
            K,
            format!("index depth {q} exceeds data rank {}", data_dims.len()),
        ));
    }
    let total = numel(K, data_dims)?;
    let block = numel(K, &data_dims[q..])?;
    let tuples = numel(K, lead)?;
    check_len(K, "dst", dst.len(), total)?;
    check_len(K, "indices", indices.len(), tuples * q)?;
    check_len(K, "updates", updates.len(), numel(K, &[tuples, block])?)?;
    let st = strides(data_dims);
    // validate every tuple before writing anything
    for t in indices[..tuples * q].chunks_exact(q.max(1)).take(tuples) {
        prefix_offset(K, &t[..q], data_dims, &st)?;
    }
    if let Some(d) = data {
        check_len(K, "data", d.len(), total)?;
        dst[..total].copy_from_slice(&d[..total]);
    }
    for (r, upd) in updates[..tuples * block]
        .chunks_exact(block.max(1))
        .enumerate()
        .take(tuples)
    {
        let off = prefix_offset(K, &indices[r * q..r * q + q], data_dims, &st)?;
        put(&mut dst[off..off + block], &upd[..block]);
    }
    Ok(())
}

/// Multi-index of flat position `p` over `dims` into `coords`.
#[inline]
fn unravel(mut p: usize, dims: &[usize], coords: &mut [usize]) {
    for (c, &d) in coords.iter_mut().zip(dims).rev() {
        let d = d.max(1);
        *c = p % d;
        p /= d;
    }
}

/// Offsets into `data` of every element of an elementwise-indexed op
/// (GatherElements / ScatterElements): position `p` of `indices` maps to
/// `p`'s coordinates with `axis` replaced by the (wrapped) index. Calls
/// `f(p, offset)` after all indices were checked.
fn for_each_element(
    kernel: &'static str,
    indices: &[i32],
    data_dims: &[usize],
    indices_dims: &[usize],
    axis: usize,
    mut f: impl FnMut(usize, usize),
) -> Result<()> {
    rank_ok(kernel, data_dims)?;
    let r = data_dims.len();
    if indices_dims.len() != r || axis >= r.max(1) {
        return Err(invalid(
            kernel,
            format!("indices {indices_dims:?} / axis {axis} do not fit data {data_dims:?}"),
        ));
    }
    if r == 0 {
        return Err(invalid(kernel, "data must have rank >= 1"));
    }
    for (i, (&a, &b)) in indices_dims.iter().zip(data_dims).enumerate() {
        if i != axis && a > b {
            return Err(invalid(
                kernel,
                format!("indices {indices_dims:?} exceed data {data_dims:?} off axis {axis}"),
            ));
        }
    }
    let n = numel(kernel, indices_dims)?;
    check_len(kernel, "indices", indices.len(), n)?;
    for &i in &indices[..n] {
        wrap(kernel, i, data_dims[axis])?;
    }
    let st = strides(data_dims);
    let mut coords = [0usize; MAX_RANK];
    for (p, &ix) in indices[..n].iter().enumerate() {
        unravel(p, indices_dims, &mut coords[..r]);
        coords[axis] = wrap(kernel, ix, data_dims[axis])?;
        let off = coords[..r].iter().zip(&st[..r]).map(|(c, s)| c * s).sum();
        f(p, off);
    }
    Ok(())
}

/// ONNX ScatterElements (replace): `dst = data`, then for every position
/// `p` of `indices`, `dst[p with axis ← indices[p]] = updates[p]`.
/// `updates >= prod(indices_dims)`, `dst (and data) >= prod(data_dims)`.
pub fn scatter_elements<T: Copy>(
    data: Option<&[T]>,
    indices: &[i32],
    updates: &[T],
    dst: &mut [T],
    data_dims: &[usize],
    indices_dims: &[usize],
    axis: usize,
) -> Result<()> {
    const K: &str = "scatter_elements";
    let total = numel(K, data_dims)?;
    check_len(K, "dst", dst.len(), total)?;
    check_len(K, "updates", updates.len(), numel(K, indices_dims)?)?;
    // validation pass (no writes), then copy and scatter
    for_each_element(K, indices, data_dims, indices_dims, axis, |_, _| {})?;
    if let Some(d) = data {
        check_len(K, "data", d.len(), total)?;
        dst[..total].copy_from_slice(&d[..total]);
    }
    for_each_element(K, indices, data_dims, indices_dims, axis, |p, off| {
        dst[off] = updates[p];
    })
}

/// ONNX GatherElements: `dst[p] = data[p with axis ← indices[p]]`;
/// `dst >= prod(indices_dims)`.
pub fn gather_elements<T: Copy>(
    data: &[T],
    indices: &[i32],
    dst: &mut [T],
    data_dims: &[usize],
    indices_dims: &[usize],
    axis: usize,
) -> Result<()> {
    const K: &str = "gather_elements";
    check_len(K, "data", data.len(), numel(K, data_dims)?)?;
    check_len(K, "dst", dst.len(), numel(K, indices_dims)?)?;
    for_each_element(K, indices, data_dims, indices_dims, axis, |p, off| {
        dst[p] = data[off];
    })
}

/// ONNX GatherND with `batch_dims` leading batch dims shared by data and
/// indices: `dst[b, i] = data[b][indices[b, i]]`, each index tuple (last dim
/// `q`) selecting a block of `prod(data_dims[batch_dims + q..])` elements.
pub fn gather_nd<T: Copy>(
    data: &[T],
    indices: &[i32],
    dst: &mut [T],
    data_dims: &[usize],
    indices_dims: &[usize],
    batch_dims: usize,
) -> Result<()> {
    const K: &str = "gather_nd";
    rank_ok(K, data_dims)?;
    let (&q, lead) = indices_dims
        .split_last()
        .ok_or_else(|| invalid(K, "indices must have rank >= 1"))?;
    let bd = batch_dims;
    if bd > lead.len() || bd + q > data_dims.len() || data_dims[..bd] != indices_dims[..bd] {
        return Err(invalid(
            K,
            format!(
                "batch_dims {bd} / index depth {q} do not fit data {data_dims:?} and \
                 indices {indices_dims:?}"
            ),
        ));
    }
    let nb = numel(K, &data_dims[..bd])?;
    let per_batch_data = numel(K, &data_dims[bd..])?;
    let tuples = numel(K, &lead[bd..])?;
    let block = numel(K, &data_dims[bd + q..])?;
    check_len(K, "data", data.len(), numel(K, &[nb, per_batch_data])?)?;
    check_len(K, "indices", indices.len(), numel(K, &[nb, tuples, q])?)?;
    check_len(K, "dst", dst.len(), numel(K, &[nb, tuples, block])?)?;
    let sub = &data_dims[bd..];
    let st = strides(sub);
    for t in indices[..nb * tuples * q].chunks_exact(q.max(1)) {
        prefix_offset(K, &t[..q], sub, &st)?;
    }
    for b in 0..nb {
        for t in 0..tuples {
            let r = b * tuples + t;
            let off = prefix_offset(K, &indices[r * q..r * q + q], sub, &st)?;
            let src = b * per_batch_data + off;
            dst[r * block..(r + 1) * block].copy_from_slice(&data[src..src + block]);
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "indexing_tests.rs"]
mod tests;
