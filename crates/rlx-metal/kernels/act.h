// act.h -- scalar activation and binary-op helpers shared by the
// elementwise, binary, matmul and region kernels (math in f32 for every
// element type). Inlined into each kernel source after `using namespace
// metal;` by rlx_metal::metal::kernels::source, like args.h.
//
// Metal has no erf: exact GELU uses Abramowitz & Stegun 7.1.26
// (|error| <= 1.5e-7). max / min propagate NaN (numpy's maximum /
// minimum); pow of a negative base is defined for integral exponents
// (numpy's power).
#ifndef RLX_METAL_ACT_H
#define RLX_METAL_ACT_H

static inline float rlx_erf(float x) {
    const float t = 1.0f / (1.0f + 0.3275911f * fabs(x));
    const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f
                     + t * (-1.453152027f + t * 1.061405429f))));
    const float y = 1.0f - poly * exp(-x * x);
    return x < 0.0f ? -y : y;
}

static inline float rlx_act(uint op, float x) {
    switch (op) {
    case RLX_ACT_GELU:        return 0.5f * x * (1.0f + rlx_erf(x * 0.70710678118654752f));
    case RLX_ACT_GELU_APPROX: return 0.5f * x * (1.0f + precise::tanh(0.79788456080286536f
                                                    * (x + 0.044715f * x * x * x)));
    case RLX_ACT_SILU:        return x / (1.0f + exp(-x));
    case RLX_ACT_RELU:        return x > 0.0f ? x : (isnan(x) ? x : 0.0f);
    case RLX_ACT_SIGMOID:     return 1.0f / (1.0f + exp(-x));
    case RLX_ACT_TANH:        return precise::tanh(x);
    case RLX_ACT_EXP:         return exp(x);
    case RLX_ACT_LOG:         return log(x);
    case RLX_ACT_SQRT:        return sqrt(x);
    case RLX_ACT_RSQRT:       return rsqrt(x);
    case RLX_ACT_NEG:         return -x;
    case RLX_ACT_ABS:         return fabs(x);
    case RLX_ACT_SIN:         return precise::sin(x);
    case RLX_ACT_COS:         return precise::cos(x);
    case RLX_ACT_TAN:         return precise::tan(x);
    case RLX_ACT_ATAN:        return precise::atan(x);
    case RLX_ACT_ROUND:       return rint(x);  // half to even
    default:                  return NAN;
    }
}

static inline float rlx_pow(float a, float b) {
    if (a >= 0.0f || b != rint(b)) {
        return precise::pow(a, b);
    }
    const float r = precise::pow(-a, b);
    return fmod(b, 2.0f) != 0.0f ? -r : r;
}

static inline float rlx_binary(uint op, float a, float b) {
    switch (op) {
    case RLX_BIN_ADD: return a + b;
    case RLX_BIN_SUB: return a - b;
    case RLX_BIN_MUL: return a * b;
    case RLX_BIN_DIV: return a / b;
    case RLX_BIN_MAX: return (a > b || isnan(a)) ? a : b;
    case RLX_BIN_MIN: return (a < b || isnan(a)) ? a : b;
    case RLX_BIN_POW: return rlx_pow(a, b);
    default:          return NAN;
    }
}

#endif  // RLX_METAL_ACT_H
