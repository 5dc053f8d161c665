//! attention.metal: `attention_decode_*` and `attention_prefill_*` against
//! an f64 softmax-attention reference: every mask kind (none, causal,
//! custom, bias, sliding window), GQA ratios 1 / 2 / 4, head dims 64, 40
//! and 256, seq 1 / 5 / 17, kv 1 / 17 / 33 / 100, a run-time `kv_len`
//! below the capacity, softcap on and off, an explicit score scale, BSHD
//! and BHSD, 1–4 simdgroups (partial query blocks, 16- and 32-key
//! blocks); fully masked rows (zeros) and a NaN bias (NaN row); the
//! FusedAttn form (NeoX RoPE on packed qkv rows, f32); f16 K / V under f32
//! q (`*_f32_kvf16`, the half KV cache).
//!
//! Tolerances: f32 `2e-5 + 1e-4·|ref|` (online softmax rescales partial
//! sums; exp and the dot products round in f32 in another order);
//! f16 `2e-3 + 2^-9·|ref|` (f32 math on the f16 inputs the reference also
//! uses, one rounding of the output to f16, |out| <= 2).

use super::common::{assert_close, lib, uniform, Dt, DTS};
use msl_sim::Grid;
use rlx_metal::metal::args::{AttnArgs, KernelArgs};
use rlx_metal::metal::kernels::Family;

#[derive(Clone, Copy, Debug)]
struct Case {
    b: u32,
    s: u32,
    kv: u32,
    heads: u32,
    kvh: u32,
    d: u32,
    mask: u32,
    window: u32,
    softcap: f32,
    scale: f32,
    bhsd: bool,
    kv_len: Option<u32>,
    nsg: u32,
}

const BASE: Case = Case {
    b: 1,
    s: 1,
    kv: 33,
    heads: 2,
    kvh: 2,
    d: 64,
    mask: 0,
    window: 0,
    softcap: 0.0,
    scale: 0.0,
    bhsd: false,
    kv_len: None,
    nsg: 2,
};

/// Element offset of row (b, pos, head) with `n` positions and `nh` heads.
fn at(bhsd: bool, b: u32, pos: u32, head: u32, n: u32, nh: u32, d: u32) -> usize {
    let r = if bhsd {
        (b * nh + head) * n + pos
    } else {
        (b * n + pos) * nh + head
    };
    (r * d) as usize
}

/// f64 attention over already-rotated f32 rows; `row(which, b, pos, head)`
/// gives the element offset into q (which 0), k (1) or v (2).
#[allow(clippy::too_many_arguments)]
fn reference(
    c: &Case,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: &[f32],
    scale: f32,
    row: &dyn Fn(usize, u32, u32, u32) -> usize,
    out_row: &dyn Fn(u32, u32, u32) -> usize,
    out_len: usize,
) -> Vec<f64> {
    let d = c.d as usize;
    let len = c.kv_len.unwrap_or(c.kv);
    let mut out = vec![0f64; out_len];
    for b in 0..c.b {
        for i in 0..c.s {
            for h in 0..c.heads {
                let g = h / (c.heads / c.kvh);
                let abs = len as i64 - c.s as i64 + i as i64;
                let qr = row(0, b, i, h);
                let mut sc: Vec<(u32, f64)> = Vec::new();
                for j in 0..len {
                    let jj = j as i64;
                    let visible = match c.mask {
                        1 => jj <= abs,
                        4 => jj <= abs && abs - jj <= c.window as i64,
                        2 => mask[((b * c.s + i) * c.kv + j) as usize] != 0.0,
                        _ => true,
                    };
                    if !visible {
                        continue;
                    }
                    let kr = row(1, b, j, g);
                    let dot: f64 = (0..d).map(|e| q[qr + e] as f64 * k[kr + e] as f64).sum();
                    let mut x = dot * scale as f64;
                    if c.softcap > 0.0 {
                        let cap = c.softcap as f64;
                        x = cap * (x / cap).tanh();
                    }
                    if c.mask == 3 {
                        x += mask[(((b * c.heads + h) * c.s + i) * c.kv + j) as usize] as f64;
                    }
                    sc.push((j, x));
                }
                let o = out_row(b, i, h);
                if sc.iter().any(|s| s.1.is_nan()) {
                    out[o..o + d].fill(f64::NAN);
                    continue;
                }
                let m = sc.iter().fold(f64::NEG_INFINITY, |a, s| a.max(s.1));
                if m == f64::NEG_INFINITY {
                    continue;
                }
                let tot: f64 = sc.iter().map(|s| (s.1 - m).exp()).sum();
                for &(j, x) in &sc {
                    let p = (x - m).exp() / tot;
                    let vr = row(2, b, j, g);
                    for e in 0..d {
                        out[o + e] += p * v[vr + e] as f64;
                    }
                }
            }
        }
    }
    out
}

fn tg_bytes(c: &Case, bk: u32) -> usize {
    let bq = (2 * c.nsg) as usize;
    (bq * c.d as usize + bk as usize * (c.d | 1) as usize + bq * 32) * 4
}

fn resolved_scale(c: &Case) -> f32 {
    if c.scale == 0.0 {
        1.0 / (c.d as f32).sqrt()
    } else {
        c.scale
    }
}

fn run_case(dt: Dt, c: &Case, seed: u64) {
    run_case_kv(dt, dt, c, seed)
}

/// [`run_case`] with K / V stored as `kv_dt` (f16 under f32 q: the
/// `_kvf16` kernels of a half KV cache; the reference reads the same
/// f16-rounded keys and values).
fn run_case_kv(dt: Dt, kv_dt: Dt, c: &Case, seed: u64) {
    let (qn, kn) = (
        (c.b * c.s * c.heads * c.d) as usize,
        (c.b * c.kv * c.kvh * c.d) as usize,
    );
    let q = dt.round(&uniform(seed, qn, -1.0, 1.0));
    let k = kv_dt.round(&uniform(seed + 1, kn, -1.0, 1.0));
    let v = kv_dt.round(&uniform(seed + 2, kn, -2.0, 2.0));
    let mut mask = match c.mask {
        2 => uniform(seed + 3, (c.b * c.s * c.kv) as usize, 0.0, 1.0)
            .iter()
            .map(|&x| (x > 0.4) as u32 as f32)
            .collect(),
        3 => uniform(seed + 3, (c.b * c.heads * c.s * c.kv) as usize, -3.0, 1.0),
        _ => vec![0.0; 1],
    };
    if c.mask == 2 {
        // query row 0 of batch 0 sees nothing: zeros
        mask[..c.kv as usize].fill(0.0);
    }
    if c.mask == 3 {
        // a NaN bias poisons row (0, 0, head 0) only
        mask[0] = f32::NAN;
    }
    let mask = dt.round(&mask);
    let (sb, ss, sh) = if c.bhsd {
        (c.s * c.heads * c.d, c.d, c.s * c.d)
    } else {
        (c.s * c.heads * c.d, c.heads * c.d, c.d)
    };
    let (kb, kss, ksh) = if c.bhsd {
        (c.kv * c.kvh * c.d, c.d, c.kv * c.d)
    } else {
        (c.kv * c.kvh * c.d, c.kvh * c.d, c.d)
    };
    let prefill = c.s > 1;
    let bk = if prefill && tg_bytes(c, 32) > 28 * 1024 {
        16
    } else {
        32
    };
    let args = AttnArgs {
        batch: c.b,
        seq: c.s,
        kv_seq: c.kv,
        heads: c.heads,
        kv_heads: c.kvh,
        head_dim: c.d,
        mask_kind: c.mask,
        window: c.window,
        scale: resolved_scale(c),
        softcap: c.softcap,
        has_kv_len: c.kv_len.is_some() as u32,
        rope: 0,
        q_sb: sb,
        q_ss: ss,
        q_sh: sh,
        kv_sb: kb,
        kv_ss: kss,
        kv_sh: ksh,
        o_sb: sb,
        o_ss: ss,
        o_sh: sh,
        bk,
    };
    let mut bufs = [
        dt.encode(&q),
        kv_dt.encode(&k),
        kv_dt.encode(&v),
        dt.encode(&mask),
        c.kv_len.unwrap_or(0).to_le_bytes().to_vec(),
        vec![0u8; 4],
        vec![0u8; 4],
        dt.encode(&vec![7.0; qn]),
    ];
    let (kind, groups, tgm) = if prefill {
        let blocks = c.s.div_ceil(2 * c.nsg);
        ("prefill", c.b * c.heads * blocks, vec![tg_bytes(c, bk)])
    } else {
        ("decode", c.b * c.heads, vec![])
    };
    let kv_suffix = if kv_dt == dt { "" } else { "_kvf16" };
    let name = format!("attention_{kind}_{}{kv_suffix}", dt.suffix());
    let mut refs: Vec<&mut Vec<u8>> = bufs.iter_mut().collect();
    let mut slices: Vec<&mut [u8]> = refs.iter_mut().map(|b| b.as_mut_slice()).collect();
    lib(Family::Attention)
        .dispatch(
            &name,
            args.as_bytes(),
            &mut slices,
            Grid::d1(groups, c.nsg * 32),
            &tgm,
        )
        .unwrap_or_else(|e| panic!("{name} {c:?}: {e}"));
    let row = |w: usize, b: u32, pos: u32, head: u32| match w {
        0 => at(c.bhsd, b, pos, head, c.s, c.heads, c.d),
        _ => at(c.bhsd, b, pos, head, c.kv, c.kvh, c.d),
    };
    let out_row = |b: u32, i: u32, h: u32| at(c.bhsd, b, i, h, c.s, c.heads, c.d);
    let want = reference(c, &q, &k, &v, &mask, resolved_scale(c), &row, &out_row, qn);
    let (atol, rtol) = match dt {
        Dt::F32 => (2e-5, 1e-4),
        Dt::F16 => (2e-3, 1.0 / 512.0),
    };
    let got = dt.decode(&bufs[7]);
    assert_close(&format!("{name} {c:?}"), &got, &want, atol, rtol);
    if c.mask == 2 {
        let o = out_row(0, 0, 0);
        assert!(got[o..o + c.d as usize].iter().all(|&x| x == 0.0));
    }
}

/// seq = 1: one threadgroup per (batch, head), keys split over simdgroups.
#[test]
fn decode_matches_reference() {
    let cases = [
        Case { nsg: 2, ..BASE },
        Case {
            nsg: 2,
            kv: 1,
            ..BASE
        },
        Case {
            kv: 1,
            heads: 2,
            kvh: 1,
            nsg: 1,
            ..BASE
        },
        Case {
            b: 2,
            kv: 100,
            heads: 8,
            kvh: 2,
            d: 40,
            mask: 1,
            kv_len: Some(57),
            softcap: 2.0,
            nsg: 3,
            ..BASE
        },
        Case {
            kv: 100,
            heads: 4,
            kvh: 1,
            mask: 3,
            scale: 0.3,
            bhsd: true,
            nsg: 4,
            ..BASE
        },
        Case {
            b: 2,
            d: 40,
            mask: 2,
            nsg: 2,
            ..BASE
        },
        Case {
            kv: 100,
            heads: 4,
            kvh: 2,
            mask: 4,
            window: 10,
            kv_len: Some(80),
            nsg: 2,
            ..BASE
        },
    ];
    for dt in DTS {
        for (n, c) in cases.iter().enumerate() {
            run_case(dt, c, 10 * n as u64 + 1);
        }
    }
}

/// seq > 1: query blocks of 2·nsg rows, key blocks staged in threadgroup
/// memory.
#[test]
fn prefill_matches_reference() {
    let p = Case { s: 17, ..BASE };
    let cases = [
        Case {
            kv: 17,
            heads: 4,
            kvh: 2,
            mask: 1,
            nsg: 4,
            ..p
        },
        Case {
            kv: 100,
            heads: 4,
            kvh: 1,
            d: 40,
            mask: 1,
            softcap: 1.5,
            bhsd: true,
            nsg: 3,
            ..p
        },
        Case {
            b: 2,
            kv: 33,
            mask: 2,
            nsg: 2,
            ..p
        },
        Case {
            kv: 100,
            kvh: 1,
            d: 40,
            mask: 3,
            kv_len: Some(60),
            nsg: 4,
            ..p
        },
        Case {
            kv: 100,
            heads: 4,
            kvh: 4,
            mask: 4,
            window: 7,
            kv_len: Some(90),
            nsg: 1,
            ..p
        },
        Case {
            kv: 1,
            mask: 1,
            nsg: 2,
            ..p
        },
        Case {
            kv: 33,
            mask: 0,
            scale: 0.2,
            bhsd: true,
            nsg: 4,
            ..p
        },
    ];
    for dt in DTS {
        for (n, c) in cases.iter().enumerate() {
            run_case(dt, c, 100 + 10 * n as u64);
        }
    }
}

/// f16 K / V under f32 q and output (the half KV cache): decode and
/// prefill, GQA, causal / sliding-window / custom / bias masks, a run-time
/// `kv_len`, odd head dims and lengths, both layouts.
#[test]
fn half_kv_matches_reference() {
    let cases = [
        Case {
            b: 2,
            kv: 100,
            heads: 8,
            kvh: 2,
            d: 40,
            mask: 1,
            kv_len: Some(57),
            nsg: 3,
            ..BASE
        },
        Case {
            kv: 100,
            heads: 4,
            kvh: 2,
            mask: 4,
            window: 10,
            kv_len: Some(80),
            nsg: 2,
            ..BASE
        },
        Case {
            kv: 37,
            heads: 3,
            kvh: 1,
            d: 24,
            mask: 3,
            bhsd: true,
            nsg: 4,
            ..BASE
        },
        Case {
            s: 17,
            kv: 100,
            heads: 4,
            kvh: 1,
            d: 40,
            mask: 1,
            kv_len: Some(60),
            nsg: 3,
            ..BASE
        },
        Case {
            s: 5,
            kv: 41,
            heads: 6,
            kvh: 2,
            d: 56,
            mask: 4,
            window: 7,
            nsg: 2,
            ..BASE
        },
        Case {
            s: 9,
            b: 2,
            kv: 33,
            mask: 2,
            bhsd: true,
            nsg: 2,
            ..BASE
        },
    ];
    for (n, c) in cases.iter().enumerate() {
        run_case_kv(Dt::F32, Dt::F16, c, 300 + 10 * n as u64);
    }
}

/// Head dim 256 (8 dims per lane, 16-key blocks to fit threadgroup memory).
#[test]
fn wide_heads_match_reference() {
    let c = Case {
        s: 5,
        kv: 20,
        heads: 1,
        kvh: 1,
        d: 256,
        mask: 1,
        nsg: 4,
        ..BASE
    };
    assert!(tg_bytes(&c, 32) > 28 * 1024);
    run_case(Dt::F32, &c, 7);
    run_case(Dt::F32, &Case { s: 1, ..c }, 8);
}

/// NeoX rotation of a whole head row (`d` even) at table row `pos`.
fn rotate(x: &[f32], cos: &[f32], sin: &[f32], pos: usize) -> Vec<f32> {
    let h = x.len() / 2;
    let (c, s) = (&cos[pos * h..], &sin[pos * h..]);
    let mut o = x.to_vec();
    for p in 0..h {
        o[p] = x[p] * c[p] - x[p + h] * s[p];
        o[p + h] = x[p] * s[p] + x[p + h] * c[p];
    }
    o
}

/// The FusedAttn form: q / k / v strided out of packed `[b, s, 3·inner]`
/// rows, q and k NeoX-rotated on load (f32 only).
#[test]
fn fused_rope_qkv_matches_reference() {
    let cases = [
        Case {
            b: 2,
            s: 9,
            kv: 9,
            heads: 2,
            kvh: 2,
            d: 40,
            mask: 1,
            nsg: 2,
            ..BASE
        },
        Case {
            b: 1,
            s: 17,
            kv: 17,
            heads: 3,
            kvh: 3,
            d: 64,
            mask: 2,
            nsg: 4,
            ..BASE
        },
        Case {
            b: 2,
            s: 1,
            kv: 1,
            heads: 2,
            kvh: 2,
            d: 64,
            mask: 0,
            nsg: 1,
            ..BASE
        },
    ];
    for (n, c) in cases.iter().enumerate() {
        let (b, s, h, d) = (c.b as usize, c.s as usize, c.heads as usize, c.d as usize);
        let inner = h * d;
        let qkv = uniform(n as u64 + 500, b * s * 3 * inner, -1.0, 1.0);
        let ang = uniform(n as u64 + 600, s * d / 2, -3.0, 3.0);
        let cos: Vec<f32> = ang.iter().map(|a| a.cos()).collect();
        let sin: Vec<f32> = ang.iter().map(|a| a.sin()).collect();
        let mask: Vec<f32> = uniform(n as u64 + 700, b * s * s, 0.0, 1.0)
            .iter()
            .map(|&x| (x > 0.3) as u32 as f32)
            .collect();
        // reference operands: rotated q / k, plain v, dense BSHD
        let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..b * s {
            for hh in 0..h {
                let at = r * 3 * inner + hh * d;
                q.extend(rotate(&qkv[at..at + d], &cos, &sin, r % s));
                k.extend(rotate(&qkv[at + inner..at + inner + d], &cos, &sin, r % s));
                v.extend_from_slice(&qkv[at + 2 * inner..at + 2 * inner + d]);
            }
        }
        let row3 = (3 * inner) as u32;
        let args = AttnArgs {
            batch: c.b,
            seq: c.s,
            kv_seq: c.s,
            heads: c.heads,
            kv_heads: c.heads,
            head_dim: c.d,
            mask_kind: c.mask,
            window: 0,
            scale: resolved_scale(c),
            softcap: 0.0,
            has_kv_len: 0,
            rope: 1,
            q_sb: c.s * row3,
            q_ss: row3,
            q_sh: c.d,
            kv_sb: c.s * row3,
            kv_ss: row3,
            kv_sh: c.d,
            o_sb: c.s * inner as u32,
            o_ss: inner as u32,
            o_sh: c.d,
            bk: 32,
        };
        let enc = |x: &[f32]| Dt::F32.encode(x);
        let mut bufs = [
            enc(&qkv),
            enc(&qkv[inner..]),
            enc(&qkv[2 * inner..]),
            enc(&mask),
            vec![0u8; 4],
            enc(&cos),
            enc(&sin),
            enc(&vec![7.0; b * s * inner]),
        ];
        let (kind, groups, tgm) = if c.s > 1 {
            let blocks = c.s.div_ceil(2 * c.nsg);
            ("prefill", c.b * c.heads * blocks, vec![tg_bytes(c, 32)])
        } else {
            ("decode", c.b * c.heads, vec![])
        };
        let name = format!("attention_{kind}_f32");
        let mut slices: Vec<&mut [u8]> = bufs.iter_mut().map(|x| x.as_mut_slice()).collect();
        lib(Family::Attention)
            .dispatch(
                &name,
                args.as_bytes(),
                &mut slices,
                Grid::d1(groups, c.nsg * 32),
                &tgm,
            )
            .unwrap_or_else(|e| panic!("{name} {c:?}: {e}"));
        let row = |w: usize, bi: u32, pos: u32, head: u32| {
            let _ = w;
            at(false, bi, pos, head, c.s, c.heads, c.d)
        };
        let out_row = |bi: u32, i: u32, hh: u32| at(false, bi, i, hh, c.s, c.heads, c.d);
        let want = reference(
            c,
            &q,
            &k,
            &v,
            &mask,
            resolved_scale(c),
            &row,
            &out_row,
            q.len(),
        );
        let got = Dt::F32.decode(&bufs[7]);
        assert_close(&format!("fused {name} {c:?}"), &got, &want, 2e-5, 1e-4);
    }
}
