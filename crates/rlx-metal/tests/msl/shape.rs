//! shape.metal: copy / narrow / split / concat per word width, transpose
//! (permutations, broadcast, rank 0 and 1) and reverse per element width,
//! on odd sizes and partial threadgroups, against index-arithmetic
//! references. Pure data movement: results must be bit-exact (the inputs
//! are random bytes, NaN payloads included).

use super::common::uniform;
use msl_sim::Grid;
use rlx_metal::metal::args::{
    ConcatArgs, CopyArgs, KernelArgs, NarrowArgs, ReverseArgs, SplitArgs, StridedArgs,
};
use rlx_metal::metal::kernels::Family;

/// `(rows, src_cols, [(start, len)])` of a split case.
type SplitCase<'a> = (usize, usize, &'a [(usize, usize)]);

const WORDS: [(usize, &str); 5] = [(1, "u8"), (2, "u16"), (4, "u32"), (8, "u64"), (16, "u128")];

/// `n` deterministic random bytes.
fn bytes(seed: u64, n: usize) -> Vec<u8> {
    uniform(seed, n, 0.0, 256.0)
        .into_iter()
        .map(|v| v as u8)
        .collect()
}

/// Runs `kernel` over `[groups_x, groups_y]` threadgroups of `tpg` threads.
fn run(kernel: &str, args: &[u8], bufs: &mut [&mut [u8]], groups: [u32; 2], tpg: u32) {
    let lib = super::common::lib(Family::Shape);
    let grid = Grid {
        groups: [groups[0], groups[1], 1],
        threads: [tpg, 1, 1],
    };
    lib.dispatch(kernel, args, bufs, grid, &[])
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
}

#[test]
fn copy_moves_every_word() {
    for (w, sfx) in WORDS {
        for (k, len) in [1usize, 31, 33, 100, 257].into_iter().enumerate() {
            let src = bytes(k as u64 + 1, len * w);
            let mut dst = vec![0u8; len * w + 16];
            let tpg = if k % 2 == 0 { 256 } else { 32 };
            let args = CopyArgs { len: len as u32 };
            run(
                &format!("copy_{sfx}"),
                args.as_bytes(),
                &mut [&mut src.clone(), &mut dst],
                [(len as u32).div_ceil(tpg), 1],
                tpg,
            );
            assert_eq!(&dst[..len * w], &src[..], "copy_{sfx} len={len}");
            assert!(
                dst[len * w..].iter().all(|&b| b == 0),
                "copy_{sfx}: wrote past len"
            );
        }
    }
}

#[test]
fn narrow_takes_the_window() {
    let shapes = [
        (1, 1, 0, 1),
        (3, 31, 5, 17),
        (4, 100, 33, 33),
        (7, 33, 32, 1),
        (2, 9, 0, 9),
    ];
    for (w, sfx) in WORDS {
        for (k, &(rows, cols, start, len)) in shapes.iter().enumerate() {
            let src = bytes(k as u64 + 7, rows * cols * w);
            let mut dst = vec![0u8; rows * len * w];
            let args = NarrowArgs {
                rows: rows as u32,
                src_cols: cols as u32,
                start: start as u32,
                len: len as u32,
            };
            let total = (rows * len) as u32;
            run(
                &format!("narrow_{sfx}"),
                args.as_bytes(),
                &mut [&mut src.clone(), &mut dst],
                [total.div_ceil(64), 1],
                64,
            );
            let mut want = Vec::new();
            for r in 0..rows {
                want.extend_from_slice(&src[(r * cols + start) * w..(r * cols + start + len) * w]);
            }
            assert_eq!(dst, want, "narrow_{sfx} {rows}x{cols}[{start}..+{len}]");
        }
    }
}

#[test]
fn split_writes_each_segment() {
    // contiguous cover, scattered windows, the 8-segment maximum
    let cases: [SplitCase; 3] = [
        (5, 40, &[(0, 7), (7, 1), (8, 32)]),
        (3, 33, &[(3, 4), (20, 13), (0, 1)]),
        (
            2,
            17,
            &[
                (0, 2),
                (2, 2),
                (4, 2),
                (6, 2),
                (8, 2),
                (10, 2),
                (12, 2),
                (14, 3),
            ],
        ),
    ];
    for (w, sfx) in WORDS {
        for (k, &(rows, cols, segs)) in cases.iter().enumerate() {
            let src = bytes(k as u64 + 3, rows * cols * w);
            let mut args = SplitArgs {
                rows: rows as u32,
                src_cols: cols as u32,
                count: segs.len() as u32,
                ..Default::default()
            };
            let mut outs: Vec<Vec<u8>> = vec![vec![0u8; 16]; 8];
            for (s, &(st, l)) in segs.iter().enumerate() {
                args.start[s] = st as u32;
                args.len[s] = l as u32;
                outs[s] = vec![0u8; rows * l * w];
            }
            let most = segs.iter().map(|s| s.1).max().unwrap() * rows;
            let mut src_buf = src.clone();
            let mut bufs: Vec<&mut [u8]> = vec![&mut src_buf];
            bufs.extend(outs.iter_mut().map(|o| o.as_mut_slice()));
            run(
                &format!("split_{sfx}"),
                args.as_bytes(),
                &mut bufs,
                [(most as u32).div_ceil(32), segs.len() as u32],
                32,
            );
            for (s, &(st, l)) in segs.iter().enumerate() {
                let mut want = Vec::new();
                for r in 0..rows {
                    want.extend_from_slice(&src[(r * cols + st) * w..(r * cols + st + l) * w]);
                }
                assert_eq!(outs[s], want, "split_{sfx} case {k} segment {s}");
            }
            assert!(outs[segs.len()..].iter().all(|o| o.iter().all(|&b| b == 0)));
        }
    }
}

#[test]
fn concat_interleaves_the_inputs() {
    let cases: [(usize, &[usize]); 3] = [
        (3, &[5, 1, 33]),
        (1, &[100]),
        (4, &[1, 2, 3, 4, 5, 6, 7, 9]),
    ];
    for (w, sfx) in WORDS {
        for (k, &(outer, cols)) in cases.iter().enumerate() {
            let dst_cols: usize = cols.iter().sum();
            let mut ins: Vec<Vec<u8>> = vec![vec![0u8; 16]; 8];
            let mut args = ConcatArgs {
                outer: outer as u32,
                dst_cols: dst_cols as u32,
                count: cols.len() as u32,
                ..Default::default()
            };
            let mut at = 0;
            for (j, &c) in cols.iter().enumerate() {
                ins[j] = bytes((k * 10 + j) as u64 + 5, outer * c * w);
                args.at[j] = at as u32;
                args.cols[j] = c as u32;
                at += c;
            }
            let mut want = Vec::new();
            for o in 0..outer {
                for (j, &c) in cols.iter().enumerate() {
                    want.extend_from_slice(&ins[j][o * c * w..(o + 1) * c * w]);
                }
            }
            let mut dst = vec![0u8; outer * dst_cols * w];
            let most = cols.iter().max().unwrap() * outer;
            let mut bufs: Vec<&mut [u8]> = vec![&mut dst];
            bufs.extend(ins.iter_mut().map(|o| o.as_mut_slice()));
            run(
                &format!("concat_{sfx}"),
                args.as_bytes(),
                &mut bufs,
                [(most as u32).div_ceil(32), cols.len() as u32],
                32,
            );
            assert_eq!(dst, want, "concat_{sfx} case {k}");
        }
    }
}

#[test]
fn transpose_follows_the_strides() {
    // (out_dims, in_strides, source words)
    let cases: [(&[u32], &[u32], usize); 6] = [
        (&[7, 3, 5], &[1, 35, 7], 105),             // [3,5,7] -> (2,0,1)
        (&[31, 33], &[1, 31], 31 * 33),             // 2-D transpose
        (&[4, 9, 5], &[5, 0, 1], 20),               // broadcast a middle axis
        (&[37], &[1], 37),                          // rank 1
        (&[], &[], 1),                              // rank 0
        (&[2, 3, 2, 3, 2], &[1, 2, 6, 12, 36], 72), // rank 5 reversal of axes
    ];
    for (k, &(dims, strides, n)) in cases.iter().enumerate() {
        let src = bytes(k as u64 + 9, n * 4);
        let total: usize = dims.iter().map(|&d| d as usize).product();
        let r = dims.len();
        let mut args = StridedArgs {
            len: total as u32,
            rank: r as u32,
            ..Default::default()
        };
        args.out_dims[..r].copy_from_slice(dims);
        args.in_strides[..r].copy_from_slice(strides);
        let mut dst = vec![0u8; total * 4];
        run(
            "transpose_u32",
            args.as_bytes(),
            &mut [&mut src.clone(), &mut dst],
            [(total as u32).div_ceil(64), 1],
            64,
        );
        let mut want = Vec::new();
        for i in 0..total {
            let (mut rem, mut at) = (i, 0);
            for d in (0..r).rev() {
                at += (rem % dims[d] as usize) * strides[d] as usize;
                rem /= dims[d] as usize;
            }
            want.extend_from_slice(&src[at * 4..at * 4 + 4]);
        }
        assert_eq!(dst, want, "transpose case {k} {dims:?} {strides:?}");
    }
}

#[test]
fn reverse_flips_the_masked_axes() {
    let cases: [(&[u32], &[bool]); 5] = [
        (&[3, 4, 5], &[true, false, true]),
        (&[3, 4, 5], &[false, true, false]),
        (&[33], &[true]),
        (&[2, 1, 31], &[true, true, true]),
        (&[6, 7], &[false, false]),
    ];
    for (w, sfx) in &WORDS[..4] {
        for (k, &(dims, mask)) in cases.iter().enumerate() {
            let r = dims.len();
            let n: usize = dims.iter().map(|&d| d as usize).product();
            let src = bytes(k as u64 + 13, n * w);
            let mut args = ReverseArgs {
                len: n as u32,
                rank: r as u32,
                ..Default::default()
            };
            args.dims[..r].copy_from_slice(dims);
            args.rev_mask = mask
                .iter()
                .enumerate()
                .fold(0, |m, (d, &f)| m | ((f as u32) << d));
            let mut dst = vec![0u8; n * w];
            run(
                &format!("reverse_{sfx}"),
                args.as_bytes(),
                &mut [&mut src.clone(), &mut dst],
                [(n as u32).div_ceil(32), 1],
                32,
            );
            let mut want = Vec::new();
            for i in 0..n {
                let (mut rem, mut at, mut stride) = (i, 0, 1);
                for d in (0..r).rev() {
                    let dd = dims[d] as usize;
                    let j = rem % dd;
                    rem /= dd;
                    at += if mask[d] { dd - 1 - j } else { j } * stride;
                    stride *= dd;
                }
                want.extend_from_slice(&src[at * w..(at + 1) * w]);
            }
            assert_eq!(dst, want, "reverse_{sfx} {dims:?} {mask:?}");
        }
    }
}
