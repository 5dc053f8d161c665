//! Layout moves → `shape.metal`: copy, narrow, split, concat, transpose
//! and reverse.
//!
//! The kernels move words, not dtypes: each move picks the widest word
//! (16, 8, 4, 2 or 1 bytes) dividing every column width and buffer offset
//! it touches, so an f16 narrow of even widths moves u32 pairs and a
//! 16-byte-aligned copy moves `uint4`s. Anything the host would reject
//! (windows past the row, piece sizes that do not add up), ranks above
//! [`MAX_RANK`], more than [`MAX_PIECES`] pieces, word counts past `u32`,
//! and aliasing between source and destination stay host commands.

use super::{aliased, elementwise, kernel, Lowered, ELEMENTWISE_THREADS};
use crate::metal::args::{
    ConcatArgs, CopyArgs, KernelArgs, NarrowArgs, ReverseArgs, SplitArgs, StridedArgs, MAX_PIECES,
    MAX_RANK,
};
use crate::metal::kernels::Family;
use crate::metal::plan::{BufferBinding, Dispatch};
use crate::thunk::{raw_offset, Thunk};

/// Word widths with kernels, widest first, and their name suffixes.
const WORDS: [(usize, &str); 5] = [(16, "u128"), (8, "u64"), (4, "u32"), (2, "u16"), (1, "u8")];

/// The widest word dividing every byte count in `sizes` and every buffer
/// offset in `offs` (tagged), as `(bytes, suffix)`.
pub(super) fn word(sizes: &[u64], offs: &[usize]) -> (u64, &'static str) {
    let (w, name) = WORDS
        .into_iter()
        .find(|&(w, _)| {
            sizes.iter().all(|&s| s.is_multiple_of(w as u64))
                && offs.iter().all(|&o| raw_offset(o).is_multiple_of(w))
        })
        .unwrap_or((1, "u8"));
    (w as u64, name)
}

/// `v` as u32 when it fits.
pub(super) fn u32_of(v: u64) -> Option<u32> {
    u32::try_from(v).ok()
}

/// True when two written ranges overlap (the pieces would race).
fn writes_overlap(t: &Thunk) -> bool {
    let w = t.io().writes;
    w.iter()
        .enumerate()
        .any(|(i, a)| w[i + 1..].iter().any(|b| a.overlaps(b)))
}

/// A dispatch whose grid y runs over `pieces` and x over `words`.
fn pieces(
    i: usize,
    function: String,
    args: &impl KernelArgs,
    offs: &[usize],
    words: u32,
    pieces: u32,
) -> Dispatch {
    Dispatch {
        thunk: i,
        kernel: kernel(Family::Shape, function),
        args: args.as_bytes().to_vec(),
        bindings: offs.iter().map(|&o| BufferBinding::of(o)).collect(),
        grid: [words.div_ceil(ELEMENTWISE_THREADS), pieces, 1],
        threadgroup: [ELEMENTWISE_THREADS, 1, 1],
        threadgroup_memory: Vec::new(),
    }
}

/// A `copy_*` dispatch of `bytes` from `src` to `dst` in the widest word
/// both offsets allow (also a same-dtype cast: a plain copy).
pub(super) fn copy(i: usize, src: usize, dst: usize, bytes: u64) -> Option<Dispatch> {
    let (w, sfx) = word(&[bytes], &[src, dst]);
    let len = u32_of(bytes / w)?;
    let k = kernel(Family::Shape, format!("copy_{sfx}"));
    Some(elementwise(i, k, &CopyArgs { len }, &[src, dst], len))
}

/// `copy_*`, `narrow_*`, `split_*`, `concat_*`, `transpose_u32`, `reverse_*`.
pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    let kinds = matches!(
        t,
        Thunk::Copy(_)
            | Thunk::Narrow(_)
            | Thunk::SplitLastAxis(_)
            | Thunk::Concat(_)
            | Thunk::Transpose(_)
            | Thunk::Reverse(_)
    );
    if !kinds {
        return None;
    }
    if matches!(t, Thunk::Copy(c) if c.src == c.dst) || t.io().writes.is_empty() {
        return Some(Lowered::Skip);
    }
    if aliased(t) || writes_overlap(t) {
        return None;
    }
    let el = |e: u32, es: usize| e as u64 * es as u64;
    let d = match t {
        Thunk::Copy(c) => copy(i, c.src, c.dst, el(c.len, c.dt.size()))?,
        Thunk::Narrow(n) => {
            if n.start as u64 + n.len as u64 > n.src_axis as u64 {
                return None;
            }
            let es = n.dt.size();
            let (cols, start, len) = (el(n.src_axis, es), el(n.start, es), el(n.len, es));
            let (w, sfx) = word(&[cols, start, len], &[n.src, n.dst]);
            let args = NarrowArgs {
                rows: n.outer,
                src_cols: u32_of(cols / w)?,
                start: u32_of(start / w)?,
                len: u32_of(len / w)?,
            };
            let total = u32_of(n.outer as u64 * (len / w))?;
            let k = kernel(Family::Shape, format!("narrow_{sfx}"));
            elementwise(i, k, &args, &[n.src, n.dst], total)
        }
        Thunk::SplitLastAxis(s) => {
            let segs = &s.segments;
            if segs.len() > MAX_PIECES
                || segs
                    .iter()
                    .any(|&(_, st, l)| st as u64 + l as u64 > s.src_axis as u64)
            {
                return None;
            }
            let es = s.dt.size();
            let mut sizes = vec![el(s.src_axis, es)];
            sizes.extend(segs.iter().flat_map(|&(_, st, l)| [el(st, es), el(l, es)]));
            let mut offs = vec![s.src];
            offs.extend(segs.iter().map(|g| g.0));
            let (w, sfx) = word(&sizes, &offs);
            let mut args = SplitArgs {
                rows: s.outer,
                src_cols: u32_of(sizes[0] / w)?,
                count: segs.len() as u32,
                ..Default::default()
            };
            let mut most = 0u64;
            for (k, &(_, st, l)) in segs.iter().enumerate() {
                args.start[k] = u32_of(el(st, es) / w)?;
                args.len[k] = u32_of(el(l, es) / w)?;
                most = most.max(s.outer as u64 * args.len[k] as u64);
            }
            // unused dst bindings: the first segment's (never written)
            offs.resize(1 + MAX_PIECES, offs[1]);
            pieces(
                i,
                format!("split_{sfx}"),
                &args,
                &offs,
                u32_of(most)?,
                args.count,
            )
        }
        Thunk::Concat(c) => {
            let sum: u64 = c.inputs.iter().map(|p| p.1 as u64).sum();
            if c.inputs.is_empty() || c.inputs.len() > MAX_PIECES || sum != c.dst_axis as u64 {
                return None;
            }
            let es = c.dt.size() as u64 * c.inner as u64;
            let mut sizes = vec![c.dst_axis as u64 * es];
            sizes.extend(c.inputs.iter().map(|p| p.1 as u64 * es));
            let mut offs = vec![c.dst];
            offs.extend(c.inputs.iter().map(|p| p.0));
            let (w, sfx) = word(&sizes, &offs);
            let mut args = ConcatArgs {
                outer: c.outer,
                dst_cols: u32_of(sizes[0] / w)?,
                count: c.inputs.len() as u32,
                ..Default::default()
            };
            let (mut at, mut most) = (0u64, 0u64);
            for (k, size) in sizes[1..].iter().enumerate() {
                args.at[k] = u32_of(at / w)?;
                args.cols[k] = u32_of(size / w)?;
                at += size;
                most = most.max(c.outer as u64 * args.cols[k] as u64);
            }
            offs.resize(1 + MAX_PIECES, offs[1]);
            pieces(
                i,
                format!("concat_{sfx}"),
                &args,
                &offs,
                u32_of(most)?,
                args.count,
            )
        }
        Thunk::Transpose(tr) => {
            let r = tr.out_dims.len();
            let numel = tr.out_dims.iter().map(|&d| d as u64).product::<u64>();
            if r > MAX_RANK || tr.in_strides.len() != r || numel != tr.total as u64 {
                return None;
            }
            let mut args = StridedArgs {
                len: tr.total,
                rank: r as u32,
                ..Default::default()
            };
            args.out_dims[..r].copy_from_slice(&tr.out_dims);
            args.in_strides[..r].copy_from_slice(&tr.in_strides);
            let k = kernel(Family::Shape, "transpose_u32".into());
            elementwise(i, k, &args, &[tr.src, tr.dst], tr.total)
        }
        Thunk::Reverse(rv) => {
            let r = rv.dims.len();
            let len = u32_of(rv.dims.iter().map(|&d| d as u64).product())?;
            let sfx = match rv.elem_bytes {
                1 => "u8",
                2 => "u16",
                4 => "u32",
                8 => "u64",
                _ => return None,
            };
            if r > MAX_RANK || rv.rev_mask.len() != r {
                return None;
            }
            let mut args = ReverseArgs {
                len,
                rank: r as u32,
                ..Default::default()
            };
            args.dims[..r].copy_from_slice(&rv.dims);
            args.rev_mask = rv
                .rev_mask
                .iter()
                .enumerate()
                .fold(0, |m, (d, &f)| m | ((f as u32) << d));
            let k = kernel(Family::Shape, format!("reverse_{sfx}"));
            elementwise(i, k, &args, &[rv.src, rv.dst], len)
        }
        _ => return None,
    };
    Some(Lowered::Dispatch(d))
}
