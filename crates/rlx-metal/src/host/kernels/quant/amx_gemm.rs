//! The prefill GEMM of [`super::vnni_gemm`] on Intel AMX tiles (AMX-TILE +
//! AMX-INT8): `out[m, n] = x[m, k] @ dequant(W)[n, k]ᵀ` for the same GGUF
//! types, the same activation codes and the same per-block scale algebra,
//! with the integer dot products done by the tile matrix unit.
//!
//! Scheme. The activations are quantised by the VNNI GEMM's own routine
//! (two levels per block of 32: `x ≈ (dx/256)·(256·qx + qx2)`), so the
//! codes are identical, then laid out per group of 16 rows in the tile
//! unit's "B" layout (four consecutive `k` of one row in a dword, the 16
//! rows of the group side by side in a 64-byte tile row). Each task
//! decodes a panel of weight rows into signed byte codes (the symmetric
//! formats Q4_0, Q5_0, Q8_0, Q3_K, Q6_K: `w = a·q`) or unsigned ones (the
//! formats with a min: `w = a·u + c`), block-major per group of 16 rows
//! so that one scale block of 16 rows is one "A" tile. For every block of
//! `g` elements (`g = 32` where both halves of a run share their scale,
//! 16 for Q2_K, Q3_K, Q6_K) two tile products (`tdpbssd` for signed
//! weights, `tdpbusd` for unsigned ones) give the exact i32 sums `S1 = Σ
//! q·qx` and `S2 = Σ q·qx2` of a 16 × 16 (weight rows × activation rows)
//! tile; the vector units then add `cvt(256·S1 + S2) · (a·dx/256)` and,
//! for the formats with a min, `c · (dx/256)·Σ(256·qx + qx2)` into 16
//! f32 accumulators, the same products as the VNNI tiles summed over `g`
//! elements instead of 4 (the signed formats fold the VNNI GEMM's offset
//! term `−o·a·Σqx` into the integer sum, so they round less).
//!
//! Numerics are those of [`super::vnni_gemm`] (same error bound, same NaN
//! rows and columns); the results differ from it by f32 rounding only
//! (another summation order), checked by the tests to ≤ 1e-6 of
//! `Σ_e |w_je · x_ie|` per output.
//!
//! The tile unit needs the kernel's permission once per process
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`), asked on first
//! use; the tile configuration is loaded per task and released after it.
//! The instructions are emitted as bytes (VEX encodings of the Intel SDM,
//! built by the `const fn`s below), so no assembler support is needed.
//! Without AMX, when the permission is refused, for `m < 16` or with
//! [`super::set_amx_prefill_gemm`] off, [`try_run`] declines and the VNNI
//! GEMM runs instead.

#![allow(clippy::incompatible_msrv)]

use std::arch::asm;
use std::arch::x86_64::*;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use rayon::prelude::*;
use rlx_ir::GgmlType;

use super::super::Elem;
use super::vnni::{
    with_vfmt, VFmt, VQ2K, VQ3K, VQ4K, VQ4_0, VQ4_1, VQ5K, VQ5_0, VQ5_1, VQ6K, VQ8_0,
};
use super::vnni_gemm::{quantize_row_simd, Dims, Dst};
use super::Out;

/// Rows of every tile: weight rows and activation rows per tile product.
const TR: usize = 16;
/// Most weight rows per task's panel (a multiple of [`TR`]).
const PANEL: usize = 64;
/// Fewest activation rows worth a tile product (a whole tile).
pub(super) const MIN_M: usize = TR;

/// Whether [`try_run`] may run ([`super::set_amx_prefill_gemm`]).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns the AMX GEMM on or off for the process; returns the previous
/// setting.
pub(super) fn set_enabled(on: bool) -> bool {
    ENABLED.swap(on, Ordering::Relaxed)
}

// ---- instruction encodings (Intel SDM vol. 2, AMX instructions) ----
//
// All are VEX.128 (L = 0), map 0F38 (mmmmm = 00010), W0, in the three-byte
// form `C4 [R̄X̄B̄ mmmmm] [W v̄v̄v̄v̄ L pp]`; with registers below 8 the inverted
// R, X, B bits are all 1, so the second byte is `E2`. `pp` is the implied
// prefix: none 0, 66 1, F3 2, F2 3.

/// Little-endian packing of up to 8 bytes (the assembler emits them back
/// one by one with `.byte`).
const fn pack(b: &[u8]) -> u64 {
    let mut v = 0u64;
    let mut i = 0;
    while i < b.len() {
        v |= (b[i] as u64) << (8 * i);
        i += 1;
    }
    v
}

/// The third VEX byte: `vvvv` inverted, `W = 0`, `L = 0`, prefix `pp`.
const fn vex3(vvvv: u8, pp: u8) -> u8 {
    ((!vvvv & 15) << 3) | pp
}

/// Register form `C4 E2 vex3 op ModRM(11, reg, rm)` (5 bytes).
const fn reg_form(op: u8, pp: u8, reg: u8, rm: u8, vvvv: u8) -> u64 {
    pack(&[0xC4, 0xE2, vex3(vvvv, pp), op, 0xC0 | (reg << 3) | rm])
}

/// Memory form `C4 E2 vex3 op ModRM(00, tmm, 100) SIB(1, index, base)`
/// (6 bytes: `[base + index]`, both general registers below 8, base not
/// rbp or rsp, index not rsp).
const fn sib_form(op: u8, pp: u8, tmm: u8, base: u8, index: u8) -> u64 {
    pack(&[
        0xC4,
        0xE2,
        vex3(0, pp),
        op,
        (tmm << 3) | 4,
        (index << 3) | base,
    ])
}

/// `LDTILECFG [rax]`: VEX.128.NP.0F38.W0 49 /0.
const LDTILECFG_RAX: u64 = pack(&[0xC4, 0xE2, vex3(0, 0), 0x49, 0x00]);
/// `TILERELEASE`: VEX.128.NP.0F38.W0 49 C0.
const TILERELEASE: u64 = reg_form(0x49, 0, 0, 0, 0);
/// `TILEZERO tmm`: VEX.128.F2.0F38.W0 49 11:rrr:000.
const fn tilezero(t: u8) -> u64 {
    reg_form(0x49, 3, t, 0, 0)
}
/// `TILELOADD tmm, [base + index]`: VEX.128.F2.0F38.W0 4B.
const fn tileloadd(t: u8, base: u8, index: u8) -> u64 {
    sib_form(0x4B, 3, t, base, index)
}
/// `TILESTORED [base + index], tmm`: VEX.128.F3.0F38.W0 4B.
const fn tilestored(t: u8, base: u8, index: u8) -> u64 {
    sib_form(0x4B, 2, t, base, index)
}
/// `TDPBSSD c, a, b` (signed × signed bytes): VEX.128.F2.0F38.W0 5E,
/// `c` in ModRM.reg, `a` in ModRM.rm, `b` in VEX.vvvv.
const fn tdpbssd(c: u8, a: u8, b: u8) -> u64 {
    reg_form(0x5E, 3, c, a, b)
}
/// `TDPBUSD c, a, b` (unsigned `a` × signed `b`): VEX.128.66.0F38.W0 5E.
const fn tdpbusd(c: u8, a: u8, b: u8) -> u64 {
    reg_form(0x5E, 1, c, a, b)
}

/// General register numbers used in the memory forms.
const RAX: u8 = 0;
const RCX: u8 = 1;
const RDX: u8 = 2;
const RSI: u8 = 6;
const RDI: u8 = 7;

/// Tiles: the two product pairs (alternate blocks), the weight tile and
/// the two activation tiles.
const T_A: u8 = 4;
const T_B1: u8 = 5;
const T_B2: u8 = 6;

/// An `.byte` line emitting the 5 bytes packed in the named const operand.
macro_rules! b5 {
    ($n:literal) => {
        concat!(
            ".byte ({",
            $n,
            "}) & 255, ({",
            $n,
            "} >> 8) & 255, ({",
            $n,
            "} >> 16) & 255, ({",
            $n,
            "} >> 24) & 255, ({",
            $n,
            "} >> 32) & 255"
        )
    };
}

/// An `.byte` line emitting the 6 bytes packed in the named const operand.
macro_rules! b6 {
    ($n:literal) => {
        concat!(b5!($n), ", ({", $n, "} >> 40) & 255")
    };
}

/// One block's tile work: loads the weight tile (`[rax + rcx]`) and both
/// activation tiles (`[rdx + rdi]`, `[rsi + rdi]`), zeroes the product
/// pair `$c1, $c2` and multiplies into it with `$dp`.
macro_rules! products {
    ($dp:ident, $c1:literal, $c2:literal, $w:expr, $g:expr, $x1:expr, $x2:expr) => {
        asm!(
            b6!("la"), b6!("lb1"), b6!("lb2"), b5!("z1"), b5!("z2"), b5!("d1"), b5!("d2"),
            la = const tileloadd(T_A, RAX, RCX),
            lb1 = const tileloadd(T_B1, RDX, RDI),
            lb2 = const tileloadd(T_B2, RSI, RDI),
            z1 = const tilezero($c1),
            z2 = const tilezero($c2),
            d1 = const $dp($c1, T_A, T_B1),
            d2 = const $dp($c2, T_A, T_B2),
            in("rax") $w,
            in("rcx") $g,
            in("rdx") $x1,
            in("rsi") $x2,
            in("rdi") 64usize,
            options(nostack, readonly, preserves_flags),
        )
    };
}

/// Stores the product pair `$c1, $c2` as 16 rows of 64 bytes at `$p1`
/// and `$p2`.
macro_rules! store_pair {
    ($c1:literal, $c2:literal, $p1:expr, $p2:expr) => {
        asm!(
            b6!("s1"), b6!("s2"),
            s1 = const tilestored($c1, RAX, RDI),
            s2 = const tilestored($c2, RDX, RDI),
            in("rax") $p1,
            in("rdx") $p2,
            in("rdi") 64usize,
            options(nostack, preserves_flags),
        )
    };
}

// ---- availability ----

/// `arch_prctl` request: permission for an extended state component.
const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
/// The AMX tile data state component.
const XFEATURE_XTILEDATA: usize = 18;
/// `arch_prctl`'s syscall number on x86-64 Linux.
const SYS_ARCH_PRCTL: usize = 158;

/// Whether the CPU has AMX-TILE and AMX-INT8 with the palette this module
/// configures (8 tiles of 16 rows × 64 bytes) and the kernel granted the
/// tile state: asked once per process.
pub(super) fn ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| cpu_has_amx() && request_permission())
}

/// CPUID leaf 7 (EDX bit 24 AMX-TILE, bit 25 AMX-INT8) and leaf 0x1D
/// palette 1 (bytes per row, tile names, rows).
fn cpu_has_amx() -> bool {
    // leaves above the maximum are checked against leaf 0 first
    let max = __cpuid(0).eax;
    if max < 0x1D {
        return false;
    }
    let l7 = __cpuid_count(7, 0);
    if l7.edx & (1 << 24) == 0 || l7.edx & (1 << 25) == 0 {
        return false;
    }
    let p = __cpuid_count(0x1D, 1);
    let (row_bytes, names, rows) = (p.ebx & 0xFFFF, p.ebx >> 16, p.ecx & 0xFFFF);
    row_bytes >= 64 && names >= 8 && rows >= 16
}

/// `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`: true when the
/// kernel granted the tile data state to this process.
fn request_permission() -> bool {
    if !cfg!(target_os = "linux") {
        return false;
    }
    let ret: isize;
    // SAFETY: a plain Linux syscall; it clobbers rcx and r11 only and
    // touches no memory of ours.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL as isize => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret == 0
}

// ---- buffers ----

/// The tile configuration (palette 1): bytes per row and rows per tile.
#[repr(C, align(64))]
struct TileCfg([u8; 64]);

impl TileCfg {
    /// Products 0–3: 16 × 64 bytes; weights (4): 16 rows × `g` bytes;
    /// activations (5, 6): `g / 4` rows × 64 bytes.
    fn new(g: usize) -> Self {
        let mut c = [0u8; 64];
        c[0] = 1;
        let mut set = |t: usize, colsb: usize, rows: usize| {
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&(colsb as u16).to_le_bytes());
            c[48 + t] = rows as u8;
        };
        for t in 0..4 {
            set(t, 64, TR);
        }
        set(usize::from(T_A), g, TR);
        set(usize::from(T_B1), 64, g / 4);
        set(usize::from(T_B2), 64, g / 4);
        TileCfg(c)
    }
}

/// Loads `cfg` into this thread's tile unit on creation, releases it on
/// drop.
struct Tiles;

impl Tiles {
    /// # Safety
    /// [`ready`] returned true.
    unsafe fn load(cfg: &TileCfg) -> Tiles {
        // SAFETY: AMX present and permitted (caller); 64 bytes at `cfg`.
        unsafe {
            asm!(b5!("l"), l = const LDTILECFG_RAX, in("rax") cfg.0.as_ptr(),
                options(nostack, readonly, preserves_flags));
        }
        Tiles
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: a configuration was loaded by `load` (AMX present).
        unsafe { asm!(b5!("r"), r = const TILERELEASE, options(nostack, nomem, preserves_flags)) };
    }
}

/// Activations in the tile layout, `mg` groups of 16 rows: codes of both
/// levels (`16·k` bytes per group, dword `d` of row `r` at `64·d + 4·r`),
/// the step `dx/256` per block of 32 (`16` per block) and the scaled code
/// sum per block of `g` (`16` per block).
#[derive(Default)]
struct XTiles {
    q1: Vec<i8>,
    q2: Vec<i8>,
    dx: Vec<f32>,
    s: Vec<f32>,
}

/// One row's codes as the VNNI GEMM's quantiser writes them.
#[derive(Default)]
struct RowQ {
    q: Vec<i8>,
    q2: Vec<i8>,
    dx: Vec<f32>,
    s: Vec<f32>,
}

/// A decoded panel: per group of 16 weight rows `16·k` codes (block `b`,
/// row `r`, element `e` at `16·g·b + g·r + e`), and per row the scale `a`
/// and offset `c` of every block of `g` (`kb` each).
#[derive(Default)]
struct WPanel {
    u: Vec<u8>,
    a: Vec<f32>,
    c: Vec<f32>,
}

/// Scratch for one block's two 16 × 16 i32 products, both parities.
#[repr(C, align(64))]
struct Scratch([[i32; 256]; 4]);

thread_local! {
    static XT: RefCell<XTiles> = RefCell::new(XTiles::default());
    static RQ: RefCell<RowQ> = RefCell::new(RowQ::default());
    static WP: RefCell<WPanel> = RefCell::new(WPanel::default());
}

/// Runs `f` on this thread's `T` from `key` (a fresh one when it is
/// already borrowed).
fn with_buf<T: Default + 'static, R>(
    key: &'static std::thread::LocalKey<RefCell<T>>,
    f: impl FnOnce(&mut T) -> R,
) -> R {
    key.with(|c| match c.try_borrow_mut() {
        Ok(mut b) => f(&mut b),
        Err(_) => f(&mut T::default()),
    })
}

// ---- entry ----

/// Runs the AMX GEMM when it is switched on (with the int8 prefill GEMM),
/// `m ≥ 16`, the CPU has AMX and VNNI, the kernel allows the tiles and
/// `ty` has a kernel; returns `false` otherwise, having done nothing.
/// Lengths are checked by the caller; `n, k > 0`, `k` whole blocks.
#[allow(clippy::too_many_arguments)]
pub(super) fn try_run(
    ty: GgmlType,
    x: &[f32],
    w: &[u8],
    rb: usize,
    out: &mut Out<'_>,
    m: usize,
    k: usize,
    n: usize,
    tasks: usize,
) -> bool {
    ENABLED.load(Ordering::Relaxed)
        && super::vnni_gemm::enabled()
        && run_typed(ty, x, w, rb, out, m, k, n, tasks)
}

/// [`try_run`] whatever the switches say (the hardware, `m` and `ty`
/// still decide).
#[allow(clippy::too_many_arguments)]
pub(super) fn run_typed(
    ty: GgmlType,
    x: &[f32],
    w: &[u8],
    rb: usize,
    out: &mut Out<'_>,
    m: usize,
    k: usize,
    n: usize,
    tasks: usize,
) -> bool {
    if m < MIN_M || n == 0 || !k.is_multiple_of(32) || !super::vnni::available() || !ready() {
        return false;
    }
    with_vfmt!(ty, V => {
        match out {
            Out::F32(o) => run::<V, f32>(x, w, rb, o, m, k, n, tasks),
            Out::F16(o) => run::<V, half::f16>(x, w, rb, o, m, k, n, tasks),
        }
        true
    }, _ => false)
}

/// Elements per scale block of `V`: 32 when both halves of a run share
/// their scale and offset, else 16.
const fn block_of<V: VFmt>() -> usize {
    if V::UNIFORM {
        32
    } else {
        16
    }
}

/// One group's slices of an [`XTiles`]: codes of both levels, steps, sums.
type GroupBufs<'a> = (&'a mut [i8], &'a mut [i8], &'a mut [f32], &'a mut [f32]);

/// Quantises the `rows` activation rows of group `x` (16 rows at most,
/// the rest zero) into one group's slices of an [`XTiles`].
///
/// # Safety
/// AVX-512 F/BW/VL present; `x` holds `rows · k` values; the slices have
/// their group sizes (`16·k`, `16·k`, `16·k/32`, `16·k/g`).
unsafe fn stage_group(x: &[f32], rows: usize, k: usize, g: usize, (q1, q2, dx, s): GroupBufs<'_>) {
    q1.fill(0);
    q2.fill(0);
    dx.fill(0.0);
    s.fill(0.0);
    let dm = Dims::new(k);
    with_buf(&RQ, |rq| {
        rq.q.resize(dm.kp, 0);
        rq.q2.resize(dm.kp, 0);
        rq.dx.resize(dm.kp / 4, 0.0);
        rq.s.resize(dm.hp, 0.0);
        for r in 0..rows {
            // SAFETY: AVX-512 (caller); the row slices have the sizes the
            // quantiser expects for `k`.
            unsafe {
                quantize_row_simd(
                    &x[r * k..(r + 1) * k],
                    &mut rq.q,
                    &mut rq.q2,
                    &mut rq.dx,
                    &mut rq.s,
                )
            };
            for d in 0..k / 4 {
                let at = 64 * d + 4 * r;
                q1[at..at + 4].copy_from_slice(&rq.q[4 * d..4 * d + 4]);
                q2[at..at + 4].copy_from_slice(&rq.q2[4 * d..4 * d + 4]);
            }
            for b in 0..k / 32 {
                dx[TR * b + r] = rq.dx[8 * b];
            }
            for b in 0..k / g {
                s[TR * b + r] = if g == 32 {
                    rq.s[2 * b] + rq.s[2 * b + 1]
                } else {
                    rq.s[b]
                };
            }
        }
    });
}

/// Decodes `rows ≤ 16` packed rows (stride `rb`, `nb` blocks each) into
/// one group of a [`WPanel`] (`u`: `16·k` codes, `a` / `c`: `16·kb`),
/// the missing rows zero.
///
/// # Safety
/// `rows` rows of `nb` blocks at `w`; AVX-512 F/BW/VL, AVX2, F16C present.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn decode_group<V: VFmt>(
    w: &[u8],
    rb: usize,
    nb: usize,
    rows: usize,
    k: usize,
    u: &mut [u8],
    a: &mut [f32],
    c: &mut [f32],
) {
    let g = block_of::<V>();
    let kb = k / g;
    u.fill(0);
    a.fill(0.0);
    c.fill(0.0);
    let (mut sa, mut sc) = ([0f32; 16], [0f32; 16]);
    for r in 0..rows {
        for blk in 0..nb {
            // SAFETY: block `blk` of row `r` lies in `w` (caller); every
            // store below lands inside the group's slices (run < k / 32).
            unsafe {
                let bp = w.as_ptr().add(r * rb + blk * V::BB);
                V::scales(bp, &mut sa, &mut sc);
                for h in 0..V::RUNS {
                    let run = blk * V::RUNS + h;
                    let q = V::codes(bp, h);
                    let cv = |i: usize| if V::SIGNED { 0.0 } else { sc[i] };
                    if g == 32 {
                        let at = (TR * run + r) * 32;
                        _mm256_storeu_si256(u.as_mut_ptr().add(at).cast(), q);
                        a[r * kb + run] = sa[2 * h];
                        c[r * kb + run] = cv(2 * h);
                    } else {
                        let lo = (TR * 2 * run + r) * 16;
                        let hi = (TR * (2 * run + 1) + r) * 16;
                        _mm_storeu_si128(u.as_mut_ptr().add(lo).cast(), _mm256_castsi256_si128(q));
                        _mm_storeu_si128(
                            u.as_mut_ptr().add(hi).cast(),
                            _mm256_extracti128_si256::<1>(q),
                        );
                        for e in 0..2 {
                            a[r * kb + 2 * run + e] = sa[2 * h + e];
                            c[r * kb + 2 * run + e] = cv(2 * h + e);
                        }
                    }
                }
            }
        }
    }
}

/// One group's pointers into the staged activations.
#[derive(Clone, Copy)]
struct XGroup {
    q1: *const i8,
    q2: *const i8,
    dx: *const f32,
    s: *const f32,
}

/// One group's pointers into a decoded panel.
#[derive(Clone, Copy)]
struct WGroup {
    u: *const u8,
    a: *const f32,
    c: *const f32,
}

/// The 16 × 16 output tile of weight group `wg` and activation group `xg`
/// over all of `k`: `acc[r]` lane `t` is the output of weight row `r` and
/// activation row `t`.
///
/// # Safety
/// The tile configuration for `g` is loaded ([`Tiles`]); the groups hold
/// `k` elements as laid out above; AVX-512 F/BW/VL present.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl")]
unsafe fn tile_16x16<const SIGNED: bool>(
    wg: WGroup,
    xg: XGroup,
    k: usize,
    g: usize,
    scr: &mut Scratch,
) -> [__m512; TR] {
    let kb = k / g;
    let mut acc = [_mm512_setzero_ps(); TR];
    // software-pipelined: block b + 1's products are issued before block
    // b's are stored and scaled, so the tile unit works while the vector
    // units finish the previous block
    let issue = |b: usize| {
        // SAFETY: block `b < kb` of both groups lies in their buffers
        // (`16·g` bytes of codes per block on either side).
        unsafe {
            let (w, x1, x2) = (
                wg.u.add(TR * g * b),
                xg.q1.add(TR * g * b),
                xg.q2.add(TR * g * b),
            );
            match (SIGNED, b & 1) {
                (true, 0) => products!(tdpbssd, 0, 1, w, g, x1, x2),
                (true, _) => products!(tdpbssd, 2, 3, w, g, x1, x2),
                (false, 0) => products!(tdpbusd, 0, 1, w, g, x1, x2),
                (false, _) => products!(tdpbusd, 2, 3, w, g, x1, x2),
            }
        }
    };
    issue(0);
    for b in 0..kb {
        if b + 1 < kb {
            issue(b + 1);
        }
        // SAFETY: `kb` scales per weight row, 16 steps per block of 32 and
        // 16 sums per block of `g`; the scratch holds both parities.
        unsafe {
            let par = b & 1;
            let (p1, p2) = (scr.0[2 * par].as_mut_ptr(), scr.0[2 * par + 1].as_mut_ptr());
            if par == 0 {
                store_pair!(0, 1, p1, p2);
            } else {
                store_pair!(2, 3, p1, p2);
            }
            let dx = _mm512_loadu_ps(xg.dx.add(TR * (b * g / 32)));
            let sv = _mm512_loadu_ps(xg.s.add(TR * b));
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let s1 = _mm512_load_si512(p1.add(TR * r).cast());
                let s2 = _mm512_load_si512(p2.add(TR * r).cast());
                let t = _mm512_add_epi32(_mm512_slli_epi32::<8>(s1), s2);
                let sc = _mm512_mul_ps(_mm512_set1_ps(*wg.a.add(r * kb + b)), dx);
                *acc_r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), sc, *acc_r);
                if !SIGNED {
                    *acc_r = _mm512_fmadd_ps(_mm512_set1_ps(*wg.c.add(r * kb + b)), sv, *acc_r);
                }
            }
        }
    }
    acc
}

/// Weight rows per task's panel: [`PANEL`] at most, fewer so that every
/// thread gets a few panels; a multiple of [`TR`].
fn panel_rows(n: usize, tasks: usize) -> usize {
    n.div_ceil(tasks.max(1) * 3).clamp(TR, PANEL).div_ceil(TR) * TR
}

/// `out[m, n] = x[m, k] @ dequant(w)ᵀ` for the format `V` on `tasks`
/// threads (lengths checked by the caller, `k` a multiple of 32, `m ≥ 16`,
/// `n, k > 0`, AMX ready).
#[allow(clippy::too_many_arguments)]
fn run<V: VFmt, T: Elem>(
    x: &[f32],
    w: &[u8],
    rb: usize,
    out: &mut [T],
    m: usize,
    k: usize,
    n: usize,
    tasks: usize,
) {
    let g = block_of::<V>();
    let kb = k / g;
    let mg = m.div_ceil(TR);
    let nb = rb / V::BB;
    with_buf(&XT, |xt| {
        xt.q1.resize(mg * TR * k, 0);
        xt.q2.resize(mg * TR * k, 0);
        xt.dx.resize(mg * TR * (k / 32), 0.0);
        xt.s.resize(mg * TR * kb, 0.0);
        let stage = |(gi, bufs): (usize, GroupBufs<'_>)| {
            let rows = TR.min(m - gi * TR);
            // SAFETY: `vnni::available()` was checked by `run_typed`; the
            // chunks have their group sizes.
            unsafe { stage_group(&x[gi * TR * k..(gi * TR + rows) * k], rows, k, g, bufs) };
        };
        let zip4 = |(((a, b), c), d)| (a, b, c, d);
        if tasks > 1 {
            xt.q1
                .par_chunks_mut(TR * k)
                .zip(xt.q2.par_chunks_mut(TR * k))
                .zip(xt.dx.par_chunks_mut(k / 2))
                .zip(xt.s.par_chunks_mut(TR * kb))
                .map(zip4)
                .enumerate()
                .for_each(stage);
        } else {
            xt.q1
                .chunks_mut(TR * k)
                .zip(xt.q2.chunks_mut(TR * k))
                .zip(xt.dx.chunks_mut(k / 2))
                .zip(xt.s.chunks_mut(TR * kb))
                .map(zip4)
                .enumerate()
                .for_each(stage);
        }
        let xt = &*xt;
        let xgroup = |gi: usize| XGroup {
            // SAFETY (of the offsets): group `gi < mg` of each buffer.
            q1: xt.q1[gi * TR * k..].as_ptr(),
            q2: xt.q2[gi * TR * k..].as_ptr(),
            dx: xt.dx[gi * (k / 2)..].as_ptr(),
            s: xt.s[gi * TR * kb..].as_ptr(),
        };
        let pr = panel_rows(n, tasks);
        let dst = Dst {
            ptr: out.as_mut_ptr(),
            m,
            n,
        };
        let cfg = TileCfg::new(g);
        let one = |pi: usize| {
            let j0 = pi * pr;
            let rows = pr.min(n - j0);
            let groups = rows.div_ceil(TR);
            with_buf(&WP, |wp| {
                wp.u.resize(groups * TR * k, 0);
                wp.a.resize(groups * TR * kb, 0.0);
                wp.c.resize(groups * TR * kb, 0.0);
                let parts =
                    wp.u.chunks_mut(TR * k)
                        .zip(wp.a.chunks_mut(TR * kb))
                        .zip(wp.c.chunks_mut(TR * kb));
                for (gj, ((u, a), c)) in parts.enumerate() {
                    let r0 = j0 + gj * TR;
                    let gr = TR.min(j0 + rows - r0);
                    // SAFETY: rows r0..r0 + gr of `w` exist (n·rb checked
                    // by the caller); the features by `run_typed`.
                    unsafe { decode_group::<V>(&w[r0 * rb..], rb, nb, gr, k, u, a, c) };
                }
                let mut scr = Scratch([[0; 256]; 4]);
                // SAFETY: `ready()` was checked by `run_typed`.
                let _tiles = unsafe { Tiles::load(&cfg) };
                for gj in 0..groups {
                    let wg = WGroup {
                        u: wp.u[gj * TR * k..].as_ptr(),
                        a: wp.a[gj * TR * kb..].as_ptr(),
                        c: wp.c[gj * TR * kb..].as_ptr(),
                    };
                    for gi in 0..mg {
                        // SAFETY: the configuration for `g` is loaded, the
                        // groups are laid out for `k`; AVX-512 present.
                        let acc = unsafe {
                            if V::SIGNED {
                                tile_16x16::<true>(wg, xgroup(gi), k, g, &mut scr)
                            } else {
                                tile_16x16::<false>(wg, xgroup(gi), k, g, &mut scr)
                            }
                        };
                        let mut t = [[0f32; TR]; TR];
                        for (tr, a) in t.iter_mut().zip(&acc) {
                            // SAFETY: 16 f32 at `tr`.
                            unsafe { _mm512_storeu_ps(tr.as_mut_ptr(), *a) };
                        }
                        for (r, tr) in t.iter().enumerate() {
                            let j = j0 + gj * TR + r;
                            if j >= j0 + rows {
                                break;
                            }
                            for (ii, &v) in tr.iter().enumerate() {
                                let i = gi * TR + ii;
                                if i >= m {
                                    break;
                                }
                                // SAFETY: i < m, j < n; this panel owns
                                // columns j0..j0 + rows.
                                unsafe { dst.put(i, j, v) };
                            }
                        }
                    }
                }
            });
        };
        let panels = n.div_ceil(pr);
        if tasks > 1 {
            (0..panels).into_par_iter().for_each(one);
        } else {
            (0..panels).for_each(one);
        }
    });
}

#[cfg(test)]
#[path = "amx_gemm_tests.rs"]
mod tests;
