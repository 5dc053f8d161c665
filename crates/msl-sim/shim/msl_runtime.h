// msl_runtime.h -- the ABI between shimmed kernel code (metal_stdlib, the
// generated entry points) and the CPU runtime (runtime/runtime.cpp).
// Includes no standard header so that it can sit inside the shim, whose
// `thread` / `device` macros would break <thread>.
#pragma once

// half: _Float16 where the compiler has it on this target (clang >= 15 on
// x86-64), else clang's storage-only __fp16 (clang 14 needs
// -Xclang -fallow-half-arguments-and-returns to pass it by value). Either
// way arithmetic is done at least in float, so results are at least as
// precise as a GPU's half arithmetic.
#if defined(__FLT16_MAX__)
typedef _Float16 msl_half;
#else
typedef __fp16 msl_half;
#endif

namespace msl_rt {
constexpr unsigned kSimdWidth = 32;  // Apple GPU simdgroup width
constexpr unsigned kSlotBytes = 16;  // largest simd-exchanged value: float4

struct Dim3 {
  unsigned x, y, z;
};

// What MSL passes through position attributes, for one lane.
struct Pos {
  Dim3 tgpig;        // threadgroup_position_in_grid
  Dim3 tpitg;        // thread_position_in_threadgroup
  Dim3 tpig;         // thread_position_in_grid
  Dim3 tptg;         // threads_per_threadgroup
  Dim3 tgpg;         // threadgroups_per_grid
  Dim3 tpg;          // threads_per_grid
  unsigned tiitg;    // thread_index_in_threadgroup (x fastest)
  unsigned sgitg;    // simdgroup_index_in_threadgroup
  unsigned tiisg;    // thread_index_in_simdgroup
  unsigned sgptg;    // simdgroups_per_threadgroup
  unsigned tptsg;    // threads_per_simdgroup (always kSimdWidth)
};

// Everything a generated entry point binds its kernel's parameters from.
struct Invocation {
  void* const* buffers;   // [[buffer(i)]]
  unsigned nbuffers;
  void* const* tgmem;     // [[threadgroup(i)]]
  unsigned ntgmem;
  const Pos* pos;
};

typedef void (*EntryFn)(const Invocation*);

// Called by the lane (emulated GPU thread) running kernel code. Each may
// unwind the lane (C++ exception) when the dispatch is aborted: a
// divergent barrier, the watchdog, or an error in another lane.
void tg_barrier(int line);       // threadgroup_barrier(...) at .metal line
void simd_barrier(int line);     // simdgroup_barrier(...)
// simd exchange: copy `size` (<= kSlotBytes) bytes of *v into this lane's
// slot, wait for the simdgroup's active lanes, return the slot array
// (stride kSlotBytes), the mask of lanes that took part and the caller's
// lane. Slots stay valid until the caller's next simd call.
const unsigned char* simd_exchange(const void* v, unsigned size, int line,
                                   unsigned* mask, unsigned* lane);
// Storage for a `threadgroup` variable: every lane declares the same
// variables in the same order, so the k-th call of every lane in a
// threadgroup returns the same address.
void* tg_alloc(unsigned long size, unsigned long align, int line);
// At every atomic operation: unwinds if the dispatch was aborted; with
// cooperative lanes also lets the other lanes of the threadgroup run.
void poll();
[[noreturn]] void fail(const char* what, int line);  // abort the dispatch
}  // namespace msl_rt
