//! metal-sim vs host for `spd.metal`: the `re_eig` / `log_eig` gradients
//! (f32 Jacobi) within `5e-5·max|host| + 1e-4·|host|` of the host's f64
//! eigendecomposition, `bi_map`'s `W dY Wᵀ` within `1e-5·max|host| +
//! 1e-5·|host|`, the `karcher_mean` / `batch_norm` gradients (f32 Karcher
//! iteration and implicit-function solve) within `1e-4·max|host|`; and
//! invalid operands (a non-symmetric `x`, an indefinite one under `log_eig`
//! and the Karcher-mean kinds, an indefinite bias), which fail the
//! metal-sim run through the plan's status check with the error the host
//! run gives, naming the op and the matrix.

use super::tests::{compiled, fill_params, node, run_host_on, run_sim_on, try_run_host_on};
use super::tests::{try_run_sim_on, uniform, Bufs};
use super::tests_misc::only_dispatch;
use super::*;
use crate::compile::Compiled;
use rlx_ir::op::SpdOp;
use rlx_ir::{DType, Graph, Op, Shape};

/// `Q diag(λ) Qᵀ` of f32 `[batch, n, n]` as bytes, `Q` the orthogonal
/// factor of a deterministic matrix, `λ(b, k)`.
fn spectrum_bytes(batch: usize, n: usize, lam: impl Fn(usize, usize) -> f64) -> Vec<u8> {
    let mut out = Vec::with_capacity(batch * n * n * 4);
    for b in 0..batch {
        let m = nalgebra::DMatrix::from_fn(n, n, |i, j| {
            (((b * 31 + i * 7 + j * 3) % 11) as f64 - 5.0) / 5.0 + if i == j { 2.0 } else { 0.0 }
        });
        let q = m.qr().q();
        let d = nalgebra::DVector::from_fn(n, |k, _| lam(b, k));
        let x = &q * nalgebra::DMatrix::from_diagonal(&d) * q.transpose();
        for i in 0..n {
            for j in 0..n {
                out.extend((x[(i, j)] as f32).to_le_bytes());
            }
        }
    }
    out
}

/// SPD matrices, `λ = 0.3, 0.75, 1.2, ..`.
fn spd_bytes(batch: usize, n: usize) -> Vec<u8> {
    spectrum_bytes(batch, n, |_, k| 0.3 + 0.45 * k as f64)
}

fn f32s(d: &[usize]) -> Shape {
    Shape::of(d, DType::F32)
}

/// `spd_backward` of `kind` over a param `x [batch, n, n]` (for `bi_map` a
/// param `w [n, m]`, for `batch_norm` a param `bias [n, n]`), `dy` an input
/// (`[n, n]` for `karcher_mean`).
fn backward_graph(kind: SpdOp, eps: f32, batch: usize, n: usize, m: usize) -> Compiled {
    let mut g = Graph::new("spd_bwd");
    let param = |g: &mut Graph, d: &[usize]| node(g, Op::Param { shape: f32s(d) }, &[]);
    let x = param(&mut g, &[batch, n, n]);
    let mut ins = vec![x];
    let dy = match kind {
        SpdOp::BiMap => {
            ins.push(param(&mut g, &[n, m]));
            vec![batch, m, m]
        }
        SpdOp::BatchNorm => {
            ins.push(param(&mut g, &[n, n]));
            vec![batch, n, n]
        }
        SpdOp::KarcherMean => vec![n, n],
        _ => vec![batch, n, n],
    };
    let dy = Op::Input { shape: f32s(&dy) };
    ins.push(node(&mut g, dy, &[]));
    let y = node(&mut g, Op::SpdBackward { kind, eps }, &ins);
    g.set_outputs(&[y]).unwrap();
    compiled(&g)
}

/// The plan: one `spd.metal` dispatch, then its status check; no host
/// command.
fn checked_plan(c: &Compiled) -> MetalPlan {
    let plan = MetalPlan::build(&c.schedule);
    only_dispatch(&plan, Family::Spd);
    let at = plan
        .commands
        .iter()
        .position(|c| matches!(c, Command::Dispatch(d) if d.kernel.family == Family::Spd))
        .unwrap();
    assert!(
        matches!(plan.commands.get(at + 1), Some(Command::Check(_))),
        "{plan}"
    );
    plan
}

/// x's bytes `xb`; a rank-2 param (w, bias) gets `second`, or uniform
/// values in [-1, 1) when that is empty.
fn bufs_with(c: &Compiled, xb: &[u8], second: &[u8]) -> Bufs {
    fill_params(c, |i, p| {
        if p.shape.rank() == 3 {
            xb.to_vec()
        } else if !second.is_empty() {
            second.to_vec()
        } else {
            let n = p.shape.numel().unwrap();
            uniform(900 + i as u64, n, -1.0, 1.0)
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect()
        }
    })
}

fn bufs(c: &Compiled, xb: &[u8]) -> Bufs {
    bufs_with(c, xb, &[])
}

/// Host and metal-sim agree within `atol·max|host| + rtol·|host|`;
/// returns `max|host|`.
fn agree(c: &Compiled, plan: &MetalPlan, xb: &[u8], atol: f32, rtol: f32, what: &str) -> f32 {
    agree_with(c, plan, xb, &[], atol, rtol, what)
}

/// [`agree`] with [`bufs_with`]'s `second`.
fn agree_with(
    c: &Compiled,
    plan: &MetalPlan,
    xb: &[u8],
    second: &[u8],
    atol: f32,
    rtol: f32,
    what: &str,
) -> f32 {
    let host = run_host_on(c, bufs_with(c, xb, second));
    let sim = run_sim_on(c, plan, bufs_with(c, xb, second));
    let big = host[0].iter().fold(0.0f32, |a, v| a.max(v.abs()));
    for (k, (h, s)) in host[0].iter().zip(&sim[0]).enumerate() {
        let tol = atol * big + rtol * h.abs();
        assert!((h - s).abs() <= tol, "{what} [{k}]: host {h}, sim {s}");
    }
    big
}

#[test]
fn spd_eig_backward_runs_on_the_gpu() {
    // eps 0.9 lies between eigenvalues 0.75 and 1.2 (re_eig's floor)
    for (kind, eps) in [(SpdOp::LogEig, 1e-4), (SpdOp::ReEig, 0.9)] {
        for (batch, n) in [(1usize, 1usize), (3, 5), (2, 16)] {
            let c = backward_graph(kind, eps, batch, n, n);
            let plan = checked_plan(&c);
            let xb = spd_bytes(batch, n);
            let host = run_host_on(&c, bufs(&c, &xb));
            let big = host[0].iter().fold(0.0f32, |a, v| a.max(v.abs()));
            // (re_eig of the 1×1 [0.3] is below the floor: gradient 0)
            assert!(big > 0.1 || n == 1, "{:?}", host[0]);
            agree(&c, &plan, &xb, 5e-5, 1e-4, &format!("{kind:?} n {n}"));
        }
    }
}

#[test]
fn spd_bimap_backward_runs_on_the_gpu() {
    for (batch, n, m) in [(3usize, 5usize, 3usize), (1, 1, 1), (2, 6, 6), (2, 70, 33)] {
        let c = backward_graph(SpdOp::BiMap, 0.0, batch, n, m);
        let plan = checked_plan(&c);
        let xb = spd_bytes(batch, n);
        let host = run_host_on(&c, bufs(&c, &xb));
        assert!(host[0].iter().any(|v| v.abs() > 0.05), "{:?}", host[0]);
        agree(
            &c,
            &plan,
            &xb,
            1e-5,
            1e-5,
            &format!("bi_map {batch}×{n}, m {m}"),
        );
    }
}

/// Both runs fail; each message names the op and `x[bad]` and contains
/// `reason`.
fn both_fail(c: &Compiled, plan: &MetalPlan, xb: &[u8], op: &str, bad: usize, reason: &str) {
    both_fail_with(c, plan, (xb, &[]), op, &format!("x[{bad}] {reason}"));
}

/// Both runs over [`bufs_with`]`(x, second)` fail; each message names the
/// op and contains `what`.
fn both_fail_with(c: &Compiled, plan: &MetalPlan, ops: (&[u8], &[u8]), op: &str, what: &str) {
    let host = try_run_host_on(c, bufs_with(c, ops.0, ops.1)).unwrap_err();
    let sim = try_run_sim_on(c, plan, bufs_with(c, ops.0, ops.1)).unwrap_err();
    assert!(
        host.contains(&format!("{op}: ")) && host.contains(what),
        "{host}"
    );
    assert!(
        sim.contains(&format!("[spd] {op} backward: {what}")),
        "{sim}"
    );
}

#[test]
fn invalid_spd_operands_fail_the_metal_sim_run_naming_the_op() {
    let (batch, n) = (3, 4);
    // matrix 1 not symmetric (one entry moved by 0.2)
    let mut asym = spd_bytes(batch, n);
    let at = (n * n + 2) * 4;
    let v = f32::from_le_bytes(asym[at..at + 4].try_into().unwrap()) + 0.2;
    asym[at..at + 4].copy_from_slice(&v.to_le_bytes());
    // matrix 2 indefinite (smallest eigenvalue -0.4)
    let indefinite = spectrum_bytes(batch, n, |b, k| {
        if b == 2 && k == 0 {
            -0.4
        } else {
            0.3 + 0.45 * k as f64
        }
    });
    for kind in [SpdOp::LogEig, SpdOp::ReEig] {
        let c = backward_graph(kind, 0.5, batch, n, n);
        let plan = checked_plan(&c);
        let op = if kind == SpdOp::LogEig {
            "log_eig"
        } else {
            "re_eig"
        };
        both_fail(&c, &plan, &asym, op, 1, "is not symmetric");
        if kind == SpdOp::LogEig {
            both_fail(&c, &plan, &indefinite, op, 2, "is not positive definite");
            let sim = try_run_sim_on(&c, &plan, bufs(&c, &indefinite)).unwrap_err();
            assert!(sim.contains("(smallest eigenvalue -4.000e-1)"), "{sim}");
        } else {
            // re_eig needs no definiteness
            agree(&c, &plan, &indefinite, 5e-5, 1e-4, "re_eig indefinite");
        }
    }
    let c = backward_graph(SpdOp::BiMap, 0.0, batch, n, 3);
    let plan = checked_plan(&c);
    both_fail(&c, &plan, &asym, "bi_map", 1, "is not symmetric");
    // bi_map needs no definiteness
    agree(&c, &plan, &indefinite, 1e-5, 1e-5, "bi_map indefinite");
}

#[test]
fn spd_karcher_mean_and_batch_norm_backward_run_on_the_gpu() {
    for (batch, n) in [(3usize, 3usize), (2, 8), (4, 1)] {
        let xb = spd_bytes(batch, n);
        let c = backward_graph(SpdOp::KarcherMean, 1e-6, batch, n, n);
        let plan = checked_plan(&c);
        let big = agree(
            &c,
            &plan,
            &xb,
            1e-4,
            0.0,
            &format!("karcher_mean {batch}×{n}"),
        );
        assert!(big > 1e-2, "karcher_mean {batch}×{n}: {big}");
        let c = backward_graph(SpdOp::BatchNorm, 1e-6, batch, n, n);
        let plan = checked_plan(&c);
        // the bias: another SPD matrix (λ = 0.3, 0.75, ..)
        let bias = spectrum_bytes(1, n, |_, k| 0.3 + 0.45 * ((k + 2) % n.max(1)) as f64);
        let what = format!("batch_norm {batch}×{n}");
        let big = agree_with(&c, &plan, &xb, &bias, 1e-4, 0.0, &what);
        assert!(big > 1e-2, "{what}: {big}");
    }
    // larger matrices and an empty batch stay on the host
    for (batch, n) in [(2usize, 9usize), (0, 3)] {
        let c = backward_graph(SpdOp::KarcherMean, 1e-6, batch, n, n);
        let plan = MetalPlan::build(&c.schedule);
        assert!(
            plan.commands
                .iter()
                .any(|c| matches!(c, Command::Host { .. })),
            "{plan}"
        );
    }
}

#[test]
fn invalid_karcher_mean_operands_fail_the_metal_sim_run() {
    let (batch, n) = (3, 4);
    let indefinite = spectrum_bytes(batch, n, |b, k| {
        if b == 1 && k == 2 {
            -0.2
        } else {
            0.3 + 0.45 * k as f64
        }
    });
    let c = backward_graph(SpdOp::KarcherMean, 1e-6, batch, n, n);
    let plan = checked_plan(&c);
    both_fail(
        &c,
        &plan,
        &indefinite,
        "karcher_mean",
        1,
        "is not positive definite",
    );
    let c = backward_graph(SpdOp::BatchNorm, 1e-6, batch, n, n);
    let plan = checked_plan(&c);
    let bias = spd_bytes(1, n);
    let ops = (&indefinite[..], &bias[..]);
    both_fail_with(
        &c,
        &plan,
        ops,
        "batch_norm",
        "x[1] is not positive definite",
    );
    let negative = spectrum_bytes(1, n, |_, k| -0.3 - 0.45 * k as f64);
    let xb = spd_bytes(batch, n);
    let ops = (&xb[..], &negative[..]);
    both_fail_with(
        &c,
        &plan,
        ops,
        "batch_norm",
        "bias[0] is not positive definite",
    );
}
