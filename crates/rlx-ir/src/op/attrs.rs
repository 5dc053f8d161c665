//! Small attribute enums shared by ops and thunks.

use serde::{Deserialize, Serialize};

/// Unary elementwise functions (the original rlx's 17 activations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// Exact GELU, `x·Φ(x)` (erf form).
    Gelu,
    /// Tanh-approximated GELU.
    GeluApprox,
    /// `x·sigmoid(x)`.
    Silu,
    /// `max(x, 0)`.
    Relu,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// Hyperbolic tangent.
    Tanh,
    /// `e^x`.
    Exp,
    /// Natural logarithm.
    Log,
    /// Square root.
    Sqrt,
    /// `1 / sqrt(x)`.
    Rsqrt,
    /// `-x`.
    Neg,
    /// `|x|`.
    Abs,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
    /// Tangent.
    Tan,
    /// Arc tangent.
    Atan,
    /// Round half to even (IEEE `roundeven`, numpy `rint`).
    Round,
}

/// All activations.
pub const ALL_ACTIVATIONS: [Activation; 17] = [
    Activation::Gelu,
    Activation::GeluApprox,
    Activation::Silu,
    Activation::Relu,
    Activation::Sigmoid,
    Activation::Tanh,
    Activation::Exp,
    Activation::Log,
    Activation::Sqrt,
    Activation::Rsqrt,
    Activation::Neg,
    Activation::Abs,
    Activation::Sin,
    Activation::Cos,
    Activation::Tan,
    Activation::Atan,
    Activation::Round,
];

impl Activation {
    /// Snake-case name (`gelu_approx`).
    pub fn name(self) -> &'static str {
        use Activation::*;
        match self {
            Gelu => "gelu",
            GeluApprox => "gelu_approx",
            Silu => "silu",
            Relu => "relu",
            Sigmoid => "sigmoid",
            Tanh => "tanh",
            Exp => "exp",
            Log => "log",
            Sqrt => "sqrt",
            Rsqrt => "rsqrt",
            Neg => "neg",
            Abs => "abs",
            Sin => "sin",
            Cos => "cos",
            Tan => "tan",
            Atan => "atan",
            Round => "round",
        }
    }

    /// True for functions that only make sense on inexact (float) inputs.
    pub fn needs_float(self) -> bool {
        !matches!(self, Activation::Neg | Activation::Abs | Activation::Relu)
    }
}

/// Binary elementwise ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b` (true division for floats, truncating for integers).
    Div,
    /// `max(a, b)` (NaN-propagating).
    Max,
    /// `min(a, b)` (NaN-propagating).
    Min,
    /// `a ^ b`.
    Pow,
}

/// All binary ops, in declaration order (also the order of the kernels'
/// binary-op codes, which the region pass relies on).
pub const ALL_BINARY_OPS: [BinaryOp; 7] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Max,
    BinaryOp::Min,
    BinaryOp::Pow,
];

impl BinaryOp {
    /// Snake-case name.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
            BinaryOp::Pow => "pow",
        }
    }
}

/// Comparison ops; results are `bool`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CmpOp {
    /// `a == b`.
    Eq,
    /// `a != b`.
    Ne,
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a >= b`.
    Ge,
}

impl CmpOp {
    /// Snake-case name.
    pub fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }
}

/// Reductions (also the kind of a pooling window: `max` or `mean`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Arithmetic mean.
    Mean,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Product.
    Prod,
}

impl ReduceOp {
    /// Snake-case name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Prod => "prod",
        }
    }
}

/// How attention scores are masked. The seed's thunk encodes these as
/// 0 = none, 1 = causal, 2 = custom, 3 = bias, 4 = sliding window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskKind {
    /// Every key visible.
    None,
    /// Key `j` visible to query `i` iff `j <= i + (kv_seq - seq)` (absolute positions).
    Causal,
    /// A binary mask input `[.., seq, kv_seq]`: nonzero = visible.
    Custom,
    /// An additive bias input broadcast to `[batch, heads, seq, kv_seq]`.
    Bias,
    /// Causal, and key `j` visible only if `abs_q - j <= window`.
    SlidingWindow,
}

impl MaskKind {
    /// The seed's integer code.
    pub fn code(self) -> u32 {
        match self {
            MaskKind::None => 0,
            MaskKind::Causal => 1,
            MaskKind::Custom => 2,
            MaskKind::Bias => 3,
            MaskKind::SlidingWindow => 4,
        }
    }

    /// True when the op takes a mask / bias input.
    pub fn has_input(self) -> bool {
        matches!(self, MaskKind::Custom | MaskKind::Bias)
    }
}

/// Memory layout of attention operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttnLayout {
    /// `[batch, heads, seq, head_dim]`.
    Bhsd,
    /// `[batch, seq, heads * head_dim]` (or `[batch, seq, heads, head_dim]`).
    Bshd,
}

/// Which pairs RoPE rotates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeKind {
    /// HF / NeoX rotate-half: pairs `(i, i + n_rot/2)`.
    Neox,
    /// GPT-J / llama.cpp NORM: pairs `(2i, 2i + 1)`.
    Interleaved,
}

/// FFT normalisation (numpy's `norm=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FftNorm {
    /// No scaling forward, `1/n` inverse.
    Backward,
    /// `1/sqrt(n)` both ways.
    Ortho,
    /// `1/n` forward, none inverse.
    Forward,
}

impl FftNorm {
    /// The seed's `norm_tag`.
    pub fn tag(self) -> u32 {
        match self {
            FftNorm::Backward => 0,
            FftNorm::Ortho => 1,
            FftNorm::Forward => 2,
        }
    }
}

/// Distance used by vector-quantiser assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VqMetric {
    /// Squared Euclidean distance (argmin).
    L2,
    /// Negative dot product (argmax of similarity).
    Dot,
    /// Negative cosine similarity.
    Cosine,
}

/// The operand a backward op differentiates with respect to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Wrt {
    /// The first operand (x, q, ...).
    Input,
    /// The scale operand (gamma).
    Gamma,
    /// The shift operand (beta).
    Beta,
    /// Attention: d/dq.
    Q,
    /// Attention: d/dk.
    K,
    /// Attention: d/dv.
    V,
}

/// The SPD-manifold (Riemannian) ops of SPDNet-style networks
/// (Huang & Van Gool, "A Riemannian Network for SPD Matrix Learning", AAAI 2017;
/// Brooks et al., "Riemannian batch normalization for SPD neural networks", NeurIPS 2019).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpdOp {
    /// `Wᵀ X W`: `[b, n, n] , [n, m] → [b, m, m]`.
    BiMap,
    /// Eigenvalue rectification `U max(Λ, eps) Uᵀ`.
    ReEig,
    /// Matrix logarithm `U log(Λ) Uᵀ`.
    LogEig,
    /// Riemannian batch norm around the Karcher mean.
    BatchNorm,
    /// Karcher (Fréchet) mean of the batch: `[b, n, n] → [n, n]`.
    KarcherMean,
}

/// Parameters shared by the Gaussian-splat ops.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SplatConfig {
    /// Image width.
    pub width: u32,
    /// Image height.
    pub height: u32,
    /// Tile edge in pixels.
    pub tile_size: u32,
    /// Splat extent in standard deviations.
    pub radius_scale: f32,
    /// Minimum alpha that contributes.
    pub alpha_cutoff: f32,
    /// Most splats blended per pixel.
    pub max_splat_steps: u32,
    /// Stop blending below this transmittance.
    pub transmittance_threshold: f32,
    /// Capacity of the tile lists.
    pub max_list_entries: u32,
}

/// Window geometry of a 2-D convolution, one entry per spatial axis (h, w).
/// Shared by [`Op::Conv2d`](super::Op::Conv2d), the transposed conv and the
/// two conv gradients; flattened into each op's JSON (`"stride": [1, 1]`
/// sits beside `"op"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvGeom {
    /// Stride (h, w).
    pub stride: [usize; 2],
    /// Zero padding (h, w).
    pub padding: [usize; 2],
    /// Dilation (h, w).
    pub dilation: [usize; 2],
    /// Groups: `c_in` and `c_out` divisible by it.
    pub groups: usize,
}

/// Size and stacking of a recurrent net, shared by
/// [`Op::Lstm`](super::Op::Lstm), [`Op::Gru`](super::Op::Gru) and
/// [`Op::Rnn`](super::Op::Rnn); flattened into each op's JSON.
///
/// **The recurrent-net layout** (the one definition), with `G` gates per
/// cell (LSTM 4 = i, f, g, o; GRU 3 = r, z, n; RNN 1), `dirs = 2` if
/// bidirectional else 1 and `L = num_layers`; slot `l·dirs + d` holds layer
/// `l`, direction `d` (0 forward, 1 reverse):
/// * `w_ih [L·dirs, G·hidden, in_w]` where `in_w = in` for one layer,
///   else `max(in, dirs·hidden)`; layer 0 reads the first `in` columns,
///   later layers the first `dirs·hidden` (the rest is ignored padding).
///   Slot `l·dirs + d` is PyTorch's `weight_ih_l{l}{_reverse}`.
/// * `w_hh [L·dirs, G·hidden, hidden]` (`weight_hh_l{l}{_reverse}`).
/// * `bias [L·dirs, G·hidden]` = PyTorch's `b_ih + b_hh` (exact for
///   LSTM and Elman RNN, whose biases only ever add).
/// * `h0`, `c0 [L·dirs, b, hidden]` (PyTorch's `h_0` / `c_0`).
/// * Output `[b, s, dirs·hidden]`: the last layer's hidden states,
///   forward then reverse along the feature axis (PyTorch `output` with
///   `batch_first=True`); layer `l > 0` consumes that concatenation
///   from layer `l − 1`.
/// * `carry` appends rows along the sequence axis: `L` rows with each
///   layer's final h (layer 0 first; directions concatenated as in the
///   output, the reverse direction's final state being the one after
///   step 0), then for the LSTM `L` rows with the final c. So row `s + l`,
///   features `d·hidden..(d+1)·hidden` is PyTorch's `h_n[l·dirs + d]`
///   (and row `s + L + l` is `c_n[l·dirs + d]`): `[b, s + 2L, ..]` for
///   the LSTM, `[b, s + L, ..]` for GRU / RNN. Needs a static `s`.
///
/// All operands share x's float dtype; `in` must be static.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recurrent {
    /// Hidden size.
    pub hidden: usize,
    /// Stacked layers.
    pub num_layers: usize,
    /// Both directions.
    pub bidirectional: bool,
    /// Append each layer's final state rows (see the layout above).
    pub carry: bool,
}

/// A pooling / im2col window, one entry per spatial axis (h, w), shared by
/// [`Op::Pool2d`](super::Op::Pool2d), the max-pool gradient and
/// [`Op::Im2Col`](super::Op::Im2Col); flattened into each op's JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// Window size.
    pub kernel: [usize; 2],
    /// Stride.
    pub stride: [usize; 2],
    /// Zero padding. Pooling takes at most `kernel/2` per axis; padded
    /// positions never win a max and are excluded from a mean's divisor
    /// (PyTorch `count_include_pad=False`).
    pub padding: [usize; 2],
}

/// The loop of a generic scan, shared by [`Op::Scan`](super::Op::Scan) and
/// its gradient; flattened into each op's JSON.
///
/// The body must verify; its `Input` leaves, in node order, are the
/// carries (shapes equal to `carry_init`) then one slice per scanned
/// operand (its shape without axis 0); its outputs are the new carries
/// (shapes equal to `carry_init`) then `y`. Other leaves (params,
/// constants) are allowed. `length ≥ 1`; axis 0 of every xs must be the
/// static `length`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScanLoop {
    /// The body graph.
    pub body: Box<crate::graph::Graph>,
    /// Number of carried values.
    pub num_carry: usize,
    /// Steps.
    pub length: usize,
}
