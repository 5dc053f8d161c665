//! `rng.metal` through msl-sim.
//!
//! * Its Philox 4x32-10 against Random123's published known-answer vectors
//!   (kat_vectors: zero, all-ones and pi-digit counters / keys), all four
//!   32-bit words, through a test kernel appended to the family source that
//!   calls the file's own `philox4x32_10` on arbitrary counters (the fill
//!   kernels only reach counters whose words 0, 1 are a thread index).
//! * Its explicit `log_f32` / `cos_turn24` bit for bit against
//!   `rlx_ir::rng` on every 13th of the 2^24 inputs Box–Muller can see.
//! * The fills `rng_uniform_f32` / `rng_normal_f32` bit for bit against
//!   `rlx_ir::rng::{philox_uniform, philox_normal}` for several keys,
//!   offsets and lengths (odd lengths, partial blocks, a partial
//!   threadgroup).

use msl_sim::{Grid, Library};
use rlx_ir::rng::{cos_turn24, log_f32, philox_normal, philox_uniform};
use rlx_metal::metal::args::{KernelArgs, RngArgs};
use rlx_metal::metal::kernels::{source, Family};

/// Random123 kat_vectors for Philox4x32-10: counter, key, output.
const KAT: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
    (
        [0; 4],
        [0; 2],
        [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8],
    ),
    (
        [u32::MAX; 4],
        [u32::MAX; 2],
        [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd],
    ),
    (
        [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
        [0xa409_3822, 0x299f_31d0],
        [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
    ),
];

/// Stride of the inputs of the log / cos comparison (odd: every residue
/// of the low bits is visited).
const STRIDE: u32 = 13;

/// Test kernels calling the family's static helpers.
const PROBES: &str = r#"
kernel void philox_kat(constant uint* in  [[buffer(0)]],
                       device uint*   out [[buffer(1)]],
                       uint gid [[thread_position_in_grid]])
{
    if (gid >= 3) {
        return;
    }
    uint c[4] = {in[6 * gid], in[6 * gid + 1], in[6 * gid + 2], in[6 * gid + 3]};
    philox4x32_10(c, in[6 * gid + 4], in[6 * gid + 5]);
    for (uint l = 0; l < 4; ++l) {
        out[4 * gid + l] = c[l];
    }
}

// out[2 j] = log_f32(k 2^-24), out[2 j + 1] = cos_turn24(k), k = 1 + 13 j
kernel void log_cos_probe(constant uint& n    [[buffer(0)]],
                          device float*  out  [[buffer(1)]],
                          uint gid [[thread_position_in_grid]])
{
    if (gid >= n) {
        return;
    }
    const uint k = 1u + 13u * gid;
    out[2 * gid] = log_f32((float)k * (1.0f / 16777216.0f));
    out[2 * gid + 1] = cos_turn24(k);
}
"#;

fn probe_lib() -> Library {
    let src = format!("{}\n{PROBES}", source(Family::Rng));
    Library::from_source("rng_probe.metal", &src).unwrap_or_else(|e| panic!("{e}"))
}

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn philox_matches_the_published_known_answers() {
    let lib = probe_lib();
    let mut input: Vec<u8> = Vec::new();
    for (ctr, key, _) in KAT {
        for w in ctr.iter().chain(&key) {
            input.extend(w.to_le_bytes());
        }
    }
    let mut out = vec![0u8; 3 * 16];
    lib.dispatch("philox_kat", &input, &mut [&mut out], Grid::d1(1, 4), &[])
        .unwrap_or_else(|e| panic!("philox_kat: {e}"));
    let got = words(&out);
    for (v, (ctr, key, want)) in KAT.iter().enumerate() {
        assert_eq!(&got[4 * v..4 * v + 4], want, "ctr {ctr:x?} key {key:x?}");
    }
}

#[test]
fn log_and_cos_are_the_hosts_bits() {
    let lib = probe_lib();
    let n = (1u32 << 24).div_ceil(STRIDE);
    let mut out = vec![0u8; 8 * n as usize];
    lib.dispatch(
        "log_cos_probe",
        &n.to_le_bytes(),
        &mut [&mut out],
        Grid::d1(n.div_ceil(256), 256),
        &[],
    )
    .unwrap_or_else(|e| panic!("log_cos_probe: {e}"));
    let got = words(&out);
    for j in 0..n {
        let k = 1 + STRIDE * j;
        let lg = log_f32(k as f32 / 16_777_216.0).to_bits();
        let cs = cos_turn24(k).to_bits();
        let (gl, gc) = (got[2 * j as usize], got[2 * j as usize + 1]);
        assert_eq!((gl, gc), (lg, cs), "k {k}");
    }
}

fn fill(
    lib: &Library,
    kernel: &str,
    per_thread: u64,
    len: u64,
    (key, offset): (u64, u64),
    a: f32,
    b: f32,
) -> Vec<u32> {
    let args = RngArgs {
        len: len as u32,
        key_lo: key as u32,
        key_hi: (key >> 32) as u32,
        offset_lo: offset as u32,
        offset_hi: (offset >> 32) as u32,
        a,
        b,
        _pad: 0,
    };
    let mut dst = vec![0xAAu8; 4 * len as usize];
    let threads = len.div_ceil(per_thread) as u32;
    lib.dispatch(
        kernel,
        args.as_bytes(),
        &mut [&mut dst],
        Grid::d1(threads.div_ceil(64), 64),
        &[],
    )
    .unwrap_or_else(|e| panic!("{kernel}: {e}"));
    words(&dst)
}

#[test]
fn fills_are_the_hosts_bits() {
    let cases = [
        (0u64, 0u64, 1u64),
        (7, 0, 5),
        (0xDEAD_BEEF_0123, 3, 1001),
        (u64::MAX, u64::MAX, 4099),
    ];
    // the family's library, and the probe library (whose fill kernels
    // are then checked too, so every kernel of both is dispatched)
    for lib in [super::common::lib(Family::Rng), probe_lib()] {
        for (key, offset, len) in cases {
            let (lo, span) = (-1.5f32, 4.0f32);
            let got = fill(&lib, "rng_uniform_f32", 4, len, (key, offset), lo, span);
            for (i, g) in (0..len).zip(&got) {
                let want = lo + span * philox_uniform(key, offset, i);
                let what = format!("uniform key {key:#x} offset {offset} i {i}");
                assert_eq!(*g, want.to_bits(), "{what}");
            }
            let (mean, scale) = (0.5f32, 2.0f32);
            let got = fill(&lib, "rng_normal_f32", 2, len, (key, offset), mean, scale);
            for (i, g) in (0..len).zip(&got) {
                let want = mean + scale * philox_normal(key, offset, i);
                let what = format!("normal key {key:#x} offset {offset} i {i}");
                assert_eq!(*g, want.to_bits(), "{what}");
            }
        }
    }
}
