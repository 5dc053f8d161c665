//! MetalPlan tests: barrier placement from byte-range hazards, host sync
//! points, bindings and args of dispatches.

use super::*;
use crate::metal::args::{act_code, KernelArgs, UnaryArgs};
use crate::metal::lower::{row_threads, ELEMENTWISE_THREADS};
use crate::thunk::binary::BinaryFull;
use crate::thunk::elementwise::{ActivationInPlace, ActivationOut};
use crate::thunk::matmul::GroupedMatMul;
use crate::thunk::norm::RmsNorm;
use crate::thunk::{tag_segment, tag_state};
use crate::thunk::{HalfFlag, Thunk};
use rlx_ir::op::Activation;
use rlx_ir::op::BinaryOp;

const N: u32 = 16; // 64 bytes of f32

fn act(src: usize, dst: usize) -> Thunk {
    ActivationOut {
        src,
        dst,
        len: N,
        act: Activation::Silu,
        dt: HalfFlag::F32,
    }
    .into()
}

fn add(lhs: usize, rhs: usize, dst: usize) -> Thunk {
    BinaryFull {
        lhs,
        rhs,
        dst,
        len: N,
        op: BinaryOp::Add,
        dt: HalfFlag::F32,
    }
    .into()
}

/// `D3` for a dispatch of thunk 3, `B` for a barrier, `H6` for host thunk
/// 6, `C2` for thunk 2's status check.
fn shape(p: &MetalPlan) -> Vec<String> {
    p.commands
        .iter()
        .map(|c| match c {
            Command::Dispatch(d) => format!("D{}", d.thunk),
            Command::User(u) => format!("U{}", u.thunk),
            Command::Barrier => "B".into(),
            Command::Host { thunk } => format!("H{thunk}"),
            Command::Check(c) => format!("C{}", c.thunk),
        })
        .collect()
}

fn schedule(thunks: Vec<Thunk>) -> ThunkSchedule {
    ThunkSchedule {
        thunks,
        ..Default::default()
    }
}

#[test]
fn barriers_only_where_byte_ranges_conflict() {
    let s = schedule(vec![
        act(0, 1024),          // 0
        act(0, 2048),          // 1 reads what 0 reads: no hazard
        add(1024, 2048, 3072), // 2 RAW on 0 and 1: barrier
        act(4096, 5120),       // 3 independent
        ActivationInPlace {
            // 4 writes what 0/1 read, but before the barrier
            data: 0,
            len: N,
            act: Activation::Relu,
            dt: HalfFlag::F32,
        }
        .into(),
        act(6144, 1024), // 5 WAR: 2 read 1024 since the barrier
        GroupedMatMul {
            // 6 no kernel: host sync point
            input: 3072,
            weight: 4096,
            expert_idx: 4096,
            dst: 3072,
            m: 1,
            k_dim: N,
            n: 1,
            num_experts: 1,
        }
        .into(),
        act(3072, 7168), // 7 after the sync: no barrier
        act(8192, 7168), // 8 WAW with 7: barrier
        RmsNorm {
            // 9 reads weights only besides its input
            src: 9216,
            g: tag_segment(1, 0),
            b: tag_segment(1, 64),
            dst: 10240,
            rows: 1,
            h: N,
            eps: 1e-6,
            dt: HalfFlag::F32,
        }
        .into(),
        act(tag_state(8192), tag_state(1024)), // 10 same raw bytes, other buffer
        Thunk::Nop,                            // 11 nothing
        add(0, 0, 32),                         // 12 partial in-place overlap: host
        act(7168, 11264),                      // 13 after the sync: no barrier
        act(11264, 11264 + 64),                // 14 RAW on 13
    ]);
    let p = MetalPlan::build(&s);
    assert_eq!(
        shape(&p),
        [
            "D0", "D1", "B", "D2", "D3", "D4", "B", "D5", "H6", "D7", "B", "D8", "D9", "D10",
            "H12", "D13", "B", "D14"
        ]
    );
    assert_eq!(
        p.stats(),
        PlanStats {
            dispatches: 12,
            barriers: 4,
            host: 2
        }
    );
    assert!(p
        .to_string()
        .contains("dispatch #9 rms_norm_f32 grid=[1, 1, 1] tg=[32, 1, 1] @9216 W1@0 W1@64 @10240"));
}

#[test]
fn every_dependent_pair_is_separated() {
    // property over a chain of random-ish thunks: whenever dispatch j
    // conflicts with an earlier dispatch i, a barrier or host command lies
    // between them
    let offs = [0usize, 64, 128, 192, 256];
    let mut thunks = Vec::new();
    let mut k = 7usize;
    for _ in 0..60 {
        k = k
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407)
            >> 1;
        let a = offs[k % 5];
        let b = offs[(k / 5) % 5];
        let c = offs[(k / 25) % 5];
        thunks.push(if k.is_multiple_of(3) {
            add(a, b, c)
        } else {
            act(a, c)
        });
    }
    let s = schedule(thunks);
    let p = MetalPlan::build(&s);
    let st = p.stats();
    assert!(st.barriers < st.dispatches, "{st:?}");
    for (j, cj) in p.commands.iter().enumerate() {
        let Command::Dispatch(dj) = cj else { continue };
        let ioj = s.thunks[dj.thunk].io();
        for ci in p.commands[..j].iter().rev() {
            let di = match ci {
                Command::Dispatch(d) => d,
                _ => break, // separated
            };
            let ioi = s.thunks[di.thunk].io();
            let hit = |a: &[ByteRange], b: &[ByteRange]| {
                a.iter().any(|x| b.iter().any(|y| x.overlaps(y)))
            };
            assert!(
                !(hit(&ioj.reads, &ioi.writes)
                    || hit(&ioj.writes, &ioi.writes)
                    || hit(&ioj.writes, &ioi.reads)),
                "thunks {} and {} conflict without a barrier:\n{p}",
                di.thunk,
                dj.thunk
            );
        }
    }
}

#[test]
fn dispatch_fields() {
    let s = schedule(vec![
        ActivationOut {
            src: 0,
            dst: 4096,
            len: 1000,
            act: Activation::Gelu,
            dt: HalfFlag::F16,
        }
        .into(),
        ActivationOut {
            src: 0,
            dst: 4096,
            len: 0,
            act: Activation::Gelu,
            dt: HalfFlag::F16,
        }
        .into(),
    ]);
    let p = MetalPlan::build(&s);
    assert_eq!(p.commands.len(), 1, "an empty thunk dispatches nothing");
    let Command::Dispatch(d) = &p.commands[0] else {
        panic!("{p}")
    };
    assert_eq!(d.kernel.family, Family::Elementwise);
    assert_eq!(d.kernel.function, "unary_f16");
    assert_eq!(d.grid, [4, 1, 1]);
    assert_eq!(d.threadgroup, [ELEMENTWISE_THREADS, 1, 1]);
    let want = UnaryArgs {
        len: 1000,
        op: act_code(Activation::Gelu),
    };
    assert_eq!(d.args, want.as_bytes());
    assert_eq!(
        d.bindings,
        [
            BufferBinding {
                buffer: Buf::Arena,
                offset: 0
            },
            BufferBinding {
                buffer: Buf::Arena,
                offset: 4096
            }
        ]
    );
    assert_eq!(row_threads(1), 32);
    assert_eq!(row_threads(33), 64);
    assert_eq!(row_threads(5000), 1024);
}

fn gpu_op(attrs: &str) -> Thunk {
    use crate::thunk::host::CustomGpuOp;
    use rlx_ir::{DType, Shape};
    let shape = Shape::new(vec![rlx_ir::shape::Dim::Static(N as usize)], DType::F32);
    CustomGpuOp {
        name: "my_op".into(),
        inputs: vec![
            (0, N, shape.clone()),
            (tag_segment(1, 64), N, shape.clone()),
        ],
        output: (128, N, shape),
        attrs: attrs.as_bytes().to_vec(),
    }
    .into()
}

#[test]
fn custom_gpu_op_is_a_user_dispatch_with_its_operands() {
    let attrs = r#"{"scale": 2, "__msl__": {"source": "kernel void k() {}", "kernel": "k",
        "grid": [3, 1, 1], "threadgroup": [8, 1, 1]}}"#;
    let plan = MetalPlan::build(&schedule(vec![act(0, 0), gpu_op(attrs)]));
    assert_eq!(plan.stats().dispatches, 2);
    // the user kernel reads bytes 0..64, which the activation writes
    assert!(matches!(plan.commands[1], Command::Barrier));
    let Command::User(u) = &plan.commands[2] else {
        panic!("not a user dispatch: {plan}");
    };
    assert_eq!((u.op.as_str(), u.function.as_str()), ("my_op", "k"));
    assert_eq!((u.grid, u.threadgroup, u.count), ([3, 1, 1], [8, 1, 1], N));
    assert_eq!(u.inputs[1].binding.buffer, Buf::Weights(1));
    assert_eq!((u.inputs[1].binding.offset, u.inputs[1].len), (64, 64));
    assert_eq!((u.output.binding.offset, u.output.len), (128, 64));
    assert!(plan.to_string().contains("user:my_op.k grid=[3, 1, 1]"));
}

#[test]
fn custom_gpu_op_without_a_kernel_spec_is_a_host_command() {
    for attrs in ["{}", "not json", r#"{"__msl__": {"kernel": "k"}}"#] {
        let plan = MetalPlan::build(&schedule(vec![gpu_op(attrs)]));
        assert_eq!(plan.commands, vec![Command::Host { thunk: 0 }], "{attrs}");
    }
}

/// An f32 `spd_backward` of `kind` on `[2, 3, 3]` operands at `x` / `dy`
/// (for `bi_map` also `w [3, 2]`), into `dst`.
fn spd_bwd(kind: rlx_ir::op::SpdOp, ins: &[usize], dst: usize) -> Thunk {
    use crate::thunk::host::SpdHost;
    use rlx_ir::{DType, Op, Shape};
    let op = |o: usize, d: &[usize]| {
        (
            o,
            d.iter().product::<usize>() as u32,
            Shape::of(d, DType::F32),
        )
    };
    let inputs = if ins.len() == 3 {
        vec![
            op(ins[0], &[2, 3, 3]),
            op(ins[1], &[3, 2]),
            op(ins[2], &[2, 2, 2]),
        ]
    } else {
        vec![op(ins[0], &[2, 3, 3]), op(ins[1], &[2, 3, 3])]
    };
    SpdHost {
        op: Op::SpdBackward { kind, eps: 0.1 },
        inputs,
        output: op(dst, &[2, 3, 3]),
    }
    .into()
}

#[test]
fn a_status_check_follows_a_validating_dispatch_and_syncs() {
    use rlx_ir::op::SpdOp;
    let s = schedule(vec![
        spd_bwd(SpdOp::LogEig, &[0, 1024], 2048), // 0 dispatch + check
        act(2048, 3072),                          // 1 after the sync: no barrier
        spd_bwd(SpdOp::BiMap, &[0, 4096, 5120], 6144), // 2 dispatch + check
        spd_bwd(SpdOp::KarcherMean, &[0, 1024], 2048), // 3 dy not [3, 3]: host (which reports it)
        spd_bwd(SpdOp::ReEig, &[2048, 1024], 2048 + 32), // 4 partial overlap: host
    ]);
    let p = MetalPlan::build(&s);
    assert_eq!(shape(&p), ["D0", "C0", "D1", "D2", "C2", "H3", "H4"]);
    let Some(Command::Check(c)) = p.commands.get(1) else {
        panic!("{p}");
    };
    assert_eq!((c.stride, c.count, c.status.offset), (9, 2, 2048));
    assert_eq!(c.op, "log_eig backward");
    assert!(p.to_string().contains("check #2 @6144"), "{p}");
    let Some(Command::Check(c)) = p.commands.get(4) else {
        panic!("{p}");
    };
    assert_eq!(c.operands, ["x", "w", "dy"]);
}
