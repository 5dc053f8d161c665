//! Property tests of shape inference through `Graph::add`:
//! broadcasting of binary ops and batch-broadcast matmul against a simple
//! independent model written here, and a no-panic sweep of every op of the
//! elementwise, matmul, norm, attention, shape and reduce families over
//! arbitrary operand shapes and attributes.

use proptest::prelude::*;
use proptest::strategy::Union;
use rlx_ir::dtype::ALL_DTYPES;
use rlx_ir::op::{
    Activation, AttnLayout, BinaryOp, CmpOp, MaskKind, ReduceOp, RegionOperand, RegionStep,
    RopeKind,
};
use rlx_ir::quant::{GgmlType, QuantScheme, ScaleLayout, ScaledFormat};
use rlx_ir::shape::dims_string;
use rlx_ir::{DType, Dim, ErrorKind, Graph, IrError, Op, Shape};

// ------------------------------------------------------------ the model

/// numpy broadcasting, written out plainly: right-align, pad with 1, and per
/// position take the common value or the one that is not the static 1.
fn model_broadcast(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    let r = a.len().max(b.len());
    let pad = |v: &[Dim]| {
        let mut p = vec![Dim::Static(1); r - v.len()];
        p.extend_from_slice(v);
        p
    };
    let (pa, pb) = (pad(a), pad(b));
    pa.into_iter()
        .zip(pb)
        .map(|(x, y)| {
            if x == y || y == Dim::Static(1) {
                Some(x)
            } else if x == Dim::Static(1) {
                Some(y)
            } else {
                None
            }
        })
        .collect()
}

fn inputs(shapes: &[Shape]) -> (Graph, Vec<usize>) {
    let mut g = Graph::new("prop");
    let ids = shapes
        .iter()
        .map(|s| {
            g.add(Op::Input { shape: s.clone() }, &[], "")
                .expect("inputs always build")
        })
        .collect();
    (g, ids)
}

// ------------------------------------------------------------ strategies

/// A dim that is never the static 1: sizes 2..=6 or one of three symbols.
fn big_dim() -> impl Strategy<Value = Dim> {
    prop_oneof![
        3 => (2usize..=6).prop_map(Dim::Static),
        1 => prop::sample::select(vec!["s", "t", "u"]).prop_map(Dim::from),
    ]
}

/// A target shape and, for one operand, which trailing dims it keeps and
/// which of those it replaces by 1.
fn operand_of(target: &[Dim], keep: usize, ones: &[bool]) -> Vec<Dim> {
    let keep = keep.min(target.len());
    target[target.len() - keep..]
        .iter()
        .zip(ones)
        .map(|(d, &one)| if one { Dim::Static(1) } else { d.clone() })
        .collect()
}

/// Two shapes compatible by construction: both are right-aligned suffixes of
/// a common target with some dims replaced by 1.
fn compatible_pair() -> impl Strategy<Value = (Vec<Dim>, Vec<Dim>)> {
    prop::collection::vec(big_dim(), 0..5).prop_flat_map(|target| {
        let r = target.len();
        (
            Just(target),
            0..=r,
            0..=r,
            prop::collection::vec(any::<bool>(), r),
            prop::collection::vec(any::<bool>(), r),
        )
            .prop_map(|(t, ka, kb, oa, ob)| (operand_of(&t, ka, &oa), operand_of(&t, kb, &ob)))
    })
}

fn numeric_dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(
        ALL_DTYPES
            .into_iter()
            .filter(|d| !d.is_complex())
            .collect::<Vec<_>>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn binary_broadcast_matches_model(
        (a, b) in compatible_pair(),
        da in numeric_dtype(),
        db in numeric_dtype(),
        swap in any::<bool>(),
    ) {
        let (a, b) = if swap { (b, a) } else { (a, b) };
        let want = model_broadcast(&a, &b).expect("built to be compatible");
        let (mut g, ids) = inputs(&[Shape::new(a.clone(), da), Shape::new(b.clone(), db)]);
        let id = g.add(Op::Binary { kind: BinaryOp::Mul }, &ids, "").unwrap();
        prop_assert_eq!(&g.shape(id).dims, &want);
        prop_assert_eq!(g.shape(id).dtype, da.promote(db));
        let id = g.add(Op::Compare { kind: CmpOp::Le }, &ids, "").unwrap();
        prop_assert_eq!(g.shape(id), &Shape::new(want, DType::Bool));
    }

    #[test]
    fn binary_incompatible_is_rejected(
        (a, b) in compatible_pair().prop_filter("need a shared axis", |(a, b)| {
            !a.is_empty() && !b.is_empty()
        }),
        pos in any::<prop::sample::Index>(),
        (x, y) in (big_dim(), big_dim()).prop_filter("distinct", |(x, y)| x != y),
    ) {
        // Corrupt one right-aligned position both operands have.
        let shared = a.len().min(b.len());
        let i = pos.index(shared);
        let (mut a, mut b) = (a, b);
        let (ia, ib) = (a.len() - 1 - i, b.len() - 1 - i);
        a[ia] = x;
        b[ib] = y;
        prop_assert!(model_broadcast(&a, &b).is_none());
        let (mut g, ids) = inputs(&[Shape::new(a.clone(), DType::F32), Shape::new(b.clone(), DType::F32)]);
        let e = g.add(Op::Binary { kind: BinaryOp::Add }, &ids, "").unwrap_err();
        prop_assert_eq!(e.kind(), ErrorKind::Shape);
        prop_assert!(matches!(e, IrError::Shape { .. }), "{:?}", e);
        let m = e.to_string();
        prop_assert!(m.starts_with("[binary] "), "{}", m);
        prop_assert!(m.contains(&dims_string(&a)), "{} lacks {}", m, dims_string(&a));
        prop_assert!(m.contains(&dims_string(&b)), "{} lacks {}", m, dims_string(&b));
        prop_assert_eq!(g.len(), 2, "a rejected node must not be added");
    }

    #[test]
    fn matmul_batch_broadcast(
        (ba, bb) in compatible_pair(),
        m in big_dim(), k in big_dim(), n in big_dim(),
        vec_lhs in prop::bool::weighted(0.15),
        vec_rhs in prop::bool::weighted(0.15),
    ) {
        let mut a = if vec_lhs { vec![] } else { ba.clone() };
        if !vec_lhs { a.push(m.clone()); }
        a.push(k.clone());
        let mut b = if vec_rhs { vec![] } else { bb.clone() };
        b.push(k.clone());
        if !vec_rhs { b.push(n.clone()); }
        let batch_a: &[Dim] = if vec_lhs { &[] } else { &ba };
        let batch_b: &[Dim] = if vec_rhs { &[] } else { &bb };
        let mut want = model_broadcast(batch_a, batch_b).expect("compatible");
        if !vec_lhs { want.push(m); }
        if !vec_rhs { want.push(n); }
        let (mut g, ids) = inputs(&[Shape::new(a, DType::F16), Shape::new(b, DType::F32)]);
        let id = g.add(Op::MatMul, &ids, "").unwrap();
        prop_assert_eq!(g.shape(id), &Shape::new(want, DType::F32));
    }

    #[test]
    fn matmul_inner_mismatch_is_rejected(
        (ba, bb) in compatible_pair(),
        m in big_dim(), n in big_dim(),
        (k1, k2) in (big_dim(), big_dim()).prop_filter("distinct", |(x, y)| x != y),
    ) {
        let mut a = ba;
        a.extend([m, k1]);
        let mut b = bb;
        b.extend([k2, n]);
        let (sa, sb) = (Shape::new(a, DType::F32), Shape::new(b, DType::F32));
        let (mut g, ids) = inputs(&[sa.clone(), sb.clone()]);
        let e = g.add(Op::MatMul, &ids, "").unwrap_err();
        prop_assert_eq!(e.kind(), ErrorKind::Shape);
        prop_assert_eq!(e.to_string(), format!("[mat_mul] inner dims differ: {sa} @ {sb}"));
    }
}

// ------------------------------------------------------------ no panics

fn any_dim() -> impl Strategy<Value = Dim> {
    // A small pool so that operands often agree and inference gets deep;
    // plus the extremes that overflow careless arithmetic.
    prop_oneof![
        6 => prop::sample::select(vec![1usize, 2, 4, 8, 16, 64]).prop_map(Dim::Static),
        1 => prop::sample::select(vec![0usize, 3, usize::MAX]).prop_map(Dim::Static),
        2 => prop::sample::select(vec!["s", "t"]).prop_map(Dim::from),
    ]
}

fn any_shape() -> impl Strategy<Value = Shape> {
    let dtype = prop_oneof![
        6 => prop::sample::select(vec![DType::F32, DType::F16, DType::U8, DType::I32]),
        1 => prop::sample::select(ALL_DTYPES.to_vec()),
    ];
    (prop::collection::vec(any_dim(), 0..5), dtype).prop_map(|(d, t)| Shape::new(d, t))
}

fn small() -> impl Strategy<Value = usize> {
    prop_oneof![0usize..=9, Just(16), Just(usize::MAX)]
}

fn axis() -> impl Strategy<Value = i64> {
    prop_oneof![-6i64..=6, Just(i64::MIN), Just(i64::MAX)]
}

fn any_f32() -> impl Strategy<Value = f32> {
    prop_oneof![-2.0f32..2.0, Just(f32::NAN), Just(f32::INFINITY), Just(0.0)]
}

fn layout() -> impl Strategy<Value = ScaleLayout> {
    prop_oneof![
        Just(ScaleLayout::PerTensor),
        Just(ScaleLayout::PerRow),
        (0u32..=40).prop_map(|size| ScaleLayout::Block { size }),
    ]
}

fn scheme() -> impl Strategy<Value = QuantScheme> {
    prop_oneof![
        prop::sample::select(vec![GgmlType::Q4K, GgmlType::Q8_0, GgmlType::F32])
            .prop_map(QuantScheme::Gguf),
        (0u32..=64, any::<bool>()).prop_map(|(block_size, asymmetric)| QuantScheme::Int4 {
            block_size,
            asymmetric
        }),
        Just(QuantScheme::Nvfp4),
        Just(QuantScheme::Fp8E5m2),
    ]
}

fn region_steps() -> impl Strategy<Value = Vec<RegionStep>> {
    let operand = prop_oneof![
        (0u32..20).prop_map(RegionOperand::Input),
        (0u32..40).prop_map(RegionOperand::Step),
    ];
    let step = prop_oneof![
        (
            operand.clone(),
            prop::sample::select(vec![Activation::Exp, Activation::Neg])
        )
            .prop_map(|(a, act)| RegionStep::Unary { act, a }),
        (operand.clone(), operand.clone()).prop_map(|(a, b)| RegionStep::Binary {
            kind: BinaryOp::Max,
            a,
            b
        }),
        (operand, prop::sample::select(ALL_DTYPES.to_vec()))
            .prop_map(|(a, to)| RegionStep::Cast { to, a }),
    ];
    prop::collection::vec(step, 0..36)
}

fn any_op() -> impl Strategy<Value = Op> {
    let mask = prop::sample::select(vec![
        MaskKind::None,
        MaskKind::Causal,
        MaskKind::Custom,
        MaskKind::Bias,
        MaskKind::SlidingWindow,
    ]);
    let attn_layout = prop::sample::select(vec![AttnLayout::Bhsd, AttnLayout::Bshd]);
    let fmt = Just(ScaledFormat::Fp8E4m3);
    Union::new(vec![
        prop::sample::select(rlx_ir::op::ALL_ACTIVATIONS.to_vec())
            .prop_map(|kind| Op::Activation { kind })
            .boxed(),
        Just(Op::Binary {
            kind: BinaryOp::Min,
        })
        .boxed(),
        Just(Op::Compare { kind: CmpOp::Gt }).boxed(),
        Just(Op::Where).boxed(),
        Just(Op::Fma).boxed(),
        Just(Op::Cast {
            to: DType::I8,
            trunc: false,
        })
        .boxed(),
        region_steps()
            .prop_map(|steps| Op::ElementwiseRegion { steps })
            .boxed(),
        Just(Op::FusedSwiGLU { gate_first: false }).boxed(),
        Just(Op::MatMul).boxed(),
        Just(Op::FusedMatMulBiasAct {
            act: Some(Activation::Silu),
        })
        .boxed(),
        (scheme(), small(), small())
            .prop_map(|(scheme, n, k)| Op::DequantMatMul { scheme, n, k })
            .boxed(),
        Just(Op::GroupedMatMul).boxed(),
        (scheme(), small(), small(), small())
            .prop_map(|(scheme, num_experts, n, k)| Op::DequantGroupedMatMul {
                scheme,
                num_experts,
                n,
                k,
            })
            .boxed(),
        (fmt, layout())
            .prop_map(|(f, layout)| Op::ScaledMatMul {
                lhs_fmt: f,
                rhs_fmt: f,
                layout,
            })
            .boxed(),
        (fmt, layout())
            .prop_map(|(fmt, layout)| Op::ScaledQuantize { fmt, layout })
            .boxed(),
        (fmt, layout())
            .prop_map(|(fmt, layout)| Op::ScaledDequantize { fmt, layout })
            .boxed(),
        (fmt, layout())
            .prop_map(|(fmt, layout)| Op::ScaledQuantScale { fmt, layout })
            .boxed(),
        any_f32().prop_map(|eps| Op::LayerNorm { eps }).boxed(),
        any_f32().prop_map(|eps| Op::RmsNorm { eps }).boxed(),
        (small(), any_f32())
            .prop_map(|(num_groups, eps)| Op::GroupNorm { num_groups, eps })
            .boxed(),
        any_f32().prop_map(|eps| Op::LayerNorm2d { eps }).boxed(),
        (any_f32(), any::<bool>())
            .prop_map(|(eps, has_bias)| Op::FusedResidualLN { eps, has_bias })
            .boxed(),
        (any_f32(), any::<bool>())
            .prop_map(|(eps, has_bias)| Op::FusedResidualRmsNorm { eps, has_bias })
            .boxed(),
        (any_f32(), any::<bool>())
            .prop_map(|(eps, layer_norm)| Op::AdaLayerNorm { eps, layer_norm })
            .boxed(),
        Just(Op::GatedResidual).boxed(),
        (
            small(),
            small(),
            small(),
            mask.clone(),
            small(),
            attn_layout,
        )
            .prop_map(
                |(heads, kv_heads, head_dim, mask, window, layout)| Op::Attention {
                    heads,
                    kv_heads,
                    head_dim,
                    mask,
                    window,
                    layout,
                    score_scale: None,
                    softcap: Some(30.0),
                    dynamic_kv_len: false,
                },
            )
            .boxed(),
        (small(), small(), mask, any::<bool>())
            .prop_map(|(heads, head_dim, mask, rope)| Op::FusedAttentionBlock {
                heads,
                head_dim,
                mask,
                rope,
            })
            .boxed(),
        (small(), small(), any::<bool>())
            .prop_map(|(head_dim, n_rot, per_token)| Op::Rope {
                kind: RopeKind::Neox,
                head_dim,
                n_rot,
                per_token,
            })
            .boxed(),
        (small(), small(), small(), small(), small())
            .prop_map(
                |(end_x, end_y, head_dim, num_heads, repeat_factor)| Op::AxialRope2d {
                    end_x,
                    end_y,
                    head_dim,
                    num_heads,
                    theta: 100.0,
                    repeat_factor,
                },
            )
            .boxed(),
        prop::collection::vec(any_dim(), 0..5)
            .prop_map(|dims| Op::Reshape { dims })
            .boxed(),
        prop::collection::vec(small(), 0..5)
            .prop_map(|perm| Op::Transpose { perm })
            .boxed(),
        prop::collection::vec(any_dim(), 0..5)
            .prop_map(|dims| Op::Expand { dims })
            .boxed(),
        (axis(), small(), small())
            .prop_map(|(axis, start, len)| Op::Narrow { axis, start, len })
            .boxed(),
        axis().prop_map(|axis| Op::Concat { axis }).boxed(),
        Just(Op::Gather).boxed(),
        axis().prop_map(|axis| Op::GatherAxis { axis }).boxed(),
        small()
            .prop_map(|out_dim| Op::ScatterAdd { out_dim })
            .boxed(),
        prop::collection::vec(axis(), 0..4)
            .prop_map(|axes| Op::Reverse { axes })
            .boxed(),
        Just(Op::ResizeNearest2x).boxed(),
        Just(Op::ScatterNd).boxed(),
        axis().prop_map(|axis| Op::ScatterElements { axis }).boxed(),
        small()
            .prop_map(|batch_dims| Op::GatherNd { batch_dims })
            .boxed(),
        axis().prop_map(|axis| Op::GatherElements { axis }).boxed(),
        (prop::collection::vec(axis(), 0..4), any::<bool>())
            .prop_map(|(axes, keep_dims)| Op::Reduce {
                kind: ReduceOp::Mean,
                axes,
                keep_dims,
            })
            .boxed(),
        axis().prop_map(|axis| Op::Softmax { axis }).boxed(),
        Just(Op::SoftmaxCrossEntropy).boxed(),
        axis()
            .prop_map(|axis| Op::Cumsum {
                axis,
                exclusive: true,
            })
            .boxed(),
        (small(), axis())
            .prop_map(|(k, axis)| Op::TopK { k, axis })
            .boxed(),
        (axis(), any::<bool>())
            .prop_map(|(axis, keep_dims)| Op::ArgMax { axis, keep_dims })
            .boxed(),
        (axis(), any::<bool>())
            .prop_map(|(axis, keep_dims)| Op::ArgMin { axis, keep_dims })
            .boxed(),
        (any_f32(), any_f32())
            .prop_map(|(temperature, top_p)| Op::Sample {
                temperature,
                top_k: 0,
                top_p,
                seed: 1,
            })
            .boxed(),
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8000))]

    /// Any op on any operands either infers a shape or fails with an error
    /// that names the op: never a panic. Every prefix of the operand list is
    /// tried, so each op also meets its own arity.
    #[test]
    fn inference_never_panics(
        op in any_op(),
        shapes in prop::collection::vec(any_shape(), 0..7),
    ) {
        // shapes past the byte limit are refused as inputs already (and
        // must say so with the input op's tag)
        let mut fit = Vec::new();
        for s in shapes {
            match s.check_bytes("input", "x", &|_| None) {
                Ok(()) => fit.push(s),
                Err(e) => prop_assert!(e.to_string().starts_with("[input] "), "{}", e),
            }
        }
        let (mut g, ids) = inputs(&fit);
        let name = op.name();
        for n in 0..=ids.len() {
            if let Err(e) = g.add(op.clone(), &ids[..n], "") {
                let m = e.to_string();
                prop_assert!(m.starts_with(&format!("[{name}] ")), "{}", m);
            }
        }
    }
}
