// runtime.cpp -- CPU execution of shimmed MSL kernels (C++17), linked into
// every kernel library that src/compile.rs builds.
//
// A dispatch runs the lanes of one threadgroup at a time, in one of two
// modes (MslDispatch::coop, from MSL_SIM_LANES via src/dispatch.rs):
//
// - threads: one std::thread per lane; the lanes run the threadgroups one
//   after another (so a threadgroup's lanes truly run concurrently, and
//   threadgroup memory is one arena reused per group). threadgroup_barrier,
//   simd_* and the group hand-over all wait on one mutex + condition
//   variable per dispatch, which lets the watchdog (the calling thread)
//   wake every waiting lane and unwind it when the dispatch is aborted.
//   Needed by the sanitizer runs (TSan cannot follow fiber switches).
// - coop (cooperative): every lane is a fiber (see "fiber contexts") with
//   its own pooled stack, all on ONE worker thread. A lane runs until it
//   must wait (barrier, simd exchange, group hand-over) or reaches an
//   atomic operation or returns, then switches straight to the next runnable lane (round robin, so a barrier costs
//   one switch per lane). No OS context switches: on few cores this is
//   many times faster than threads. The very same wait / check code runs
//   in both modes; only "wait for a generation to change" differs (cv
//   wait vs. switching away until it changed). When every unfinished lane
//   waits and none can go on, that is a deadlock, reported at once.
//
// Everything a lane does is checked against MSL's rules where a CPU can
// tell: a barrier that not every lane reaches, lanes at different
// barriers, simd functions at different lines in one simdgroup,
// threadgroup memory beyond 32 KiB.
#if defined(__APPLE__)
// macOS hides the (deprecated, still working) ucontext calls unless asked.
#define _XOPEN_SOURCE 700
#define _DARWIN_C_SOURCE 1
#endif
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "msl_runtime.h"

namespace msl_rt {
namespace {
constexpr unsigned long kMaxTgMem = 32768;  // Apple GPUs: 32 KiB per threadgroup

struct Abort {};  // unwinds a lane out of kernel code

struct Simd {
  unsigned active = 0;   // lanes still running the kernel in this group
  unsigned arrived = 0;  // lanes waiting in the current exchange
  unsigned pending = 0;  // their mask
  unsigned long long gen = 0;
  int line = -1;  // line of the current exchange
  unsigned masks[2] = {0, 0};
  alignas(16) unsigned char slots[2][kSimdWidth][kSlotBytes];
};

// Lane states for the timeout report.
constexpr int kRunning = 0, kAtBarrier = 1, kAtSimd = 2, kFinished = 3, kExited = 4;

// --- fiber contexts ----------------------------------------------------------
// x86-64 Linux: a hand-written switch that saves the callee-saved registers
// and the FP control words (a few ns). glibc's swapcontext also saves and
// restores the signal mask with a system call at every switch, which is
// then most of a coop dispatch's time. Elsewhere (macOS arm64, ...) the
// portable ucontext calls; -DMSL_RT_UCONTEXT forces them here too.
#if defined(__x86_64__) && defined(__linux__) && !defined(MSL_RT_UCONTEXT)
extern "C" {
// Push the callee-saved registers on the current stack, store its pointer
// in *save_sp, continue on to_sp (popping what its own switch pushed).
void msl_rt_switch(void** save_sp, void* to_sp);
// A new fiber's first "return address": calls r13(r12).
void msl_rt_fiber_start();
}
asm(R"(
  .text
  .p2align 4
  .globl msl_rt_switch
  .hidden msl_rt_switch
  .type msl_rt_switch,@function
msl_rt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size msl_rt_switch, .-msl_rt_switch

  .p2align 4
  .globl msl_rt_fiber_start
  .hidden msl_rt_fiber_start
  .type msl_rt_fiber_start,@function
msl_rt_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size msl_rt_fiber_start, .-msl_rt_fiber_start
)");

struct Context {
  void* sp = nullptr;
};

// A context that starts fn(arg) on [stack, stack + size): the frame
// msl_rt_switch pops, returning into msl_rt_fiber_start with the stack
// 16-byte aligned as the ABI wants at a call.
void ctx_make(Context& c, void* stack, size_t size, void (*fn)(int), int arg) {
  const uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + size) & ~uintptr_t(15);
  void** sp = reinterpret_cast<void**>(top - 16);
  *--sp = reinterpret_cast<void*>(msl_rt_fiber_start);
  *--sp = nullptr;                                   // rbp (ends frame-pointer walks)
  *--sp = nullptr;                                   // rbx
  *--sp = reinterpret_cast<void*>(intptr_t(arg));   // r12
  *--sp = reinterpret_cast<void*>(fn);               // r13
  *--sp = nullptr;                                   // r14
  *--sp = nullptr;                                   // r15
  --sp;
  const unsigned mxcsr = 0x1f80;       // default: all exceptions masked, round to nearest
  const unsigned short fpcw = 0x037f;  // x87 default
  std::memcpy(sp, &mxcsr, 4);
  std::memcpy(reinterpret_cast<char*>(sp) + 4, &fpcw, 2);
  c.sp = sp;
}
void ctx_swap(Context& from, Context& to) { msl_rt_switch(&from.sp, to.sp); }
[[noreturn]] void ctx_jump(Context& to) {
  void* discard;
  msl_rt_switch(&discard, to.sp);
  std::abort();
}
#else
struct Context {
  ucontext_t uc;
};
void ctx_make(Context& c, void* stack, size_t size, void (*fn)(int), int arg) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, reinterpret_cast<void (*)()>(fn), 1, arg);
}
void ctx_swap(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
[[noreturn]] void ctx_jump(Context& to) {
  setcontext(&to.uc);
  std::abort();
}
#endif

// A cooperative lane: its context and what it waits for. A lane is
// runnable unless it waits for *wait to move past `seen` (and the dispatch
// is not aborted), so the scheduler can skip it without switching to it.
struct Fiber {
  Context ctx;
  void* stack = nullptr;  // from the stack pool (see acquire_stack)
  const unsigned long long* wait = nullptr;
  unsigned long long seen = 0;
  bool exited = false;
};

struct Shared {
  std::mutex m;
  std::condition_variable cv;
  unsigned n = 0;  // lanes per threadgroup
  // threadgroup_barrier
  unsigned arrived = 0, finished = 0;
  unsigned long long gen = 0;
  int line = -1;
  // group hand-over (internal barrier)
  unsigned handover = 0;
  unsigned long long handover_gen = 0;
  unsigned exited = 0;  // lane threads that returned
  // Completed barriers, simd exchanges, group hand-overs and lane exits:
  // the watchdog fires only when this stops moving. Atomic: in coop mode
  // the watchdog samples it without the lock.
  std::atomic<unsigned long long> progress{0};
  bool abort = false;
  std::string error;
  // coop mode. All lane and group state is then touched by the worker
  // thread only (the mutex is still taken, uncontended, by the shared code
  // paths and must never be held across a fiber switch); the watchdog
  // talks to the worker through the atomics and, at the end, `done` under
  // the mutex.
  bool coop = false;
  std::vector<Fiber> fib;
  Context worker_ctx;                    // the worker's own stack
  std::atomic<bool> watchdog_fired{false};  // set by the watchdog
  std::atomic<unsigned> current{0};      // lane on the worker, for reports
  bool done = false;                     // worker finished (under m)
  bool timed_out = false;                // worker honoured watchdog_fired
  bool deadlock = false;                 // every lane blocked, none runnable
  std::string where;                     // lanes at the watchdog's stop
  std::vector<Simd> sg;
  std::vector<int> state, state_line;
  // threadgroup memory: dynamic [[threadgroup(i)]] buffers, then variables
  std::vector<unsigned long> tg_off, tg_len;
  unsigned long static_base = 0;
  unsigned char* arena = nullptr;
  // the dispatch
  EntryFn entry = nullptr;
  void* const* buffers = nullptr;
  unsigned nbuffers = 0;
  Dim3 groups{1, 1, 1}, tpg{1, 1, 1};
};

struct Lane {
  Shared* sh;
  unsigned lid, sid, lane;
  unsigned long bump;
};
// The lane running on this thread (in coop mode: on this fiber; each
// fiber sets it again whenever it is switched back in).
thread_local Lane* t_lane = nullptr;
// The dispatch whose fibers run on this (worker) thread.
thread_local Shared* t_coop = nullptr;

Lane& me() { return *t_lane; }

// Wake lane threads waiting on the condition variable. In coop mode nobody
// waits on it but the watchdog, which polls progress instead: notifying it
// at every barrier would cost a futex wake-up each time.
void notify(Shared& s) {
  if (!s.coop) s.cv.notify_all();
}

// Record the first error and wake everyone; the caller then unwinds.
void abort_locked(Shared& s, const std::string& why) {
  if (!s.abort) {
    s.abort = true;
    s.error = why;
  }
  notify(s);
}

void reset_group_locked(Shared& s) {
  s.arrived = s.finished = 0;
  s.line = -1;
  for (unsigned i = 0; i < s.sg.size(); ++i) {
    Simd& g = s.sg[i];
    const unsigned lanes = i + 1 < s.sg.size() ? kSimdWidth : s.n - i * kSimdWidth;
    g.active = lanes;
    g.arrived = g.pending = 0;
    g.line = -1;
  }
  // Threadgroup memory is not zeroed on a GPU: poison it (NaN for floats)
  // so that a kernel reading before writing gives visibly wrong results.
  std::memset(s.arena, 0xff, kMaxTgMem);
}

std::string lane_range(const std::vector<unsigned>& lanes) {
  std::string out;
  for (size_t i = 0; i < lanes.size();) {
    size_t j = i;
    while (j + 1 < lanes.size() && lanes[j + 1] == lanes[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(lanes[i]);
    if (j > i) out += "-" + std::to_string(lanes[j]);
    i = j + 1;
  }
  return out;
}

std::string describe_lanes_locked(Shared& s) {
  static const char* names[] = {"running", "at threadgroup_barrier", "in a simd function",
                                "returned", "stopped"};
  std::string out;
  for (int st = 0; st < 5; ++st) {
    // group by (state, line)
    std::vector<int> lines;
    for (unsigned l = 0; l < s.n; ++l)
      if (s.state[l] == st) {
        bool seen = false;
        for (int x : lines) seen |= x == s.state_line[l];
        if (!seen) lines.push_back(s.state_line[l]);
      }
    for (int line : lines) {
      std::vector<unsigned> lanes;
      for (unsigned l = 0; l < s.n; ++l)
        if (s.state[l] == st && s.state_line[l] == line) lanes.push_back(l);
      out += "; lanes " + lane_range(lanes) + " " + names[st];
      if (line > 0) out += " (line " + std::to_string(line) + ")";
    }
  }
  return out;
}

// --- cooperative lanes -----------------------------------------------------

bool runnable(const Shared& s, unsigned j) {
  const Fiber& f = s.fib[j];
  return !f.exited && (!f.wait || s.abort || *f.wait != f.seen);
}

// The next lane to run after `from` (round robin; `from` itself last).
// Turns a watchdog request into an abort (the worker owns the lane state,
// so the report of where the lanes are is written here), and a state where
// every unfinished lane waits for something no lane can do into a deadlock
// error; after either, every unfinished lane is runnable and unwinds.
unsigned pick_next(Shared& s, unsigned from) {
  if (!s.abort && s.watchdog_fired.load(std::memory_order_relaxed)) {
    s.where = describe_lanes_locked(s);
    s.timed_out = true;
    abort_locked(s, "timeout");
  }
  for (;;) {
    for (unsigned k = 1; k <= s.n; ++k) {
      const unsigned j = (from + k) % s.n;
      if (runnable(s, j)) return j;
    }
    // Only reachable before an abort: afterwards every lane that has not
    // exited is runnable, and the caller never asks once all have exited.
    s.deadlock = true;
    abort_locked(s, "deadlock: every lane still in the kernel waits and none can go on "
                    "(found at once by the cooperative lanes; the threaded lanes report it "
                    "through the watchdog)" + describe_lanes_locked(s));
  }
}

// Let other lanes run; returns when this lane is picked again.
void coop_yield(Lane& l) {
  Shared& s = *l.sh;
  const unsigned j = pick_next(s, l.lid);
  if (j == l.lid) return;
  s.current.store(j, std::memory_order_relaxed);
  ctx_swap(s.fib[l.lid].ctx, s.fib[j].ctx);
  t_lane = &l;
}

void wait_gen_locked(std::unique_lock<std::mutex>& lk, Shared& s, unsigned long long* gen,
                     unsigned long long seen) {
  if (s.coop) {
    Lane& l = me();
    Fiber& f = s.fib[l.lid];
    f.wait = gen;
    f.seen = seen;
    lk.unlock();  // other fibers on this thread take it
    while (!s.abort && *gen == seen) coop_yield(l);
    lk.lock();
    f.wait = nullptr;
  } else {
    s.cv.wait(lk, [&] { return s.abort || *gen != seen; });
  }
  if (*gen == seen) throw Abort{};
}

void finish_lane(Lane& l) {
  Shared& s = *l.sh;
  std::lock_guard<std::mutex> lk(s.m);
  if (s.abort) return;
  s.state[l.lid] = kFinished;
  s.finished++;
  if (s.arrived > 0) {
    abort_locked(s, "threadgroup_barrier at line " + std::to_string(s.line) +
                        " is not reached by every lane: lane " + std::to_string(l.lid) +
                        " returned while " + std::to_string(s.arrived) + " lanes wait there" +
                        describe_lanes_locked(s));
    return;
  }
  Simd& g = s.sg[l.sid];
  g.active--;
  if (g.arrived > 0 && g.arrived == g.active) {  // the others were waiting for us
    g.masks[g.gen & 1] = g.pending;
    g.arrived = g.pending = 0;
    g.gen++;
    s.progress++;
    notify(s);
  }
}

// All lanes meet between threadgroups; the last one resets the group state.
void handover(Lane& l) {
  Shared& s = *l.sh;
  std::unique_lock<std::mutex> lk(s.m);
  if (s.abort) throw Abort{};
  const unsigned long long seen = s.handover_gen;
  if (++s.handover == s.n) {
    s.handover = 0;
    reset_group_locked(s);
    for (unsigned i = 0; i < s.n; ++i) s.state[i] = kRunning, s.state_line[i] = 0;
    s.handover_gen++;
    s.progress++;
    notify(s);
    return;
  }
  wait_gen_locked(lk, s, &s.handover_gen, seen);
}

void lane_main(Shared* sh, unsigned lid) {
  Shared& s = *sh;
  Lane l{sh, lid, lid / kSimdWidth, lid % kSimdWidth, 0};
  t_lane = &l;
  const Dim3 t = s.tpg, gr = s.groups;
  Pos p{};
  p.tpitg = {lid % t.x, (lid / t.x) % t.y, lid / (t.x * t.y)};
  p.tptg = t;
  p.tgpg = gr;
  p.tpg = {gr.x * t.x, gr.y * t.y, gr.z * t.z};
  p.tiitg = lid;
  p.sgitg = l.sid;
  p.tiisg = l.lane;
  p.sgptg = (s.n + kSimdWidth - 1) / kSimdWidth;
  p.tptsg = kSimdWidth;
  std::vector<void*> tgmem(s.tg_off.size());
  for (size_t i = 0; i < tgmem.size(); ++i) tgmem[i] = s.arena + s.tg_off[i];
  const Invocation inv{s.buffers, s.nbuffers, tgmem.data(), (unsigned)tgmem.size(), &p};
  try {
    for (unsigned gz = 0; gz < gr.z; ++gz)
      for (unsigned gy = 0; gy < gr.y; ++gy)
        for (unsigned gx = 0; gx < gr.x; ++gx) {
          handover(l);
          p.tgpig = {gx, gy, gz};
          p.tpig = {gx * t.x + p.tpitg.x, gy * t.y + p.tpitg.y, gz * t.z + p.tpitg.z};
          l.bump = s.static_base;
          s.entry(&inv);
          finish_lane(l);
        }
  } catch (const Abort&) {
  }
  t_lane = nullptr;
  std::lock_guard<std::mutex> lk(s.m);
  s.state[lid] = kExited;
  s.exited++;
  s.progress++;
  notify(s);
}

// A fiber's whole life: run the lane, then hand the worker thread to the
// next lane (or back to the worker once every lane has exited). The fiber
// is never resumed, its stack is reused by the next dispatch.
void fiber_main(int lid) {
  Shared& s = *t_coop;
  lane_main(&s, (unsigned)lid);
  s.fib[lid].exited = true;
  if (s.exited == s.n) ctx_jump(s.worker_ctx);
  const unsigned j = pick_next(s, (unsigned)lid);
  s.current.store(j, std::memory_order_relaxed);
  ctx_jump(s.fib[j].ctx);
}

// Fiber stacks: mmap'd with a PROT_NONE guard page below (a kernel whose
// per-lane arrays overflow the stack faults instead of corrupting the next
// stack), pooled across dispatches: starting a 1024-lane dispatch must not
// cost 1024 mmaps. Generous because kernels keep per-lane arrays on the
// stack (16 KiB and more); untouched pages cost no memory.
constexpr size_t kFiberStack = 512 * 1024;
std::mutex g_pool_m;
std::vector<void*> g_pool;  // usable base of each free stack

size_t page_size() {
  static const size_t p = (size_t)sysconf(_SC_PAGESIZE);
  return p;
}

void* acquire_stack() {
  {
    std::lock_guard<std::mutex> lk(g_pool_m);
    if (!g_pool.empty()) {
      void* st = g_pool.back();
      g_pool.pop_back();
      return st;
    }
  }
  const size_t guard = page_size();
  void* m = mmap(nullptr, kFiberStack + guard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANON,
                 -1, 0);
  if (m == MAP_FAILED) return nullptr;
  if (mprotect(m, guard, PROT_NONE) != 0) {
    munmap(m, kFiberStack + guard);
    return nullptr;
  }
  return static_cast<unsigned char*>(m) + guard;
}

void release_stacks(Shared& s) {
  std::lock_guard<std::mutex> lk(g_pool_m);
  for (Fiber& f : s.fib)
    if (f.stack) g_pool.push_back(f.stack), f.stack = nullptr;
}

// The worker thread of a coop dispatch: make one context per lane, run
// lane 0 (the lanes then switch among themselves) and come back when the
// last lane has exited.
void coop_worker(Shared* sh) {
  Shared& s = *sh;
  t_coop = sh;
  for (unsigned i = 0; i < s.n; ++i) {
    Fiber& f = s.fib[i];
    ctx_make(f.ctx, f.stack, kFiberStack, fiber_main, (int)i);
  }
  s.current.store(0, std::memory_order_relaxed);
  ctx_swap(s.worker_ctx, s.fib[0].ctx);
  t_coop = nullptr;
  std::lock_guard<std::mutex> lk(s.m);
  s.done = true;
  s.cv.notify_all();
}
}  // namespace

void tg_barrier(int line) {
  Lane& l = me();
  Shared& s = *l.sh;
  std::unique_lock<std::mutex> lk(s.m);
  if (s.abort) throw Abort{};
  if (s.finished > 0) {
    abort_locked(s, "threadgroup_barrier at line " + std::to_string(line) +
                        " is not reached by every lane: lane " + std::to_string(l.lid) +
                        " arrived after " + std::to_string(s.finished) + " lanes returned" +
                        describe_lanes_locked(s));
    throw Abort{};
  }
  if (s.arrived > 0 && s.line != line) {
    abort_locked(s, "lanes of one threadgroup wait at different threadgroup_barriers (lines " +
                        std::to_string(s.line) + " and " + std::to_string(line) + ")" +
                        describe_lanes_locked(s));
    throw Abort{};
  }
  s.line = line;
  s.state[l.lid] = kAtBarrier;
  s.state_line[l.lid] = line;
  const unsigned long long seen = s.gen;
  if (++s.arrived == s.n) {
    s.arrived = 0;
    s.gen++;
    s.progress++;
    for (unsigned i = 0; i < s.n; ++i)
      if (s.state[i] == kAtBarrier) s.state[i] = kRunning;
    notify(s);
    return;
  }
  wait_gen_locked(lk, s, &s.gen, seen);
}

const unsigned char* simd_exchange(const void* v, unsigned size, int line, unsigned* mask,
                                   unsigned* lane) {
  Lane& l = me();
  Shared& s = *l.sh;
  std::unique_lock<std::mutex> lk(s.m);
  if (s.abort) throw Abort{};
  Simd& g = s.sg[l.sid];
  if (g.arrived > 0 && g.line != line) {
    abort_locked(s, "lanes of simdgroup " + std::to_string(l.sid) +
                        " call simd functions at different lines (" + std::to_string(g.line) +
                        " and " + std::to_string(line) +
                        "): lane-divergent simd calls are not supported by msl-sim");
    throw Abort{};
  }
  g.line = line;
  const unsigned buf = g.gen & 1;
  std::memcpy(g.slots[buf][l.lane], v, size);
  g.pending |= 1u << l.lane;
  s.state[l.lid] = kAtSimd;
  s.state_line[l.lid] = line;
  const unsigned long long seen = g.gen;
  if (++g.arrived == g.active) {
    g.masks[buf] = g.pending;
    g.arrived = g.pending = 0;
    g.gen++;
    s.progress++;
    notify(s);
  } else {
    wait_gen_locked(lk, s, &g.gen, seen);
  }
  s.state[l.lid] = kRunning;
  *mask = g.masks[buf];
  *lane = l.lane;
  return &g.slots[buf][0][0];
}

void simd_barrier(int line) {
  unsigned mask, lane;
  const int dummy = 0;
  simd_exchange(&dummy, sizeof dummy, line, &mask, &lane);
}

void* tg_alloc(unsigned long size, unsigned long align, int line) {
  Lane& l = me();
  unsigned long off = (l.bump + align - 1) / align * align;
  if (off + size > kMaxTgMem) {
    fail(("threadgroup variables need more than 32 KiB (with " +
          std::to_string(l.sh->static_base) + " bytes of [[threadgroup(i)]] memory)")
             .c_str(),
         line);
  }
  l.bump = off + size;
  return l.sh->arena + off;
}

void poll() {
  Lane* l = t_lane;
  if (!l) return;
  Shared& s = *l->sh;
  if (s.coop) {
    // An atomic is where a lane may spin on another lane's store: let the
    // others run. A spin that never touches the runtime (a plain loop)
    // would keep the worker forever; see msl_rt_dispatch.
    if (!s.abort) coop_yield(*l);
    if (s.abort) throw Abort{};
    return;
  }
  std::lock_guard<std::mutex> lk(s.m);
  if (s.abort) throw Abort{};
}

void fail(const char* what, int line) {
  Lane& l = me();
  std::lock_guard<std::mutex> lk(l.sh->m);
  abort_locked(*l.sh, std::string(what) + " (line " + std::to_string(line) + ", lane " +
                          std::to_string(l.lid) + ")");
  throw Abort{};
}
}  // namespace msl_rt

namespace msl_rt {
namespace {
// The coop half of msl_rt_dispatch: the calling thread is the watchdog, a
// worker thread runs the fibers. The watchdog samples `progress` every
// window/8 (no wake-up per barrier) and, after a window without progress,
// raises watchdog_fired; the worker sees it at the next switch (every
// barrier, simd call, atomic or return), writes where the lanes are and
// unwinds them all. A lane looping without ever touching the runtime never
// switches: then, as with threads, the worker is leaked (code 4).
// Returns msl_rt_dispatch's code, the message in `msg`.
int run_coop(Shared* s, unsigned timeout_ms, std::string& msg) {
  auto report = [&](const std::string& m, int code) {
    msg = m;
    return code;
  };
  s->coop = true;
  s->fib.resize(s->n);
  for (Fiber& f : s->fib)
    if (!(f.stack = acquire_stack())) {
      release_stacks(*s);
      ::operator delete(s->arena, std::align_val_t(64));
      delete s;
      return report("could not allocate lane stacks (mmap)", 3);
    }
  std::thread worker;
  try {
    worker = std::thread(coop_worker, s);
  } catch (const std::exception& e) {
    release_stacks(*s);
    ::operator delete(s->arena, std::align_val_t(64));
    delete s;
    return report(std::string("could not start the lane worker thread: ") + e.what(), 3);
  }
  using clock = std::chrono::steady_clock;
  const auto window = std::chrono::milliseconds(timeout_ms);
  const auto tick = std::max(window / 8, decltype(window)(1));
  bool stuck = false;
  {
    std::unique_lock<std::mutex> lk(s->m);
    unsigned long long seen = s->progress.load();
    auto last = clock::now();
    while (!s->done) {
      s->cv.wait_for(lk, tick);
      if (s->done) break;
      const unsigned long long p = s->progress.load(std::memory_order_relaxed);
      const auto now = clock::now();
      if (p != seen) {
        seen = p, last = now;
      } else if (now - last >= window) {
        s->watchdog_fired.store(true);
        stuck = !s->cv.wait_for(lk, std::chrono::seconds(2), [&] { return s->done; });
        break;
      }
    }
  }
  if (stuck) {
    worker.detach();  // s, its stacks, the arena and the buffers stay alive
    return report("watchdog: no lane made progress for " + std::to_string(timeout_ms) +
                      " ms and the lanes could not be stopped: lane " +
                      std::to_string(s->current.load()) +
                      " loops without reaching a barrier, simd function or atomic; the "
                      "worker thread was leaked",
                  4);
  }
  worker.join();
  release_stacks(*s);
  const std::string m = s->error, where = s->where;
  const bool failed = s->abort, timed_out = s->timed_out, deadlock = s->deadlock;
  ::operator delete(s->arena, std::align_val_t(64));
  delete s;
  if (timed_out)
    return report("watchdog: no lane made progress (barrier, simd function, threadgroup) for " +
                      std::to_string(timeout_ms) + " ms (deadlock?)" + where,
                  2);
  if (deadlock) return report(m, 2);
  if (failed) return report(m, 1);
  return 0;
}
}  // namespace
}  // namespace msl_rt

// ---------------------------------------------------------------------------
// C ABI used by src/dispatch.rs.
// ---------------------------------------------------------------------------
extern "C" {
struct MslDispatch {
  msl_rt::EntryFn entry;
  void* const* buffers;
  unsigned nbuffers;
  const unsigned long* tgmem_bytes;  // [[threadgroup(i)]] lengths
  unsigned ntgmem;
  unsigned groups[3];
  unsigned threads[3];
  unsigned timeout_ms;
  unsigned coop;  // 1: cooperative lanes (fibers on one worker thread)
};

// 0: ok; 1: kernel error (divergence, ...); 2: timeout; 3: bad dispatch;
// 4: timeout with lanes still running (the caller must leak the buffers).
// On error writes a message into err (NUL-terminated, truncated to errlen).
int msl_rt_dispatch(const MslDispatch* d, char* err, unsigned long errlen) {
  using namespace msl_rt;
  auto report = [&](const std::string& m, int code) {
    std::snprintf(err, errlen, "%s", m.c_str());
    return code;
  };
  const unsigned n = d->threads[0] * d->threads[1] * d->threads[2];
  if (n == 0 || n > 1024) return report("threads per threadgroup must be 1..1024", 3);
  const unsigned long long ng = 1ull * d->groups[0] * d->groups[1] * d->groups[2];
  if (ng == 0) return 0;
  // Leaked on purpose when lanes cannot be stopped (see below).
  auto* s = new Shared();
  s->n = n;
  s->entry = d->entry;
  s->buffers = d->buffers;
  s->nbuffers = d->nbuffers;
  s->groups = {d->groups[0], d->groups[1], d->groups[2]};
  s->tpg = {d->threads[0], d->threads[1], d->threads[2]};
  s->sg.resize((n + kSimdWidth - 1) / kSimdWidth);
  s->state.assign(n, kRunning);
  s->state_line.assign(n, 0);
  unsigned long off = 0;
  for (unsigned i = 0; i < d->ntgmem; ++i) {
    off = (off + 15) / 16 * 16;
    s->tg_off.push_back(off);
    s->tg_len.push_back(d->tgmem_bytes[i]);
    off += d->tgmem_bytes[i];
  }
  if (off > kMaxTgMem) {
    delete s;
    return report("[[threadgroup(i)]] memory of " + std::to_string(off) +
                      " bytes exceeds 32 KiB", 3);
  }
  s->static_base = (off + 15) / 16 * 16;
  s->arena = static_cast<unsigned char*>(::operator new(kMaxTgMem, std::align_val_t(64)));
  if (d->coop) {
    std::string m;
    const int code = run_coop(s, d->timeout_ms, m);
    return code == 0 ? 0 : report(m, code);
  }
  std::vector<std::thread> lanes;
  lanes.reserve(n);
  try {
    for (unsigned i = 0; i < n; ++i) lanes.emplace_back(lane_main, s, i);
  } catch (const std::exception& e) {
    {
      std::lock_guard<std::mutex> lk(s->m);
      abort_locked(*s, std::string("could not start lane threads: ") + e.what());
    }
    for (auto& t : lanes) t.join();
    std::string m = s->error;
    ::operator delete(s->arena, std::align_val_t(64));
    delete s;
    return report(m, 3);
  }
  bool timed_out = false, stuck = false;
  std::string where;
  {
    std::unique_lock<std::mutex> lk(s->m);
    // A progress watchdog: a long dispatch that keeps passing barriers,
    // simd exchanges and group hand-overs runs on; one where nothing moves
    // for timeout_ms (a deadlock, or a lane spinning alone) is stopped.
    const auto window = std::chrono::milliseconds(d->timeout_ms);
    unsigned long long seen = s->progress;
    for (;;) {
      const bool moved = s->cv.wait_until(lk, std::chrono::steady_clock::now() + window, [&] {
        return s->exited == n || s->progress != seen;
      });
      if (!moved || s->exited == n) break;
      seen = s->progress;
    }
    if (s->exited != n) {
      timed_out = !s->abort;
      where = describe_lanes_locked(*s);
      abort_locked(*s, "timeout");
      // Lanes blocked in a barrier, simd call or atomic load unwind now; a
      // lane spinning without touching the runtime cannot be stopped.
      stuck = !s->cv.wait_for(lk, std::chrono::seconds(2), [&] { return s->exited == n; });
    }
  }
  if (stuck) {
    for (auto& t : lanes) t.detach();  // s, the arena and the buffers stay alive
    return report("watchdog: no lane made progress for " + std::to_string(d->timeout_ms) +
                      " ms and some lanes could not be stopped (a loop that never reaches a "
                      "barrier, simd function or atomic); their threads were leaked" + where,
                  4);
  }
  for (auto& t : lanes) t.join();
  std::string m = s->error;
  const bool failed = s->abort;
  ::operator delete(s->arena, std::align_val_t(64));
  delete s;
  if (timed_out)
    return report("watchdog: no lane made progress (barrier, simd function, threadgroup) for " +
                      std::to_string(d->timeout_ms) + " ms (deadlock?)" + where,
                  2);
  if (failed) return report(m, 1);
  return 0;
}
}
