// vision.metal -- the NCHW image family: direct 2-D convolution, transposed
// convolution, im2col, max / mean pooling (and the max-pool argmax and its
// gradient), nearest 2x upsample, LayerNorm across channels.
//
// Threadgroup layout: every kernel is a 1-D grid with one thread per
// output element, any threadgroup size (the host uses 256); the innermost
// (width) axis is fastest, so neighbouring threads read neighbouring input
// words. Accumulation is in f32 for both element types; the f16 variants
// round once on the store. Every index is computed in 32 bits from the
// output coordinate (the host checks that each tensor fits in 2^32
// elements); addresses are formed in 64 bits.
//
// Window geometry follows PyTorch: input row iy = oy * sh + ky * dh - ph
// (likewise columns); taps falling in the padding read zero (conv, im2col)
// or are skipped (pooling).
//
// conv2d_{f32,f16}            args Conv2dArgs: buffer(1) src [n, c_in, h, w],
//   (2) weight [c_out, c_in / groups, kh, kw], (3) dst [n, c_out, h_out,
//   w_out]; summed over the group's input channels, then ky, then kx.
// conv_transpose2d_{f32,f16}  args Conv2dArgs (h, w = the input's size):
//   buffer(1) src [n, c_in, h, w], (2) weight [c_in, c_out / groups, kh,
//   kw], (3) dst [n, c_out, h_out, w_out]; gather form: output (oy, ox)
//   takes input (iy, ix) through tap (ky, kx) when oy + ph - ky * dh =
//   iy * sh (and the same for x), so no two threads write one word.
// im2col_{f32,f16}            args Conv2dArgs (c_out, groups unused):
//   buffer(1) src, (2) col [n, c_in * kh * kw, h_out * w_out], row index
//   (ci * kh + ky) * kw + kx (the layout a conv weight [c_out, c_in, kh, kw]
//   flattens to, so conv = weight @ col).
// pool2d_{max,mean}_{f32,f16} args Pool2dArgs: buffer(1) src [n, c, h, w],
//   (2) dst [n, c, h_out, w_out]. Max starts at -inf, takes the first
//   strictly larger value in row-major window order and propagates NaN;
//   mean divides by the taps inside the input (count_include_pad off; 0/0
//   gives NaN for a window wholly in the padding).
// max_pool2d_argmax_{f32,f16} args Pool2dArgs: as pool2d_max, and buffer(3)
//   argmax [n, c, h_out, w_out] int: the winning tap's flat index iy * w +
//   ix within its [h, w] plane (the first maximum in row-major window
//   order, the first NaN if any), -1 when no tap is inside the input. This
//   is the layout MaxPool2dBackward routes the gradient by.
// max_pool2d_backward_{f32,f16} args Pool2dArgs: buffer(1) x [n, c, h, w],
//   (2) dy [n, c, h_out, w_out], (3) dx [n, c, h, w]; gather form: each
//   input pixel sums dy over the windows that cover it and whose argmax
//   (recomputed exactly as max_pool2d_argmax does) is that pixel.
// resize_nearest2x_{f32,f16}  args Resize2xArgs: buffer(1) src [planes, h,
//   w], (2) dst [planes, 2h, 2w], dst[p, y, x] = src[p, y / 2, x / 2].
// layer_norm2d_{f32,f16}      args LayerNorm2dArgs: buffer(1) src [n, c,
//   hw], (2) g [c], (3) b [c], (4) dst; per (sample, position) over the c
//   channels (stride hw): dst = (x - mean) * rsqrt(var + eps) * g + b,
//   two-pass variance, one thread per position.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

template <typename T>
kernel void conv2d(constant Conv2dArgs& a   [[buffer(0)]],
                   device const T*      src [[buffer(1)]],
                   device const T*      wt  [[buffer(2)]],
                   device T*            dst [[buffer(3)]],
                   uint gid [[thread_position_in_grid]])
{
    const uint plane = a.h_out * a.w_out;
    if (plane == 0 || gid >= a.n * a.c_out * plane) {
        return;
    }
    const uint pix = gid % plane;
    const uint nc = gid / plane;
    const uint co = nc % a.c_out;
    const uint b = nc / a.c_out;
    const uint oy = pix / a.w_out;
    const uint ox = pix - oy * a.w_out;
    const uint cig = a.c_in / a.groups;
    const uint cog = a.c_out / a.groups;
    const uint ci0 = (co / cog) * cig;
    const int y0 = int(oy * a.sh) - int(a.ph);
    const int x0 = int(ox * a.sw) - int(a.pw);
    device const T* w = wt + (ulong)co * cig * a.kh * a.kw;
    float acc = 0.0f;
    for (uint ci = 0; ci < cig; ++ci) {
        device const T* x = src + ((ulong)b * a.c_in + ci0 + ci) * a.h * a.w;
        for (uint ky = 0; ky < a.kh; ++ky) {
            const int iy = y0 + int(ky * a.dh);
            if (iy < 0 || iy >= int(a.h)) {
                continue;
            }
            device const T* xr = x + (ulong)iy * a.w;
            device const T* wr = w + ((ulong)ci * a.kh + ky) * a.kw;
            for (uint kx = 0; kx < a.kw; ++kx) {
                const int ix = x0 + int(kx * a.dw);
                if (ix >= 0 && ix < int(a.w)) {
                    acc += float(xr[ix]) * float(wr[kx]);
                }
            }
        }
    }
    dst[gid] = T(acc);
}

template <typename T>
kernel void conv_transpose2d(constant Conv2dArgs& a   [[buffer(0)]],
                             device const T*      src [[buffer(1)]],
                             device const T*      wt  [[buffer(2)]],
                             device T*            dst [[buffer(3)]],
                             uint gid [[thread_position_in_grid]])
{
    const uint plane = a.h_out * a.w_out;
    if (plane == 0 || gid >= a.n * a.c_out * plane) {
        return;
    }
    const uint pix = gid % plane;
    const uint nc = gid / plane;
    const uint co = nc % a.c_out;
    const uint b = nc / a.c_out;
    const uint oy = pix / a.w_out;
    const uint ox = pix - oy * a.w_out;
    const uint cig = a.c_in / a.groups;
    const uint cog = a.c_out / a.groups;
    const uint g = co / cog;
    const uint col = co - g * cog;
    float acc = 0.0f;
    for (uint ci = g * cig; ci < (g + 1) * cig; ++ci) {
        device const T* x = src + ((ulong)b * a.c_in + ci) * a.h * a.w;
        device const T* w = wt + ((ulong)ci * cog + col) * a.kh * a.kw;
        for (uint ky = 0; ky < a.kh; ++ky) {
            const int ty = int(oy + a.ph) - int(ky * a.dh);
            if (ty < 0 || ty % int(a.sh) != 0 || ty / int(a.sh) >= int(a.h)) {
                continue;
            }
            device const T* xr = x + (ulong)(ty / int(a.sh)) * a.w;
            for (uint kx = 0; kx < a.kw; ++kx) {
                const int tx = int(ox + a.pw) - int(kx * a.dw);
                if (tx >= 0 && tx % int(a.sw) == 0 && tx / int(a.sw) < int(a.w)) {
                    acc += float(xr[tx / int(a.sw)]) * float(w[ky * a.kw + kx]);
                }
            }
        }
    }
    dst[gid] = T(acc);
}

template <typename T>
kernel void im2col(constant Conv2dArgs& a   [[buffer(0)]],
                   device const T*      src [[buffer(1)]],
                   device T*            col [[buffer(2)]],
                   uint gid [[thread_position_in_grid]])
{
    const uint plane = a.h_out * a.w_out;
    const uint taps = a.kh * a.kw;
    if (plane == 0 || taps == 0 || gid >= a.n * a.c_in * taps * plane) {
        return;
    }
    const uint pix = gid % plane;
    const uint row = gid / plane;  // (b * c_in + ci) * taps + tap
    const uint tap = row % taps;
    const uint bc = row / taps;
    const uint ky = tap / a.kw;
    const uint kx = tap - ky * a.kw;
    const uint oy = pix / a.w_out;
    const uint ox = pix - oy * a.w_out;
    const int iy = int(oy * a.sh + ky * a.dh) - int(a.ph);
    const int ix = int(ox * a.sw + kx * a.dw) - int(a.pw);
    T v = T(0);
    if (iy >= 0 && iy < int(a.h) && ix >= 0 && ix < int(a.w)) {
        v = src[(ulong)bc * a.h * a.w + (ulong)iy * a.w + ix];
    }
    col[gid] = v;
}

// The max of the window of output (oy, ox) over `plane` ([h, w]) and the
// flat index of its winner (-1 when no tap is inside the input).
template <typename T>
static inline float rlx_window_max(constant Pool2dArgs& a, device const T* plane,
                                   uint oy, uint ox, thread int& arg) {
    float m = -INFINITY;
    arg = -1;
    for (uint ky = 0; ky < a.kh; ++ky) {
        const int iy = int(oy * a.sh + ky) - int(a.ph);
        if (iy < 0 || iy >= int(a.h)) {
            continue;
        }
        for (uint kx = 0; kx < a.kw; ++kx) {
            const int ix = int(ox * a.sw + kx) - int(a.pw);
            if (ix < 0 || ix >= int(a.w)) {
                continue;
            }
            const float v = float(plane[iy * int(a.w) + ix]);
            // NaN wins once and stays (NaN > m and m > NaN are both false)
            if (arg < 0 || (!isnan(m) && (isnan(v) || v > m))) {
                m = v;
                arg = iy * int(a.w) + ix;
            }
        }
    }
    return m;
}

template <typename T>
kernel void pool2d_max(constant Pool2dArgs& a   [[buffer(0)]],
                       device const T*      src [[buffer(1)]],
                       device T*            dst [[buffer(2)]],
                       uint gid [[thread_position_in_grid]])
{
    const uint plane = a.h_out * a.w_out;
    if (plane == 0 || gid >= a.n * a.c * plane) {
        return;
    }
    const uint pix = gid % plane;
    const uint oy = pix / a.w_out;
    int arg;
    const float m = rlx_window_max(a, src + (ulong)(gid / plane) * a.h * a.w, oy,
                                   pix - oy * a.w_out, arg);
    dst[gid] = T(m);
}

template <typename T>
kernel void max_pool2d_argmax(constant Pool2dArgs& a   [[buffer(0)]],
                              device const T*      src [[buffer(1)]],
                              device T*            dst [[buffer(2)]],
                              device int*          idx [[buffer(3)]],
                              uint gid [[thread_position_in_grid]])
{
    const uint plane = a.h_out * a.w_out;
    if (plane == 0 || gid >= a.n * a.c * plane) {
        return;
    }
    const uint pix = gid % plane;
    const uint oy = pix / a.w_out;
    int arg;
    const float m = rlx_window_max(a, src + (ulong)(gid / plane) * a.h * a.w, oy,
                                   pix - oy * a.w_out, arg);
    dst[gid] = T(m);
    idx[gid] = arg;
}

template <typename T>
kernel void pool2d_mean(constant Pool2dArgs& a   [[buffer(0)]],
                        device const T*      src [[buffer(1)]],
                        device T*            dst [[buffer(2)]],
                        uint gid [[thread_position_in_grid]])
{
    const uint plane = a.h_out * a.w_out;
    if (plane == 0 || gid >= a.n * a.c * plane) {
        return;
    }
    const uint pix = gid % plane;
    const uint oy = pix / a.w_out;
    const uint ox = pix - oy * a.w_out;
    device const T* x = src + (ulong)(gid / plane) * a.h * a.w;
    float s = 0.0f;
    uint cnt = 0;
    for (uint ky = 0; ky < a.kh; ++ky) {
        const int iy = int(oy * a.sh + ky) - int(a.ph);
        if (iy < 0 || iy >= int(a.h)) {
            continue;
        }
        for (uint kx = 0; kx < a.kw; ++kx) {
            const int ix = int(ox * a.sw + kx) - int(a.pw);
            if (ix >= 0 && ix < int(a.w)) {
                s += float(x[iy * int(a.w) + ix]);
                cnt += 1;
            }
        }
    }
    dst[gid] = T(s / float(cnt));
}

template <typename T>
kernel void max_pool2d_backward(constant Pool2dArgs& a  [[buffer(0)]],
                                device const T*      xs [[buffer(1)]],
                                device const T*      dy [[buffer(2)]],
                                device T*            dx [[buffer(3)]],
                                uint gid [[thread_position_in_grid]])
{
    const uint hw = a.h * a.w;
    if (hw == 0 || gid >= a.n * a.c * hw) {
        return;
    }
    const uint pl = gid / hw;
    const int me = int(gid - pl * hw);
    const int iy = me / int(a.w);
    const int ix = me - iy * int(a.w);
    device const T* x = xs + (ulong)pl * hw;
    device const T* g = dy + (ulong)pl * a.h_out * a.w_out;
    float acc = 0.0f;
    // windows covering (iy, ix): oy * sh - ph <= iy < oy * sh - ph + kh
    const int ty = iy + int(a.ph);
    const int tx = ix + int(a.pw);
    const int sy = int(a.sh);
    const int sx = int(a.sw);
    const int oy0 = max(0, (ty - int(a.kh) + sy) / sy);
    const int oy1 = min(int(a.h_out) - 1, ty / sy);
    const int ox0 = max(0, (tx - int(a.kw) + sx) / sx);
    const int ox1 = min(int(a.w_out) - 1, tx / sx);
    for (int oy = oy0; oy <= oy1; ++oy) {
        for (int ox = ox0; ox <= ox1; ++ox) {
            int arg;
            rlx_window_max(a, x, uint(oy), uint(ox), arg);
            if (arg == me) {
                acc += float(g[oy * int(a.w_out) + ox]);
            }
        }
    }
    dx[gid] = T(acc);
}

template <typename T>
kernel void resize_nearest2x(constant Resize2xArgs& a   [[buffer(0)]],
                             device const T*        src [[buffer(1)]],
                             device T*              dst [[buffer(2)]],
                             uint gid [[thread_position_in_grid]])
{
    const uint w2 = 2 * a.w;
    const uint plane = 2 * a.h * w2;
    if (plane == 0 || gid >= a.planes * plane) {
        return;
    }
    const uint p = gid / plane;
    const uint r = gid - p * plane;
    const uint y = r / w2;
    const uint x = r - y * w2;
    dst[gid] = src[(ulong)p * a.h * a.w + (y / 2) * a.w + x / 2];
}

template <typename T>
kernel void layer_norm2d(constant LayerNorm2dArgs& a   [[buffer(0)]],
                         device const T*           src [[buffer(1)]],
                         device const T*           g   [[buffer(2)]],
                         device const T*           b   [[buffer(3)]],
                         device T*                 dst [[buffer(4)]],
                         uint gid [[thread_position_in_grid]])
{
    if (a.hw == 0 || a.c == 0 || gid >= a.n * a.hw) {
        return;
    }
    const uint s = gid / a.hw;
    const uint p = gid - s * a.hw;
    const ulong base = (ulong)s * a.c * a.hw + p;
    device const T* x = src + base;
    device T* y = dst + base;
    float sum = 0.0f;
    for (uint c = 0; c < a.c; ++c) {
        sum += float(x[(ulong)c * a.hw]);
    }
    const float mean = sum / float(a.c);
    float var = 0.0f;
    for (uint c = 0; c < a.c; ++c) {
        const float d = float(x[(ulong)c * a.hw]) - mean;
        var += d * d;
    }
    const float inv = rsqrt(var / float(a.c) + a.eps);
    for (uint c = 0; c < a.c; ++c) {
        const float d = float(x[(ulong)c * a.hw]) - mean;
        y[(ulong)c * a.hw] = T(d * inv * float(g[c]) + float(b[c]));
    }
}

#define RLX_VISION_3(fn, Args, name, T)                                           \
template [[host_name(name)]] kernel void fn<T>(                                   \
    constant Args& a [[buffer(0)]], device const T* x [[buffer(1)]],             \
    device const T* y [[buffer(2)]], device T* z [[buffer(3)]],                  \
    uint gid [[thread_position_in_grid]]);
#define RLX_VISION_2(fn, Args, name, T)                                           \
template [[host_name(name)]] kernel void fn<T>(                                   \
    constant Args& a [[buffer(0)]], device const T* x [[buffer(1)]],             \
    device T* y [[buffer(2)]], uint gid [[thread_position_in_grid]]);
#define RLX_ARGMAX(name, T)                                                       \
template [[host_name(name)]] kernel void max_pool2d_argmax<T>(                    \
    constant Pool2dArgs& a [[buffer(0)]], device const T* src [[buffer(1)]],     \
    device T* dst [[buffer(2)]], device int* idx [[buffer(3)]],                  \
    uint gid [[thread_position_in_grid]]);
#define RLX_LN2D(name, T)                                                         \
template [[host_name(name)]] kernel void layer_norm2d<T>(                         \
    constant LayerNorm2dArgs& a [[buffer(0)]], device const T* src [[buffer(1)]], \
    device const T* g [[buffer(2)]], device const T* b [[buffer(3)]],            \
    device T* dst [[buffer(4)]], uint gid [[thread_position_in_grid]]);
RLX_VISION_3(conv2d, Conv2dArgs, "conv2d_f32", float)
RLX_VISION_3(conv_transpose2d, Conv2dArgs, "conv_transpose2d_f32", float)
RLX_VISION_2(im2col, Conv2dArgs, "im2col_f32", float)
RLX_VISION_2(pool2d_max, Pool2dArgs, "pool2d_max_f32", float)
RLX_VISION_2(pool2d_mean, Pool2dArgs, "pool2d_mean_f32", float)
RLX_VISION_3(max_pool2d_backward, Pool2dArgs, "max_pool2d_backward_f32", float)
RLX_VISION_2(resize_nearest2x, Resize2xArgs, "resize_nearest2x_f32", float)
RLX_ARGMAX("max_pool2d_argmax_f32", float)
RLX_LN2D("layer_norm2d_f32", float)
RLX_VISION_3(conv2d, Conv2dArgs, "conv2d_f16", half)
RLX_VISION_3(conv_transpose2d, Conv2dArgs, "conv_transpose2d_f16", half)
RLX_VISION_2(im2col, Conv2dArgs, "im2col_f16", half)
RLX_VISION_2(pool2d_max, Pool2dArgs, "pool2d_max_f16", half)
RLX_VISION_2(pool2d_mean, Pool2dArgs, "pool2d_mean_f16", half)
RLX_VISION_3(max_pool2d_backward, Pool2dArgs, "max_pool2d_backward_f16", half)
RLX_VISION_2(resize_nearest2x, Resize2xArgs, "resize_nearest2x_f16", half)
RLX_ARGMAX("max_pool2d_argmax_f16", half)
RLX_LN2D("layer_norm2d_f16", half)
