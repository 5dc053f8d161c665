// region.metal -- fused elementwise regions (a per-element interpreter of
// a short step chain), fused binary / ternary activations, fma, compare,
// where and SwiGLU.
//
// Threadgroup layout: 1-D grids of one thread per output element (any
// threadgroup size, ceil(len / size) threadgroups, threads past the end
// return at once); region_f32 adds grid y = slice. No threadgroup memory.
//
// region_f32          args RegionArgs: buffer(1) the f32 arena bound at
//     offset 0 (inputs are arena element indices, as the thunks encode
//     them), buffer(2) dst (slice s at dst + s * slice_elems). Each thread
//     loads its inputs once (scalar: element 0, modulus m: element g % m,
//     else element g), then runs the chain: kind 0 activation (RlxAct),
//     kind 1 cast rounding (0 none, 1 f16, 2 bf16, 3 truncate), kind 2
//     binary op (RlxBin); operand words with bit 31 set name earlier steps.
//     The last step is stored.
// binary_act_{f32,f16}   args FusedActArgs: buffer(1) lhs, (2) rhs, (3) dst
//     dst = act(lhs op0 rhs)
// ternary_act_{f32,f16}  args FusedActArgs: buffer(1) lhs, (2) rhs0,
//     (3) rhs1, (4) dst: dst = act((lhs op0 rhs0) op1 rhs1) (act only when
//     has_act; Fma is mul, add without act)
// compare_f32         args CompareArgs: buffer(1) lhs, (2) rhs, (3) dst
// where_f32           args WhereArgs: buffer(1) cond, (2) on_true,
//     (3) on_false, (4) dst
// swiglu_{f32,f16}    args SwigluArgs: buffer(1) src [rows, 2 n_half],
//     (2) dst [rows, n_half]: value * silu(gate)
//
// Math in f32 (helpers in act.h); f16 results rounded once at the store.
#include <metal_stdlib>
#include "args.h"
using namespace metal;
#include "act.h"

#define RLX_STEP_OPERAND 0x80000000u

// Rounding of a region cast step (the value stays an f32).
static inline float rlx_cast_step(uint sub, float x) {
    switch (sub) {
    case 1: return float(half(x));
    case 2: {
        if (isnan(x)) {
            return x;
        }
        uint u = as_type<uint>(x);
        u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
        return as_type<float>(u & 0xffff0000u);
    }
    case 3: return trunc(x);
    default: return x;
    }
}

kernel void region_f32(constant RegionArgs& p     [[buffer(0)]],
                       device const float*  arena [[buffer(1)]],
                       device float*        dst   [[buffer(2)]],
                       uint2 tg   [[threadgroup_position_in_grid]],
                       uint2 lid  [[thread_position_in_threadgroup]],
                       uint2 tptg [[threads_per_threadgroup]])
{
    const uint g = tg.x * tptg.x + lid.x;
    const uint slice = tg.y;
    if (g >= p.slice_len) {
        return;
    }
    float in[RLX_REGION_INPUTS];
    const uint n_in = min(p.n_in, (uint)RLX_REGION_INPUTS);
    for (uint i = 0; i < n_in; ++i) {
        const uint off = p.input_offs[slice * p.n_in + i];
        uint idx = g;
        if (((p.scalar_mask >> i) & 1u) != 0) {
            idx = 0;
        } else if (p.modulus[i] != 0) {
            idx = g % p.modulus[i];
        }
        in[i] = arena[(ulong)off + idx];
    }
    float reg[RLX_REGION_STEPS];
    float v = 0.0f;
    for (uint s = 0; s < p.num_steps; ++s) {
        const uint kind = p.chain[4 * s];
        const uint sub = p.chain[4 * s + 1];
        const uint wa = p.chain[4 * s + 2];
        const float x = (wa & RLX_STEP_OPERAND) != 0 ? reg[wa & ~RLX_STEP_OPERAND] : in[wa];
        if (kind == 2) {
            const uint wb = p.chain[4 * s + 3];
            const float y = (wb & RLX_STEP_OPERAND) != 0 ? reg[wb & ~RLX_STEP_OPERAND] : in[wb];
            v = rlx_binary(sub, x, y);
        } else if (kind == 1) {
            v = rlx_cast_step(sub, x);
        } else {
            v = rlx_act(sub, x);
        }
        reg[s] = v;
    }
    dst[(ulong)slice * p.slice_elems + g] = v;
}

template <typename T>
kernel void binary_act(constant FusedActArgs& p   [[buffer(0)]],
                       device const T*        lhs [[buffer(1)]],
                       device const T*        rhs [[buffer(2)]],
                       device T*              dst [[buffer(3)]],
                       uint gid [[thread_position_in_grid]])
{
    if (gid >= p.len) {
        return;
    }
    float v = rlx_binary(p.op0, float(lhs[gid]), float(rhs[gid]));
    dst[gid] = T(p.has_act != 0 ? rlx_act(p.act, v) : v);
}

template <typename T>
kernel void ternary_act(constant FusedActArgs& p    [[buffer(0)]],
                        device const T*        lhs  [[buffer(1)]],
                        device const T*        rhs0 [[buffer(2)]],
                        device const T*        rhs1 [[buffer(3)]],
                        device T*              dst  [[buffer(4)]],
                        uint gid [[thread_position_in_grid]])
{
    if (gid >= p.len) {
        return;
    }
    float v = rlx_binary(p.op0, float(lhs[gid]), float(rhs0[gid]));
    v = rlx_binary(p.op1, v, float(rhs1[gid]));
    dst[gid] = T(p.has_act != 0 ? rlx_act(p.act, v) : v);
}

kernel void compare_f32(constant CompareArgs& p   [[buffer(0)]],
                        device const float*   lhs [[buffer(1)]],
                        device const float*   rhs [[buffer(2)]],
                        device float*         dst [[buffer(3)]],
                        uint gid [[thread_position_in_grid]])
{
    if (gid >= p.len) {
        return;
    }
    const float a = lhs[p.lhs_scalar != 0 ? 0 : gid];
    const float b = rhs[p.rhs_scalar != 0 ? 0 : gid];
    bool hit = false;
    switch (p.op) {
    case RLX_CMP_EQ: hit = a == b; break;
    case RLX_CMP_NE: hit = a != b; break;
    case RLX_CMP_LT: hit = a < b; break;
    case RLX_CMP_LE: hit = a <= b; break;
    case RLX_CMP_GT: hit = a > b; break;
    case RLX_CMP_GE: hit = a >= b; break;
    default: break;
    }
    dst[gid] = hit ? 1.0f : 0.0f;
}

kernel void where_f32(constant WhereArgs&  p        [[buffer(0)]],
                      device const float*  cond     [[buffer(1)]],
                      device const float*  on_true  [[buffer(2)]],
                      device const float*  on_false [[buffer(3)]],
                      device float*        dst      [[buffer(4)]],
                      uint gid [[thread_position_in_grid]])
{
    if (gid >= p.len) {
        return;
    }
    const bool c = cond[p.cond_scalar != 0 ? 0 : gid] != 0.0f;
    dst[gid] = c ? on_true[p.true_scalar != 0 ? 0 : gid]
                 : on_false[p.false_scalar != 0 ? 0 : gid];
}

template <typename T>
kernel void swiglu(constant SwigluArgs& p   [[buffer(0)]],
                   device const T*      src [[buffer(1)]],
                   device T*            dst [[buffer(2)]],
                   uint gid [[thread_position_in_grid]])
{
    if (gid >= p.total) {
        return;
    }
    const uint row = gid / p.n_half;
    const uint j = gid % p.n_half;
    device const T* x = src + (ulong)row * 2 * p.n_half;
    const float l = float(x[j]);
    const float r = float(x[p.n_half + j]);
    const float val = p.gate_first != 0 ? r : l;
    const float gate = p.gate_first != 0 ? l : r;
    dst[gid] = T(val * (gate / (1.0f + exp(-gate))));
}

#define RLX_BINACT(name, T)                                                      \
template [[host_name(name)]] kernel void binary_act<T>(                          \
    constant FusedActArgs& p [[buffer(0)]], device const T* lhs [[buffer(1)]],   \
    device const T* rhs [[buffer(2)]], device T* dst [[buffer(3)]],              \
    uint gid [[thread_position_in_grid]]);
RLX_BINACT("binary_act_f32", float)
RLX_BINACT("binary_act_f16", half)

#define RLX_TERACT(name, T)                                                      \
template [[host_name(name)]] kernel void ternary_act<T>(                         \
    constant FusedActArgs& p [[buffer(0)]], device const T* lhs [[buffer(1)]],   \
    device const T* rhs0 [[buffer(2)]], device const T* rhs1 [[buffer(3)]],      \
    device T* dst [[buffer(4)]], uint gid [[thread_position_in_grid]]);
RLX_TERACT("ternary_act_f32", float)
RLX_TERACT("ternary_act_f16", half)

#define RLX_SWIGLU(name, T)                                                      \
template [[host_name(name)]] kernel void swiglu<T>(                              \
    constant SwigluArgs& p [[buffer(0)]], device const T* src [[buffer(1)]],     \
    device T* dst [[buffer(2)]], uint gid [[thread_position_in_grid]]);
RLX_SWIGLU("swiglu_f32", float)
RLX_SWIGLU("swiglu_f16", half)
