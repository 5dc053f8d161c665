//! metal-sim vs host for GGUF-quantised matmuls (`quant.metal`): a graph
//! `x [m, k] → DequantMatMul(w_q) → (+ bias)` per type, compiled, its
//! `dequant_matmul_gguf` thunk a dispatch (GEMV for m ≤ 8, GEMM above),
//! run by the host executor and by metal-sim on the same valid blocks.
//!
//! The weight params are random bytes with every block's scale fields set
//! to f16 values of magnitude 0.004 … 0.05 (the generic `fill` would write
//! floats into a u8 tensor), so both sides decode finite weights.
//!
//! Tolerance: `1e-4 + 1e-4·|host|`. Both sides accumulate in f32 but in
//! different orders (the host's 8-lane chunks or `gemm` panels, the
//! kernels' per-lane chunks + simd_sum or tiles); with |x| ≤ 2, |w| ≲ 2
//! and k ≤ 512 the sums are ≲ 1e2 in magnitude and their rounding
//! differences ≲ 1e-5 absolute. The host may take its AVX-512 VNNI paths
//! (m ≤ 8 and the m > 8 GEMM), which rounds x to 8-bit blocks of 32 (`dx_b = max|x| / 127`)
//! and is exact only to `½ Σ_e |w_e|·dx_b(e)` per output (its documented
//! bound, see host/kernels/quant/vnni.rs): that bound is added, computed
//! from the very weights and activations of the run. The whole-type
//! coverage against an f64 reference is in tests/msl/quant.rs.

use super::tests::{encode, fill_params, node, outputs, uniform, Bufs};
use super::*;
use crate::compile::{compile_without, CompileOptions, Compiled};
use crate::metal::lower::{lower, Lowered};
use crate::thunk::quant::DequantMatMulGguf;
use crate::thunk::{raw_offset, tag_segment};
use rlx_ir::op::BinaryOp;
use rlx_ir::{DType, GgmlType, Graph, Op, QuantScheme, Shape};

/// Byte offsets of the f16 scale fields of a block of `ty`.
fn scale_fields(ty: GgmlType) -> &'static [usize] {
    use GgmlType as G;
    match ty {
        G::F32 | G::F16 | G::BF16 | G::Q8K => &[],
        G::Q4_0 | G::Q5_0 | G::Q8_0 | G::Q1_0 | G::Q2_0 => &[0],
        G::Q4_1 | G::Q5_1 | G::Q8_1 | G::Q4K | G::Q5K => &[0, 2],
        G::Q2K => &[80, 82],
        G::Q3K => &[108],
        G::Q6K => &[208],
    }
}

/// `len` bytes of valid `ty` rows (see the module docs).
fn valid_blocks(ty: GgmlType, len: usize, seed: u64) -> Vec<u8> {
    use GgmlType as G;
    match ty {
        G::F32 => return encode(DType::F32, &uniform(seed, len / 4, -1.0, 1.0)),
        G::F16 => return encode(DType::F16, &uniform(seed, len / 2, -1.0, 1.0)),
        G::BF16 => {
            let v = uniform(seed, len / 2, -1.0, 1.0);
            return v
                .iter()
                .flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes())
                .collect();
        }
        _ => {}
    }
    let mut w: Vec<u8> = uniform(seed, len, 0.0, 256.0)
        .iter()
        .map(|&v| v as u8)
        .collect();
    let scales = uniform(seed ^ 0xa5a5, 2 * len / ty.block_bytes(), 0.004, 0.05);
    for (i, blk) in w.chunks_exact_mut(ty.block_bytes()).enumerate() {
        for (f, &at) in scale_fields(ty).iter().enumerate() {
            let s = scales[2 * i + f] * if (i + f) % 3 == 0 { -1.0 } else { 1.0 };
            blk[at..at + 2].copy_from_slice(&half::f16::from_f32(s).to_le_bytes());
        }
        if ty == G::Q8K {
            blk[0..4].copy_from_slice(&(0.1 * scales[2 * i]).to_le_bytes());
        }
    }
    w
}

/// `fill` with u8 params holding valid `ty` blocks.
fn fill_quant(c: &Compiled, ty: GgmlType) -> Bufs {
    fill_params(c, |i, p| {
        let n = p.shape.numel().unwrap();
        if p.shape.dtype == DType::U8 {
            valid_blocks(ty, n, 100 + i as u64)
        } else {
            encode(p.shape.dtype, &uniform(100 + i as u64, n, -2.0, 2.0))
        }
    })
}

fn host(c: &Compiled, ty: GgmlType) -> Vec<Vec<f32>> {
    let mut b = fill_quant(c, ty);
    let segs: Vec<Segment> = b
        .segs
        .iter_mut()
        .map(|s| Segment {
            ptr: s.as_mut_ptr(),
            len: s.len(),
        })
        .collect();
    let (al, sl) = (b.arena.len(), b.state.len());
    // SAFETY: the buffers outlive `mem` and are only touched through it.
    let mem = unsafe { Mem::new(b.arena.as_mut_ptr(), al, b.state.as_mut_ptr(), sl, &segs) };
    HostExecutor::new(Mode::Native)
        .run(&c.schedule, &mem, &mut super::tests::no_fallback)
        .unwrap_or_else(|e| panic!("{e}"));
    outputs(c, &b)
}

fn sim(c: &Compiled, plan: &MetalPlan, ty: GgmlType) -> Vec<Vec<f32>> {
    let mut b = fill_quant(c, ty);
    {
        let segs: Vec<&[u8]> = b.segs.iter().map(|s| s.as_slice()).collect();
        let bufs = SimBuffers {
            arena: b.arena.as_mut_slice(),
            state: b.state.as_mut_slice(),
            segments: &segs,
        };
        SimExecutor::new()
            .run(plan, &c.schedule, bufs, &mut super::tests::no_fallback)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    outputs(c, &b)
}

/// `x [m, k] @ dequant(w)ᵀ + bias`.
fn graph(ty: GgmlType, x_dt: DType, m: usize, k: usize, n: usize) -> Graph {
    let mut g = Graph::new("qmm");
    let x = node(
        &mut g,
        Op::Input {
            shape: Shape::of(&[m, k], x_dt),
        },
        &[],
    );
    let rb = ty.row_bytes(k).unwrap();
    let w = node(
        &mut g,
        Op::Param {
            shape: Shape::of(&[n, rb], DType::U8),
        },
        &[],
    );
    let bias = node(
        &mut g,
        Op::Param {
            shape: Shape::of(&[n], DType::F32),
        },
        &[],
    );
    let scheme = QuantScheme::Gguf(ty);
    let mm = node(&mut g, Op::DequantMatMul { scheme, n, k }, &[x, w]);
    let out = node(
        &mut g,
        Op::Binary {
            kind: BinaryOp::Add,
        },
        &[mm, bias],
    );
    g.set_outputs(&[out]).unwrap();
    g
}

fn check(ty: GgmlType, x_dt: DType, m: usize, k: usize, n: usize) {
    let keep = ["ir_elementwise_region".to_string()];
    let c = compile_without(&graph(ty, x_dt, m, k, n), &CompileOptions::default(), &keep)
        .unwrap_or_else(|e| panic!("{e}"));
    let plan = MetalPlan::build(&c.schedule);
    let want = format!(
        "{}_{}",
        if m <= 8 { "gemv" } else { "gemm" },
        ty.name().to_lowercase()
    );
    let found = plan.commands.iter().any(|cmd| {
        matches!(cmd, Command::Dispatch(d)
            if d.kernel.function == want
                && matches!(c.schedule.thunks[d.thunk], Thunk::DequantMatMulGguf(_)))
    });
    assert!(found, "{ty:?} m={m}: no {want} dispatch\n{plan}");
    let (h, s) = (host(&c, ty), sim(&c, &plan, ty));
    // the host rounds activations to 8 bits for every m (m > 8: the
    // prefill GEMM of quant/vnni_gemm.rs, within this bound too)
    let vnni = vnni_bound(&c, ty, m, k, n);
    for (hv, sv) in h.iter().zip(&s) {
        assert_eq!(hv.len(), m * n);
        for (i, (&a, &b)) in hv.iter().zip(sv).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 + 1e-4 * a.abs() + vnni[i],
                "{ty:?} {x_dt:?} m={m} k={k} n={n} [{i}]: host {a}, metal-sim {b}\n{plan}"
            );
        }
    }
}

/// The host's 8-bit activation rounding bound `½ Σ_e |w_je|·dx_b(e)` per
/// output `[i, j]` (see the module docs), from the run's own x and w.
fn vnni_bound(c: &Compiled, ty: GgmlType, m: usize, k: usize, n: usize) -> Vec<f32> {
    let b = fill_quant(c, ty);
    let wi = c
        .params
        .iter()
        .position(|p| p.shape.dtype == DType::U8)
        .unwrap();
    let mut w = vec![0f32; n * k];
    let rows: Vec<i64> = (0..n as i64).collect();
    crate::host::kernels::quant::dequantize_rows(
        ty,
        b.segs[1 + wi].as_slice(),
        n,
        &rows,
        k,
        &mut w,
    )
    .unwrap();
    let xb = &c.inputs[0];
    let at = raw_offset(xb.offset);
    let x = super::tests::decode(
        xb.shape.dtype,
        &b.arena.as_slice()[at..at + xb.shape.size_bytes().unwrap()],
    );
    let mut out = Vec::with_capacity(m * n);
    for xr in x.chunks_exact(k) {
        let dx: Vec<f32> = xr
            .chunks(32)
            .map(|c| c.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0)
            .collect();
        for wr in w.chunks_exact(k) {
            let s: f32 = wr
                .iter()
                .enumerate()
                .map(|(e, v)| v.abs() * dx[e / 32])
                .sum();
            out.push(0.5 * s * 1.01);
        }
    }
    out
}

#[test]
fn gguf_matmuls_match_host_gemv_and_gemm() {
    use GgmlType as G;
    // decode (GEMV) and prefill (GEMM) shapes, one type family each turn
    for (ty, m, blocks, n) in [
        (G::Q4_0, 1, 3, 33),
        (G::Q8_0, 17, 2, 5),
        (G::Q4K, 3, 2, 33),
        (G::Q6K, 17, 1, 33),
        (G::Q5K, 1, 1, 5),
        (G::Q3K, 9, 1, 7),
        (G::F16, 2, 37, 5),
    ] {
        check(ty, DType::F32, m, blocks * ty.block_size(), n);
    }
    // f16 activations (x_f16)
    check(G::Q4K, DType::F16, 1, 256, 9);
    check(G::Q5_1, DType::F16, 17, 64, 9);
}

fn thunk(x: usize, dst: usize, x_f16: bool) -> Thunk {
    Thunk::DequantMatMulGguf(DequantMatMulGguf {
        x,
        w_q: tag_segment(1, 3), // the weight needs no alignment
        dst,
        m: 2,
        k: 64,
        n: 4,
        scheme: QuantScheme::Gguf(GgmlType::Q4_0),
        x_f16,
        dst_f16: false,
    })
}

#[test]
fn unsupported_layouts_stay_on_the_host() {
    assert!(matches!(
        lower(0, &thunk(0, 4096, false)),
        Lowered::Dispatch(_)
    ));
    // x over dst (the planner reuses a dead x): other threadgroups would
    // overwrite x while it is read
    assert!(matches!(lower(0, &thunk(0, 0, false)), Lowered::Host));
    assert!(matches!(lower(0, &thunk(0, 256, false)), Lowered::Host));
    // misaligned activations / results
    assert!(matches!(lower(0, &thunk(2, 4096, false)), Lowered::Host));
    assert!(matches!(
        lower(0, &thunk(2, 4096, true)),
        Lowered::Dispatch(_)
    ));
    assert!(matches!(lower(0, &thunk(0, 4098, false)), Lowered::Host));
    // k not whole blocks: the host reports the error
    let mut bad = thunk(0, 4096, false);
    if let Thunk::DequantMatMulGguf(d) = &mut bad {
        d.k = 48;
    }
    assert!(matches!(lower(0, &bad), Lowered::Host));
}

/// A decode MLP block `h + down(act(gate(h)) · up(h))` on `ty` weights.
fn mlp_graph(ty: GgmlType, k: usize, n: usize, gelu: bool) -> Graph {
    use rlx_ir::op::Activation;
    let mut g = Graph::new("mlp");
    let h = node(
        &mut g,
        Op::Input {
            shape: Shape::of(&[1, k], DType::F32),
        },
        &[],
    );
    let mut param = |rows: usize, cols: usize| {
        let rb = ty.row_bytes(cols).unwrap();
        node(
            &mut g,
            Op::Param {
                shape: Shape::of(&[rows, rb], DType::U8),
            },
            &[],
        )
    };
    let (wg, wu, wd) = (param(n, k), param(n, k), param(k, n));
    let scheme = QuantScheme::Gguf(ty);
    let gate = node(&mut g, Op::DequantMatMul { scheme, n, k }, &[h, wg]);
    let up = node(&mut g, Op::DequantMatMul { scheme, n, k }, &[h, wu]);
    let kind = if gelu {
        Activation::GeluApprox
    } else {
        Activation::Silu
    };
    let a = node(&mut g, Op::Activation { kind }, &[gate]);
    let mul = Op::Binary {
        kind: BinaryOp::Mul,
    };
    let p = node(&mut g, mul, &[a, up]);
    let d = node(&mut g, Op::DequantMatMul { scheme, n: k, k: n }, &[p, wd]);
    let add = Op::Binary {
        kind: BinaryOp::Add,
    };
    let out = node(&mut g, add, &[h, d]);
    g.set_outputs(&[out]).unwrap();
    g
}

#[test]
fn fused_decode_mlp_matches_host() {
    use GgmlType as G;
    for (ty, gelu) in [(G::Q4K, false), (G::Q8_0, true), (G::Q6K, false)] {
        let (k, n) = (256, 512);
        let keep = ["ir_elementwise_region".to_string()];
        let c = compile_without(
            &mlp_graph(ty, k, n, gelu),
            &CompileOptions::default(),
            &keep,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let plan = MetalPlan::build(&c.schedule);
        let names: Vec<&str> = plan
            .commands
            .iter()
            .filter_map(|cmd| match cmd {
                Command::Dispatch(d) => Some(d.kernel.function.as_str()),
                _ => None,
            })
            .collect();
        let t = ty.name().to_lowercase();
        let gate_up = format!("gate_up_{t}");
        assert!(
            names.contains(&gate_up.as_str()),
            "{ty:?}: no {gate_up}\n{plan}"
        );
        // the planner puts the down's result over its dead input (the
        // product): that GEMV must stay a host command (the kernel cannot
        // read x while other simdgroups overwrite it); without the overlap
        // it is a kernel
        for (i, th) in c.schedule.thunks.iter().enumerate() {
            if let Thunk::FusedMlpDownResidual(d) = th {
                let io = th.io();
                let over = io.reads[0].overlaps(&io.writes[0]);
                let dispatched = plan
                    .commands
                    .iter()
                    .any(|cmd| matches!(cmd, Command::Dispatch(x) if x.thunk == i));
                assert_eq!(dispatched, !over, "{d:?}\n{plan}");
            }
        }
        // the host's fused GEMVs may round x to 8-bit blocks (VNNI, about
        // 0.5 % of the output scale per GEMV; here the down GEMV runs on the
        // host in both runs, the gate / up only in the host run): compare
        // against the output's scale. Measured on an AVX-512 VNNI CPU: the
        // worst difference is 0.8 … 0.9 % of the largest output; a wrong
        // block decode is off by the order of the output itself.
        let (h, s) = (host(&c, ty), sim(&c, &plan, ty));
        let scale = h[0].iter().fold(0f32, |a, v| a.max(v.abs()));
        for (i, (&a, &b)) in h[0].iter().zip(&s[0]).enumerate() {
            assert!(
                (a - b).abs() <= 2e-2 * scale,
                "{ty:?} [{i}]: host {a}, metal-sim {b} (scale {scale})\n{plan}"
            );
        }
    }
}

#[test]
fn fused_mlp_aliasing_stays_correct() {
    use crate::thunk::fused::{FusedMlpDownResidual, FusedMlpGateUpSwiGLU};
    let scheme = QuantScheme::Gguf(GgmlType::Q4_0);
    let gate_up = |x: usize, dst: usize| {
        Thunk::FusedMlpGateUpSwiGLU(FusedMlpGateUpSwiGLU {
            x,
            gate_w: tag_segment(1, 0),
            up_w: tag_segment(2, 0),
            dst,
            k: 64,
            n: 32,
            scheme,
            x_f16: false,
            dst_f16: false,
        })
    };
    assert!(matches!(lower(0, &gate_up(0, 1024)), Lowered::Dispatch(_)));
    // the product over the dead x (Qwen layers): host
    assert!(matches!(lower(0, &gate_up(0, 0)), Lowered::Host));
    assert!(matches!(lower(0, &gate_up(0, 128)), Lowered::Host));
    let down = |x: usize, res: usize, dst: usize| {
        Thunk::FusedMlpDownResidual(FusedMlpDownResidual {
            x,
            w: tag_segment(1, 0),
            res,
            dst,
            k: 64,
            n: 32,
            scheme,
            x_f16: false,
            dst_f16: false,
            res_f16: false,
        })
    };
    // in-place residual: a kernel
    assert!(matches!(
        lower(0, &down(0, 1024, 1024)),
        Lowered::Dispatch(_)
    ));
    assert!(matches!(
        lower(0, &down(0, 1024, 2048)),
        Lowered::Dispatch(_)
    ));
    // x under dst, or res shifted against dst: host
    assert!(matches!(lower(0, &down(1024, 0, 1024)), Lowered::Host));
    assert!(matches!(lower(0, &down(0, 1028, 1024)), Lowered::Host));
}
