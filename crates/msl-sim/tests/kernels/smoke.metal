#include <metal_stdlib>
using namespace metal;

// Shim and runtime features that rlx's kernels may use: vector
// constructors, swizzles, as_type, half literals, simd reductions, scans and
// shuffles over partial simdgroups, threadgroup variables and
// [[threadgroup(0)]] memory, atomics on device and threadgroup memory.
struct SmokeArgs {
    uint n;
    float scale;
};

kernel void smoke(constant SmokeArgs& args   [[buffer(0)]],
                  device float4*      out4   [[buffer(1)]],
                  device uint*        bits   [[buffer(2)]],
                  device atomic_uint* count  [[buffer(3)]],
                  device float*       scan   [[buffer(4)]],
                  device float*       red    [[buffer(5)]],
                  threadgroup float*  dyn    [[threadgroup(0)]],
                  uint gid  [[thread_position_in_grid]],
                  uint lid  [[thread_position_in_threadgroup]],
                  uint tg   [[threadgroup_position_in_grid]],
                  uint tpg  [[threads_per_threadgroup]],
                  uint sid  [[simdgroup_index_in_threadgroup]],
                  uint nsg  [[simdgroups_per_threadgroup]],
                  uint lane [[thread_index_in_simdgroup]])
{
    threadgroup float partial[32];
    threadgroup atomic_uint tg_count;
    if (lid == 0) {
        atomic_store_explicit(&tg_count, 0u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    const float2 ab = float2(1.0f, 2.0f);
    const float4 v  = float4(ab, 3.0f, float(gid));
    const half4  h  = half4(v);
    out4[gid] = float4(h.wzyx) * args.scale + float4(0.5h);
    bits[gid] = as_type<uint>(float(gid));
    atomic_fetch_add_explicit(count, 1u, memory_order_relaxed);
    atomic_fetch_add_explicit(&tg_count, 1u, memory_order_relaxed);

    const float down = simd_shuffle_down(float(lane), 1);
    scan[gid] = simd_prefix_exclusive_sum(1.0f) + 100.0f * (down - float(lane));

    // two-level threadgroup sum through both kinds of threadgroup memory
    const float s = simd_sum(float(gid));
    if (lane == 0) { partial[sid] = s; }
    dyn[lid] = float(lid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sid == 0) {
        const float t = simd_sum(lane < nsg ? partial[lane] : 0.0f);
        if (lane == 0) {
            red[tg * 3 + 0] = t;
            red[tg * 3 + 1] = float(atomic_load_explicit(&tg_count, memory_order_relaxed));
            red[tg * 3 + 2] = dyn[tpg - 1];
        }
    }
}

// A barrier inside a branch that only some lanes take.
kernel void divergent_barrier(device float* x [[buffer(1)]],
                              uint lid [[thread_position_in_threadgroup]])
{
    if (lid < 16) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    x[lid] = 1.0f;
}

// Lanes 0..15 wait for a flag that no lane ever sets: a deadlock.
kernel void spin_forever(device atomic_uint* flag [[buffer(1)]],
                         uint lid [[thread_position_in_threadgroup]])
{
    while (atomic_load_explicit(flag, memory_order_relaxed) == 0u) {
    }
}

// Writes one element past the end of its buffer.
kernel void overrun(device float* x [[buffer(1)]],
                    constant uint& n [[buffer(0)]],
                    uint gid [[thread_position_in_grid]])
{
    if (gid <= n) { x[gid] = 1.0f; }
}

// Lanes write one threadgroup variable with no barrier: a data race that
// only ThreadSanitizer sees (negative control of `make sanitize`).
kernel void racy(device float* x [[buffer(1)]],
                 uint lid [[thread_position_in_threadgroup]])
{
    threadgroup float shared_value;
    shared_value = float(lid);
    x[lid] = shared_value;
}

// Half the lanes wait at one barrier, half at another.
kernel void split_barriers(device float* x [[buffer(1)]],
                           uint lid [[thread_position_in_threadgroup]])
{
    if (lid < 16) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    } else {
        threadgroup_barrier(mem_flags::mem_device);
    }
    x[lid] = 1.0f;
}

// Lanes 0..15 wait at a barrier, lanes 16..31 in a simd function that
// waits for the whole simdgroup: every lane waits, none can go on.
kernel void barrier_vs_simd(device float* x [[buffer(1)]],
                            uint lid [[thread_position_in_threadgroup]])
{
    if (lid < 16) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        x[lid] = 1.0f;
    } else {
        x[lid] = simd_sum(1.0f);
    }
}

// The last lane raises a flag the others spin on: only works when a lane
// spinning on an atomic lets the others run.
kernel void flag_handoff(device atomic_uint* flag [[buffer(1)]],
                         device uint*        out  [[buffer(2)]],
                         uint lid [[thread_position_in_threadgroup]],
                         uint tpg [[threads_per_threadgroup]])
{
    if (lid == tpg - 1) {
        atomic_store_explicit(flag, 7u, memory_order_relaxed);
    }
    uint seen = 0u;
    while ((seen = atomic_load_explicit(flag, memory_order_relaxed)) == 0u) {
    }
    out[lid] = seen + lid;
}

// Lane 0 returns without raising the flag the other lanes spin on.
kernel void flag_never_set(device atomic_uint* flag [[buffer(1)]],
                           uint lid [[thread_position_in_threadgroup]])
{
    if (lid == 0) {
        return;
    }
    while (atomic_load_explicit(flag, memory_order_relaxed) == 0u) {
    }
}
