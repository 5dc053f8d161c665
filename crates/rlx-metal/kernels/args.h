// args.h -- argument structs of rlx's Metal kernels, shared by every
// kernels/*.metal file and mirrored field for field by the #[repr(C)]
// structs in src/metal/args.rs. Sizes and alignments are asserted here and
// there (and msl-sim checks each dispatch's args bytes against the size the
// kernel reads).
//
// Binding convention: the args struct is [[buffer(0)]] (setBytes); the
// operands follow as [[buffer(1)]], [[buffer(2)]], ... in the order each
// kernel's header comment lists. Only 4-byte fields: no padding, the same
// layout in MSL, C++ and Rust.
//
// This header is inlined into each kernel source by
// rlx_metal::metal::kernels::source (Metal compiles from a string, so
// there is no include path).
#ifndef RLX_METAL_ARGS_H
#define RLX_METAL_ARGS_H

// Unary activation codes (UnaryArgs::op), in rlx_ir::op::Activation order.
enum RlxAct : uint {
    RLX_ACT_GELU = 0,
    RLX_ACT_GELU_APPROX = 1,
    RLX_ACT_SILU = 2,
    RLX_ACT_RELU = 3,
    RLX_ACT_SIGMOID = 4,
    RLX_ACT_TANH = 5,
    RLX_ACT_EXP = 6,
    RLX_ACT_LOG = 7,
    RLX_ACT_SQRT = 8,
    RLX_ACT_RSQRT = 9,
    RLX_ACT_NEG = 10,
    RLX_ACT_ABS = 11,
    RLX_ACT_SIN = 12,
    RLX_ACT_COS = 13,
    RLX_ACT_TAN = 14,
    RLX_ACT_ATAN = 15,
    RLX_ACT_ROUND = 16,
};

// Binary op codes (BinaryArgs::op, BroadcastArgs::op), in
// rlx_ir::op::BinaryOp order.
enum RlxBin : uint {
    RLX_BIN_ADD = 0,
    RLX_BIN_SUB = 1,
    RLX_BIN_MUL = 2,
    RLX_BIN_DIV = 3,
    RLX_BIN_MAX = 4,
    RLX_BIN_MIN = 5,
    RLX_BIN_POW = 6,
};

// Reduce op codes (ReduceArgs::op), in rlx_ir::op::ReduceOp order.
enum RlxReduce : uint {
    RLX_RED_SUM = 0,
    RLX_RED_MEAN = 1,
    RLX_RED_MAX = 2,
    RLX_RED_MIN = 3,
    RLX_RED_PROD = 4,
};

// Highest rank of a broadcasting binary op.
#define RLX_MAX_RANK 8

// elementwise.metal unary_*: dst[i] = act(src[i]), i < len.
struct UnaryArgs {
    uint len;
    uint op;  // RlxAct
};

// elementwise.metal cast_*: dst[i] = convert(src[i]), i < len.
struct CastArgs {
    uint len;
};

// binary.metal binary_*: dst[i] = lhs[i] op rhs[i], i < len.
struct BinaryArgs {
    uint len;
    uint op;  // RlxBin
};

// binary.metal binary_broadcast_*: dense dst with out_dims (len elements);
// each input addressed through per-axis element strides (0 = broadcast).
// Entries past `rank` are ignored.
struct BroadcastArgs {
    uint len;
    uint op;  // RlxBin
    uint rank;
    uint _pad;  // keeps the arrays 16-byte aligned for readers
    uint out_dims[RLX_MAX_RANK];
    uint lhs_strides[RLX_MAX_RANK];
    uint rhs_strides[RLX_MAX_RANK];
};

// norm.metal: row norms over [rows, h].
struct RowNormArgs {
    uint rows;
    uint h;
    float eps;
    uint has_bias;  // residual norms: add bias[h] to x + res
};

// softmax.metal: softmax over the last axis of [rows, cols], in place.
struct SoftmaxArgs {
    uint rows;
    uint cols;
};

// Most pieces of one split / concat dispatch.
#define RLX_MAX_PIECES 8

// shape.metal copy_*: dst[i] = src[i], i < len words.
struct CopyArgs {
    uint len;
};

// shape.metal narrow_*: dst [rows, len] = src [rows, src_cols][:, start ..]
// (words).
struct NarrowArgs {
    uint rows;
    uint src_cols;
    uint start;
    uint len;
};

// shape.metal split_*: segment s < count writes dst_s [rows, len[s]] =
// src [rows, src_cols][:, start[s] ..] (words).
struct SplitArgs {
    uint rows;
    uint src_cols;
    uint count;
    uint _pad;
    uint start[RLX_MAX_PIECES];
    uint len[RLX_MAX_PIECES];
};

// shape.metal concat_*: input k < count, [outer, cols[k]], lands at
// dst [outer, dst_cols][:, at[k] ..] (words).
struct ConcatArgs {
    uint outer;
    uint dst_cols;
    uint count;
    uint _pad;
    uint at[RLX_MAX_PIECES];
    uint cols[RLX_MAX_PIECES];
};

// shape.metal transpose_u32: dense dst over out_dims (len words) reads
// src[sum_d i_d * in_strides[d]]; entries past `rank` are ignored.
struct StridedArgs {
    uint len;
    uint rank;
    uint _pad[2];
    uint out_dims[RLX_MAX_RANK];
    uint in_strides[RLX_MAX_RANK];
};

// shape.metal reverse_*: flip the axes whose bit is set in rev_mask
// (bit d = axis d) of dense [dims] (len elements).
struct ReverseArgs {
    uint len;
    uint rank;
    uint rev_mask;
    uint _pad;
    uint dims[RLX_MAX_RANK];
};

// indexing.metal gather_*: dst [outer, num_idx, trailing] =
// table [outer, axis_dim, trailing][:, idx, :] (trailing in words);
// signed_idx: negative indices count from the end.
struct GatherArgs {
    uint outer;
    uint axis_dim;
    uint num_idx;
    uint trailing;
    uint signed_idx;
    uint _pad[3];
};

// indexing.metal scatter_add_f32: dst [out_dim, trailing] = 0, then
// dst[idx[i], :] += updates[i, :] for i < num.
struct ScatterAddArgs {
    uint num;
    uint out_dim;
    uint trailing;
};

// indexing.metal scatter_nd_*: tuple t < tuples of q indices into
// dims[..q] picks a block of `block` words; dst[block] = updates[t].
struct ScatterNdArgs {
    uint tuples;
    uint q;
    uint block;
    uint _pad;
    uint dims[RLX_MAX_RANK];
};

// reduce.metal reduce_*: dst [outer, inner] = op over the middle axis of
// src [outer, reduced, inner].
struct ReduceArgs {
    uint outer;
    uint reduced;
    uint inner;
    uint op;  // RlxReduce
};

// reduce.metal argreduce_*: dst (i32) [outer, inner] = first arg max / min.
struct ArgReduceArgs {
    uint outer;
    uint reduced;
    uint inner;
    uint is_max;
};

// reduce.metal cumsum_f32: running sum along the last axis of [rows, cols].
struct CumsumArgs {
    uint rows;
    uint cols;
    uint exclusive;
};

// conv.metal depthwise_conv1d_bsc_f32: causal depthwise conv over the seq
// axis of [batch, width, channels], out_seq = width - k + 1.
struct DwConv1dArgs {
    uint batch;
    uint width;
    uint out_seq;
    uint channels;
    uint k;
    uint silu;
};

// reduce.metal topk_f32: indices of the k first-ranked entries of each
// row of [outer, n] (descending, ties by index, NaN last).
struct TopKArgs {
    uint outer;
    uint n;
    uint k;
};

// norm_fused.metal ada_layer_norm_* / gated_residual_*: [rows, h] rows
// modulated by row rlx_mod_row(r) of [mod_rows, h] operands: r when `same`,
// else sum over lead dims i (x_lead, innermost last) of
// (r's index along i) * mod_stride[i] (0 on broadcast dims).
struct ModNormArgs {
    uint rows;
    uint h;
    float eps;
    uint layer_norm;  // ada: 1 LayerNorm, 0 RMSNorm
    uint same;
    uint rank;
    uint _pad[2];
    uint x_lead[RLX_MAX_RANK];
    uint mod_stride[RLX_MAX_RANK];
};

// norm_fused.metal group_norm_*: `count` groups (samples x groups) of cg
// channels x hw positions, contiguous; channel of element i of group k is
// (k % groups) * cg + i / hw.
struct GroupNormArgs {
    uint count;
    uint groups;
    uint cg;
    uint hw;
    float eps;
};

static_assert(sizeof(UnaryArgs) == 8 && alignof(UnaryArgs) == 4, "UnaryArgs layout");
static_assert(sizeof(CastArgs) == 4 && alignof(CastArgs) == 4, "CastArgs layout");
static_assert(sizeof(BinaryArgs) == 8 && alignof(BinaryArgs) == 4, "BinaryArgs layout");
static_assert(sizeof(BroadcastArgs) == 112 && alignof(BroadcastArgs) == 4, "BroadcastArgs layout");
static_assert(sizeof(RowNormArgs) == 16 && alignof(RowNormArgs) == 4, "RowNormArgs layout");
static_assert(sizeof(SoftmaxArgs) == 8 && alignof(SoftmaxArgs) == 4, "SoftmaxArgs layout");
static_assert(sizeof(CopyArgs) == 4 && alignof(CopyArgs) == 4, "CopyArgs layout");
static_assert(sizeof(NarrowArgs) == 16 && alignof(NarrowArgs) == 4, "NarrowArgs layout");
static_assert(sizeof(SplitArgs) == 80 && alignof(SplitArgs) == 4, "SplitArgs layout");
static_assert(sizeof(ConcatArgs) == 80 && alignof(ConcatArgs) == 4, "ConcatArgs layout");
static_assert(sizeof(StridedArgs) == 80 && alignof(StridedArgs) == 4, "StridedArgs layout");
static_assert(sizeof(ReverseArgs) == 48 && alignof(ReverseArgs) == 4, "ReverseArgs layout");
static_assert(sizeof(GatherArgs) == 32 && alignof(GatherArgs) == 4, "GatherArgs layout");
static_assert(sizeof(ScatterAddArgs) == 12 && alignof(ScatterAddArgs) == 4, "ScatterAddArgs layout");
static_assert(sizeof(ScatterNdArgs) == 48 && alignof(ScatterNdArgs) == 4, "ScatterNdArgs layout");
static_assert(sizeof(ReduceArgs) == 16 && alignof(ReduceArgs) == 4, "ReduceArgs layout");
static_assert(sizeof(ArgReduceArgs) == 16 && alignof(ArgReduceArgs) == 4, "ArgReduceArgs layout");
static_assert(sizeof(CumsumArgs) == 12 && alignof(CumsumArgs) == 4, "CumsumArgs layout");
static_assert(sizeof(DwConv1dArgs) == 24 && alignof(DwConv1dArgs) == 4, "DwConv1dArgs layout");
static_assert(sizeof(TopKArgs) == 12 && alignof(TopKArgs) == 4, "TopKArgs layout");
static_assert(sizeof(ModNormArgs) == 96 && alignof(ModNormArgs) == 4, "ModNormArgs layout");
static_assert(sizeof(GroupNormArgs) == 20 && alignof(GroupNormArgs) == 4, "GroupNormArgs layout");

#endif  // RLX_METAL_ARGS_H
