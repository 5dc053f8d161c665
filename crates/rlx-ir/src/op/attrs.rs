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
