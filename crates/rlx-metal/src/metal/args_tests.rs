//! Tests of `metal::args`: header / Rust layouts and codes agree.
use super::*;
use rlx_ir::op::{ALL_ACTIVATIONS, ALL_BINARY_OPS};

/// `static_assert(sizeof(Name) == N && alignof(Name) == 4` lines of args.h
/// and args_backward.h.
fn header_sizes() -> Vec<(String, usize)> {
    super::super::kernels::ARGS_H
        .lines()
        .chain(super::super::kernels::ARGS_BACKWARD_H.lines())
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("static_assert(sizeof(")?;
            let (name, rest) = rest.split_once(')')?;
            let n = rest.trim().strip_prefix("==")?.split_whitespace().next()?;
            assert!(l.contains(&format!("alignof({name}) == 4")), "{l}");
            Some((name.to_string(), n.parse().ok()?))
        })
        .collect()
}

#[test]
fn header_and_rust_assert_the_same_layouts() {
    use std::mem::size_of;
    let rust = [
        ("UnaryArgs", size_of::<UnaryArgs>()),
        ("CastArgs", size_of::<CastArgs>()),
        ("BinaryArgs", size_of::<BinaryArgs>()),
        ("BroadcastArgs", size_of::<BroadcastArgs>()),
        ("RowNormArgs", size_of::<RowNormArgs>()),
        ("SoftmaxArgs", size_of::<SoftmaxArgs>()),
        ("QuantArgs", size_of::<QuantArgs>()),
        ("QuantFormatArgs", size_of::<QuantFormatArgs>()),
        ("ScaledArgs", size_of::<ScaledArgs>()),
        ("MlpArgs", size_of::<MlpArgs>()),
        ("MoeArgs", size_of::<MoeArgs>()),
        ("HeadGemvArgs", size_of::<HeadGemvArgs>()),
        ("MatmulArgs", size_of::<MatmulArgs>()),
        ("BiasAddArgs", size_of::<BiasAddArgs>()),
        ("RegionArgs", size_of::<RegionArgs>()),
        ("FusedActArgs", size_of::<FusedActArgs>()),
        ("CompareArgs", size_of::<CompareArgs>()),
        ("WhereArgs", size_of::<WhereArgs>()),
        ("SwigluArgs", size_of::<SwigluArgs>()),
        ("AttnArgs", size_of::<AttnArgs>()),
        ("RopeArgs", size_of::<RopeArgs>()),
        ("CopyArgs", size_of::<CopyArgs>()),
        ("NarrowArgs", size_of::<NarrowArgs>()),
        ("SplitArgs", size_of::<SplitArgs>()),
        ("ConcatArgs", size_of::<ConcatArgs>()),
        ("StridedArgs", size_of::<StridedArgs>()),
        ("ReverseArgs", size_of::<ReverseArgs>()),
        ("GatherArgs", size_of::<GatherArgs>()),
        ("ScatterAddArgs", size_of::<ScatterAddArgs>()),
        ("ScatterNdArgs", size_of::<ScatterNdArgs>()),
        ("GatherElemArgs", size_of::<GatherElemArgs>()),
        ("ReduceArgs", size_of::<ReduceArgs>()),
        ("ArgReduceArgs", size_of::<ArgReduceArgs>()),
        ("CumsumArgs", size_of::<CumsumArgs>()),
        ("DwConv1dArgs", size_of::<DwConv1dArgs>()),
        ("TopKArgs", size_of::<TopKArgs>()),
        ("ModNormArgs", size_of::<ModNormArgs>()),
        ("GroupNormArgs", size_of::<GroupNormArgs>()),
        ("GdnArgs", size_of::<GdnArgs>()),
        ("SsmArgs", size_of::<SsmArgs>()),
        ("Mamba2Args", size_of::<Mamba2Args>()),
        ("RnnArgs", size_of::<RnnArgs>()),
        ("Conv2dArgs", size_of::<Conv2dArgs>()),
        ("Pool2dArgs", size_of::<Pool2dArgs>()),
        ("Resize2xArgs", size_of::<Resize2xArgs>()),
        ("LayerNorm2dArgs", size_of::<LayerNorm2dArgs>()),
        ("RngArgs", size_of::<RngArgs>()),
        ("VqArgs", size_of::<VqArgs>()),
        ("SpdArgs", size_of::<SpdArgs>()),
        ("SpdBiMapArgs", size_of::<SpdBiMapArgs>()),
        ("AxialRopeArgs", size_of::<AxialRopeArgs>()),
        ("FftArgs", size_of::<FftArgs>()),
        ("LogMelArgs", size_of::<LogMelArgs>()),
        ("WelchArgs", size_of::<WelchArgs>()),
        ("SplatArgs", size_of::<SplatArgs>()),
        ("SplatBwdArgs", size_of::<SplatBwdArgs>()),
        ("AttnBwdArgs", size_of::<AttnBwdArgs>()),
        ("RmsBwdArgs", size_of::<RmsBwdArgs>()),
        ("RopeBwdArgs", size_of::<RopeBwdArgs>()),
        ("CumsumBwdArgs", size_of::<CumsumBwdArgs>()),
        ("GatherBwdArgs", size_of::<GatherBwdArgs>()),
        ("Window2dArgs", size_of::<Window2dArgs>()),
        ("ModBwdArgs", size_of::<ModBwdArgs>()),
        ("SceArgs", size_of::<SceArgs>()),
    ];
    let header = header_sizes();
    assert_eq!(header.len(), rust.len(), "{header:?}");
    for (name, size) in rust {
        let h = header.iter().find(|(n, _)| n == name);
        assert_eq!(h.map(|x| x.1), Some(size), "{name}");
    }
}

#[test]
fn codes_match_the_header_enums() {
    for a in ALL_ACTIVATIONS {
        let line = format!("RLX_ACT_{} = {},", a.name().to_uppercase(), act_code(a));
        assert!(super::super::kernels::ARGS_H.contains(&line), "{line}");
    }
    for op in ALL_BINARY_OPS {
        // the region pass decodes sub-codes by indexing ALL_BINARY_OPS
        assert_eq!(ALL_BINARY_OPS[binary_code(op) as usize], op);
        let line = format!(
            "RLX_BIN_{} = {},",
            op.name().to_uppercase(),
            binary_code(op)
        );
        assert!(super::super::kernels::ARGS_H.contains(&line), "{line}");
    }
    use rlx_ir::op::CmpOp;
    for op in [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ] {
        let line = format!("RLX_CMP_{} = {},", op.name().to_uppercase(), cmp_code(op));
        assert!(super::super::kernels::ARGS_H.contains(&line), "{line}");
    }
}

#[test]
fn reduce_codes_match_the_header() {
    use rlx_ir::op::ReduceOp;
    for op in [
        ReduceOp::Sum,
        ReduceOp::Mean,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
    ] {
        let line = format!(
            "RLX_RED_{} = {},",
            op.name().to_uppercase(),
            reduce_code(op)
        );
        assert!(super::super::kernels::ARGS_H.contains(&line), "{line}");
    }
}

#[test]
fn as_bytes_is_the_field_order() {
    let a = RowNormArgs {
        rows: 3,
        h: 5,
        eps: 1e-6,
        has_bias: 1,
    };
    let b = a.as_bytes();
    assert_eq!(&b[0..4], 3u32.to_ne_bytes());
    assert_eq!(&b[4..8], 5u32.to_ne_bytes());
    assert_eq!(&b[8..12], 1e-6f32.to_ne_bytes());
    assert_eq!(&b[12..16], 1u32.to_ne_bytes());
}
