//! quant.metal's fused decode-MLP GEMVs: `gate_up_<type>` (silu and
//! tanh-GELU gating) and `down_residual_<type>` for every GGUF type, f32 and
//! f16 x / dst / res, against an f64 reference on the weights decoded by
//! the independent decoder of `quant.rs`; the residual also in place
//! (res = dst, the planner's usual residual stream).
//!
//! Tolerances: the dots as in `quant.rs` (`1e-5 · S + 1e-6`, S = Σ|w·x|).
//! Gate / up: `out = act(g)·u`, so a dot error δ moves it by
//! `|act'(g)|·|u|·δg + |act(g)|·δu` with |act'| ≤ 1.13 (silu, tanh-GELU):
//! the bound uses `1.2·(|u|·tol_g + |act(g)|·tol_u)` plus 1e-6 relative
//! for the f32 exp / tanh, and `2^-11·|ref|` when dst is f16.

use super::common::{lib, uniform, Dt};
use super::quant::{dequant, random_weights};
use msl_sim::{Binding, Grid};
use rlx_ir::quant::ALL_GGML_TYPES;
use rlx_ir::GgmlType;
use rlx_metal::metal::args::{KernelArgs, MlpArgs};
use rlx_metal::metal::kernels::Family;

/// `(Σ w·x, Σ |w·x|)` for each row of `wd [n, k]`.
fn dots(wd: &[f64], x: &[f32], k: usize) -> Vec<(f64, f64)> {
    wd.chunks_exact(k)
        .map(|r| {
            r.iter().zip(x).fold((0.0, 0.0), |(a, b), (&w, &xv)| {
                let p = w * xv as f64;
                (a + p, b + p.abs())
            })
        })
        .collect()
}

fn k_for(ty: GgmlType) -> usize {
    match ty.block_size() {
        1 => 37,
        32 => 96,
        bs => 2 * bs,
    }
}

fn dispatch(name: &str, a: MlpArgs, bufs: &mut [&mut [u8]]) {
    lib(Family::Quant)
        .dispatch(
            name,
            a.as_bytes(),
            bufs,
            Grid::d1(a.n.div_ceil(4), 128),
            &[],
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
}

fn act(g: f64, op: u32) -> f64 {
    if op == 0 {
        g / (1.0 + (-g).exp())
    } else {
        let c = (2.0 / std::f64::consts::PI).sqrt();
        0.5 * g * (1.0 + (c * (g + 0.044715 * g * g * g)).tanh())
    }
}

#[test]
fn gate_up_matches_reference_for_every_type() {
    for (t, ty) in ALL_GGML_TYPES.into_iter().enumerate() {
        let name = format!("gate_up_{}", ty.name().to_lowercase());
        let (k, n) = (k_for(ty), if t % 2 == 0 { 33 } else { 5 });
        let (x_f16, dst_f16, op) = (t % 3 == 1, t % 4 == 2, (t % 2) as u32);
        let (gw, uw) = (
            random_weights(ty, n, k, 3 + t as u64),
            random_weights(ty, n, k, 50 + t as u64),
        );
        let x = Dt::of(x_f16).round(&uniform(7 + t as u64, k, -1.0, 1.0));
        let g = dots(&dequant(ty, &gw, n, k), &x, k);
        let u = dots(&dequant(ty, &uw, n, k), &x, k);
        let a = MlpArgs {
            k: k as u32,
            n: n as u32,
            row_bytes: ty.row_bytes(k).unwrap() as u32,
            x_f16: x_f16 as u32,
            dst_f16: dst_f16 as u32,
            res_f16: 0,
            op,
        };
        let (mut xb, mut gb, mut ub) = (Dt::of(x_f16).encode(&x), gw.clone(), uw.clone());
        let mut out = vec![0u8; n * if dst_f16 { 2 } else { 4 }];
        dispatch(&name, a, &mut [&mut xb, &mut gb, &mut ub, &mut out]);
        for (j, (&got, (&(gv, gs), &(uv, us)))) in Dt::of(dst_f16)
            .decode_f64(&out)
            .iter()
            .zip(g.iter().zip(&u))
            .enumerate()
        {
            let want = act(gv, op) * uv;
            let (tg, tu) = (1e-5 * gs + 1e-6, 1e-5 * us + 1e-6);
            let mut tol = 1.2 * (uv.abs() * tg + act(gv, op).abs() * tu) + 1e-6 * want.abs();
            if dst_f16 {
                tol += want.abs() / 2048.0;
            }
            assert!(
                (got - want).abs() <= tol,
                "{name} op={op} [{j}]: got {got}, want {want} (tol {tol:e})"
            );
        }
    }
}

#[test]
fn down_residual_matches_reference_in_and_out_of_place() {
    for (t, ty) in ALL_GGML_TYPES.into_iter().enumerate() {
        let name = format!("down_residual_{}", ty.name().to_lowercase());
        let (k, n) = (k_for(ty), if t % 2 == 0 { 5 } else { 33 });
        let w = random_weights(ty, n, k, 11 + t as u64);
        let wd = dequant(ty, &w, n, k);
        for in_place in [false, true] {
            let x_f16 = t % 3 == 0;
            let dst_f16 = t % 2 == 1;
            let res_f16 = if in_place { dst_f16 } else { t % 4 == 1 };
            let x = Dt::of(x_f16).round(&uniform(20 + t as u64, k, -1.0, 1.0));
            let res = Dt::of(res_f16).round(&uniform(40 + t as u64, n, -3.0, 3.0));
            let d = dots(&wd, &x, k);
            let a = MlpArgs {
                k: k as u32,
                n: n as u32,
                row_bytes: ty.row_bytes(k).unwrap() as u32,
                x_f16: x_f16 as u32,
                dst_f16: dst_f16 as u32,
                res_f16: res_f16 as u32,
                op: 0,
            };
            let (mut xb, mut wb) = (Dt::of(x_f16).encode(&x), w.clone());
            let mut rb = Dt::of(res_f16).encode(&res);
            let out = if in_place {
                // res and dst one region, both bindings at offset 0 (as a
                // MetalPlan binds an in-place residual)
                let mut region = rb.clone();
                let args = a.as_bytes().to_vec();
                let mut bindings = [
                    Binding::Bytes(&args),
                    Binding::Bytes(&xb),
                    Binding::Bytes(&wb),
                    Binding::View {
                        region: 0,
                        offset: 0,
                    },
                    Binding::View {
                        region: 0,
                        offset: 0,
                    },
                ];
                let grid = Grid::d1(a.n.div_ceil(4), 128);
                lib(Family::Quant)
                    .dispatch_views(&name, &mut bindings, &mut [&mut region], grid, &[])
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                region
            } else {
                let mut ob = vec![0u8; n * if dst_f16 { 2 } else { 4 }];
                dispatch(&name, a, &mut [&mut xb, &mut wb, &mut rb, &mut ob]);
                ob
            };
            for (j, (&got, (&(dv, ds), &r))) in Dt::of(dst_f16)
                .decode_f64(&out)
                .iter()
                .zip(d.iter().zip(&res))
                .enumerate()
            {
                let want = r as f64 + dv;
                let mut tol = 1e-5 * ds + 1e-6 + 1e-7 * want.abs();
                if dst_f16 {
                    tol += want.abs() / 2048.0;
                }
                assert!(
                    (got - want).abs() <= tol,
                    "{name} [{j}] in_place={in_place}: got {got}, want {want} (tol {tol:e})"
                );
            }
        }
    }
}
