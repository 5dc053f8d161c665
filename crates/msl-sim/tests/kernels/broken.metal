#include <metal_stdlib>
using namespace metal;

kernel void broken(device float* x [[buffer(0)]],
                   uint gid [[thread_position_in_grid]])
{
    x[gid] = erf(x[gid]) + undeclared_name;
}
