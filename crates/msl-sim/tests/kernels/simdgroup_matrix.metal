// simdgroup_matrix.metal -- msl-sim's simdgroup_float8x8 subset: each
// simdgroup s computes d[s] = a[s] (8x8) @ b (8x8) + c, loading a from
// device memory and b from threadgroup memory, and stores d[s] directly
// and through threadgroup memory (stride 9 to test elements_per_row).
#include <metal_stdlib>
using namespace metal;

kernel void mma(device const float* a   [[buffer(0)]],
                device const float* b   [[buffer(1)]],
                device const float* c   [[buffer(2)]],
                device float*       d   [[buffer(3)]],
                device float*       d2  [[buffer(4)]],
                uint lid [[thread_index_in_threadgroup]],
                uint sid [[simdgroup_index_in_threadgroup]])
{
    threadgroup float bt[64];
    threadgroup float st[4][72];
    if (sid == 0) {
        for (uint e = lid; e < 64; e += 32) {
            bt[e] = b[e];
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_float8x8 ma;
    simdgroup_float8x8 mb;
    simdgroup_float8x8 mc;
    simdgroup_load(ma, a + sid * 64);
    simdgroup_load(mb, bt, 8);
    simdgroup_load(mc, c, 8);
    simdgroup_multiply_accumulate(mc, ma, mb, mc);
    simdgroup_store(mc, d + sid * 64, 8);
    simdgroup_float8x8 prod = make_filled_simdgroup_matrix<float, 8, 8>(1.0f);
    simdgroup_multiply(prod, ma, mb);
    simdgroup_store(prod, &st[sid][0], 9);
    simdgroup_barrier(mem_flags::mem_threadgroup);
    const uint lane = lid % 32;
    for (uint e = lane; e < 64; e += 32) {
        d2[sid * 64 + e] = st[sid][(e / 8) * 9 + e % 8];
    }
}
