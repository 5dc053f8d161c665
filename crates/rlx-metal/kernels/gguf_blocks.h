// gguf_blocks.h -- the GGUF block decoders shared by quant.metal (dense
// packed matmuls) and moe.metal (grouped expert matmuls).
//
// w is rows of `row_bytes` bytes, each k elements stored as ggml blocks
// (the layouts of src/host/kernels/quant/{legacy,kquants,seed,float}.rs).
// Every block type provides `decode16(row, e0, k, w)`: elements e0 ..
// e0 + 15 of a row (e0 a multiple of 16) dequantised into w[16]; elements
// at or past k are 0 (only the float types can have a k that is not a
// multiple of 16).
//
// Weight bytes are read one at a time (blocks are 18, 22, 110 ... bytes
// long, so wider fields are not aligned in general); f16 fields are built
// from two bytes.
//
// Inlined into each family's source by rlx_metal::metal::kernels::source.
#ifndef RLX_METAL_GGUF_BLOCKS_H
#define RLX_METAL_GGUF_BLOCKS_H

static inline float q_f16(device const uchar* p) {
    return float(as_type<half>(ushort(ushort(p[0]) | (ushort(p[1]) << 8))));
}

// A byte as a signed int8 (two's complement), independent of char's sign.
static inline float q_i8(uchar b) {
    return float(int(uint(b) << 24) >> 24);
}

static inline uint q_u32(device const uchar* p) {
    return uint(p[0]) | (uint(p[1]) << 8) | (uint(p[2]) << 16) | (uint(p[3]) << 24);
}

// ---------------------------------------------------------------------------
// Float rows (block = 1 element; k may be anything).
// ---------------------------------------------------------------------------
struct QF32 {
    static void decode16(device const uchar* row, uint e0, uint k, thread float* w) {
        for (uint t = 0; t < 16; ++t) {
            const uint e = e0 + t;
            w[t] = e < k ? as_type<float>(q_u32(row + 4 * e)) : 0.0f;
        }
    }
};

struct QF16 {
    static void decode16(device const uchar* row, uint e0, uint k, thread float* w) {
        for (uint t = 0; t < 16; ++t) {
            const uint e = e0 + t;
            w[t] = e < k ? q_f16(row + 2 * e) : 0.0f;
        }
    }
};

struct QBF16 {
    static void decode16(device const uchar* row, uint e0, uint k, thread float* w) {
        for (uint t = 0; t < 16; ++t) {
            const uint e = e0 + t;
            const uint b = e < k ? (uint(row[2 * e]) | (uint(row[2 * e + 1]) << 8)) : 0u;
            w[t] = as_type<float>(b << 16);
        }
    }
};

// ---------------------------------------------------------------------------
// 32-element blocks. Element e of the block: e < 16 is the low nibble of
// qs[e], e >= 16 the high nibble of qs[e - 16]; the fifth bit (Q5_*) is
// bit e of qh; w = d * (q - bias) (+ min for *_1).
// ---------------------------------------------------------------------------
template <uint BB, uint QS, uint QH, bool MIN, uint BIAS>
static inline void q_legacy(device const uchar* row, uint e0, thread float* w) {
    device const uchar* b = row + (e0 / 32) * BB;
    const uint h = (e0 % 32) / 16;  // which nibble
    const float d = q_f16(b);
    const float mn = MIN ? q_f16(b + 2) : 0.0f;
    const uint qh = QH ? q_u32(b + QH) : 0u;
    for (uint t = 0; t < 16; ++t) {
        uint q = (uint(b[QS + t]) >> (4 * h)) & 0x0Fu;
        if (QH) {
            q |= ((qh >> (16 * h + t)) & 1u) << 4;
        }
        w[t] = d * (float(q) - float(BIAS)) + mn;
    }
}

struct QQ4_0 {
    static void decode16(device const uchar* r, uint e0, uint, thread float* w) {
        q_legacy<18, 2, 0, false, 8>(r, e0, w);
    }
};
struct QQ4_1 {
    static void decode16(device const uchar* r, uint e0, uint, thread float* w) {
        q_legacy<20, 4, 0, true, 0>(r, e0, w);
    }
};
struct QQ5_0 {
    static void decode16(device const uchar* r, uint e0, uint, thread float* w) {
        q_legacy<22, 6, 2, false, 16>(r, e0, w);
    }
};
struct QQ5_1 {
    static void decode16(device const uchar* r, uint e0, uint, thread float* w) {
        q_legacy<24, 8, 4, true, 0>(r, e0, w);
    }
};

// int8 codes after a `QS`-byte header starting with f16 d (Q8_0, Q8_1).
template <uint BB, uint QS>
static inline void q_int8(device const uchar* row, uint e0, thread float* w) {
    device const uchar* b = row + (e0 / 32) * BB;
    const float d = q_f16(b);
    device const uchar* qs = b + QS + e0 % 32;
    for (uint t = 0; t < 16; ++t) {
        w[t] = d * q_i8(qs[t]);
    }
}

struct QQ8_0 {
    static void decode16(device const uchar* r, uint e0, uint, thread float* w) {
        q_int8<34, 2>(r, e0, w);
    }
};
struct QQ8_1 {
    static void decode16(device const uchar* r, uint e0, uint, thread float* w) {
        q_int8<36, 4>(r, e0, w);
    }
};

// ---------------------------------------------------------------------------
// The seed's 128-element blocks: f16 d, then sign bits (Q1_0: bit t of
// byte e / 8 -> +d / -d) or 2-bit codes (Q2_0: bits 2t of byte e / 4 ->
// d * (q - 1.5)).
// ---------------------------------------------------------------------------
struct QQ1_0 {
    static void decode16(device const uchar* r, uint e0, uint, thread float* w) {
        device const uchar* b = r + (e0 / 128) * 18;
        const float d = q_f16(b);
        const uint e = e0 % 128;
        for (uint t = 0; t < 16; ++t) {
            const uint bit = (uint(b[2 + (e + t) / 8]) >> ((e + t) % 8)) & 1u;
            w[t] = bit ? d : -d;
        }
    }
};
struct QQ2_0 {
    static void decode16(device const uchar* r, uint e0, uint, thread float* w) {
        device const uchar* b = r + (e0 / 128) * 34;
        const float d = q_f16(b);
        const uint e = e0 % 128;
        for (uint t = 0; t < 16; ++t) {
            const uint q = (uint(b[2 + (e + t) / 4]) >> (2 * ((e + t) % 4))) & 3u;
            w[t] = d * (float(q) - 1.5f);
        }
    }
};

// ---------------------------------------------------------------------------
// 256-element k-quants. Chunk c = (e0 % 256) / 16 of a block; for Q2_K,
// Q3_K and Q6_K it is exactly one sub-block (scale index c), element
// 16c + t is 128n + 32j + l with n = c / 8, j = (c % 8) / 2,
// l = 16 (c % 2) + t.
// ---------------------------------------------------------------------------
struct QQ2K {
    static void decode16(device const uchar* r, uint e0, uint, thread float* w) {
        device const uchar* b = r + (e0 / 256) * 84;
        const uint c = (e0 % 256) / 16;
        const uint n = c / 8, j = (c % 8) / 2, l0 = 16 * (c % 2);
        const uint sc = b[c];
        const float a = q_f16(b + 80) * float(sc & 0x0Fu);
        const float mn = q_f16(b + 82) * float(sc >> 4);
        device const uchar* qs = b + 16 + 32 * n + l0;
        for (uint t = 0; t < 16; ++t) {
            w[t] = a * float((uint(qs[t]) >> (2 * j)) & 3u) - mn;
        }
    }
};

struct QQ3K {
    static void decode16(device const uchar* r, uint e0, uint, thread float* w) {
        device const uchar* b = r + (e0 / 256) * 110;
        const uint c = (e0 % 256) / 16;
        const uint n = c / 8, j = (c % 8) / 2, l0 = 16 * (c % 2);
        device const uchar* sc = b + 96;
        const uint lo = c < 8 ? (uint(sc[c]) & 0x0Fu) : (uint(sc[c - 8]) >> 4);
        const uint hi = (uint(sc[8 + c % 4]) >> (2 * (c / 4))) & 3u;
        const float a = q_f16(b + 108) * (float(lo | (hi << 4)) - 32.0f);
        device const uchar* hm = b + l0;
        device const uchar* qs = b + 32 + 32 * n + l0;
        const uint bit = 4 * n + j;
        for (uint t = 0; t < 16; ++t) {
            const int q = int((uint(qs[t]) >> (2 * j)) & 3u)
                        - (((uint(hm[t]) >> bit) & 1u) ? 0 : 4);
            w[t] = a * float(q);
        }
    }
};

// Q4_K / Q5_K: d, dmin, 12 bytes of 8 packed 6-bit (scale, min) pairs.
// Element 16c + t is 64 cc + 32 h + l (cc = c / 4, h = (c / 2) % 2,
// l = 16 (c % 2) + t): nibble h of qs[32 cc + l], pair p = c / 2, fifth
// bit (Q5_K) bit p of qh[l].
template <uint BB, uint QS, uint QH>
static inline void q_k4(device const uchar* r, uint e0, thread float* w) {
    device const uchar* b = r + (e0 / 256) * BB;
    const uint c = (e0 % 256) / 16;
    const uint p = c / 2, cc = c / 4, h = (c / 2) % 2, l0 = 16 * (c % 2);
    device const uchar* sc = b + 4;
    uint s, m;
    if (p < 4) {
        s = uint(sc[p]) & 63u;
        m = uint(sc[p + 4]) & 63u;
    } else {
        s = (uint(sc[p + 4]) & 0x0Fu) | ((uint(sc[p - 4]) >> 6) << 4);
        m = (uint(sc[p + 4]) >> 4) | ((uint(sc[p]) >> 6) << 4);
    }
    const float a = q_f16(b) * float(s);
    const float mn = q_f16(b + 2) * float(m);
    device const uchar* qs = b + QS + 32 * cc + l0;
    for (uint t = 0; t < 16; ++t) {
        uint q = (uint(qs[t]) >> (4 * h)) & 0x0Fu;
        if (QH) {
            q |= ((uint(b[QH + l0 + t]) >> p) & 1u) << 4;
        }
        w[t] = a * float(q) - mn;
    }
}

struct QQ4K {
    static void decode16(device const uchar* r, uint e0, uint, thread float* w) {
        q_k4<144, 16, 0>(r, e0, w);
    }
};
struct QQ5K {
    static void decode16(device const uchar* r, uint e0, uint, thread float* w) {
        q_k4<176, 48, 16>(r, e0, w);
    }
};

// Q6_K: ql[128], qh[64], int8 scales[16], d. Element 128n + 32j + l:
// nibble j / 2 of ql[64n + 32(j % 2) + l], high bits (qh[32n + l] >> 2j) & 3.
struct QQ6K {
    static void decode16(device const uchar* r, uint e0, uint, thread float* w) {
        device const uchar* b = r + (e0 / 256) * 210;
        const uint c = (e0 % 256) / 16;
        const uint n = c / 8, j = (c % 8) / 2, l0 = 16 * (c % 2);
        const float a = q_f16(b + 208) * q_i8(b[192 + c]);
        device const uchar* ql = b + 64 * n + 32 * (j % 2) + l0;
        device const uchar* qh = b + 128 + 32 * n + l0;
        for (uint t = 0; t < 16; ++t) {
            const uint q = ((uint(ql[t]) >> (4 * (j / 2))) & 0x0Fu)
                         | (((uint(qh[t]) >> (2 * j)) & 3u) << 4);
            w[t] = a * (float(q) - 32.0f);
        }
    }
};

// Q8_K: f32 d, int8 qs[256] (the bsums are not needed).
struct QQ8K {
    static void decode16(device const uchar* r, uint e0, uint, thread float* w) {
        device const uchar* b = r + (e0 / 256) * 292;
        const float d = as_type<float>(q_u32(b));
        device const uchar* qs = b + 4 + e0 % 256;
        for (uint t = 0; t < 16; ++t) {
            w[t] = d * q_i8(qs[t]);
        }
    }
};

#endif  // RLX_METAL_GGUF_BLOCKS_H
