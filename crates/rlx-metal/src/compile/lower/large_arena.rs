//! The seed's large-arena lowering: past a threshold of planned arena
//! bytes (4 GiB by default, `RLX_GELU_HOST_ARENA_BYTES`), an f32 tanh GELU
//! lowers to `GeluApproxHost`, which the Metal plan runs on the CPU over
//! unified memory, instead of `GeluApproxOut` (a kernel dispatch whose
//! offsets would have to address the whole arena). The host runs both
//! with the same native kernel.

/// True when an arena of `arena_bytes` is past the GELU host threshold.
pub(super) fn gelu_on_host(arena_bytes: usize) -> bool {
    let limit = rlx_ir::env::int_at_most("RLX_GELU_HOST_ARENA_BYTES", u64::MAX);
    arena_bytes as u64 > limit
}

#[cfg(test)]
mod tests {
    use crate::compile::{lower, CompileOptions};
    use crate::thunk::Thunk;
    use rlx_ir::op::Activation;
    use rlx_ir::{DType, Graph, Op, Shape};

    #[test]
    fn small_arenas_keep_the_kernel_thunk() {
        let mut g = Graph::new("gelu");
        let shape = Shape::of(&[4, 8], DType::F32);
        let x = g.add(Op::Input { shape }, &[], "x").unwrap();
        let kind = Activation::GeluApprox;
        let y = g.add(Op::Activation { kind }, &[x], "y").unwrap();
        g.set_outputs(&[y]).unwrap();
        // the default threshold (4 GiB) is far above this graph's arena
        // (the Python tests lower the threshold through the environment)
        if std::env::var_os("RLX_GELU_HOST_ARENA_BYTES").is_none() {
            let c = lower(&g, &CompileOptions::default()).unwrap();
            assert!(matches!(c.schedule.thunks[..], [Thunk::GeluApproxOut(_)]));
            assert!(!super::gelu_on_host(c.arena_bytes));
            assert!(super::gelu_on_host(5 << 30));
        }
    }
}
