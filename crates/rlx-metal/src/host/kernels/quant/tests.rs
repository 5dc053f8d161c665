//! Quantised matmul kernels against a naive dequantise-then-dot written
//! here, element by element from the block layouts (an independent code
//! path from the kernels' block unpackers), accumulated in f64.

use super::*;
use crate::host::kernels::testutil::rand_vec;
use rlx_ir::quant::ALL_GGML_TYPES;

/// Deterministic bytes (xorshift).
fn rand_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 32) as u8
        })
        .collect()
}

fn put_f16(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

fn get_f16(b: &[u8], at: usize) -> f64 {
    f64::from(f16::from_le_bytes([b[at], b[at + 1]]).to_f32())
}

/// Byte offsets of the f16 scale fields of each format.
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 | Q1_0 | Q2_0 => &[0],
        Q4_1 | Q5_1 | Q8_1 | Q4K | Q5K => &[0, 2],
        Q2K => &[80, 82],
        Q3K => &[108],
        Q6K => &[208],
        F32 | F16 | BF16 | Q8K => &[],
    }
}

/// `rows` random packed rows of `k` elements with sane scales.
pub(super) fn rand_rows(ty: GgmlType, rows: usize, k: usize, seed: u64) -> Vec<u8> {
    let vals = rand_vec(rows * k, seed);
    match ty {
        GgmlType::F32 => return vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => {
            return vals
                .iter()
                .flat_map(|&v| f16::from_f32(v).to_le_bytes())
                .collect()
        }
        GgmlType::BF16 => {
            return vals
                .iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                .collect()
        }
        _ => {}
    }
    let bb = ty.block_bytes();
    let nb = rows * k / ty.block_size();
    let mut b = rand_bytes(nb * bb, seed ^ 0xABCD);
    let scales = rand_vec(nb * 2, seed ^ 0x1234);
    for (i, blk) in b.chunks_exact_mut(bb).enumerate() {
        for (f, &at) in f16_fields(ty).iter().enumerate() {
            put_f16(
                blk,
                at,
                0.02 * scales[2 * i + f] + if f == 0 { 0.01 } else { 0.0 },
            );
        }
        if ty == GgmlType::Q8K {
            blk[..4].copy_from_slice(&(0.003 * scales[2 * i] + 0.001).to_le_bytes());
        }
    }
    b
}

/// Weight `e` of one block, straight from the layout description.
fn naive_elem(ty: GgmlType, b: &[u8], e: usize) -> f64 {
    use GgmlType::*;
    let nib = |qs: usize, i: usize| -> u32 {
        // element i < 16: low nibble of byte i; else high nibble of byte i-16
        if i < 16 {
            u32::from(b[qs + i] & 15)
        } else {
            u32::from(b[qs + i - 16] >> 4)
        }
    };
    let bit = |at: usize, i: usize| -> u32 { u32::from((b[at + i / 8] >> (i % 8)) & 1) };
    let d = get_f16(b, 0);
    match ty {
        Q4_0 => d * (f64::from(nib(2, e)) - 8.0),
        Q4_1 => d * f64::from(nib(4, e)) + get_f16(b, 2),
        Q5_0 => d * (f64::from(nib(6, e) + 16 * bit(2, e)) - 16.0),
        Q5_1 => d * f64::from(nib(8, e) + 16 * bit(4, e)) + get_f16(b, 2),
        Q8_0 => d * f64::from(b[2 + e] as i8),
        Q8_1 => d * f64::from(b[4 + e] as i8),
        Q8K => {
            let d = f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            d * f64::from(b[4 + e] as i8)
        }
        Q1_0 => d * if bit(2, e) == 1 { 1.0 } else { -1.0 },
        Q2_0 => d * (f64::from((b[2 + e / 4] >> (2 * (e % 4))) & 3) - 1.5),
        Q2K => {
            let (half, j, l) = (e / 128, (e % 128) / 32, e % 32);
            let q = f64::from((b[16 + 32 * half + l] >> (2 * j)) & 3);
            let s = b[e / 16];
            let (dd, dm) = (get_f16(b, 80), get_f16(b, 82));
            dd * f64::from(s & 15) * q - dm * f64::from(s >> 4)
        }
        Q3K => {
            let (half, j, l) = (e / 128, (e % 128) / 32, e % 32);
            let low = i32::from((b[32 + 32 * half + l] >> (2 * j)) & 3);
            let hb = (b[l] >> (4 * half + j)) & 1;
            let q = low - if hb == 1 { 0 } else { 4 };
            let i = e / 16;
            let sc = &b[96..108];
            let lo = if i < 8 { sc[i] & 15 } else { sc[i - 8] >> 4 };
            let hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
            let s = i32::from(lo | (hi << 4)) - 32;
            get_f16(b, 108) * f64::from(s) * f64::from(q)
        }
        Q4K | Q5K => {
            let (c, h, l) = (e / 64, (e % 64) / 32, e % 32);
            let qs = if ty == Q4K { 16 } else { 48 };
            let byte = b[qs + 32 * c + l];
            let mut q = u32::from(if h == 0 { byte & 15 } else { byte >> 4 });
            if ty == Q5K {
                q += 16 * u32::from((b[16 + l] >> (2 * c + h)) & 1);
            }
            let j = 2 * c + h;
            let sc = &b[4..16];
            let (s, m) = if j < 4 {
                (sc[j] & 63, sc[j + 4] & 63)
            } else {
                (
                    (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4),
                    (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4),
                )
            };
            d * f64::from(s) * f64::from(q) - get_f16(b, 2) * f64::from(m)
        }
        Q6K => {
            let (half, r, l) = (e / 128, (e % 128) / 32, e % 32);
            let lb = b[64 * half + l + 32 * (r % 2)];
            let low = if r < 2 { lb & 15 } else { lb >> 4 };
            let high = (b[128 + 32 * half + l] >> (2 * r)) & 3;
            let q = i32::from(low | (high << 4)) - 32;
            get_f16(b, 208) * f64::from(b[192 + e / 16] as i8) * f64::from(q)
        }
        F32 | F16 | BF16 => unreachable!("float rows are decoded in naive_row"),
    }
}

/// Row `j` of the naive dequantised weight.
pub(super) fn naive_row(ty: GgmlType, w: &[u8], j: usize, k: usize) -> Vec<f64> {
    let rb = ty.row_bytes(k).unwrap();
    let row = &w[j * rb..(j + 1) * rb];
    match ty {
        GgmlType::F32 => row
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
            .collect(),
        GgmlType::F16 => row
            .chunks_exact(2)
            .map(|c| f64::from(f16::from_le_bytes([c[0], c[1]]).to_f32()))
            .collect(),
        GgmlType::BF16 => row
            .chunks_exact(2)
            .map(|c| f64::from(half::bf16::from_le_bytes([c[0], c[1]]).to_f32()))
            .collect(),
        _ => {
            let (bs, bb) = (ty.block_size(), ty.block_bytes());
            (0..k)
                .map(|e| naive_elem(ty, &row[e / bs * bb..(e / bs + 1) * bb], e % bs))
                .collect()
        }
    }
}

pub(super) fn naive_matmul(
    ty: GgmlType,
    x: &[f32],
    w: &[u8],
    m: usize,
    k: usize,
    n: usize,
) -> Vec<f64> {
    let rows: Vec<Vec<f64>> = (0..n).map(|j| naive_row(ty, w, j, k)).collect();
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for (j, r) in rows.iter().enumerate() {
            out[i * n + j] = x[i * k..(i + 1) * k]
                .iter()
                .zip(r)
                .map(|(&a, &b)| f64::from(a) * b)
                .sum();
        }
    }
    out
}

/// `max |got − want| ≤ tol · max |want|` (tolerance relative to the output
/// scale: f32 accumulation vs the f64 oracle).
#[track_caller]
fn assert_scaled(got: &[f32], want: &[f64], tol: f64, what: &str) {
    let scale = want.iter().fold(0f64, |a, &v| a.max(v.abs())).max(1e-30);
    let err = got
        .iter()
        .zip(want)
        .fold(0f64, |a, (&g, &w)| a.max((f64::from(g) - w).abs()));
    assert!(err <= tol * scale, "{what}: max err {err} vs scale {scale}");
}

/// Whether `dequant_matmul` rounds the activations of `ty` to 8-bit blocks
/// on this machine for `m` rows (module `vnni` for `m ≤ 8`, `vnni_gemm`
/// above).
fn int_dots(ty: GgmlType, m: usize) -> bool {
    use GgmlType::*;
    #[cfg(target_arch = "x86_64")]
    if vnni::available() && (m <= vnni::MAX_M || vnni_gemm::enabled()) {
        return matches!(
            ty,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q2K | Q3K | Q4K | Q5K | Q6K
        );
    }
    let _ = (ty, m);
    false
}

/// Per-output bound of the activation rounding of the integer-dot path:
/// `½ Σ_e |w_je| · dx_b(e)` with `dx_b = max|x_b| / 127` per block of 32
/// of each activation row (module `vnni`); zero where the path is not used.
/// The rows are rounded on two code levels by default
/// (`set_int8_activation_levels`), to within `dx_b / 256` per element
/// (`dx_b / 512` but where the residual code clamps at 127): 1/128 of that.
pub(super) fn rounding_bound(
    ty: GgmlType,
    x: &[f32],
    w: &[u8],
    m: usize,
    k: usize,
    n: usize,
) -> Vec<f64> {
    if !int_dots(ty, m) {
        return vec![0.0; m * n];
    }
    let rows: Vec<Vec<f64>> = (0..n).map(|j| naive_row(ty, w, j, k)).collect();
    let mut out = vec![0f64; m * n];
    let half = 0.5 / 128.0;
    for i in 0..m {
        let xi = &x[i * k..(i + 1) * k];
        let dx: Vec<f64> = xi
            .chunks_exact(32)
            .map(|b| f64::from(b.iter().fold(0f32, |a, v| a.max(v.abs()))) / 127.0)
            .collect();
        for (j, r) in rows.iter().enumerate() {
            out[i * n + j] = half
                * r.iter()
                    .enumerate()
                    .map(|(e, v)| v.abs() * dx[e / 32])
                    .sum::<f64>();
        }
    }
    out
}

/// `|got − want| ≤ tol · max|want| + bound` element-wise.
#[track_caller]
fn assert_bounded(got: &[f32], want: &[f64], bound: &[f64], tol: f64, what: &str) {
    let scale = want.iter().fold(0f64, |a, &v| a.max(v.abs())).max(1e-30);
    for (e, ((&g, &w), &b)) in got.iter().zip(want).zip(bound).enumerate() {
        let err = (f64::from(g) - w).abs();
        assert!(
            err <= tol * scale + b,
            "{what}: element {e}: got {g}, want {w} (err {err}, bound {b}, scale {scale})"
        );
    }
}

fn check(ty: GgmlType, m: usize, k: usize, n: usize, seed: u64) {
    let w = rand_rows(ty, n, k, seed);
    let x = rand_vec(m * k, seed + 7);
    let want = naive_matmul(ty, &x, &w, m, k, n);
    let bound = rounding_bound(ty, &x, &w, m, k, n);
    let what = format!("{} m={m} k={k} n={n}", ty.name());
    let mut out = vec![f32::NAN; m * n];
    dequant_matmul(ty, Act::F32(&x), &w, Out::F32(&mut out), m, k, n).unwrap();
    assert_bounded(&out, &want, &bound, 1e-5, &what);
    // f16 activations and f16 result: the oracle sees the same rounded x
    let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let xr: Vec<f32> = xh.iter().map(|v| v.to_f32()).collect();
    let want_h = naive_matmul(ty, &xr, &w, m, k, n);
    let bound_h = rounding_bound(ty, &xr, &w, m, k, n);
    let mut oh = vec![f16::NAN; m * n];
    dequant_matmul(ty, Act::F16(&xh), &w, Out::F16(&mut oh), m, k, n).unwrap();
    let oh: Vec<f32> = oh.iter().map(|v| v.to_f32()).collect();
    assert_bounded(&oh, &want_h, &bound_h, 2e-3, &format!("{what} f16"));
}

/// Small `k` for a type: three blocks (37 elements for the float rows).
fn small_k(ty: GgmlType) -> usize {
    match ty.block_size() {
        1 => 37,
        bs => 3 * bs,
    }
}

#[test]
fn every_type_small_odd_shapes() {
    for (t, &ty) in ALL_GGML_TYPES.iter().enumerate() {
        for m in [1, 3, 17] {
            check(ty, m, small_k(ty), 7, 11 * t as u64 + m as u64);
        }
    }
}

#[test]
fn every_type_parallel_shapes() {
    // n·k above PAR_MIN so the row chunks / panels run on the pool
    for (t, &ty) in ALL_GGML_TYPES.iter().enumerate() {
        for m in [1, 3, 17] {
            check(ty, m, 1024, 67, 101 + 13 * t as u64 + m as u64);
        }
    }
}

#[test]
fn zero_sized_dims() {
    let ty = GgmlType::Q4_0;
    let mut out = vec![1f32; 4];
    let w = vec![0u8; 4 * 18];
    dequant_matmul(ty, Act::F32(&[]), &w, Out::F32(&mut out), 0, 32, 4).unwrap();
    assert_eq!(out, [1.0; 4], "m = 0 writes nothing");
    let mut out = vec![1f32; 2];
    dequant_matmul(ty, Act::F32(&[]), &[], Out::F32(&mut out), 2, 0, 1).unwrap();
    assert_eq!(out, [0.0, 0.0]);
}

#[test]
fn bad_operands_are_errors() {
    let ty = GgmlType::Q4K;
    let w = rand_rows(ty, 2, 256, 1);
    let x = rand_vec(256, 2);
    let mut out = vec![0f32; 2];
    let e = dequant_matmul(ty, Act::F32(&x), &w, Out::F32(&mut out), 1, 100, 2).unwrap_err();
    assert!(e.to_string().contains("not a multiple"), "{e}");
    let e = dequant_matmul(ty, Act::F32(&x), &w[..200], Out::F32(&mut out), 1, 256, 2).unwrap_err();
    assert!(e.to_string().starts_with("[dequant_matmul_gguf] w"), "{e}");
    let e = dequant_matmul(ty, Act::F32(&x[..10]), &w, Out::F32(&mut out), 1, 256, 2).unwrap_err();
    assert!(e.to_string().contains("x has 10"), "{e}");
    let e = dequant_matmul(ty, Act::F32(&x), &w, Out::F32(&mut out[..1]), 1, 256, 2).unwrap_err();
    assert!(e.to_string().contains("dst"), "{e}");
    let idx = [0i32];
    let e = dequant_grouped_matmul(ty, &x, &w, &idx, &mut out, 1, 256, 2, 2).unwrap_err();
    assert!(e.to_string().contains("w has"), "{e}");
}

/// Expert ids of a grouped call with `m` rows over 3 experts: a decode
/// step's distinct experts, repeats, and ids out of range (zero rows).
fn grouped_ids(m: usize) -> Vec<i32> {
    [2i32, 0, 5, -1, 1, 2, 0, 2, 1, 1, 0, 2, 2, 1, 0, 0, 2]
        .into_iter()
        .cycle()
        .take(m)
        .collect()
}

#[test]
fn grouped_matches_per_expert_and_zeroes_bad_ids() {
    // every type, a decode step (m = 2: the single-row integer-dot GEMVs),
    // a batched one (m = 8) and a prefill (m = 17: per-expert GEMMs); each
    // row against the oracle of its own expert, within the rounding bound
    // of the path that expert's group takes
    for (t, &ty) in ALL_GGML_TYPES.iter().enumerate() {
        let (e, n) = (3usize, 37usize);
        let k = small_k(ty).max(ty.block_size() * 2);
        let rb = ty.row_bytes(k).unwrap();
        let w = rand_rows(ty, e * n, k, 5 + t as u64);
        for m in [2usize, 8, 17] {
            let idx = grouped_ids(m);
            let x = rand_vec(m * k, 9 + t as u64 + m as u64);
            let mut out = vec![f32::NAN; m * n];
            dequant_grouped_matmul(ty, &x, &w, &idx, &mut out, m, k, n, e).unwrap();
            for (i, &ex) in idx.iter().enumerate() {
                let got = &out[i * n..(i + 1) * n];
                let what = format!("{} m={m} row {i}", ty.name());
                if !(0..e as i32).contains(&ex) {
                    assert!(got.iter().all(|&v| v == 0.0), "{what} not zero");
                    continue;
                }
                let we = &w[ex as usize * n * rb..(ex as usize + 1) * n * rb];
                let xi = &x[i * k..(i + 1) * k];
                let want = naive_matmul(ty, xi, we, 1, k, n);
                // m ≤ 8: f32 row GEMVs unless the integer-dot GEMV takes
                // the decode rows on this CPU; above, each expert's rows
                // together through the dense kernels (int8 activations
                // where they are)
                let rows = idx.iter().filter(|&&v| v == ex).count();
                let dense = m > 8 || super::grouped::int8_decode_rows();
                let bound = if dense && int_dots(ty, rows) {
                    rounding_bound(ty, xi, we, 1, k, n)
                } else {
                    vec![0.0; n]
                };
                assert_bounded(got, &want, &bound, 1e-5, &what);
            }
        }
    }
}

#[test]
fn grouped_decode_rows_equal_dense_gemvs() {
    // a decode step's rows (m ≤ 8) give bit for bit what each row gives
    // through the decode GEMV of its expert alone: the f32 one (one
    // parallel region over every chosen expert, with n·k large enough to
    // split the rows across threads), or the dense entry point where the
    // integer-dot GEMV takes the decode rows on this CPU
    for (t, &ty) in ALL_GGML_TYPES.iter().enumerate() {
        let (e, n) = (3usize, 203usize);
        let k = 4 * ty.block_size().max(64);
        let rb = ty.row_bytes(k).unwrap();
        let w = rand_rows(ty, e * n, k, 70 + t as u64);
        for m in [1usize, 2, 5] {
            let idx = grouped_ids(m);
            let x = rand_vec(m * k, 80 + t as u64 + m as u64);
            let mut out = vec![f32::NAN; m * n];
            dequant_grouped_matmul(ty, &x, &w, &idx, &mut out, m, k, n, e).unwrap();
            for (i, &ex) in idx.iter().enumerate().filter(|(_, &v)| (0..3).contains(&v)) {
                let we = &w[ex as usize * n * rb..(ex as usize + 1) * n * rb];
                let mut one = vec![f32::NAN; n];
                let xi = &x[i * k..(i + 1) * k];
                if super::grouped::int8_decode_rows() {
                    dequant_matmul(ty, Act::F32(xi), we, Out::F32(&mut one), 1, k, n).unwrap();
                } else {
                    with_fmt!(ty, F => driver::run::<F, f32>(xi, we, rb, &mut one, 1, k, n));
                }
                let row = &out[i * n..(i + 1) * n];
                let same = row
                    .iter()
                    .zip(&one)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{} m={m} row {i}", ty.name());
            }
        }
    }
}

#[test]
fn unpack_matches_naive_decoder_exactly_for_legacy() {
    // the legacy formats decode to the same f32 products as the reference
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q8_0,
        GgmlType::Q1_0,
        GgmlType::Q2_0,
    ] {
        let k = small_k(ty);
        let w = rand_rows(ty, 1, k, 3);
        let mut out = vec![0f32; k];
        with_fmt!(ty, F => F::decode_row(&w, &mut out));
        let want = naive_row(ty, &w, 0, k);
        for (e, (&g, &v)) in out.iter().zip(&want).enumerate() {
            assert!(
                (f64::from(g) - v).abs() <= 1e-7 * v.abs(),
                "{} e={e}",
                ty.name()
            );
        }
    }
}

#[test]
#[ignore = "timing probe; run with --release --ignored --nocapture"]
fn gemv_timing_probe() {
    for (ty, k, n) in [
        (GgmlType::Q4_1, 576, 1536),
        (GgmlType::Q4_1, 1536, 576),
        (GgmlType::Q4_0, 576, 1536),
        (GgmlType::Q8_0, 576, 1536),
        (GgmlType::Q8_0, 1536, 576),
        (GgmlType::Q5_0, 576, 1536),
        (GgmlType::Q4K, 768, 2048),
        (GgmlType::Q6K, 768, 2048),
        (GgmlType::F32, 576, 1536),
    ] {
        let w = rand_rows(ty, n, k, 1);
        let x = rand_vec(k, 2);
        let mut out = vec![0f32; n];
        let reps = 200;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            dequant_matmul(ty, Act::F32(&x), &w, Out::F32(&mut out), 1, k, n).unwrap();
        }
        let dt = t.elapsed().as_secs_f64() / reps as f64;
        let gbs = w.len() as f64 / dt / 1e9;
        println!(
            "{} k={k} n={n}: {:.1} us, {gbs:.2} GB/s",
            ty.name(),
            dt * 1e6
        );
    }
}

#[test]
fn portable_dot_row_matches_naive() {
    // the driver prefers the AVX2 kernels where the CPU has them; this keeps
    // the portable path (used elsewhere) covered on such machines too
    for (t, &ty) in ALL_GGML_TYPES.iter().enumerate() {
        let k = small_k(ty) * 2;
        let n = 5;
        let w = rand_rows(ty, n, k, 40 + t as u64);
        let x = rand_vec(k, 41 + t as u64);
        let want = naive_matmul(ty, &x, &w, 1, k, n);
        let rb = ty.row_bytes(k).unwrap();
        let got: Vec<f32> = with_fmt!(ty, F => {
            let xsum: Vec<f32> = if F::SUB == 0 {
                Vec::new()
            } else {
                x.chunks_exact(F::SUB).map(|c| c.iter().sum()).collect()
            };
            w.chunks_exact(rb).map(|r| F::dot_row(r, &x, &xsum)).collect()
        });
        assert_scaled(&got, &want, 1e-5, &format!("{} portable", ty.name()));
    }
}

/// The formats with integer-dot kernels.
const INT_DOT_TYPES: [GgmlType; 10] = {
    use GgmlType::*;
    [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2K, Q3K, Q4K, Q5K, Q6K]
};

#[test]
fn integer_dot_types_odd_shapes() {
    // odd m (row groups of 4 plus every remainder), odd n (ragged chunks),
    // k an odd number of blocks; within the rounding bound of the oracle
    for (t, &ty) in INT_DOT_TYPES.iter().enumerate() {
        let bs = ty.block_size();
        for (s, (m, nb, n)) in [
            (1, 1, 1),
            (1, 3, 7),
            (1, 5, 30),
            (2, 3, 5),
            (3, 5, 13),
            (5, 1, 7),
            (7, 3, 3),
            (8, 1, 9),
            (9, 5, 31),
            (17, 3, 65),
        ]
        .into_iter()
        .enumerate()
        {
            check(ty, m, nb * bs, n, 500 + 17 * t as u64 + s as u64);
        }
    }
}

#[test]
fn integer_dot_rows_do_not_depend_on_the_batch() {
    // a batched decode step (m = 2..8 rows) gives each row exactly what the
    // same row gives alone (m = 1): continuous batching relies on it
    for (t, &ty) in INT_DOT_TYPES.iter().enumerate() {
        let (k, n) = (5 * ty.block_size(), 37);
        let w = rand_rows(ty, n, k, 900 + t as u64);
        for m in [2usize, 3, 4, 5, 8] {
            let x = rand_vec(m * k, 950 + t as u64 + m as u64);
            let mut all = vec![f32::NAN; m * n];
            dequant_matmul(ty, Act::F32(&x), &w, Out::F32(&mut all), m, k, n).unwrap();
            for i in 0..m {
                let mut one = vec![f32::NAN; n];
                let xi = &x[i * k..(i + 1) * k];
                dequant_matmul(ty, Act::F32(xi), &w, Out::F32(&mut one), 1, k, n).unwrap();
                let row = &all[i * n..(i + 1) * n];
                let same = row
                    .iter()
                    .zip(&one)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{} m={m} row {i}: {row:?} vs {one:?}", ty.name());
            }
        }
    }
}

#[test]
fn integer_dot_types_large_parallel_shapes() {
    // above PAR_MIN: chunks run on the pool, prefill chunks capped by bytes
    for (t, &ty) in INT_DOT_TYPES.iter().enumerate() {
        for m in [1, 6] {
            check(ty, m, 1280, 203, 900 + 3 * t as u64 + m as u64);
        }
        // a single activation row over more than 1 MiB of packed weights
        // (the threshold for splitting decode GEMVs across the pool)
        let n = (1 << 20) / ty.row_bytes(1280).unwrap_or(1) + 5;
        check(ty, 1, 1280, n, 950 + t as u64);
    }
}

#[test]
fn integer_dots_propagate_non_finite_activations() {
    for &ty in &INT_DOT_TYPES {
        let k = ty.block_size() * 2;
        let n = 3;
        let w = rand_rows(ty, n, k, 77);
        for bad in [f32::INFINITY, f32::NAN] {
            let mut x = rand_vec(2 * k, 78);
            x[k + 5] = bad;
            let mut out = vec![0f32; 2 * n];
            dequant_matmul(ty, Act::F32(&x), &w, Out::F32(&mut out), 2, k, n).unwrap();
            assert!(
                out[..n].iter().all(|v| v.is_finite()),
                "{} row 0",
                ty.name()
            );
            assert!(
                out[n..].iter().all(|v| !v.is_finite()),
                "{} row 1 {bad}",
                ty.name()
            );
        }
    }
}

#[test]
#[ignore = "timing probe; run with --release --ignored --nocapture"]
fn integer_dot_timing_probe() {
    // best of many calls (robust to a loaded machine), one thread and the
    // default pool, integer-dot path vs the f32 path
    let shapes = [
        (GgmlType::Q4_1, 576, 1536),
        (GgmlType::Q4_1, 1536, 576),
        (GgmlType::Q8_0, 576, 1536),
        (GgmlType::Q8_0, 576, 8192),
        (GgmlType::Q5_0, 640, 2048),
        (GgmlType::Q6K, 2048, 640),
        (GgmlType::Q5_0, 2048, 640),
        (GgmlType::Q4K, 1024, 4864),
        (GgmlType::Q6K, 4864, 896),
        (GgmlType::Q4K, 4864, 896),
        (GgmlType::Q3K, 1024, 4864),
        (GgmlType::Q2K, 1024, 4864),
        (GgmlType::Q5K, 1024, 4864),
    ];
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    for m in [1usize, 4, 64] {
        for &(ty, k, n) in &shapes {
            let w = rand_rows(ty, n, k, 1);
            let x = rand_vec(m * k, 2);
            let mut out = vec![0f32; m * n];
            let reps = if m == 64 { 10 } else { 200 };
            let best = |f: &mut dyn FnMut()| {
                f();
                (0..reps)
                    .map(|_| {
                        let t = std::time::Instant::now();
                        f();
                        t.elapsed().as_secs_f64()
                    })
                    .fold(f64::INFINITY, f64::min)
            };
            let rb = ty.row_bytes(k).unwrap();
            let mut new =
                || dequant_matmul(ty, Act::F32(&x), &w, Out::F32(&mut out), m, k, n).unwrap();
            let t2 = best(&mut new);
            let t1 = one.install(|| best(&mut new));
            let mut out2 = vec![0f32; m * n];
            let mut old =
                || with_fmt!(ty, F => driver::run::<F, f32>(&x, &w, rb, &mut out2, m, k, n));
            let o2 = best(&mut old);
            let o1 = one.install(|| best(&mut old));
            let gb = w.len() as f64 / 1e9;
            let gf = 2.0 * (m * n * k) as f64 / 1e9;
            println!(
                "m={m:3} {:5} k={k:5} n={n:5}: int 1t {:7.1} us {:5.1} GB/s {:6.1} GF/s | 2t {:7.1} us {:5.1} GB/s {:6.1} GF/s || f32 1t {:7.1} us | 2t {:7.1} us",
                ty.name(),
                t1 * 1e6,
                gb / t1,
                gf / t1,
                t2 * 1e6,
                gb / t2,
                gf / t2,
                o1 * 1e6,
                o2 * 1e6
            );
        }
    }
}
