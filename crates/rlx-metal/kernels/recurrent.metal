// recurrent.metal -- LSTM, GRU and Elman RNN (torch.nn semantics,
// batch-first), f32.
//
//   lstm: gates i, f, g, o: c' = sig(f) c + sig(i) tanh(g), h' = sig(o) tanh(c')
//   gru:  gates r, z, n: n = tanh(W_in x + b_in + r (W_hn h + b_hn)),
//         h' = (1 - z) n + z h
//   rnn:  h' = tanh(W_ih x + W_hh h + b)  (max(., 0) with relu)
// where each gate pre-activation is W_ih[gate rows] x_t + W_hh[gate rows]
// h + bias (LSTM / RNN: one summed bias b_ih; GRU: b_ih on the input side,
// b_hh on the recurrent side).
//
// Threadgroup layout: one threadgroup per (batch item, direction): grid
// [batch, dirs, 1], any threads [T, 1, 1] (the host picks min(1024,
// hidden rounded up to 32)); thread `lid` owns hidden units j = lid +
// T m. h lives in a ping-pong pair of threadgroup arrays (step t reads
// one and writes the other, so one barrier per step), the LSTM's c in a
// third; hidden <= RLX_RNN_MAXH (12 KiB of threadgroup memory; larger
// runs on the host). After the step's barrier each thread stores its
// units of h_t to dst row t.
//
// Layers run one after the other inside the threadgroup (a device +
// threadgroup barrier between layers); layer l > 0 reads layer l - 1's
// output from dst in place: step t reads row t before the step's barrier
// and writes row t after it. That is only sound with dirs == 1 (with two
// directions the backward pass would read rows the forward pass already
// overwrote), so the lowering sends multi-layer bidirectional nets to the
// host. The backward direction (y = 1) walks t from seq - 1 down to 0.
//
// Packing (element offsets, G gates, D = dirs, H = hidden, layer-major
// then direction): w_ih layer 0 block (l, d) at d G H ih_cols0, rows of
// ih_cols0 floats (input_size used); layer l > 0 at D G H ih_cols0 +
// ((l - 1) D + d) G H ih_cols, rows of ih_cols floats (D H used). w_hh
// [L D, G H, H]; biases [L D, G H]; h0 / c0 [L D, batch, H]. dst
// [batch, out_rows, D H], direction d in columns d H .. d H + H; with
// carry, layer l's final h goes to row seq + l and (LSTM) its final c to
// row seq + layers + l.
//
// lstm_f32 / gru_f32 / rnn_f32   args RnnArgs: buffer(1) x [batch, seq,
//   input_size], (2) w_ih, (3) w_hh, (4) b_ih, (5) b_hh (GRU only; bind
//   anything), (6) h0, (7) c0 (LSTM only; bind anything), (8) dst.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

#define RLX_RNN_MAXH 1024
#define RLX_CELL_LSTM 0
#define RLX_CELL_GRU 1
#define RLX_CELL_RNN 2

static inline float rlx_sigmoid(float v)
{
    return 1.0f / (1.0f + exp(-v));
}

template <uint CELL>
kernel void recurrent(constant RnnArgs&   a    [[buffer(0)]],
                      device const float* x    [[buffer(1)]],
                      device const float* w_ih [[buffer(2)]],
                      device const float* w_hh [[buffer(3)]],
                      device const float* b_ih [[buffer(4)]],
                      device const float* b_hh [[buffer(5)]],
                      device const float* h0   [[buffer(6)]],
                      device const float* c0   [[buffer(7)]],
                      device float*       dst  [[buffer(8)]],
                      uint3 tg  [[threadgroup_position_in_grid]],
                      uint  lid [[thread_position_in_threadgroup]],
                      uint  tpg [[threads_per_threadgroup]])
{
    threadgroup float hbuf[2][RLX_RNN_MAXH];
    threadgroup float cbuf[RLX_RNN_MAXH];
    const uint H = a.hidden;
    if (H > RLX_RNN_MAXH) {
        return;
    }
    const uint G = CELL == RLX_CELL_LSTM ? 4 : (CELL == RLX_CELL_GRU ? 3 : 1);
    const uint b = tg.x;
    const uint d = tg.y;
    const ulong gh = (ulong)G * H;
    const uint ow = a.dirs * H;
    device float* out = dst + (ulong)b * a.out_rows * ow + (ulong)d * H;
    for (uint l = 0; l < a.layers; ++l) {
        const ulong ld = (ulong)l * a.dirs + d;
        const uint in_w = l == 0 ? a.input_size : ow;
        const uint cols = l == 0 ? a.ih_cols0 : a.ih_cols;
        const ulong ih_off = l == 0
            ? (ulong)d * gh * a.ih_cols0
            : (ulong)a.dirs * gh * a.ih_cols0 + ((ulong)(l - 1) * a.dirs + d) * gh * a.ih_cols;
        device const float* wi = w_ih + ih_off;
        device const float* wh = w_hh + ld * gh * H;
        device const float* bi = b_ih + ld * gh;
        device const float* bh = b_hh + ld * gh;
        device const float* src = l == 0 ? x + (ulong)b * a.seq * a.input_size
                                         : dst + (ulong)b * a.out_rows * ow;
        for (uint j = lid; j < H; j += tpg) {
            const ulong s0 = (ld * a.batch + b) * H + j;
            hbuf[0][j] = h0[s0];
            if (CELL == RLX_CELL_LSTM) {
                cbuf[j] = c0[s0];
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        uint p = 0;
        for (uint s = 0; s < a.seq; ++s) {
            const uint t = d == 1 ? a.seq - 1 - s : s;
            device const float* xt = src + (ulong)t * in_w;
            threadgroup const float* h = hbuf[p];
            threadgroup float* hn = hbuf[p ^ 1];
            for (uint j = lid; j < H; j += tpg) {
                float gx[4];
                float gr[4];
                for (uint k = 0; k < G; ++k) {
                    const ulong r = (ulong)k * H + j;
                    float sx = bi[r];
                    device const float* wr = wi + r * cols;
                    for (uint e = 0; e < in_w; ++e) {
                        sx += wr[e] * xt[e];
                    }
                    float sh = CELL == RLX_CELL_GRU ? bh[r] : 0.0f;
                    device const float* vr = wh + r * H;
                    for (uint e = 0; e < H; ++e) {
                        sh += vr[e] * h[e];
                    }
                    gx[k] = sx;
                    gr[k] = sh;
                }
                float hv;
                if (CELL == RLX_CELL_LSTM) {
                    const float ig = rlx_sigmoid(gx[0] + gr[0]);
                    const float fg = rlx_sigmoid(gx[1] + gr[1]);
                    const float gg = tanh(gx[2] + gr[2]);
                    const float og = rlx_sigmoid(gx[3] + gr[3]);
                    const float c = fg * cbuf[j] + ig * gg;
                    cbuf[j] = c;
                    hv = og * tanh(c);
                } else if (CELL == RLX_CELL_GRU) {
                    const float r = rlx_sigmoid(gx[0] + gr[0]);
                    const float z = rlx_sigmoid(gx[1] + gr[1]);
                    const float nn = tanh(gx[2] + r * gr[2]);
                    hv = (1.0f - z) * nn + z * h[j];
                } else {
                    const float pre = gx[0] + gr[0];
                    hv = a.relu != 0 ? max(pre, 0.0f) : tanh(pre);
                }
                hn[j] = hv;
            }
            // every read of h and of row t is done before anyone writes
            threadgroup_barrier(mem_flags::mem_threadgroup);
            for (uint j = lid; j < H; j += tpg) {
                out[(ulong)t * ow + j] = hn[j];
            }
            p ^= 1;
        }
        if (a.carry != 0) {
            for (uint j = lid; j < H; j += tpg) {
                out[((ulong)a.seq + l) * ow + j] = hbuf[p][j];
                if (CELL == RLX_CELL_LSTM) {
                    out[((ulong)a.seq + a.layers + l) * ow + j] = cbuf[j];
                }
            }
        }
        // layer l's output rows are visible before layer l + 1 reads them
        threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    }
}

#define RLX_RECURRENT(name, CELL)                                                 \
template [[host_name(name)]] kernel void recurrent<CELL>(                         \
    constant RnnArgs& a [[buffer(0)]], device const float* x [[buffer(1)]],      \
    device const float* w_ih [[buffer(2)]], device const float* w_hh [[buffer(3)]], \
    device const float* b_ih [[buffer(4)]], device const float* b_hh [[buffer(5)]], \
    device const float* h0 [[buffer(6)]], device const float* c0 [[buffer(7)]],  \
    device float* dst [[buffer(8)]], uint3 tg [[threadgroup_position_in_grid]],  \
    uint lid [[thread_position_in_threadgroup]],                                 \
    uint tpg [[threads_per_threadgroup]]);
RLX_RECURRENT("lstm_f32", RLX_CELL_LSTM)
RLX_RECURRENT("gru_f32", RLX_CELL_GRU)
RLX_RECURRENT("rnn_f32", RLX_CELL_RNN)
