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

// Real SH basis (3DGS sign convention) of unit direction d, degree <= 3.
static inline void splat_sh_basis(thread const float* d, thread float* out)
{
    const float x = d[0], y = d[1], z = d[2];
    const float xx = x * x, yy = y * y, zz = z * z;
    out[0] = SH_C0;
    out[1] = -SH_C1 * y;
    out[2] = SH_C1 * z;
    out[3] = -SH_C1 * x;
    out[4] = SH_C2[0] * x * y;
    out[5] = SH_C2[1] * y * z;
    out[6] = SH_C2[2] * (2.0f * zz - xx - yy);
    out[7] = SH_C2[3] * x * z;
    out[8] = SH_C2[4] * (xx - yy);
    out[9] = SH_C3[0] * y * (3.0f * xx - yy);
    out[10] = SH_C3[1] * x * y * z;
    out[11] = SH_C3[2] * y * (4.0f * zz - xx - yy);
    out[12] = SH_C3[3] * z * (2.0f * zz - 3.0f * xx - 3.0f * yy);
    out[13] = SH_C3[4] * x * (4.0f * zz - xx - yy);
    out[14] = SH_C3[5] * z * (xx - yy);
    out[15] = SH_C3[6] * x * (xx - 3.0f * yy);
}

// One splat projected, with the intermediates the gradient needs.
struct SplatProj {
    float t[3];      // camera-space centre
    float qn[4];     // normalised quaternion
    float qnorm;     // the input's norm
    float r[3][3];   // rotation
    float m[3][3];   // R S
    float sig[3][3]; // world covariance
    float jw[2][3];  // J W
    float conic[3];
    float u, v, radius;
    float rect[4];   // tile x0 y0 x1 y1 (exclusive)
    float dir[3];    // unit viewing direction (k >= 1)
    float dist;      // the distance it was normalised by
    float raw[3];    // colour before the clamp at 0
    float rgb[3];
};

// Project splat gid (the host's project()); false when it is culled.
static inline bool splat_project(constant SplatArgs& a, device const float* pos,
                                 device const float* scl, device const float* rot,
                                 device const float* col, device const float* sh,
                                 device const float* cam, uint gid, thread SplatProj& pr,
                                 bool colour)
{
    float p[3];
    for (uint c = 0; c < 3; ++c) {
        p[c] = pos[(ulong)gid * 3 + c];
    }
    float w[3][3];
    for (uint r = 0; r < 3; ++r) {
        for (uint c = 0; c < 3; ++c) {
            w[r][c] = cam[r * 4 + c];
        }
        pr.t[r] = w[r][0] * p[0] + w[r][1] * p[1] + w[r][2] * p[2] + cam[r * 4 + 3];
    }
    if (!(pr.t[2] > SPLAT_NEAR)) {
        return false;
    }
    float qn = 0.0f;
    for (uint c = 0; c < 4; ++c) {
        pr.qn[c] = rot[(ulong)gid * 4 + c];
        qn += pr.qn[c] * pr.qn[c];
    }
    qn = sqrt(qn);
    pr.qnorm = qn;
    if (qn > 0.0f) {
        for (uint c = 0; c < 4; ++c) {
            pr.qn[c] /= qn;
        }
    }
    const float qw = pr.qn[0], qx = pr.qn[1], qy = pr.qn[2], qz = pr.qn[3];
    const float rm[3][3] = {
        {1.0f - 2.0f * (qy * qy + qz * qz), 2.0f * (qx * qy - qw * qz), 2.0f * (qx * qz + qw * qy)},
        {2.0f * (qx * qy + qw * qz), 1.0f - 2.0f * (qx * qx + qz * qz), 2.0f * (qy * qz - qw * qx)},
        {2.0f * (qx * qz - qw * qy), 2.0f * (qy * qz + qw * qx), 1.0f - 2.0f * (qx * qx + qy * qy)},
    };
    for (uint r = 0; r < 3; ++r) {
        for (uint c = 0; c < 3; ++c) {
            pr.r[r][c] = rm[r][c];
            pr.m[r][c] = rm[r][c] * scl[(ulong)gid * 3 + c];
        }
    }
    for (uint r = 0; r < 3; ++r) {
        for (uint c = 0; c < 3; ++c) {
            pr.sig[r][c] = pr.m[r][0] * pr.m[c][0] + pr.m[r][1] * pr.m[c][1] + pr.m[r][2] * pr.m[c][2];
        }
    }
    const float fx = cam[16], fy = cam[17], cx = cam[18], cy = cam[19];
    const float tz = pr.t[2];
    const float j[2][3] = {
        {fx / tz, 0.0f, -fx * pr.t[0] / (tz * tz)},
        {0.0f, fy / tz, -fy * pr.t[1] / (tz * tz)},
    };
    for (uint r = 0; r < 2; ++r) {
        for (uint c = 0; c < 3; ++c) {
            pr.jw[r][c] = j[r][0] * w[0][c] + j[r][1] * w[1][c] + j[r][2] * w[2][c];
        }
    }
    float s2[2][2];
    for (uint r = 0; r < 2; ++r) {
        for (uint c = 0; c < 2; ++c) {
            float acc = 0.0f;
            for (uint k = 0; k < 3; ++k) {
                for (uint l = 0; l < 3; ++l) {
                    acc += pr.jw[r][k] * pr.sig[k][l] * pr.jw[c][l];
                }
            }
            s2[r][c] = acc + (r == c ? SPLAT_BLUR : 0.0f);
        }
    }
    const float sa = s2[0][0], sb = s2[0][1], sc = s2[1][1];
    const float det = sa * sc - sb * sb;
    if (!(det > 0.0f)) {
        return false;
    }
    const float mid = 0.5f * (sa + sc);
    const float lambda = mid + sqrt(max(0.1f, mid * mid - det));
    const float radius = ceil(a.radius_scale * sqrt(lambda));
    const float u = fx * pr.t[0] / tz + cx;
    const float v = fy * pr.t[1] / tz + cy;
    const float ts = (float)a.tile_size;
    pr.rect[0] = clamp(floor((u - radius) / ts), 0.0f, (float)a.tiles_x);
    pr.rect[1] = clamp(floor((v - radius) / ts), 0.0f, (float)a.tiles_y);
    pr.rect[2] = clamp(floor((u + radius + ts - 1.0f) / ts), 0.0f, (float)a.tiles_x);
    pr.rect[3] = clamp(floor((v + radius + ts - 1.0f) / ts), 0.0f, (float)a.tiles_y);
    if (!(pr.rect[2] > pr.rect[0]) || !(pr.rect[3] > pr.rect[1]) || !isfinite(radius)) {
        return false;
    }
    pr.conic[0] = sc / det;
    pr.conic[1] = -sb / det;
    pr.conic[2] = sa / det;
    pr.u = u, pr.v = v, pr.radius = radius;
    pr.dist = 0.0f;
    pr.dir[0] = pr.dir[1] = 0.0f;
    pr.dir[2] = 1.0f;
    if (!colour) {
        return true;
    }
    const uint used = splat_sh_used(a.sh_coeffs);
    if (used == 0) {
        for (uint c = 0; c < 3; ++c) {
            pr.rgb[c] = col[(ulong)gid * 3 + c];
            pr.raw[c] = pr.rgb[c];
        }
        return true;
    }
    // viewing direction from the camera centre -W^T t to the splat
    float dn = 0.0f;
    float d[3];
    for (uint c = 0; c < 3; ++c) {
        const float centre = -(w[0][c] * cam[3] + w[1][c] * cam[7] + w[2][c] * cam[11]);
        d[c] = p[c] - centre;
        dn += d[c] * d[c];
    }
    dn = sqrt(dn);
    pr.dist = dn;
    if (dn > 0.0f) {
        for (uint c = 0; c < 3; ++c) {
            pr.dir[c] = d[c] / dn;
        }
    }
    float basis[16];
    splat_sh_basis(pr.dir, basis);
    device const float* s = sh + (ulong)gid * a.sh_coeffs * 3;
    for (uint c = 0; c < 3; ++c) {
        float acc = 0.0f;
        for (uint b = 0; b < used; ++b) {
            acc += basis[b] * s[b * 3 + c];
        }
        pr.raw[c] = 0.5f + acc;
        pr.rgb[c] = max(pr.raw[c], 0.0f);
    }
    return true;
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
    SplatProj pr;
    if (!splat_project(a, pos, scl, rot, col, sh, cam, gid, pr, true)) {
        return;
    }
    rec[0] = pr.u;
    rec[1] = pr.v;
    rec[2] = pr.t[2];
    rec[3] = pr.radius;
    rec[4] = pr.conic[0];
    rec[5] = pr.conic[1];
    rec[6] = pr.conic[2];
    rec[7] = opa[gid];
    for (uint c = 0; c < 3; ++c) {
        rec[8 + c] = pr.rgb[c];
    }
    for (uint c = 0; c < 4; ++c) {
        rec[11 + c] = pr.rect[c];
    }
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

// ---- render backward -------------------------------------------------------
// splat_render_backward_f32 args SplatBwdArgs: buffer(1) positions [g,3],
//   (2) scales [g,3], (3) rotations [g,4], (4) opacities [g], (5) colors
//   [g,3], (6) sh [g,k,3], (7) camera [20], (8) d_loss [height,width,3],
//   (9) packed out [g, 14 + 3k] (the host's render_backward layout).
//   Threadgroup layout: 1-D grid, one thread per splat, any splat count.
//   No scratch operand, no atomics and no cross-thread communication:
//   thread i reads only the operands and writes only packed row i, so the
//   result does not depend on the threadgroup size or order.
//   1. thread i projects its splat; a culled splat gets a zero row;
//   2. over every pixel of every tile of its rectangle (tiles row-major,
//      pixels row-major), the pixel's list is walked front to back with
//      the rasterizer's selection scan and capacity cut, the records of
//      the other splats recomputed from the operands (a candidate's depth
//      is checked first, so only a candidate that could be the next entry
//      is projected), giving its alpha, transmittance and the suffix
//      S = sum over later blended j of alpha_j T_j (c_j . dL/dC); the 2-D
//      gradients (mean, conic, opacity, colour) are summed per tile, then
//      over tiles, in registers;
//   3. the sums are chained back to the 3-D operands into row i.

// Camera-space depth of splat i (splat_project's t[2], same expression).
static inline float splat_bwd_depth(device const float* pos, device const float* cam, uint i)
{
    const device float* p = pos + (ulong)i * 3;
    return cam[8] * p[0] + cam[9] * p[1] + cam[10] * p[2] + cam[11];
}

// True when the tile rectangle of a projected splat holds tile (tx, ty).
static inline bool splat_bwd_covers(thread const SplatProj& pr, uint tx, uint ty)
{
    return (float)tx >= pr.rect[0] && (float)tx < pr.rect[2] && (float)ty >= pr.rect[1]
        && (float)ty < pr.rect[3];
}

// The operands of the backward (device pointers, read only).
#define SPLAT_BWD_OPS pos, scl, rot, col, sh, cam
#define SPLAT_BWD_PARAMS                                                                  \
    device const float *pos, device const float *scl, device const float *rot,            \
        device const float *col, device const float *sh, device const float *cam

// The entry of tile (tx, ty) after (last_d, last_i) in (depth, index)
// order, -1 when there is none; its depth in best_d.
static inline int splat_bwd_next(constant SplatArgs& a, SPLAT_BWD_PARAMS, uint tx, uint ty,
                                 float last_d, int last_i, thread float& best_d)
{
    int best = -1;
    for (uint i = 0; i < a.count; ++i) {
        const float d = splat_bwd_depth(pos, cam, i);
        if (!(d > SPLAT_NEAR)) {
            continue;
        }
        const bool after = last_i < 0 || d > last_d || (d == last_d && (int)i > last_i);
        if (!after || (best >= 0 && !(d < best_d))) {
            continue;
        }
        SplatProj pr;
        if (splat_project(a, SPLAT_BWD_OPS, i, pr, false) && splat_bwd_covers(pr, tx, ty)) {
            best = (int)i;
            best_d = d;
        }
    }
    return best;
}

// Entries of the tiles before (tx, ty) in row-major order.
static inline ulong splat_bwd_before(constant SplatArgs& a, SPLAT_BWD_PARAMS, uint tx, uint ty)
{
    ulong before = 0;
    for (uint i = 0; i < a.count; ++i) {
        SplatProj pr;
        if (!(splat_bwd_depth(pos, cam, i) > SPLAT_NEAR)
            || !splat_project(a, SPLAT_BWD_OPS, i, pr, false)) {
            continue;
        }
        const uint r[4] = {(uint)pr.rect[0], (uint)pr.rect[1], (uint)pr.rect[2], (uint)pr.rect[3]};
        const ulong rows = (ulong)(clamp(ty, r[1], r[3]) - r[1]);
        before += rows * (ulong)(r[2] - r[0]);
        if (ty >= r[1] && ty < r[3]) {
            before += (ulong)(clamp(tx, r[0], r[2]) - r[0]);
        }
    }
    return before;
}

// Per-pixel state of splat `me` in a pixel's walk.
struct SplatHit {
    bool hit;
    bool unclamped;
    float alpha, t_before, gauss, dx, dy;
    float suffix;
};

static inline SplatHit splat_bwd_walk(constant SplatArgs& a, SPLAT_BWD_PARAMS,
                                      device const float* opa, uint tx, uint ty, ulong keep,
                                      float px, float py, thread const float* dc, uint me)
{
    SplatHit h = {false, false, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    float tr = 1.0f;
    uint blended = 0;
    float last_d = 0.0f;
    int last_i = -1;
    for (ulong step = 0; step < keep; ++step) {
        if (a.max_splat_steps > 0 && blended >= a.max_splat_steps) {
            break;
        }
        float best_d = 0.0f;
        const int best = splat_bwd_next(a, SPLAT_BWD_OPS, tx, ty, last_d, last_i, best_d);
        if (best < 0) {
            break;
        }
        last_i = best;
        last_d = best_d;
        SplatProj q;
        splat_project(a, SPLAT_BWD_OPS, (uint)best, q, true);
        const float dx = q.u - px, dy = q.v - py;
        const float power = -0.5f * (q.conic[0] * dx * dx + q.conic[2] * dy * dy)
            - q.conic[1] * dx * dy;
        if (power > 0.0f) {
            continue;
        }
        const float gauss = exp(power);
        const float raw = opa[best] * gauss;
        const float alpha = min(SPLAT_ALPHA_MAX, raw);
        if (!(alpha >= a.alpha_cutoff)) {
            continue;
        }
        const float next = tr * (1.0f - alpha);
        if (next < a.transmittance_threshold) {
            break;
        }
        if ((uint)best == me) {
            h.hit = true;
            h.unclamped = raw < SPLAT_ALPHA_MAX;
            h.alpha = alpha;
            h.t_before = tr;
            h.gauss = gauss;
            h.dx = dx;
            h.dy = dy;
        } else if (h.hit) {
            const float cd = q.rgb[0] * dc[0] + q.rgb[1] * dc[1] + q.rgb[2] * dc[2];
            h.suffix += alpha * tr * cd;
        }
        tr = next;
        blended += 1;
    }
    return h;
}

// Stage 2 for splat `me` (projected as `mine`): its summed 2-D gradients
// g[9] = u, v, conic a b c, opacity, r g b.
static inline void splat_bwd_pixels(constant SplatBwdArgs& b, SPLAT_BWD_PARAMS,
                                    device const float* opa, device const float* dl,
                                    thread const SplatProj& mine, uint me, thread float* g)
{
    constant SplatArgs& a = b.s;
    for (uint c = 0; c < 9; ++c) {
        g[c] = 0.0f;
    }
    const uint rc[4] = {(uint)mine.rect[0], (uint)mine.rect[1], (uint)mine.rect[2],
                        (uint)mine.rect[3]};
    const float clip = b.loss_grad_clip > 0.0f ? b.loss_grad_clip : INFINITY;
    const float ca = mine.conic[0], cb = mine.conic[1], cc = mine.conic[2];
    const ulong cap = a.max_list_entries;
    for (uint ty = rc[1]; ty < rc[3]; ++ty) {
        for (uint tx = rc[0]; tx < rc[2]; ++tx) {
            ulong keep = ~0ul;
            if (cap != 0) {
                const ulong before = splat_bwd_before(a, SPLAT_BWD_OPS, tx, ty);
                keep = cap > before ? cap - before : 0ul;
            }
            float e[9] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
            const uint y1 = min((ty + 1) * a.tile_size, a.height);
            const uint x1 = min((tx + 1) * a.tile_size, a.width);
            for (uint y = ty * a.tile_size; y < y1; ++y) {
                for (uint x = tx * a.tile_size; x < x1; ++x) {
                    float dc[3];
                    for (uint c = 0; c < 3; ++c) {
                        dc[c] = clamp(dl[((ulong)y * a.width + x) * 3 + c], -clip, clip);
                    }
                    const SplatHit h = splat_bwd_walk(a, SPLAT_BWD_OPS, opa, tx, ty, keep,
                                                      (float)x + 0.5f, (float)y + 0.5f, dc, me);
                    if (!h.hit) {
                        continue;
                    }
                    const float cd = mine.rgb[0] * dc[0] + mine.rgb[1] * dc[1] + mine.rgb[2] * dc[2];
                    const float wt = h.alpha * h.t_before;
                    for (uint c = 0; c < 3; ++c) {
                        e[6 + c] += wt * dc[c];
                    }
                    if (!h.unclamped) {
                        continue;
                    }
                    const float dalpha = h.t_before * cd - h.suffix / (1.0f - h.alpha);
                    e[5] += dalpha * h.gauss;
                    const float dpow = dalpha * h.alpha;
                    const float dx = h.dx, dy = h.dy;
                    e[0] += dpow * (-ca * dx - cb * dy);
                    e[1] += dpow * (-cc * dy - cb * dx);
                    e[2] += dpow * (-0.5f * dx * dx);
                    e[3] += dpow * (-dx * dy);
                    e[4] += dpow * (-0.5f * dy * dy);
                }
            }
            for (uint c = 0; c < 9; ++c) {
                g[c] += e[c];
            }
        }
    }
}

// d(SH basis)/d(dir) for basis function j (the polynomial's gradient).
static inline void splat_sh_basis_grad(thread const float* d, uint j, thread float* o)
{
    const float x = d[0], y = d[1], z = d[2];
    const float xx = x * x, yy = y * y, zz = z * z;
    o[0] = o[1] = o[2] = 0.0f;
    switch (j) {
    case 1: o[1] = -SH_C1; break;
    case 2: o[2] = SH_C1; break;
    case 3: o[0] = -SH_C1; break;
    case 4: o[0] = SH_C2[0] * y; o[1] = SH_C2[0] * x; break;
    case 5: o[1] = SH_C2[1] * z; o[2] = SH_C2[1] * y; break;
    case 6: o[0] = -2.0f * SH_C2[2] * x; o[1] = -2.0f * SH_C2[2] * y; o[2] = 4.0f * SH_C2[2] * z; break;
    case 7: o[0] = SH_C2[3] * z; o[2] = SH_C2[3] * x; break;
    case 8: o[0] = 2.0f * SH_C2[4] * x; o[1] = -2.0f * SH_C2[4] * y; break;
    case 9: o[0] = SH_C3[0] * 6.0f * x * y; o[1] = SH_C3[0] * (3.0f * xx - 3.0f * yy); break;
    case 10: o[0] = SH_C3[1] * y * z; o[1] = SH_C3[1] * x * z; o[2] = SH_C3[1] * x * y; break;
    case 11:
        o[0] = SH_C3[2] * -2.0f * x * y;
        o[1] = SH_C3[2] * (4.0f * zz - xx - 3.0f * yy);
        o[2] = SH_C3[2] * 8.0f * y * z;
        break;
    case 12:
        o[0] = SH_C3[3] * -6.0f * x * z;
        o[1] = SH_C3[3] * -6.0f * y * z;
        o[2] = SH_C3[3] * (6.0f * zz - 3.0f * xx - 3.0f * yy);
        break;
    case 13:
        o[0] = SH_C3[4] * (4.0f * zz - 3.0f * xx - yy);
        o[1] = SH_C3[4] * -2.0f * x * y;
        o[2] = SH_C3[4] * 8.0f * x * z;
        break;
    case 14: o[0] = SH_C3[5] * 2.0f * x * z; o[1] = SH_C3[5] * -2.0f * y * z; o[2] = SH_C3[5] * (xx - yy); break;
    case 15: o[0] = SH_C3[6] * (3.0f * xx - 3.0f * yy); o[1] = SH_C3[6] * -6.0f * x * y; break;
    default: break;
    }
}

// Stage 3: the 2-D sums g back through the projection to the operands,
// into row[0 .. 14 + 3k] (already zero).
static inline void splat_bwd_chain(constant SplatBwdArgs& b, thread const SplatProj& pr,
                                   device const float* scl, device const float* sh,
                                   device const float* cam, uint i, thread const float* g,
                                   device float* row)
{
    constant SplatArgs& a = b.s;
    // conic K = S'^-1: dS' = -K dK K (b appears twice in K)
    const float kk[2][2] = {{pr.conic[0], pr.conic[1]}, {pr.conic[1], pr.conic[2]}};
    const float gk[2][2] = {{g[2], 0.5f * g[3]}, {0.5f * g[3], g[4]}};
    float kg[2][2];
    for (uint r = 0; r < 2; ++r) {
        for (uint c = 0; c < 2; ++c) {
            kg[r][c] = kk[r][0] * gk[0][c] + kk[r][1] * gk[1][c];
        }
    }
    float gs2[2][2];
    for (uint r = 0; r < 2; ++r) {
        for (uint c = 0; c < 2; ++c) {
            gs2[r][c] = -(kg[r][0] * kk[0][c] + kg[r][1] * kk[1][c]);
        }
    }
    // S' = (JW) S (JW)^T
    float gsjw[2][3]; // gs2 * jw
    for (uint r = 0; r < 2; ++r) {
        for (uint c = 0; c < 3; ++c) {
            gsjw[r][c] = gs2[r][0] * pr.jw[0][c] + gs2[r][1] * pr.jw[1][c];
        }
    }
    float gsig[3][3];
    for (uint k = 0; k < 3; ++k) {
        for (uint l = 0; l < 3; ++l) {
            gsig[k][l] = pr.jw[0][k] * gsjw[0][l] + pr.jw[1][k] * gsjw[1][l];
        }
    }
    float gjw[2][3];
    for (uint r = 0; r < 2; ++r) {
        for (uint l = 0; l < 3; ++l) {
            float acc = 0.0f;
            for (uint k = 0; k < 3; ++k) {
                acc += gsjw[r][k] * pr.sig[k][l];
            }
            gjw[r][l] = 2.0f * acc;
        }
    }
    float w[3][3];
    for (uint r = 0; r < 3; ++r) {
        for (uint c = 0; c < 3; ++c) {
            w[r][c] = cam[r * 4 + c];
        }
    }
    float gj[2][3];
    for (uint r = 0; r < 2; ++r) {
        for (uint k = 0; k < 3; ++k) {
            gj[r][k] = gjw[r][0] * w[k][0] + gjw[r][1] * w[k][1] + gjw[r][2] * w[k][2];
        }
    }
    const float tx = pr.t[0], ty = pr.t[1], tz = pr.t[2];
    const float fx = cam[16], fy = cam[17];
    const float tz2 = tz * tz, tz3 = tz2 * tz;
    const float gu = g[0], gv = g[1];
    const float gt[3] = {
        gj[0][2] * (-fx / tz2) + gu * fx / tz,
        gj[1][2] * (-fy / tz2) + gv * fy / tz,
        gj[0][0] * (-fx / tz2) + gj[0][2] * (2.0f * fx * tx / tz3) + gj[1][1] * (-fy / tz2)
            + gj[1][2] * (2.0f * fy * ty / tz3) - gu * fx * tx / tz2 - gv * fy * ty / tz2,
    };
    float gpos[3];
    for (uint c = 0; c < 3; ++c) {
        gpos[c] = gt[0] * w[0][c] + gt[1] * w[1][c] + gt[2] * w[2][c];
    }
    // S = M M^T, M = R S
    float gm[3][3];
    for (uint r = 0; r < 3; ++r) {
        for (uint k = 0; k < 3; ++k) {
            gm[r][k] = 2.0f * (gsig[r][0] * pr.m[0][k] + gsig[r][1] * pr.m[1][k] + gsig[r][2] * pr.m[2][k]);
        }
    }
    float gscale[3];
    float gr[3][3];
    for (uint k = 0; k < 3; ++k) {
        gscale[k] = gm[0][k] * pr.r[0][k] + gm[1][k] * pr.r[1][k] + gm[2][k] * pr.r[2][k];
        const float s = scl[(ulong)i * 3 + k];
        for (uint r = 0; r < 3; ++r) {
            gr[r][k] = gm[r][k] * s;
        }
    }
    const float qw = pr.qn[0], qx = pr.qn[1], qy = pr.qn[2], qz = pr.qn[3];
    const float gqh[4] = {
        2.0f * (-qz * gr[0][1] + qy * gr[0][2] + qz * gr[1][0] - qx * gr[1][2] - qy * gr[2][0]
                + qx * gr[2][1]),
        2.0f * (qy * gr[0][1] + qz * gr[0][2] + qy * gr[1][0] - 2.0f * qx * gr[1][1] - qw * gr[1][2]
                + qz * gr[2][0] + qw * gr[2][1] - 2.0f * qx * gr[2][2]),
        2.0f * (-2.0f * qy * gr[0][0] + qx * gr[0][1] + qw * gr[0][2] + qx * gr[1][0] + qz * gr[1][2]
                - qw * gr[2][0] + qz * gr[2][1] - 2.0f * qy * gr[2][2]),
        2.0f * (-2.0f * qz * gr[0][0] - qw * gr[0][1] + qx * gr[0][2] + qw * gr[1][0]
                - 2.0f * qz * gr[1][1] + qy * gr[1][2] + qx * gr[2][0] + qy * gr[2][1]),
    };
    float dot = 0.0f;
    for (uint c = 0; c < 4; ++c) {
        dot += pr.qn[c] * gqh[c];
    }
    const float inv = pr.qnorm > 0.0f ? 1.0f / pr.qnorm : 1.0f;
    float gcolors[3] = {0.0f, 0.0f, 0.0f};
    const uint used = splat_sh_used(a.sh_coeffs);
    if (used == 0) {
        for (uint c = 0; c < 3; ++c) {
            gcolors[c] = g[6 + c];
        }
    } else {
        float gcol[3];
        for (uint c = 0; c < 3; ++c) {
            gcol[c] = pr.raw[c] > 0.0f ? g[6 + c] : 0.0f;
        }
        float basis[16];
        splat_sh_basis(pr.dir, basis);
        const uint band = min(b.sh_band, 3u) + 1u;
        const uint live = min(used, band * band);
        for (uint j = 0; j < live; ++j) {
            for (uint c = 0; c < 3; ++c) {
                row[14 + j * 3 + c] = basis[j] * gcol[c];
            }
        }
        if (used > 1 && pr.dist > 0.0f) {
            device const float* s = sh + (ulong)i * a.sh_coeffs * 3;
            float gdir[3] = {0.0f, 0.0f, 0.0f};
            for (uint j = 1; j < used; ++j) {
                const float wj = gcol[0] * s[j * 3] + gcol[1] * s[j * 3 + 1] + gcol[2] * s[j * 3 + 2];
                float bg[3];
                splat_sh_basis_grad(pr.dir, j, bg);
                for (uint c = 0; c < 3; ++c) {
                    gdir[c] += wj * bg[c];
                }
            }
            const float along = gdir[0] * pr.dir[0] + gdir[1] * pr.dir[1] + gdir[2] * pr.dir[2];
            for (uint c = 0; c < 3; ++c) {
                gpos[c] += (gdir[c] - pr.dir[c] * along) / pr.dist;
            }
        }
    }
    for (uint c = 0; c < 3; ++c) {
        row[c] = gpos[c];
        row[3 + c] = gscale[c];
        row[11 + c] = gcolors[c];
    }
    for (uint c = 0; c < 4; ++c) {
        row[6 + c] = (gqh[c] - pr.qn[c] * dot) * inv;
    }
    row[10] = g[5];
}

kernel void splat_render_backward_f32(constant SplatBwdArgs& b   [[buffer(0)]],
                                      device const float*    pos [[buffer(1)]],
                                      device const float*    scl [[buffer(2)]],
                                      device const float*    rot [[buffer(3)]],
                                      device const float*    opa [[buffer(4)]],
                                      device const float*    col [[buffer(5)]],
                                      device const float*    sh  [[buffer(6)]],
                                      device const float*    cam [[buffer(7)]],
                                      device const float*    dl  [[buffer(8)]],
                                      device float*          out [[buffer(9)]],
                                      uint gid [[thread_position_in_grid]])
{
    constant SplatArgs& a = b.s;
    if (gid >= a.count) {
        return;
    }
    const uint w = 14u + 3u * a.sh_coeffs;
    device float* row = out + (ulong)gid * w;
    for (uint c = 0; c < w; ++c) {
        row[c] = 0.0f;
    }
    SplatProj pr;
    if (!(splat_bwd_depth(pos, cam, gid) > SPLAT_NEAR)
        || !splat_project(a, SPLAT_BWD_OPS, gid, pr, true)) {
        return;
    }
    float g2[9];
    splat_bwd_pixels(b, SPLAT_BWD_OPS, opa, dl, pr, gid, g2);
    splat_bwd_chain(b, pr, scl, sh, cam, gid, g2, row);
}
