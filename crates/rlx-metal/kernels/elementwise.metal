// elementwise.metal -- unary activations and f32 <-> f16 casts.
//
// Threadgroup layout: 1-D grid, one thread per element; any threadgroup
// size (256 is the host's choice), ceil(len / size) threadgroups; threads
// past `len` return at once. No threadgroup memory, no barriers.
//
// unary_f32 / unary_f16     args UnaryArgs: buffer(1) src, buffer(2) dst
//                           (src == dst for the in-place thunk)
// cast_f32_f16 / cast_f16_f32  args CastArgs: buffer(1) src, buffer(2) dst
//
// Math is done in f32 for both element types. Metal has no erf: exact
// GELU uses Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7).
#include <metal_stdlib>
#include "args.h"
using namespace metal;

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

template <typename T>
kernel void unary(constant UnaryArgs& a [[buffer(0)]],
                  device const T*     src [[buffer(1)]],
                  device T*           dst [[buffer(2)]],
                  uint gid [[thread_position_in_grid]])
{
    if (gid >= a.len) {
        return;
    }
    dst[gid] = T(rlx_act(a.op, float(src[gid])));
}

template <typename S, typename D>
kernel void cast(constant CastArgs& a [[buffer(0)]],
                 device const S*    src [[buffer(1)]],
                 device D*          dst [[buffer(2)]],
                 uint gid [[thread_position_in_grid]])
{
    if (gid >= a.len) {
        return;
    }
    dst[gid] = D(src[gid]);
}

#define RLX_UNARY(name, T)                                                   \
template [[host_name(name)]] kernel void unary<T>(                           \
    constant UnaryArgs& a [[buffer(0)]], device const T* src [[buffer(1)]], \
    device T* dst [[buffer(2)]], uint gid [[thread_position_in_grid]]);
RLX_UNARY("unary_f32", float)
RLX_UNARY("unary_f16", half)

#define RLX_CAST(name, S, D)                                                 \
template [[host_name(name)]] kernel void cast<S, D>(                         \
    constant CastArgs& a [[buffer(0)]], device const S* src [[buffer(1)]],  \
    device D* dst [[buffer(2)]], uint gid [[thread_position_in_grid]]);
RLX_CAST("cast_f32_f16", float, half)
RLX_CAST("cast_f16_f32", half, float)
