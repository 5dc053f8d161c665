//! metal-sim vs host for `quant_formats.metal`: block int8 / int4, FP8 and
//! NVFP4 weight matmuls and the four scaled ops, each a graph compiled by
//! rlx whose thunk must become a `quant_formats` dispatch, run by the host
//! executor and by metal-sim on the same data.
//!
//! u8 params are random bytes, with FP8 / E4M3 scale codes kept finite
//! (NaN / inf codes are remapped) and E4M3 block scales within
//! `2^-3 … 2^1` so the products stay well scaled; f32 params and inputs are
//! uniform in `[-2, 2)` (scales and zero points shifted positive).
//!
//! Tolerances: matmuls `1e-4 + 1e-5·max|host|` per output (both accumulate
//! in f32, in different orders: the host's gemm panels, the kernel's 32 lane
//! strides and simd_sum; terms up to |x·w| ≈ 2·256·2 for int8 codes, k ≤ 256,
//! so single outputs that cancel carry errors of ~1e-3 absolute while the
//! largest outputs are ~1e3). The quantise / dequantise /
//! scale chain is exact (`0`): the simulator divides and rounds like the
//! host (on a GPU, fast-math division may move a value sitting on a
//! rounding boundary to the neighbouring code).

use super::tests::{encode, fill_params, leaf, node, run_host_on, run_sim_on, uniform, Bufs};
use super::*;
use crate::compile::{compile_without, CompileOptions, Compiled};
use crate::metal::kernels::Family;
use rlx_ir::{DType, Graph, Op, QuantScheme, ScaleLayout, ScaledFormat};

/// How the bytes of u8 param `i` are made valid.
type FixBytes = fn(usize, &mut [u8]);

fn fill(c: &Compiled, fix: FixBytes) -> Bufs {
    fill_params(c, |i, p| {
        let n = p.shape.numel().unwrap();
        let seed = 100 + i as u64;
        if p.shape.dtype == DType::U8 {
            let mut b: Vec<u8> = uniform(seed, n, 0.0, 256.0)
                .iter()
                .map(|&v| v as u8)
                .collect();
            fix(i, &mut b);
            b
        } else {
            // scales and zero points: positive
            encode(p.shape.dtype, &uniform(seed, n, 0.05, 2.0))
        }
    })
}

/// Compiles `g`, checks that every thunk named in `kernels` became a
/// `quant_formats` dispatch of that kernel, and compares host and sim.
fn check(g: &Graph, kernels: &[&str], fix: FixBytes, atol: f32, rtol: f32) {
    let c = compile_without(g, &CompileOptions::default(), &[]).unwrap_or_else(|e| panic!("{e}"));
    let plan = MetalPlan::build(&c.schedule);
    for k in kernels {
        let found = plan.commands.iter().any(|cmd| {
            matches!(cmd, Command::Dispatch(d)
                if d.kernel.family == Family::QuantFormats && d.kernel.function == *k)
        });
        assert!(found, "no {k} dispatch\n{plan}");
    }
    let h = run_host_on(&c, fill(&c, fix));
    let s = run_sim_on(&c, &plan, fill(&c, fix));
    for (o, (hv, sv)) in h.iter().zip(&s).enumerate() {
        let big = hv.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (i, (&a, &b)) in hv.iter().zip(sv).enumerate() {
            assert!(
                (a - b).abs() <= atol + rtol * big || (a.is_nan() && b.is_nan()),
                "{kernels:?} output {o}[{i}]: host {a}, metal-sim {b}"
            );
        }
    }
}

/// Random bytes are valid int8 / int4 codes.
fn any_bytes(_: usize, _: &mut [u8]) {}

/// FP8 weights (param 0): no NaN / inf codes (E5M2 ones are a superset).
fn finite_fp8(i: usize, b: &mut [u8]) {
    if i == 0 {
        b.iter_mut().for_each(|v| *v &= 0xF3);
    }
}

/// NVFP4: any E2M1 codes (param 0), E4M3 block scales (param 1) in 2^-3 … 2^1.
fn nvfp4_bytes(i: usize, b: &mut [u8]) {
    if i == 1 {
        b.iter_mut().for_each(|v| *v = 0x20 + (*v & 0x1F));
    }
}

fn dqmm_graph(
    scheme: QuantScheme,
    m: usize,
    n: usize,
    k: usize,
    aux: &[(&[usize], DType)],
) -> Graph {
    let mut g = Graph::new("qf");
    let x = leaf(&mut g, &[m, k], DType::F32, false);
    let w = leaf(&mut g, &[n, scheme.row_bytes(k).unwrap()], DType::U8, true);
    let mut ins = vec![x, w];
    for (d, dt) in aux {
        ins.push(leaf(&mut g, d, *dt, true));
    }
    let y = node(&mut g, Op::DequantMatMul { scheme, n, k }, &ins);
    g.set_outputs(&[y]).unwrap();
    g
}

#[test]
fn int_weight_matmuls_match_host() {
    let (n, k) = (13, 256);
    let int8 = |block_size, asymmetric| QuantScheme::Int8 {
        block_size,
        asymmetric,
    };
    let int4 = |block_size, asymmetric| QuantScheme::Int4 {
        block_size,
        asymmetric,
    };
    let cases = [
        (int8(256, false), 256, false, "dqmm_int8"),
        (int8(32, true), 32, true, "dqmm_int8"),
        (int8(64, false), 64, false, "dqmm_int8"),
        (int4(32, true), 32, true, "dqmm_int4"),
        (int4(64, false), 64, false, "dqmm_int4"),
        (int4(128, true), 128, true, "dqmm_int4"),
    ];
    for m in [1, 5] {
        for &(scheme, bs, asym, kernel) in &cases {
            let zp = [n * (k / bs)];
            let mut aux: Vec<(&[usize], DType)> = vec![(&zp, DType::F32)];
            if asym {
                aux.push((&zp, DType::F32));
            }
            check(
                &dqmm_graph(scheme, m, n, k, &aux),
                &[kernel],
                any_bytes,
                1e-4,
                1e-5,
            );
        }
    }
}

#[test]
fn fp8_and_nvfp4_matmuls_match_host() {
    let (m, n, k) = (3, 9, 64);
    for scheme in [QuantScheme::Fp8E4m3, QuantScheme::Fp8E5m2] {
        for scales in [n, 1] {
            let g = dqmm_graph(scheme, m, n, k, &[(&[scales], DType::F32)]);
            check(&g, &["dqmm_fp8"], finite_fp8, 1e-4, 1e-5);
        }
    }
    let g = dqmm_graph(
        QuantScheme::Nvfp4,
        m,
        n,
        k,
        &[(&[n, k / 16], DType::U8), (&[1], DType::F32)],
    );
    check(&g, &["dqmm_nvfp4"], nvfp4_bytes, 1e-4, 1e-5);
}

#[test]
fn scaled_ops_match_host() {
    use ScaledFormat::*;
    let (r, c, n) = (6, 40, 7);
    for fmt in [Fp8E4m3, Fp8E5m2, Int8] {
        for layout in [
            ScaleLayout::PerTensor,
            ScaleLayout::PerRow,
            ScaleLayout::Block { size: 16 },
        ] {
            let mut g = Graph::new("scaled");
            let x = leaf(&mut g, &[r, c], DType::F32, false);
            let s = node(&mut g, Op::ScaledQuantScale { fmt, layout }, &[x]);
            let q = node(&mut g, Op::ScaledQuantize { fmt, layout }, &[x, s]);
            let d = node(&mut g, Op::ScaledDequantize { fmt, layout }, &[q, s]);
            // the rhs: quantised from a second input with its own scales
            let y = leaf(&mut g, &[n, c], DType::F32, false);
            let ys = node(&mut g, Op::ScaledQuantScale { fmt, layout }, &[y]);
            let yq = node(&mut g, Op::ScaledQuantize { fmt, layout }, &[y, ys]);
            let bias = leaf(&mut g, &[n], DType::F32, true);
            let op = Op::ScaledMatMul {
                lhs_fmt: fmt,
                rhs_fmt: Fp8E4m3,
                layout,
            };
            // rhs codes reinterpreted as E4M3: only their decoding differs
            let mm = node(&mut g, op, &[q, yq, s, ys, bias]);
            g.set_outputs(&[s, d]).unwrap();
            let kernels = ["scaled_quant_scale", "scaled_quantize", "scaled_dequantize"];
            check(&g, &kernels, any_bytes, 0.0, 0.0);
            g.set_outputs(&[mm]).unwrap();
            check(&g, &["scaled_matmul"], any_bytes, 1e-4, 1e-5);
        }
    }
}
