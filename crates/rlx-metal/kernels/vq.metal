// vq.metal -- vector-quantiser assignment: the nearest codebook row of
// each vector (VqAssign thunk), f32 in, i32 out.
//
// Scores (smaller is better), each summed in f32 in dimension order as the
// host does: L2 sum (x - c)^2; dot -sum x*c; cosine
// -(x.c / max(|x|, 1e-12) / max(|c|, 1e-12)). Ties (and NaN scores) keep
// the lowest codebook index.
//
// Threadgroup layout: one threadgroup per vector (grid [n]), VQ_THREADS
// threads; thread t scores codebook rows t, t + VQ_THREADS, ... and keeps
// its best; a threadgroup tree reduction over (score, index) pairs, the
// lower index winning equal scores, gives the row's answer.
//
// vq_assign_f32   args VqArgs: buffer(1) x [n, d], (2) codebook [k, d],
//   (3) out i32 [n]
#include <metal_stdlib>
#include "args.h"
using namespace metal;

#define VQ_THREADS 64

static inline float vq_norm(device const float* v, uint d)
{
    float acc = 0.0f;
    for (uint j = 0; j < d; ++j) {
        const float t = v[j] * v[j];
        acc += t;
    }
    return max(sqrt(acc), 1e-12f);
}

kernel void vq_assign_f32(constant VqArgs&    a   [[buffer(0)]],
                          device const float* x   [[buffer(1)]],
                          device const float* cb  [[buffer(2)]],
                          device int*         out [[buffer(3)]],
                          uint row [[threadgroup_position_in_grid]],
                          uint tid [[thread_position_in_threadgroup]])
{
    threadgroup float best_s[VQ_THREADS];
    threadgroup uint best_i[VQ_THREADS];
    device const float* xr = x + (ulong)row * a.d;
    const float xn = a.metric == 2 ? vq_norm(xr, a.d) : 1.0f;
    float bs = INFINITY;
    uint bi = 0xFFFFFFFFu;
    for (uint j = tid; j < a.k; j += VQ_THREADS) {
        device const float* c = cb + (ulong)j * a.d;
        float acc = 0.0f;
        for (uint e = 0; e < a.d; ++e) {
            if (a.metric == 0) {
                const float df = xr[e] - c[e];
                const float t = df * df;
                acc += t;
            } else {
                const float t = xr[e] * c[e];
                acc += t;
            }
        }
        float s;
        if (a.metric == 0) {
            s = acc;
        } else if (a.metric == 1) {
            s = -acc;
        } else {
            s = -(acc / xn / vq_norm(c, a.d));
        }
        if (s < bs) {
            bs = s;
            bi = j;
        }
    }
    best_s[tid] = bs;
    best_i[tid] = bi;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint w = VQ_THREADS / 2; w > 0; w /= 2) {
        if (tid < w) {
            const float os = best_s[tid + w];
            const uint oi = best_i[tid + w];
            if (os < best_s[tid] || (os == best_s[tid] && oi < best_i[tid])) {
                best_s[tid] = os;
                best_i[tid] = oi;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (tid == 0) {
        out[row] = best_i[0] == 0xFFFFFFFFu ? 0 : (int)best_i[0];
    }
}
