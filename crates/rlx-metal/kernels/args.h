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

// attention.metal: SDPA / fused RoPE + SDPA. Row (b, i, h) of q / out
// starts at b·q_sb + i·q_ss + h·q_sh elements (out: o_*), row (b, j, g) of
// k / v at b·kv_sb + j·kv_ss + g·kv_sh. scale is resolved (never 0).
struct AttnArgs {
    uint batch;
    uint seq;
    uint kv_seq;
    uint heads;
    uint kv_heads;
    uint head_dim;
    uint mask_kind;   // 0 none, 1 causal, 2 custom, 3 bias, 4 sliding window
    uint window;
    float scale;
    float softcap;    // 0: off
    uint has_kv_len;  // buffer(5) holds the run-time key length
    uint rope;        // NeoX-rotate q and k (FusedAttn)
    uint q_sb;
    uint q_ss;
    uint q_sh;
    uint kv_sb;
    uint kv_ss;
    uint kv_sh;
    uint o_sb;
    uint o_ss;
    uint o_sh;
    uint bk;          // prefill: keys per staged block (16 or 32)
};

// rope.metal: rotary embedding of `rows` token rows of `hidden` elements
// (source rows `src_stride` apart) into dense dst.
struct RopeArgs {
    uint len;         // rows · hidden
    uint seq;
    uint hidden;
    uint head_dim;
    uint n_rot;
    uint src_stride;
    uint per_token;   // tables [rows, n_rot/2] instead of [seq, n_rot/2]
    uint interleaved; // GPT-J pairs (2i, 2i+1), else NeoX (i, i + n_rot/2)
};

static_assert(sizeof(UnaryArgs) == 8 && alignof(UnaryArgs) == 4, "UnaryArgs layout");
static_assert(sizeof(CastArgs) == 4 && alignof(CastArgs) == 4, "CastArgs layout");
static_assert(sizeof(BinaryArgs) == 8 && alignof(BinaryArgs) == 4, "BinaryArgs layout");
static_assert(sizeof(BroadcastArgs) == 112 && alignof(BroadcastArgs) == 4, "BroadcastArgs layout");
static_assert(sizeof(RowNormArgs) == 16 && alignof(RowNormArgs) == 4, "RowNormArgs layout");
static_assert(sizeof(SoftmaxArgs) == 8 && alignof(SoftmaxArgs) == 4, "SoftmaxArgs layout");
static_assert(sizeof(AttnArgs) == 88 && alignof(AttnArgs) == 4, "AttnArgs layout");
static_assert(sizeof(RopeArgs) == 32 && alignof(RopeArgs) == 4, "RopeArgs layout");

#endif  // RLX_METAL_ARGS_H
