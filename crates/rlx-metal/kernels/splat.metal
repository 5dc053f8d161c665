// splat.metal -- 3-D Gaussian splatting (Kerbl et al. 2023): per-splat
// projection ("prepare") and tile-ordered front-to-back compositing
// ("rasterize"), f32. Same conventions as the host kernels
// (host/kernels/splat.rs): camera [20] = row-major 4x4 world->camera then
// fx, fy, cx, cy; record [16] = u, v, depth, radius, conic a b c, opacity,
// r g b, tile x0 y0 x1 y1 (exclusive), valid (culled rows all zero).
//
// splat_prepare_f32   args SplatArgs: buffer(1) positions [g,3],
//   (2) scales [g,3], (3) rotations [g,4] (w x y z), (4) opacities [g],
//   (5) colors [g,3], (6) sh [g,k,3], (7) camera [20], (8) prep out [g,16].
//   Threadgroup layout: 1-D grid, one thread per splat.
// splat_rasterize_f32 args SplatArgs: buffer(1) prep [g,16],
//   (2) image out [height,width,3].
//   Threadgroup layout: 1-D grid, one thread per pixel. The pixel's tile
//   list is the records covering its tile in (depth, index) order, cut so
//   that the global (tile, depth, index) order keeps max_list_entries
//   entries: the thread counts the entries of earlier tiles in closed form
//   from every rectangle, then selects its list's next entry by a scan
//   over the records (no scratch, no sort, no atomics; O(g) per entry
//   walked, and the walk stops early at the transmittance threshold).
#include <metal_stdlib>
#include "args.h"
using namespace metal;

#define SPLAT_NEAR 0.2f
#define SPLAT_BLUR 0.3f
#define SPLAT_ALPHA_MAX 0.99f

constant float SH_C0 = 0.28209479177387814f;
constant float SH_C1 = 0.4886025119029199f;
constant float SH_C2[5] = {1.0925484305920792f, -1.0925484305920792f, 0.31539156525252005f,
                           -1.0925484305920792f, 0.5462742152960396f};
constant float SH_C3[7] = {-0.5900435899266435f, 2.890611442640554f, -0.4570457994644658f,
                           0.3731763325901154f, -0.4570457994644658f, 1.445305721320277f,
                           -0.5900435899266435f};

// basis functions the colour uses for k coefficients: (deg + 1)^2
static inline uint splat_sh_used(uint k)
{
    return k == 0 ? 0u : (k < 4 ? 1u : (k < 9 ? 4u : (k < 16 ? 9u : 16u)));
}

kernel void splat_prepare_f32(constant SplatArgs&  a   [[buffer(0)]],
                              device const float*  pos [[buffer(1)]],
                              device const float*  scl [[buffer(2)]],
                              device const float*  rot [[buffer(3)]],
                              device const float*  opa [[buffer(4)]],
                              device const float*  col [[buffer(5)]],
                              device const float*  sh  [[buffer(6)]],
                              device const float*  cam [[buffer(7)]],
                              device float*        out [[buffer(8)]],
                              uint gid [[thread_position_in_grid]])
{
    if (gid >= a.count) {
        return;
    }
    device float* rec = out + (ulong)gid * 16;
    for (uint c = 0; c < 16; ++c) {
        rec[c] = 0.0f;
    }
    float p[3];
    for (uint c = 0; c < 3; ++c) {
        p[c] = pos[(ulong)gid * 3 + c];
    }
    float w[3][3];
    float t[3];
    for (uint r = 0; r < 3; ++r) {
        for (uint c = 0; c < 3; ++c) {
            w[r][c] = cam[r * 4 + c];
        }
        t[r] = w[r][0] * p[0] + w[r][1] * p[1] + w[r][2] * p[2] + cam[r * 4 + 3];
    }
    if (!(t[2] > SPLAT_NEAR)) {
        return;
    }
    float q[4];
    float qn = 0.0f;
    for (uint c = 0; c < 4; ++c) {
        q[c] = rot[(ulong)gid * 4 + c];
        qn += q[c] * q[c];
    }
    qn = sqrt(qn);
    if (qn > 0.0f) {
        for (uint c = 0; c < 4; ++c) {
            q[c] /= qn;
        }
    }
    const float qw = q[0], qx = q[1], qy = q[2], qz = q[3];
    const float rm[3][3] = {
        {1.0f - 2.0f * (qy * qy + qz * qz), 2.0f * (qx * qy - qw * qz), 2.0f * (qx * qz + qw * qy)},
        {2.0f * (qx * qy + qw * qz), 1.0f - 2.0f * (qx * qx + qz * qz), 2.0f * (qy * qz - qw * qx)},
        {2.0f * (qx * qz - qw * qy), 2.0f * (qy * qz + qw * qx), 1.0f - 2.0f * (qx * qx + qy * qy)},
    };
    float m[3][3];
    for (uint r = 0; r < 3; ++r) {
        for (uint c = 0; c < 3; ++c) {
            m[r][c] = rm[r][c] * scl[(ulong)gid * 3 + c];
        }
    }
    float sig[3][3];
    for (uint r = 0; r < 3; ++r) {
        for (uint c = 0; c < 3; ++c) {
            sig[r][c] = m[r][0] * m[c][0] + m[r][1] * m[c][1] + m[r][2] * m[c][2];
        }
    }
    const float fx = cam[16], fy = cam[17], cx = cam[18], cy = cam[19];
    const float tz = t[2];
    const float j[2][3] = {
        {fx / tz, 0.0f, -fx * t[0] / (tz * tz)},
        {0.0f, fy / tz, -fy * t[1] / (tz * tz)},
    };
    float jw[2][3];
    for (uint r = 0; r < 2; ++r) {
        for (uint c = 0; c < 3; ++c) {
            jw[r][c] = j[r][0] * w[0][c] + j[r][1] * w[1][c] + j[r][2] * w[2][c];
        }
    }
    float s2[2][2];
    for (uint r = 0; r < 2; ++r) {
        for (uint c = 0; c < 2; ++c) {
            float acc = 0.0f;
            for (uint k = 0; k < 3; ++k) {
                for (uint l = 0; l < 3; ++l) {
                    acc += jw[r][k] * sig[k][l] * jw[c][l];
                }
            }
            s2[r][c] = acc + (r == c ? SPLAT_BLUR : 0.0f);
        }
    }
    const float sa = s2[0][0], sb = s2[0][1], sc = s2[1][1];
    const float det = sa * sc - sb * sb;
    if (!(det > 0.0f)) {
        return;
    }
    const float mid = 0.5f * (sa + sc);
    const float lambda = mid + sqrt(max(0.1f, mid * mid - det));
    const float radius = ceil(a.radius_scale * sqrt(lambda));
    const float u = fx * t[0] / tz + cx;
    const float v = fy * t[1] / tz + cy;
    const float ts = (float)a.tile_size;
    const float x0 = clamp(floor((u - radius) / ts), 0.0f, (float)a.tiles_x);
    const float y0 = clamp(floor((v - radius) / ts), 0.0f, (float)a.tiles_y);
    const float x1 = clamp(floor((u + radius + ts - 1.0f) / ts), 0.0f, (float)a.tiles_x);
    const float y1 = clamp(floor((v + radius + ts - 1.0f) / ts), 0.0f, (float)a.tiles_y);
    if (!(x1 > x0) || !(y1 > y0) || !isfinite(radius)) {
        return;
    }
    float rgb[3];
    const uint used = splat_sh_used(a.sh_coeffs);
    if (used == 0) {
        for (uint c = 0; c < 3; ++c) {
            rgb[c] = col[(ulong)gid * 3 + c];
        }
    } else {
        // viewing direction from the camera centre -W^T t to the splat
        float d[3];
        float dn = 0.0f;
        for (uint c = 0; c < 3; ++c) {
            const float centre = -(w[0][c] * cam[3] + w[1][c] * cam[7] + w[2][c] * cam[11]);
            d[c] = p[c] - centre;
            dn += d[c] * d[c];
        }
        dn = sqrt(dn);
        if (dn > 0.0f) {
            for (uint c = 0; c < 3; ++c) {
                d[c] /= dn;
            }
        } else {
            d[0] = 0.0f;
            d[1] = 0.0f;
            d[2] = 1.0f;
        }
        const float x = d[0], y = d[1], z = d[2];
        const float xx = x * x, yy = y * y, zz = z * z;
        const float basis[16] = {
            SH_C0, -SH_C1 * y, SH_C1 * z, -SH_C1 * x,
            SH_C2[0] * x * y, SH_C2[1] * y * z, SH_C2[2] * (2.0f * zz - xx - yy),
            SH_C2[3] * x * z, SH_C2[4] * (xx - yy),
            SH_C3[0] * y * (3.0f * xx - yy), SH_C3[1] * x * y * z,
            SH_C3[2] * y * (4.0f * zz - xx - yy), SH_C3[3] * z * (2.0f * zz - 3.0f * xx - 3.0f * yy),
            SH_C3[4] * x * (4.0f * zz - xx - yy), SH_C3[5] * z * (xx - yy),
            SH_C3[6] * x * (xx - 3.0f * yy),
        };
        device const float* s = sh + (ulong)gid * a.sh_coeffs * 3;
        for (uint c = 0; c < 3; ++c) {
            float acc = 0.0f;
            for (uint b = 0; b < used; ++b) {
                acc += basis[b] * s[b * 3 + c];
            }
            rgb[c] = max(0.5f + acc, 0.0f);
        }
    }
    rec[0] = u;
    rec[1] = v;
    rec[2] = tz;
    rec[3] = radius;
    rec[4] = sc / det;
    rec[5] = -sb / det;
    rec[6] = sa / det;
    rec[7] = opa[gid];
    rec[8] = rgb[0];
    rec[9] = rgb[1];
    rec[10] = rgb[2];
    rec[11] = x0;
    rec[12] = y0;
    rec[13] = x1;
    rec[14] = y1;
    rec[15] = 1.0f;
}

// The tile rectangle of record r, false when it is not valid (a record may
// come from any user tensor: non-finite corners are invalid, corners are
// clamped to the grid).
static inline bool splat_rect(device const float* r, constant SplatArgs& a, thread uint* out)
{
    if (!(r[15] > 0.0f)) {
        return false;
    }
    for (uint c = 0; c < 4; ++c) {
        const float v = r[11 + c];
        if (!isfinite(v)) {
            return false;
        }
        const float hi = (float)((c % 2 == 0) ? a.tiles_x : a.tiles_y);
        out[c] = (uint)clamp(v, 0.0f, hi);
    }
    return out[2] > out[0] && out[3] > out[1];
}

kernel void splat_rasterize_f32(constant SplatArgs&  a    [[buffer(0)]],
                                device const float*  prep [[buffer(1)]],
                                device float*        img  [[buffer(2)]],
                                uint gid [[thread_position_in_grid]])
{
    if (gid >= a.width * a.height) {
        return;
    }
    const uint x = gid % a.width, y = gid / a.width;
    const uint tx = x / a.tile_size, ty = y / a.tile_size;
    // entries of the tiles before this one (row-major tile order)
    ulong before = 0;
    for (uint i = 0; i < a.count; ++i) {
        uint r[4];
        if (!splat_rect(prep + (ulong)i * 16, a, r)) {
            continue;
        }
        const ulong rows = (ulong)(clamp(ty, r[1], r[3]) - r[1]);
        before += rows * (ulong)(r[2] - r[0]);
        if (ty >= r[1] && ty < r[3]) {
            before += (ulong)(clamp(tx, r[0], r[2]) - r[0]);
        }
    }
    const ulong cap = a.max_list_entries;
    const ulong keep = cap == 0 ? ~0ul : (cap > before ? cap - before : 0ul);
    const float px = (float)x + 0.5f, py = (float)y + 0.5f;
    float tr = 1.0f;
    float rgb[3] = {0.0f, 0.0f, 0.0f};
    uint blended = 0;
    float last_d = 0.0f;
    int last_i = -1;
    for (ulong step = 0; step < keep; ++step) {
        if (a.max_splat_steps > 0 && blended >= a.max_splat_steps) {
            break;
        }
        int best = -1;
        float best_d = 0.0f;
        for (uint i = 0; i < a.count; ++i) {
            device const float* rec = prep + (ulong)i * 16;
            uint r[4];
            if (!splat_rect(rec, a, r) || tx < r[0] || tx >= r[2] || ty < r[1] || ty >= r[3]) {
                continue;
            }
            const float d = rec[2];
            const bool after = last_i < 0 || d > last_d || (d == last_d && (int)i > last_i);
            if (after && (best < 0 || d < best_d)) {
                best = (int)i;
                best_d = d;
            }
        }
        if (best < 0) {
            break;
        }
        last_i = best;
        last_d = best_d;
        device const float* rec = prep + (ulong)best * 16;
        const float dx = rec[0] - px, dy = rec[1] - py;
        const float power = -0.5f * (rec[4] * dx * dx + rec[6] * dy * dy) - rec[5] * dx * dy;
        if (power > 0.0f) {
            continue;
        }
        const float alpha = min(SPLAT_ALPHA_MAX, rec[7] * exp(power));
        if (!(alpha >= a.alpha_cutoff)) {
            continue;
        }
        const float next = tr * (1.0f - alpha);
        if (next < a.transmittance_threshold) {
            break;
        }
        for (uint c = 0; c < 3; ++c) {
            rgb[c] += alpha * tr * rec[8 + c];
        }
        tr = next;
        blended += 1;
    }
    device float* o = img + (ulong)gid * 3;
    for (uint c = 0; c < 3; ++c) {
        o[c] = rgb[c];
    }
}
