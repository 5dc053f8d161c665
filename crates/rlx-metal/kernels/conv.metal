// conv.metal -- depthwise causal 1-D convolution on [batch, seq, channels]
// data (GDN / Mamba ssm_conv1d), optionally followed by SiLU.
//
// Threadgroup layout: 1-D grid over the outputs [batch, out_seq, channels],
// one thread per output, any threadgroup size (256 is the host's choice);
// channels are fastest, so consecutive threads read consecutive words of
// each input row (coalesced) and the k weights of their channel.
//
// depthwise_conv1d_bsc_f32   args DwConv1dArgs: buffer(1) src [batch,
//   width, channels], buffer(2) weight [channels, k], buffer(3) dst
//   [batch, out_seq, channels], out_seq = width - k + 1:
//   dst[b, t, c] = act(sum_i src[b, t + i, c] * weight[c, i]), summed from 0
//   in tap order as the host does; act = SiLU when `silu`.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

kernel void depthwise_conv1d_bsc_f32(constant DwConv1dArgs& a  [[buffer(0)]],
                                     device const float*    src [[buffer(1)]],
                                     device const float*    wt  [[buffer(2)]],
                                     device float*          dst [[buffer(3)]],
                                     uint gid [[thread_position_in_grid]])
{
    if (a.channels == 0 || gid >= a.batch * a.out_seq * a.channels) {
        return;
    }
    const uint row = gid / a.channels;
    const uint c = gid - row * a.channels;
    const uint b = row / a.out_seq;
    const uint t = row - b * a.out_seq;
    device const float* x = src + ((ulong)b * a.width + t) * a.channels + c;
    device const float* w = wt + (ulong)c * a.k;
    float acc = 0.0f;
    for (uint i = 0; i < a.k; ++i) {
        acc += x[(ulong)i * a.channels] * w[i];
    }
    dst[gid] = a.silu != 0 ? acc / (1.0f + exp(-acc)) : acc;
}
