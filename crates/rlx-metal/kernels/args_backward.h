// args_backward.h -- argument structs of backward.metal (the training
// gradients), split from args.h to keep each header readable; same rules:
// only 4-byte fields, mirrored field for field by the #[repr(C)] structs in
// src/metal/args_backward.rs, sizes asserted here and in args_tests.rs.
// Inlined by
// rlx_metal::metal::kernels::source after args.h.
#ifndef RLX_METAL_ARGS_BACKWARD_H
#define RLX_METAL_ARGS_BACKWARD_H

// backward.metal attention_bwd_f32: operands [b, heads, L, d] (bhsd) or
// [b, L, heads, d]; mask kinds as AttnArgs; wrt 0 q, 1 k, 2 v; scale 1/sqrt(d).
struct AttnBwdArgs {
    uint batch;
    uint seq;
    uint kv_seq;
    uint heads;
    uint head_dim;
    uint mask_kind;
    uint window;
    uint wrt;
    uint bhsd;
    float scale;
};

// backward.metal rms_norm_bwd_f32: x / dy [rows, h]; wrt 0 input, 1 gamma, 2 beta.
struct RmsBwdArgs {
    uint rows;
    uint h;
    float eps;
    uint wrt;
};

// backward.metal rope_bwd_f32: [batch, seq, hidden], cos / sin cos_len floats.
struct RopeBwdArgs {
    uint batch;
    uint seq;
    uint hidden;
    uint head_dim;
    uint n_rot;
    uint cos_len;
};

// backward.metal cumsum_bwd_f32: [rows, cols].
struct CumsumBwdArgs {
    uint rows;
    uint cols;
    uint exclusive;
};

// backward.metal gather_bwd_f32: dy [outer, num_idx, trailing] -> [outer, axis_dim, trailing].
struct GatherBwdArgs {
    uint outer;
    uint axis_dim;
    uint num_idx;
    uint trailing;
};

// backward.metal conv2d gradients: x [n, c, h, w], y [n, c_out, h_out, w_out].
struct Window2dArgs {
    uint n;
    uint c;
    uint h;
    uint w;
    uint c_out;
    uint h_out;
    uint w_out;
    uint kh;
    uint kw;
    uint sh;
    uint sw;
    uint ph;
    uint pw;
    uint dh;
    uint dw;
    uint groups;
};

// backward.metal ada_ln_bwd_* / gated_residual_bwd_*: mod_rows rows of h, each
// covering seq_per_mod rows.
struct ModBwdArgs {
    uint h;
    uint seq_per_mod;
    uint mod_rows;
    float eps;
    uint layer_norm;
};

// backward.metal softmax_ce_*: logits [n, c], labels i32 [n].
struct SceArgs {
    uint n;
    uint c;
};

static_assert(sizeof(UnaryArgs) == 8 && alignof(UnaryArgs) == 4, "UnaryArgs layout");
static_assert(sizeof(CastArgs) == 4 && alignof(CastArgs) == 4, "CastArgs layout");
static_assert(sizeof(BinaryArgs) == 8 && alignof(BinaryArgs) == 4, "BinaryArgs layout");
static_assert(sizeof(BroadcastArgs) == 112 && alignof(BroadcastArgs) == 4, "BroadcastArgs layout");
static_assert(sizeof(RowNormArgs) == 16 && alignof(RowNormArgs) == 4, "RowNormArgs layout");
static_assert(sizeof(SoftmaxArgs) == 8 && alignof(SoftmaxArgs) == 4, "SoftmaxArgs layout");

static_assert(sizeof(AttnBwdArgs) == 40 && alignof(AttnBwdArgs) == 4, "AttnBwdArgs layout");
static_assert(sizeof(RmsBwdArgs) == 16 && alignof(RmsBwdArgs) == 4, "RmsBwdArgs layout");
static_assert(sizeof(RopeBwdArgs) == 24 && alignof(RopeBwdArgs) == 4, "RopeBwdArgs layout");
static_assert(sizeof(CumsumBwdArgs) == 12 && alignof(CumsumBwdArgs) == 4, "CumsumBwdArgs layout");
static_assert(sizeof(GatherBwdArgs) == 16 && alignof(GatherBwdArgs) == 4, "GatherBwdArgs layout");
static_assert(sizeof(Window2dArgs) == 64 && alignof(Window2dArgs) == 4, "Window2dArgs layout");
static_assert(sizeof(ModBwdArgs) == 20 && alignof(ModBwdArgs) == 4, "ModBwdArgs layout");
static_assert(sizeof(SceArgs) == 8 && alignof(SceArgs) == 4, "SceArgs layout");

#endif  // RLX_METAL_ARGS_BACKWARD_H
