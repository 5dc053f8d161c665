// args.h -- argument structs of rlx's Metal kernels, shared by every
// kernels/*.metal file and mirrored field for field by the #[repr(C)]
// structs in src/metal/args.rs. Sizes and alignments are asserted here and
// there (and msl-sim checks each dispatch's args bytes against the size the
// kernel reads). The structs of backward.metal are in args_backward.h.
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

// Comparison codes (CompareArgs::op), in rlx_ir::op::CmpOp order.
enum RlxCmp : uint {
    RLX_CMP_EQ = 0,
    RLX_CMP_NE = 1,
    RLX_CMP_LT = 2,
    RLX_CMP_LE = 3,
    RLX_CMP_GT = 4,
    RLX_CMP_GE = 5,
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

// quant.metal gemv_* / gemm_*: dst[m, n] = x[m, k] @ dequant(w)ᵀ, w n rows
// of row_bytes packed GGUF bytes; x / dst f16 when the flags are 1.
struct QuantArgs {
    uint m;
    uint k;
    uint n;
    uint row_bytes;
    uint x_f16;
    uint dst_f16;
};

// quant.metal gate_up_* / down_residual_*: fused decode-MLP GEMVs over n
// packed rows of row_bytes bytes (k elements); x / dst / res f16 when the
// flags are 1; op: 0 silu, 1 tanh-GELU (gate_up only).
struct MlpArgs {
    uint k;
    uint n;
    uint row_bytes;
    uint x_f16;
    uint dst_f16;
    uint res_f16;
    uint op;
};

// moe.metal grouped_*: row i of x [m, k] (f32) times expert idx[i] (i32)
// of a stack of num_experts experts (f32 [E, k, n], or GGUF rows
// [E, n, row_bytes]) into dst [m, n] (f32).
struct MoeArgs {
    uint m;
    uint k;
    uint n;
    uint num_experts;
    uint row_bytes;  // GGUF kernels only
};

// matmul.metal gemm_* / gemv_*: c[z] = act(a[z] @ b[z] + bias), z < batch;
// a[z] starts a_batch_stride elements after a[z-1] (0 = one shared
// matrix), likewise b; c[z] is dense [m, n].
struct MatmulArgs {
    uint m;
    uint k;
    uint n;
    uint batch;
    uint a_batch_stride;
    uint b_batch_stride;
    uint has_bias;
    uint has_act;
    uint act;  // RlxAct, when has_act
};

// matmul.metal bias_add_*: dst[i, j] = src[i, j] + bias[j] over [m, n].
struct BiasAddArgs {
    uint m;
    uint n;
};

// Most inputs / steps / batch input slots of a region (thunk::region).
#define RLX_REGION_INPUTS 16
#define RLX_REGION_STEPS 32
#define RLX_REGION_SLOTS 64

// region.metal region_f32: num_batch slices of slice_len elements, slice s
// written at dst + s * slice_elems. Slice s's input i is the f32 arena
// element index input_offs[s * n_in + i]; it reads 1 element (bit i of
// scalar_mask), element g % modulus[i] (modulus[i] > 0) or element g.
// chain: num_steps steps of [kind, sub, a, b] (thunk::region docs).
struct RegionArgs {
    uint slice_len;
    uint num_batch;
    uint num_steps;
    uint n_in;
    uint slice_elems;
    uint scalar_mask;
    uint modulus[RLX_REGION_INPUTS];
    uint input_offs[RLX_REGION_SLOTS];
    uint chain[4 * RLX_REGION_STEPS];
};

// region.metal binary_act_* / ternary_act_*:
// dst = act((lhs op0 rhs0) op1 rhs1), the ternary part for ternary_act
// only, act when has_act (fma = ternary mul, add without act).
struct FusedActArgs {
    uint len;
    uint op0;  // RlxBin
    uint op1;  // RlxBin
    uint has_act;
    uint act;  // RlxAct
};

// region.metal compare_f32: dst = (lhs op rhs) ? 1 : 0; a scalar operand
// is its element 0 everywhere.
struct CompareArgs {
    uint len;
    uint op;  // RlxCmp
    uint lhs_scalar;
    uint rhs_scalar;
};

// region.metal where_f32: dst = cond != 0 ? on_true : on_false.
struct WhereArgs {
    uint len;
    uint cond_scalar;
    uint true_scalar;
    uint false_scalar;
};

// region.metal swiglu_*: src [rows, 2 n_half] -> dst [rows, n_half],
// total = rows * n_half; value * silu(gate), gate the first half of a row
// when gate_first.
struct SwigluArgs {
    uint total;
    uint n_half;
    uint gate_first;
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
    uint has_kv_len;  // buffer(5) holds the run-time key length (1), one per batch entry (2)
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

// indexing.metal gather_elements_*: ONNX GatherElements over `rank` dims:
// dst[p] (p < len, dense over idx_dims) = data element p with the `axis`
// coordinate replaced by idx[p] (negative counts from the end; data
// elements data_strides apart per dim).
struct GatherElemArgs {
    uint len;
    uint rank;
    uint axis;
    uint axis_dim;
    uint idx_dims[RLX_MAX_RANK];
    uint data_strides[RLX_MAX_RANK];
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

// gdn.metal gated_delta_net_{f32,f16}: gated DeltaNet recurrence over
// [batch, seq, heads * n] with a [batch, heads, n, n] state.
struct GdnArgs {
    uint batch;
    uint seq;
    uint heads;
    uint n;
};

// ssm.metal selective_scan_f32: Mamba scan over [batch, seq, hidden] with
// an n-wide state per channel; has_state: start from / write back state.
struct SsmArgs {
    uint batch;
    uint seq;
    uint hidden;
    uint n;
    uint has_state;
};

// ssm.metal mamba2_f32: Mamba-2 SSD over [batch, seq, heads * head_dim]
// with a [head_dim, n] state per head; has_state as SsmArgs.
struct Mamba2Args {
    uint batch;
    uint seq;
    uint heads;
    uint head_dim;
    uint n;
    uint has_state;
};

// recurrent.metal {lstm,gru,rnn}_f32: packed multi-layer recurrences (see
// the file header): ih_cols0 / ih_cols are the row strides of layer 0's /
// later layers' w_ih blocks, out_rows the rows of dst per batch item.
struct RnnArgs {
    uint batch;
    uint seq;
    uint input_size;
    uint hidden;
    uint layers;
    uint dirs;
    uint ih_cols0;
    uint ih_cols;
    uint out_rows;
    uint carry;
    uint relu;
    uint _pad;
};

// rng.metal rng_{uniform,normal}_f32: Philox 4x32-10 fills (rlx_ir::rng),
// key = key_hi:key_lo, counter words 2-3 = offset_hi:offset_lo;
// dst[i] = a + b * uniform (a = low, b = high - low) or a + b * normal
// (a = mean, b = scale).
struct RngArgs {
    uint len;
    uint key_lo;
    uint key_hi;
    uint offset_lo;
    uint offset_hi;
    float a;
    float b;
    uint _pad;
};

// vq.metal vq_assign_f32: x [n, d], codebook [k, d] -> i32 [n];
// metric 0 L2, 1 dot, 2 cosine.
struct VqArgs {
    uint n;
    uint d;
    uint k;
    uint metric;
};

// spd.metal spd_eig_bwd_f32: Daleckii–Krein gradient of re_eig / log_eig
// over [batch, n, n], one thread per matrix.
struct SpdArgs {
    uint batch;
    uint n;
    uint kind;   // 0 re_eig, 1 log_eig
    float eps;   // re_eig floor
};

// spd.metal spd_bimap_bwd_f32: bi_map's gradient W dY Wᵀ, x [batch, n, n],
// w [n, m], dy [batch, m, m].
struct SpdBiMapArgs {
    uint batch;
    uint n;
    uint m;
    uint _pad;
};

// rope.metal axial_rope2d_f32: SAM 2 axial RoPE on [rows, heads*head_dim]
// (rows = batch*seq), one thread per rotated pair.
struct AxialRopeArgs {
    uint pairs;      // rows * hidden / 2
    uint seq;
    uint hidden;
    uint head_dim;
    uint end_x;
    uint grid;       // end_x * end_y
    float theta;
    uint _pad;
};

// signal.metal fft_stockham_f32 / fft_dft_f32: `outer` rows of `n` complex
// points; layout 0 block, 1 real input, 2 interleaved (c64); scale = norm factor.
struct FftArgs {
    uint outer;
    uint n;
    uint inverse;
    uint layout;
    float scale;
};

// signal.metal log_mel_f32: spec [outer, 2·n_fft], filters [n_mels, n_bins].
struct LogMelArgs {
    uint outer;
    uint n_fft;
    uint n_bins;
    uint n_mels;
};

// signal.metal welch_peaks_f32: spec [batch·n_segments, 2·n_fft] → [batch, k].
struct WelchArgs {
    uint batch;
    uint n_fft;
    uint n_segments;
    uint k;
};

// quant_formats.metal dqmm_*: dst[m, n] = x[m, k] @ dequant(w)ᵀ for block
// int8 / int4 (block_size; flag 1: zero points), FP8 (flag 1: E5M2) and
// NVFP4 weights.
struct QuantFormatArgs {
    uint m;
    uint k;
    uint n;
    uint block_size;
    uint flag;
};

// quant_formats.metal scaled_*: formats 0 fp8_e4m3, 1 fp8_e5m2, 2 int8;
// layout 0 per tensor, 1 per row, 2 blocks of `block` columns. The
// elementwise kernels use m rows, k cols and lhs_fmt.
struct ScaledArgs {
    uint m;
    uint k;
    uint n;
    uint lhs_fmt;
    uint rhs_fmt;
    uint layout;
    uint block;
    uint has_bias;
};

static_assert(sizeof(QuantArgs) == 24 && alignof(QuantArgs) == 4, "QuantArgs layout");
static_assert(sizeof(MlpArgs) == 28 && alignof(MlpArgs) == 4, "MlpArgs layout");
static_assert(sizeof(MoeArgs) == 20 && alignof(MoeArgs) == 4, "MoeArgs layout");
static_assert(sizeof(MatmulArgs) == 36 && alignof(MatmulArgs) == 4, "MatmulArgs layout");
static_assert(sizeof(BiasAddArgs) == 8 && alignof(BiasAddArgs) == 4, "BiasAddArgs layout");
static_assert(sizeof(RegionArgs) == 856 && alignof(RegionArgs) == 4, "RegionArgs layout");
static_assert(sizeof(FusedActArgs) == 20 && alignof(FusedActArgs) == 4, "FusedActArgs layout");
static_assert(sizeof(CompareArgs) == 16 && alignof(CompareArgs) == 4, "CompareArgs layout");
static_assert(sizeof(WhereArgs) == 16 && alignof(WhereArgs) == 4, "WhereArgs layout");
static_assert(sizeof(SwigluArgs) == 12 && alignof(SwigluArgs) == 4, "SwigluArgs layout");
static_assert(sizeof(AttnArgs) == 88 && alignof(AttnArgs) == 4, "AttnArgs layout");
static_assert(sizeof(RopeArgs) == 32 && alignof(RopeArgs) == 4, "RopeArgs layout");
static_assert(sizeof(CopyArgs) == 4 && alignof(CopyArgs) == 4, "CopyArgs layout");
static_assert(sizeof(NarrowArgs) == 16 && alignof(NarrowArgs) == 4, "NarrowArgs layout");
static_assert(sizeof(SplitArgs) == 80 && alignof(SplitArgs) == 4, "SplitArgs layout");
static_assert(sizeof(ConcatArgs) == 80 && alignof(ConcatArgs) == 4, "ConcatArgs layout");
static_assert(sizeof(StridedArgs) == 80 && alignof(StridedArgs) == 4, "StridedArgs layout");
static_assert(sizeof(ReverseArgs) == 48 && alignof(ReverseArgs) == 4, "ReverseArgs layout");
static_assert(sizeof(GatherArgs) == 32 && alignof(GatherArgs) == 4, "GatherArgs layout");
static_assert(sizeof(ScatterAddArgs) == 12 && alignof(ScatterAddArgs) == 4, "ScatterAddArgs layout");
static_assert(sizeof(ScatterNdArgs) == 48 && alignof(ScatterNdArgs) == 4, "ScatterNdArgs layout");
static_assert(sizeof(GatherElemArgs) == 80 && alignof(GatherElemArgs) == 4, "GatherElemArgs layout");
static_assert(sizeof(ReduceArgs) == 16 && alignof(ReduceArgs) == 4, "ReduceArgs layout");
static_assert(sizeof(ArgReduceArgs) == 16 && alignof(ArgReduceArgs) == 4, "ArgReduceArgs layout");
static_assert(sizeof(CumsumArgs) == 12 && alignof(CumsumArgs) == 4, "CumsumArgs layout");
static_assert(sizeof(DwConv1dArgs) == 24 && alignof(DwConv1dArgs) == 4, "DwConv1dArgs layout");
static_assert(sizeof(TopKArgs) == 12 && alignof(TopKArgs) == 4, "TopKArgs layout");
static_assert(sizeof(ModNormArgs) == 96 && alignof(ModNormArgs) == 4, "ModNormArgs layout");
static_assert(sizeof(GroupNormArgs) == 20 && alignof(GroupNormArgs) == 4, "GroupNormArgs layout");
static_assert(sizeof(GdnArgs) == 16 && alignof(GdnArgs) == 4, "GdnArgs layout");
static_assert(sizeof(SsmArgs) == 20 && alignof(SsmArgs) == 4, "SsmArgs layout");
static_assert(sizeof(Mamba2Args) == 24 && alignof(Mamba2Args) == 4, "Mamba2Args layout");
static_assert(sizeof(RnnArgs) == 48 && alignof(RnnArgs) == 4, "RnnArgs layout");
static_assert(sizeof(RngArgs) == 32 && alignof(RngArgs) == 4, "RngArgs layout");
static_assert(sizeof(VqArgs) == 16 && alignof(VqArgs) == 4, "VqArgs layout");
static_assert(sizeof(SpdArgs) == 16 && alignof(SpdArgs) == 4, "SpdArgs layout");
static_assert(sizeof(SpdBiMapArgs) == 16 && alignof(SpdBiMapArgs) == 4, "SpdBiMapArgs layout");
static_assert(sizeof(AxialRopeArgs) == 32 && alignof(AxialRopeArgs) == 4, "AxialRopeArgs layout");

// splat.metal splat_prepare_f32 (one thread per splat) and
// splat_rasterize_f32 (one thread per pixel): Gaussian splats.
struct SplatArgs {
    uint count;                   // splats g
    uint sh_coeffs;               // k per splat
    uint width;
    uint height;
    uint tile_size;
    uint tiles_x;
    uint tiles_y;
    uint max_splat_steps;         // 0 = unlimited
    uint max_list_entries;        // 0 = unlimited
    float radius_scale;
    float alpha_cutoff;
    float transmittance_threshold;
};
static_assert(sizeof(SplatArgs) == 48 && alignof(SplatArgs) == 4, "SplatArgs layout");

// splat.metal splat_render_backward_f32 (one thread per splat): the render's
// settings plus the gradient's.
struct SplatBwdArgs {
    SplatArgs s;
    float loss_grad_clip;         // <= 0: no clip
    uint sh_band;                 // highest SH band with a gradient
};
static_assert(sizeof(SplatBwdArgs) == 56 && alignof(SplatBwdArgs) == 4, "SplatBwdArgs layout");

// vision.metal conv2d_* / conv_transpose2d_* / im2col_*: NCHW geometry; h,
// w are the input's size (c_out and groups unused by im2col).
struct Conv2dArgs {
    uint n;
    uint c_in;
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

// vision.metal pool2d_* / max_pool2d_argmax_* / max_pool2d_backward_*.
struct Pool2dArgs {
    uint n;
    uint c;
    uint h;
    uint w;
    uint h_out;
    uint w_out;
    uint kh;
    uint kw;
    uint sh;
    uint sw;
    uint ph;
    uint pw;
};

// vision.metal resize_nearest2x_*: `planes` [h, w] planes -> [2h, 2w].
struct Resize2xArgs {
    uint planes;
    uint h;
    uint w;
};

// vision.metal layer_norm2d_*: LayerNorm across c at each of hw positions.
struct LayerNorm2dArgs {
    uint n;
    uint c;
    uint hw;
    float eps;
};

static_assert(sizeof(Conv2dArgs) == 64 && alignof(Conv2dArgs) == 4, "Conv2dArgs layout");
static_assert(sizeof(Pool2dArgs) == 48 && alignof(Pool2dArgs) == 4, "Pool2dArgs layout");
static_assert(sizeof(Resize2xArgs) == 12 && alignof(Resize2xArgs) == 4, "Resize2xArgs layout");
static_assert(sizeof(LayerNorm2dArgs) == 16 && alignof(LayerNorm2dArgs) == 4, "LayerNorm2dArgs layout");
static_assert(sizeof(QuantFormatArgs) == 20 && alignof(QuantFormatArgs) == 4, "QuantFormatArgs layout");
static_assert(sizeof(ScaledArgs) == 32 && alignof(ScaledArgs) == 4, "ScaledArgs layout");
static_assert(sizeof(FftArgs) == 20 && alignof(FftArgs) == 4, "FftArgs layout");
static_assert(sizeof(LogMelArgs) == 16 && alignof(LogMelArgs) == 4, "LogMelArgs layout");
static_assert(sizeof(WelchArgs) == 16 && alignof(WelchArgs) == 4, "WelchArgs layout");

// quant.metal qkv_head_* / norm_gate_up_*, norm_fused.metal norm_residual_f32:
// the fused decode-layer kernels of the Metal plan (flags and fields there).
struct HeadGemvArgs { uint k, n, head_dim, row_bytes, flags, n_rot, cache_rows, cache_row, op; float eps, head_eps, post_eps; };
static_assert(sizeof(HeadGemvArgs) == 48 && alignof(HeadGemvArgs) == 4, "HeadGemvArgs layout");

#endif  // RLX_METAL_ARGS_H
