//! The operation set. One [`Op`] per node; operands are the node's inputs in
//! the order each variant's doc gives. Ops serialise as JSON objects tagged
//! by `"op"` (`{"op": "binary", "kind": "add"}`); that is also how the Python
//! front end hands ops to the builder.
//!
//! The set covers every operation the seed's thunks are lowered from. Fused
//! thunks that only passes create (fused decode MLP, split-last-axis, ...)
//! have no op of their own.

mod attrs;
mod meta;
mod region;

pub use meta::OpFamily;

pub use attrs::*;
pub use region::{RegionOperand, RegionStep, MAX_REGION_INPUTS, MAX_REGION_STEPS};

use crate::dtype::DType;
use crate::quant::{QuantScheme, ScaleLayout, ScaledFormat};
use crate::shape::{Dim, Shape};
use serde::{Deserialize, Serialize};

/// One operation. Field docs give operand order, shapes and result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    // ---------------------------------------------------------------- leaves
    /// A run-time input bound at each run. No operands.
    Input {
        /// Declared shape (may hold symbols).
        shape: Shape,
    },
    /// A weight, set once after compile. No operands.
    Param {
        /// Declared shape.
        shape: Shape,
    },
    /// Persistent state (KV cache, recurrent state): kept across runs, never
    /// reused by the memory planner. No operands.
    State {
        /// Declared shape.
        shape: Shape,
    },
    /// A constant. `values` has one entry (splat) or one per element.
    Constant {
        /// Declared shape (static).
        shape: Shape,
        /// Values, row-major, converted to `shape.dtype`.
        values: Vec<f64>,
    },

    // ----------------------------------------------------------- elementwise
    /// `act(x)`. Operands `[x]`; result has x's shape.
    Activation {
        /// The function.
        kind: Activation,
    },
    /// `a <kind> b` with numpy broadcasting and dtype promotion. Operands `[a, b]`.
    Binary {
        /// The op.
        kind: BinaryOp,
    },
    /// `a <kind> b` → bool, broadcasting. Operands `[a, b]`.
    Compare {
        /// The comparison.
        kind: CmpOp,
    },
    /// `cond ? a : b`, three-way broadcast. Operands `[cond, a, b]`; result
    /// dtype is the promotion of a and b.
    Where,
    /// Convert to `to`. Operands `[x]`. Float → int truncates toward zero.
    Cast {
        /// Target dtype.
        to: DType,
        /// Float → float rounded toward zero (NaN and ±inf kept).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        trunc: bool,
    },
    /// `a * b + c`, broadcasting. Operands `[a, b, c]`.
    Fma,
    /// A fused chain of elementwise steps over 1..=16 broadcast inputs
    /// (≤ 32 steps); the result is the last step's value.
    ElementwiseRegion {
        /// The steps, in order.
        steps: Vec<RegionStep>,
    },
    /// SwiGLU: `x[.., :n] * silu(x[.., n:])` (or gate first). Operands `[x]`
    /// with last dim `2n`; result last dim `n`.
    #[serde(rename = "fused_swiglu")]
    FusedSwiGLU {
        /// When true the first half is the gate: `silu(x[..,:n]) * x[..,n:]`.
        gate_first: bool,
    },

    // ---------------------------------------------------------------- matmul
    /// numpy `matmul` on rank ≥ 2 operands with batch broadcasting; a rank-1
    /// rhs `[k]` is treated as `[k, 1]` and the trailing 1 dropped (a rank-1
    /// lhs likewise as `[1, k]`, leading 1 dropped). Operands `[a, b]`.
    MatMul,
    /// `act(a @ w + bias)`. Operands `[a [.., k], w [k, n], bias [n]]`.
    FusedMatMulBiasAct {
        /// Optional activation epilogue.
        act: Option<Activation>,
    },
    /// `x @ dequant(w_q)ᵀ`. Operands `[x [.., k], w_q (u8, [n, row_bytes]),
    /// aux...]` where aux are the scheme's scales / zero points
    /// (`QuantScheme::aux_inputs`). Result `[.., n]` f32.
    DequantMatMul {
        /// Weight format.
        scheme: QuantScheme,
        /// Output features (rows of the weight).
        n: usize,
        /// Reduction length (elements per weight row).
        k: usize,
    },
    /// `dy @ dequant(w_q)`: the transposed product of [`Op::DequantMatMul`]
    /// (its input gradient). Operands `[dy [.., n], w_q (u8, [n, row_bytes])]`,
    /// GGUF block formats only; result `[.., k]` f32.
    DequantMatMulT {
        /// Weight format (a GGUF block type).
        scheme: QuantScheme,
        /// Rows of the weight (the reduction length here).
        n: usize,
        /// Elements per weight row (the output features here).
        k: usize,
    },
    /// Mixture-of-experts matmul: row `i` uses expert `expert_idx[i]`.
    /// Operands `[x [m, k], w [experts, k, n], expert_idx [m] int]` → `[m, n]`.
    GroupedMatMul,
    /// Grouped matmul on packed GGUF expert weights. Operands
    /// `[x [m, k], w_q (u8, [experts, n, row_bytes]), expert_idx [m]]` → `[m, n]` f32.
    DequantGroupedMatMul {
        /// Weight format (GGUF types).
        scheme: QuantScheme,
        /// Number of experts.
        num_experts: usize,
        /// Output features.
        n: usize,
        /// Reduction length.
        k: usize,
    },
    /// Low-precision GEMM, TN: `(lhs·s_l) @ (rhs·s_r)ᵀ (+ bias)`. Operands
    /// `[lhs u8 [m, k], rhs u8 [n, k], lhs_scale, rhs_scale, (bias [n])]` → f32 `[m, n]`.
    ScaledMatMul {
        /// Format of lhs codes.
        lhs_fmt: ScaledFormat,
        /// Format of rhs codes.
        rhs_fmt: ScaledFormat,
        /// Scale layout of both operands.
        layout: ScaleLayout,
    },
    /// f32 → codes: `round_to_fmt(x / scale)`. Operands `[x [r, c], scale]` → u8 `[r, c]`.
    ScaledQuantize {
        /// Code format.
        fmt: ScaledFormat,
        /// Scale layout.
        layout: ScaleLayout,
    },
    /// codes → f32: `decode(codes) * scale`. Operands `[codes u8 [r, c], scale]` → f32.
    ScaledDequantize {
        /// Code format.
        fmt: ScaledFormat,
        /// Scale layout.
        layout: ScaleLayout,
    },
    /// Scales that map `max|x|` of each scale group onto the format's max.
    /// Operands `[x [r, c]]` → f32 `layout.scale_dims(r, c)`.
    ScaledQuantScale {
        /// Code format.
        fmt: ScaledFormat,
        /// Scale layout.
        layout: ScaleLayout,
    },

    // ----------------------------------------------------------------- norms
    /// LayerNorm over the last axis. Operands `[x, gamma [h], beta [h]]`.
    LayerNorm {
        /// Variance epsilon.
        eps: f32,
    },
    /// RMSNorm over the last axis: `x / sqrt(mean(x²) + eps) * gamma (+ beta)`.
    /// Operands `[x, gamma [h]]` or `[x, gamma, beta]`.
    RmsNorm {
        /// Epsilon.
        eps: f32,
    },
    /// GroupNorm on NCHW. Operands `[x [n, c, h, w], gamma [c], beta [c]]`.
    GroupNorm {
        /// Groups (divides c).
        num_groups: usize,
        /// Epsilon.
        eps: f32,
    },
    /// LayerNorm across channels at each position of NCHW.
    /// Operands `[x [n, c, h, w], gamma [c], beta [c]]`.
    LayerNorm2d {
        /// Epsilon.
        eps: f32,
    },
    /// `LayerNorm(x + res (+ bias))`. Operands `[x, res, (bias [h]), gamma, beta]`.
    #[serde(rename = "fused_residual_ln")]
    FusedResidualLN {
        /// Epsilon.
        eps: f32,
        /// Whether a bias operand is present.
        has_bias: bool,
    },
    /// `RmsNorm(x + res (+ bias))`. Operands `[x, res, (bias [h]), gamma, (beta)]`.
    FusedResidualRmsNorm {
        /// Epsilon.
        eps: f32,
        /// Whether a bias operand is present.
        has_bias: bool,
    },
    /// DiT adaLN: `norm(x)·(1 + scale) + shift`, scale/shift broadcast over
    /// leading dims. Operands `[x [.., h], scale [.., h], shift [.., h]]`.
    AdaLayerNorm {
        /// Epsilon.
        eps: f32,
        /// LayerNorm (true) or RMSNorm (false).
        layer_norm: bool,
    },
    /// DiT gated residual `x + gate·y`. Operands `[x, y, gate]` (gate broadcast).
    GatedResidual,

    // ------------------------------------------------------------- attention
    /// Scaled dot-product attention. Operands `[q, k, v, (mask or bias),
    /// (kv_len)]`. BSHD: q `[b, s, heads·d]`, k/v `[b, kv_s, kv_heads·d]`;
    /// BHSD: q `[b, heads, s, d]`, k/v `[b, kv_heads, kv_s, d]`. Result has
    /// q's shape. Query `i` sits at absolute position `L - s + i` where `L`
    /// is the attended key length: `kv_s`, or the run-time `kv_len` operand
    /// when `dynamic_kv_len` (cached decode over a fixed-capacity cache).
    Attention {
        /// Query heads.
        heads: usize,
        /// Key/value heads (divides `heads`; GQA when smaller).
        kv_heads: usize,
        /// Head dimension.
        head_dim: usize,
        /// Masking.
        mask: MaskKind,
        /// Lookback for `SlidingWindow` (0 otherwise).
        window: usize,
        /// Operand layout.
        layout: AttnLayout,
        /// Score scale; `None` means `1/sqrt(head_dim)`.
        score_scale: Option<f32>,
        /// `softcap·tanh(s/softcap)` on scores; `None` disables.
        softcap: Option<f32>,
        /// When true a last operand `kv_len` (i32 `[1]`, or i32 `[b]`: one
        /// per batch entry, e.g. batched decode of several sequences) gives,
        /// at run time, how many leading keys are attended (`1 ≤ kv_len ≤
        /// kv_s`); the rest of k/v (unwritten cache rows) is never read.
        #[serde(default)]
        dynamic_kv_len: bool,
    },
    /// QKV projection + NeoX RoPE + SDPA + output projection in one op (short
    /// sequences). Operands `[x [b, s, hidden], w_qkv [hidden, 3·heads·d],
    /// w_out [heads·d, hidden], (cos, sin [s, d/2]), (mask)]` → `[b, s, hidden]`.
    FusedAttentionBlock {
        /// Heads.
        heads: usize,
        /// Head dim.
        head_dim: usize,
        /// Masking (none, causal or custom).
        mask: MaskKind,
        /// Whether cos/sin operands are present.
        rope: bool,
    },
    /// Rotary embedding on `[b, s, hidden]` (`hidden = heads·head_dim`), the
    /// first `n_rot` dims of each head rotated. Operands `[x, cos, sin]` with
    /// cos/sin `[s, n_rot/2]`, or `[b·s, n_rot/2]` when `per_token`.
    Rope {
        /// Pairing.
        kind: RopeKind,
        /// Head dim.
        head_dim: usize,
        /// Rotated dims per head (even, ≤ head_dim).
        n_rot: usize,
        /// cos/sin have one row per token rather than per position.
        per_token: bool,
    },
    /// SAM2 axial 2-D RoPE over an `end_x × end_y` grid. Operands `[x [b, s, hidden]]`.
    AxialRope2d {
        /// Grid width.
        end_x: usize,
        /// Grid height.
        end_y: usize,
        /// Head dim.
        head_dim: usize,
        /// Heads.
        num_heads: usize,
        /// Frequency base.
        theta: f32,
        /// Grid rows repeated along the sequence.
        repeat_factor: usize,
    },

    // ----------------------------------------------------------------- shape
    /// Same elements, new dims (element counts must agree). Operands `[x]`.
    Reshape {
        /// New dims.
        dims: Vec<Dim>,
    },
    /// Permute axes. Operands `[x]`.
    Transpose {
        /// `perm[i]` = input axis placed at output axis `i`.
        perm: Vec<usize>,
    },
    /// Broadcast to `dims` (numpy `broadcast_to`). Operands `[x]`.
    Expand {
        /// Target dims.
        dims: Vec<Dim>,
    },
    /// `x[.., start:start+len, ..]` along `axis`. Operands `[x]`.
    Narrow {
        /// Axis (negative counts from the end).
        axis: i64,
        /// First index.
        start: usize,
        /// Length.
        len: usize,
    },
    /// Join along `axis`. Operands: one or more, equal but for `axis`.
    Concat {
        /// Axis.
        axis: i64,
    },
    /// Embedding lookup along axis 0. Operands `[table [v, ..], idx (int)]`
    /// → `idx.dims ++ table.dims[1..]`.
    Gather,
    /// `index_select`: operands `[x, idx (int, rank 1)]`; `axis` of x becomes `len(idx)`.
    GatherAxis {
        /// Axis.
        axis: i64,
    },
    /// `out[idx[i]] += updates[i]` into zeros. Operands `[updates [u, ..], idx [u]]`
    /// → `[out_dim, ..]`.
    ScatterAdd {
        /// Leading dim of the result.
        out_dim: usize,
    },
    /// Flip along `axes`. Operands `[x]`.
    Reverse {
        /// Axes to flip.
        axes: Vec<i64>,
    },
    /// Nearest-neighbour 2× upsample of NCHW. Operands `[x [n, c, h, w]]` → `[n, c, 2h, 2w]`.
    ResizeNearest2x,
    /// ONNX ScatterND. Operands `[data, indices [.., q], updates]` → data's shape.
    ScatterNd,
    /// ONNX ScatterElements (replace). Operands `[data, indices, updates]` → data's shape.
    ScatterElements {
        /// Axis.
        axis: i64,
    },
    /// ONNX GatherND. Operands `[data, indices [.., q]]`.
    GatherNd {
        /// Leading batch dims shared by data and indices.
        batch_dims: usize,
    },
    /// ONNX GatherElements. Operands `[data, indices]` → indices' dims, data's dtype.
    GatherElements {
        /// Axis.
        axis: i64,
    },

    // ------------------------------------------------------------ reductions
    /// Reduce over `axes` (empty = all). Operands `[x]`.
    Reduce {
        /// Reduction.
        kind: ReduceOp,
        /// Axes.
        axes: Vec<i64>,
        /// Keep reduced axes as size 1.
        keep_dims: bool,
    },
    /// Softmax along `axis`. Operands `[x]`.
    Softmax {
        /// Axis.
        axis: i64,
    },
    /// Per-row softmax cross-entropy. Operands `[logits [n, c], labels]` with
    /// labels int `[n]` (class ids) or float `[n, c]` (soft targets) → f32 `[n]`.
    SoftmaxCrossEntropy,
    /// Gradient of the integer-label loss. Operands `[logits [n, c] float,
    /// labels [n] int, d_loss [n] (logits' dtype)]` → logits' shape.
    SoftmaxCrossEntropyBackward,
    /// Inclusive (or exclusive) prefix sum along `axis`. Operands `[x]`.
    Cumsum {
        /// Axis.
        axis: i64,
        /// Exclusive scan.
        exclusive: bool,
    },
    /// Indices of the `k` largest along `axis` (descending) → i32. Operands `[x]`.
    TopK {
        /// How many.
        k: usize,
        /// Axis.
        axis: i64,
    },
    /// Index of the maximum along `axis` → i32. Operands `[x]`.
    ArgMax {
        /// Axis.
        axis: i64,
        /// Keep the reduced axis as size 1.
        keep_dims: bool,
    },
    /// Index of the minimum along `axis` → i32. Operands `[x]`.
    ArgMin {
        /// Axis.
        axis: i64,
        /// Keep the reduced axis as size 1.
        keep_dims: bool,
    },
    /// Draw a token per row. Operands `[logits [b, vocab]]` → i32 `[b]`.
    /// `temperature == 0` is greedy.
    Sample {
        /// Softmax temperature.
        temperature: f32,
        /// Keep the k most likely (0 = all).
        top_k: usize,
        /// Nucleus threshold (1 = off).
        top_p: f32,
        /// Seed of the draw.
        seed: u64,
    },

    // ------------------------------------------------------------------ conv
    /// 2-D convolution, NCHW. Operands `[x [n, c_in, h, w], w [c_out, c_in/g, kh, kw], (bias [c_out])]`,
    /// all of x's float dtype; `c_in` and `c_out` divisible by `groups`.
    /// Result `[n, c_out, h_out, w_out]` with
    /// `h_out = floor((h + 2·pad − dil·(kh − 1) − 1) / stride) + 1 ≥ 1`.
    /// Channels and kernel must be static; a symbolic `h`/`w` is kept only by
    /// a length-preserving window (stride 1, `2·pad = dil·(k − 1)`).
    Conv2d {
        /// Stride, padding, dilation, groups.
        #[serde(flatten)]
        geom: ConvGeom,
    },
    /// Transposed 2-D convolution (PyTorch layout). Operands
    /// `[x [n, c_in, h, w], w [c_in, c_out/g, kh, kw], (bias [c_out])]`.
    /// Result `[n, c_out, h_out, w_out]` with `h_out = (h − 1)·stride − 2·pad
    /// + dil·(kh − 1) + output_padding + 1 ≥ 1`; `output_padding` must be
    /// below `max(stride, dilation)` on each axis.
    ConvTranspose2d {
        /// Stride, padding, dilation, groups.
        #[serde(flatten)]
        geom: ConvGeom,
        /// Extra size added to one side of the output.
        output_padding: [usize; 2],
    },
    /// Max or average pooling, NCHW. Operands `[x [n, c, h, w]]` (float) →
    /// `[n, c, h_out, w_out]` by the conv formula with dilation 1.
    Pool2d {
        /// `max` or `mean`.
        kind: ReduceOp,
        /// Kernel, stride, padding.
        #[serde(flatten)]
        win: Window,
    },
    /// im2col, NCHW. Operands `[x [n, c, h, w]]` (any dtype: pure data
    /// movement) → `[n, c·kh·kw, h_out·w_out]`, rows ordered `(c, ky, kx)`.
    Im2Col {
        /// Kernel, stride, padding.
        #[serde(flatten)]
        win: Window,
        /// Dilation.
        dilation: [usize; 2],
    },

    // -------------------------------------------------------------- sequence
    /// Mamba selective scan (Gu & Dao 2023). Operands `[x [b, s, h],
    /// delta [b, s, h], a [h, n], b_ [b, s, n], c [b, s, n], (state [b, h, n])]`
    /// → `[b, s, h]`; all operands share x's float dtype. Per channel
    /// `h_t = exp(Δ_t·A) ⊙ h_{t−1} + (Δ_t·x_t)·B_t`, `y_t = h_t·C_t`.
    ///
    /// The optional 6th operand is the recurrent state (decode): the scan
    /// starts from it and writes the final state back into it in place, so
    /// the verifier requires a `State` leaf. Without it the initial state is
    /// zero and nothing is written.
    SelectiveScan,
    /// Mamba-2 SSD scan (Dao & Gu 2024). Operands `[x [b, s, heads·p], dt [b, s, heads],
    /// a [heads], b_ [b, s, n], c [b, s, n], (state [b, heads, p, n])]` →
    /// `[b, s, heads·p]`, one shared float dtype, one B/C group
    /// (`n = state_size`). Per head `h_t = exp(dt_t·a)·h_{t−1} + dt_t·x_t ⊗ B_t`,
    /// `y_t = h_t·C_t`. The optional state works as on
    /// [`Op::SelectiveScan`] (a `State` leaf, read then written in place).
    Mamba2 {
        /// Heads.
        heads: usize,
        /// Per-head channels p.
        head_dim: usize,
        /// State size n.
        state_size: usize,
    },
    /// Gated DeltaNet (Yang et al. 2024). Operands `[q, k, v [b, s, heads·n],
    /// g [b, s, heads], beta [b, s, heads], state [b, heads, n, n] (State)]`
    /// → `[b, s, heads·n]`; the state is updated in place, so the verifier
    /// requires it to be a `State` leaf. One shared float dtype.
    GatedDeltaNet {
        /// Heads.
        heads: usize,
        /// Key/value dim n per head.
        state_size: usize,
    },
    /// LSTM (PyTorch gate order i, f, g, o), batch-first. Operands
    /// `[x [b, s, in], w_ih, w_hh, bias, h0, c0]` → `[b, s, dirs·hidden]`,
    /// packed as [`Recurrent`] documents with `G = 4`; `carry` appends each
    /// layer's final h and c as `2·num_layers` rows.
    Lstm {
        /// Size and stacking.
        #[serde(flatten)]
        net: Recurrent,
    },
    /// GRU (PyTorch gate order r, z, n). Operands `[x, w_ih, w_hh, b_ih, b_hh, h0]`,
    /// packed as [`Recurrent`] documents with `G = 3`; `b_ih` and `b_hh` are
    /// separate (`[layers·dirs, 3·hidden]` each) because the n gate scales
    /// `b_hn` by r.
    Gru {
        /// Size and stacking.
        #[serde(flatten)]
        net: Recurrent,
    },
    /// Elman RNN (tanh or relu). Operands `[x, w_ih, w_hh, bias, h0]`, packed
    /// as [`Recurrent`] documents with `G = 1`.
    Rnn {
        /// Size and stacking.
        #[serde(flatten)]
        net: Recurrent,
        /// ReLU instead of tanh.
        relu: bool,
    },
    /// Generic scan. The body takes `num_carry` carries then one slice of each
    /// scanned operand, and returns `num_carry` new carries then `y`.
    /// Operands `[carry_init.., xs..]` (xs scanned along axis 0, length
    /// `length`) → `y` stacked `[length, ..]`; the body's contract is on
    /// [`ScanLoop`].
    Scan {
        /// Body, carries, steps.
        #[serde(flatten)]
        scan: ScanLoop,
        /// Scan from the end.
        reverse: bool,
    },

    // ---------------------------------------------------------------- signal
    /// 1-D complex FFT along the last axis on the 2N-real-block layout
    /// (`[re_0..re_{n-1}, im_0..im_{n-1}]`). Operands `[x [.., 2n]]` (float,
    /// static even last dim) → same shape. A `c64` operand `[.., n]` holds the
    /// complex values directly (any `n ≥ 1`, may be symbolic) → same shape.
    Fft {
        /// Inverse transform.
        inverse: bool,
        /// Normalisation.
        norm: FftNorm,
    },
    /// `log(filters @ |spec[:n_bins]|² + 1e-10)` from an FFT block spectrum.
    /// Operands `[spec [outer, 2·n_fft], filters [n_mels, n_bins]]` → `[outer, n_mels]`,
    /// spec's float dtype; `1 ≤ n_bins ≤ n_fft/2 + 1` (the one-sided bins).
    LogMel {
        /// FFT length.
        n_fft: usize,
    },
    /// Welch periodogram peaks: mean power over `n_segments` spectra, then the
    /// `k` largest bins. Operands `[spec [batch·n_segments, 2·n_fft]]` → f32 `[batch, k]`:
    /// per batch row, the indices of the `k` largest bins of the one-sided
    /// (`n_fft/2 + 1` bins) mean power spectrum, by descending power, stored
    /// as f32. Segments of one batch row are consecutive spectrum rows.
    WelchPeaks {
        /// FFT length.
        n_fft: usize,
        /// Segments averaged per row.
        n_segments: usize,
        /// Peaks returned.
        k: usize,
    },

    // ------------------------------------------------------------------ misc
    /// Normal fill. No operands → f32 `dims` (static or symbolic);
    /// `scale ≥ 0`, both finite.
    RngNormal {
        /// Result dims.
        dims: Vec<Dim>,
        /// Mean.
        mean: f32,
        /// Standard deviation.
        scale: f32,
        /// Per-op seed (`None` = derive from the graph's RNG options).
        seed: Option<u64>,
    },
    /// Uniform fill in `[low, high)`. No operands → f32 `dims`; finite `low < high`.
    RngUniform {
        /// Result dims.
        dims: Vec<Dim>,
        /// Lower bound.
        low: f32,
        /// Upper bound.
        high: f32,
        /// Per-op seed.
        seed: Option<u64>,
    },
    /// Nearest codebook row. Operands `[x [n, d], codebook [k, d]]` → i32 `[n]`.
    VqAssign {
        /// Distance.
        metric: VqMetric,
    },
    /// SPD-manifold op (see [`SpdOp`]). Operands: BiMap `[x [b, n, n], w [n, m]]`
    /// → `[b, m, m]` (`m ≤ n`); ReEig / LogEig `[x [.., n, n]]` → x's shape;
    /// BatchNorm `[x [b, n, n], bias [n, n]]` → x's shape; KarcherMean
    /// `[x [b, n, n]]` → `[n, n]`. Float operands of one dtype.
    Spd {
        /// Which op.
        kind: SpdOp,
        /// Eigenvalue floor (ReEig) / iteration tolerance (Karcher); must be
        /// > 0 for those two, finite and ≥ 0 otherwise.
        eps: f32,
    },
    /// 3-D Gaussian splatting forward (Kerbl et al. 2023). Operands
    /// `[positions [g, 3], scales [g, 3], rotations [g, 4], opacities [g],
    /// colors [g, 3], sh [g, k, 3], camera [20]]` → `[height, width, 3]`.
    /// One float dtype; `g` may be symbolic, `k` must be static. The config
    /// needs positive sizes, `radius_scale > 0` and both thresholds in `[0, 1)`.
    GaussianSplatRender {
        /// Splat parameters.
        cfg: SplatConfig,
    },
    /// Per-splat screen-space preparation (operands as the render) → `[g, 16]`.
    GaussianSplatPrepare {
        /// Splat parameters.
        cfg: SplatConfig,
    },
    /// Rasterise prepared splats. Operands `[prep [g, 16], camera [20]]` → `[height, width, 3]`.
    GaussianSplatRasterize {
        /// Splat parameters.
        cfg: SplatConfig,
    },
    /// A user op registered from Python (`rlx.register_op`); its shape comes
    /// from the user's shape function.
    Custom {
        /// Registered name.
        name: String,
        /// Free-form attributes handed to the kernel.
        attrs: serde_json::Value,
        /// Result shape.
        out: Shape,
    },

    // -------------------------------------------------------------- backward
    /// Attention gradient w.r.t. q, k or v. Operands `[q, k, v, dy, (mask)]` →
    /// the shape of the chosen operand. Layouts as [`Op::Attention`]; the
    /// key/value head count is read from k (BSHD: last dim / head_dim) and
    /// must divide `heads`; `dy` has q's shape; the mask operand is present
    /// iff `mask` is custom or bias and broadcasts to `[b, heads, s, kv_s]`.
    /// `wrt` is q, k or v.
    AttentionBackward {
        /// q, k or v.
        wrt: Wrt,
        /// Heads.
        heads: usize,
        /// Head dim.
        head_dim: usize,
        /// Masking.
        mask: MaskKind,
        /// Sliding window.
        window: usize,
        /// Layout.
        layout: AttnLayout,
    },
    /// RMSNorm gradient. Operands `[x, gamma, dy]` or `[x, gamma, beta, dy]`
    /// (gamma, beta `[h]`, dy x's shape) → x's shape (`wrt` input) or `[h]`
    /// (gamma; beta needs the four-operand form).
    RmsNormBackward {
        /// Epsilon.
        eps: f32,
        /// input, gamma or beta.
        wrt: Wrt,
    },
    /// RoPE gradient (the inverse rotation). Operands `[dy [b, s, hidden], cos, sin]`
    /// with cos/sin `[s, n_rot/2]`, or `[b·s, n_rot/2]` for per-token tables;
    /// → dy's shape.
    RopeBackward {
        /// Pairing.
        kind: RopeKind,
        /// Head dim.
        head_dim: usize,
        /// Rotated dims.
        n_rot: usize,
    },
    /// Cumsum gradient (reverse cumsum). Operands `[dy]` (float) → dy's shape.
    CumsumBackward {
        /// Axis.
        axis: i64,
        /// Exclusive.
        exclusive: bool,
    },
    /// GatherAxis gradient: scatter-add `dy` rows back. Operands `[dy, idx]`
    /// → dy's dims with `axis` set to `axis_dim`.
    GatherBackward {
        /// Axis.
        axis: i64,
        /// Size of the gathered-from axis.
        axis_dim: usize,
    },
    /// Max-pool gradient. Operands `[x, dy]` → x's shape; dy must have the
    /// forward max-pool's output shape.
    MaxPool2dBackward {
        /// The forward's kernel, stride, padding.
        #[serde(flatten)]
        win: Window,
    },
    /// Conv2d gradient w.r.t. input. Operands `[dy, w]` → `[n, c_in, h, w]`
    /// with `c_in = w.dims[1]·groups`, `(h, w) = input_hw`; dy must equal the
    /// forward conv's output shape.
    Conv2dBackwardInput {
        /// The forward conv's stride, padding, dilation, groups.
        #[serde(flatten)]
        geom: ConvGeom,
        /// Spatial size of the forward input.
        input_hw: [usize; 2],
    },
    /// Conv2d gradient w.r.t. weight. Operands `[x, dy]` → `[c_out, c_in/g, kh, kw]`
    /// (`c_out` from dy); dy must equal the forward conv's output shape.
    Conv2dBackwardWeight {
        /// The forward conv's stride, padding, dilation, groups.
        #[serde(flatten)]
        geom: ConvGeom,
        /// Kernel size.
        kernel: [usize; 2],
    },
    /// adaLN gradient, packed `[dx ∥ dscale ∥ dshift]` flat. Operands `[x, scale, dy]`.
    ///
    /// x `[.., h]` and scale are static; scale has x's rank and last dim and
    /// leading dims equal to a prefix of x's followed only by 1s (each scale
    /// row modulates one contiguous run of x rows; shift has scale's shape).
    /// dy has x's shape. Result: x's dtype, `[numel(x) + 2·numel(scale)]`:
    /// dx (x's layout), then dscale, then dshift (scale's layout).
    AdaLayerNormBackward {
        /// Epsilon.
        eps: f32,
        /// LayerNorm or RMSNorm.
        layer_norm: bool,
    },
    /// Gated-residual gradient, packed `[dx ∥ dy ∥ dgate]` flat. Operands `[y, gate, dy]`
    /// where the last operand is the gradient of the output `x + gate·y`
    /// (y's shape) and gate modulates y as scale does on
    /// [`Op::AdaLayerNormBackward`]. Result: y's dtype,
    /// `[2·numel(y) + numel(gate)]`: d/dx, d/dy (y's layout), then d/dgate.
    GatedResidualBackward,
    /// Log-mel gradient w.r.t. the spectrum. Operands `[spec, filters, dy]` → spec's shape;
    /// dy must have the forward log-mel's shape.
    LogMelBackward {
        /// FFT length.
        n_fft: usize,
    },
    /// Splat gradient, packed per splat. Operands: the render's seven plus
    /// `d_loss [height, width, 3]` → `[g, 14 + 3k]` (positions' dtype); row
    /// `i` holds splat `i`'s gradients in operand order: position (3), scale
    /// (3), rotation (4), opacity (1), colour (3), SH coefficients (`k·3`,
    /// coefficient-major). The camera gets no gradient.
    GaussianSplatRenderBackward {
        /// Splat parameters.
        cfg: SplatConfig,
        /// Clip on |d_loss|.
        loss_grad_clip: f32,
        /// Highest spherical-harmonics band that gets a gradient (≤ 3;
        /// needs `(band + 1)² ≤ k`, or band 0 when `k = 0`).
        sh_band: u32,
        /// Largest allowed scale ratio.
        max_anisotropy: f32,
    },
    /// SPD-op gradient w.r.t. the first forward operand (x). Operands: the
    /// forward's, then `dy` (the forward result's shape); result is x's shape.
    SpdBackward {
        /// Which op.
        kind: SpdOp,
        /// As the forward.
        eps: f32,
    },
    /// Scan gradient w.r.t. the initial carries (`wrt_xs = false`) or the
    /// scanned operands. Operands `[carry_init.., xs.., dy]` with dy the
    /// stacked `y`'s shape. Result: the gradients of every carry (or every
    /// xs), each flattened, concatenated in operand order: `[Σ numel]` of their
    /// shared float dtype (targets must be static floats of one dtype).
    ScanBackward {
        /// The forward's body, carries, steps.
        #[serde(flatten)]
        scan: ScanLoop,
        /// Differentiate w.r.t. xs (else the carries).
        wrt_xs: bool,
    },
}
