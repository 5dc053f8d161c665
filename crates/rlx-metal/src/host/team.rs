//! A small fixed team of worker threads for the fine-grained parallel loops
//! of a decode step.
//!
//! A decode step runs a few hundred GEMVs of 20–100 µs each. Splitting one
//! across rayon's pool costs a futex wake and a join (tens of µs when the
//! workers sleep), more than the second core saves, so those loops used to
//! run on one thread. The team's workers instead spin for a short while
//! (`RLX_SPIN_US`) after each job, so the next job of the same step starts
//! on every core within a microsecond or two; idle longer than that, they
//! sleep on a condition variable and cost nothing.
//!
//! Protocol (one job at a time; a second caller, or a call from inside a
//! job, runs serially instead of waiting):
//! * `state` packs the job generation (bits 33..), an *open* flag (bit 32)
//!   and the number of workers inside the job (bits 0..32);
//! * the caller writes the job, then publishes it by storing a new
//!   generation with the open flag (release), works on chunks itself,
//!   closes the job (clears the flag) and waits until no worker is inside;
//! * a worker enters only by a compare-and-swap that adds itself to an
//!   open job of the generation it saw, so after the close no worker can
//!   touch the job's closure: the caller never waits for a worker that was
//!   descheduled before it entered.
//!
//! Chunks are handed out by one atomic counter, so a slow core takes fewer.

use std::cell::{Cell, UnsafeCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock, TryLockError};
use std::time::{Duration, Instant};

const OPEN: u64 = 1 << 32;
const ACTIVE: u64 = OPEN - 1;
const GEN_SHIFT: u32 = 33;

/// The closure of the current job with its lifetime erased; valid while
/// the job is open or a worker is inside it.
#[derive(Clone, Copy)]
struct Job {
    f: *const (dyn Fn(usize) + Sync),
    chunks: usize,
}

struct Shared {
    state: AtomicU64,
    job: UnsafeCell<Job>,
    next: AtomicUsize,
    /// Set when a chunk panicked on a worker; the caller re-raises.
    panicked: AtomicBool,
    /// Workers asleep (or about to sleep) on `wake`; changed only under
    /// `sleep_lock`, read without it by the caller (see `for_each`).
    sleepers: AtomicUsize,
    sleep_lock: Mutex<()>,
    wake: Condvar,
    spin: Duration,
}

// SAFETY: `job` is written only by the caller holding `Team::caller` while
// no job is open and no worker is inside (see the module protocol), and
// read by workers only after entering an open job (acquire on the CAS that
// pairs with the caller's release store). The closure it points to is
// `Sync`.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointer is only dereferenced under the protocol.
unsafe impl Send for Shared {}

/// The process-wide team.
pub struct Team {
    shared: &'static Shared,
    workers: usize,
    caller: Mutex<()>,
}

thread_local! {
    /// True on team workers and on a caller while its job runs: a nested
    /// call runs serially.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// The job slot's value before the first job.
static NOOP: fn(usize) = |_| {};

fn threads_wanted() -> usize {
    // 0 / unset = one per core; clamped to four per core (with a warning)
    rlx_ir::env::threads("RLX_NUM_THREADS")
}

fn spin_budget() -> Duration {
    Duration::from_micros(rlx_ir::env::int_at_most(
        "RLX_SPIN_US",
        rlx_ir::env::MAX_SPIN_US,
    ))
}

impl Team {
    /// The team, started on first use with `RLX_NUM_THREADS − 1` workers
    /// (one per core besides the caller by default).
    pub fn get() -> &'static Team {
        static TEAM: OnceLock<Team> = OnceLock::new();
        TEAM.get_or_init(|| Team::start(threads_wanted().saturating_sub(1), spin_budget()))
    }

    fn start(workers: usize, spin: Duration) -> Team {
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            state: AtomicU64::new(0),
            job: UnsafeCell::new(Job {
                f: &NOOP as &(dyn Fn(usize) + Sync),
                chunks: 0,
            }),
            next: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
            spin,
        }));
        let mut started = 0;
        for i in 0..workers {
            let spawned = std::thread::Builder::new()
                .name(format!("rlx-team-{i}"))
                .spawn(move || worker(shared));
            // a thread that cannot start only makes the team smaller
            if spawned.is_ok() {
                started += 1;
            }
        }
        Team {
            shared,
            workers: started,
            caller: Mutex::new(()),
        }
    }

    /// Threads a job can use: the workers plus the caller.
    pub fn threads(&self) -> usize {
        self.workers + 1
    }

    /// Run `f(c)` for every chunk `c` in `0..chunks`, on the caller and the
    /// workers; returns when all chunks are done. Runs serially when the
    /// team has no workers, is busy with another caller's job, or is called
    /// from inside a job. A panic in a chunk is re-raised here.
    pub fn for_each(&self, chunks: usize, f: &(dyn Fn(usize) + Sync)) {
        if chunks <= 1 || self.workers == 0 || INSIDE.with(Cell::get) {
            return (0..chunks).for_each(f);
        }
        let _guard = match self.caller.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return (0..chunks).for_each(f),
        };
        let sh = self.shared;
        // SAFETY: we hold `caller`, and the previous job was closed with no
        // worker inside, so nobody reads `job` now. The erased lifetime is
        // sound because no worker can reach `f` after this call returns.
        unsafe {
            let f: *const (dyn Fn(usize) + Sync + '_) = f;
            *sh.job.get() = Job {
                f: std::mem::transmute::<
                    *const (dyn Fn(usize) + Sync + '_),
                    *const (dyn Fn(usize) + Sync + 'static),
                >(f),
                chunks,
            };
        }
        sh.next.store(0, Ordering::Relaxed);
        let generation = (sh.state.load(Ordering::Relaxed) >> GEN_SHIFT).wrapping_add(1);
        // SeqCst store, then SeqCst load of `sleepers`: a worker counts
        // itself (SeqCst) before its last look at `state`, so either it sees
        // this job or we see it and wake it. Taking `sleep_lock` before the
        // notify orders it after the worker's wait (it holds the lock from
        // counting itself until it waits). No lock when nobody sleeps,
        // which is every job of a busy decode step.
        sh.state
            .store((generation << GEN_SHIFT) | OPEN, Ordering::SeqCst);
        if sh.sleepers.load(Ordering::SeqCst) > 0 {
            let _lock = sh.sleep_lock.lock().unwrap_or_else(|p| p.into_inner());
            sh.wake.notify_all();
        }
        INSIDE.with(|c| c.set(true));
        let mine = catch_unwind(AssertUnwindSafe(|| run_chunks(sh, f, chunks)));
        INSIDE.with(|c| c.set(false));
        // close, then wait for the workers that entered
        let mut s = sh.state.fetch_and(!OPEN, Ordering::AcqRel) & !OPEN;
        while s & ACTIVE != 0 {
            std::hint::spin_loop();
            s = sh.state.load(Ordering::Acquire);
        }
        let worker_panicked = sh.panicked.swap(false, Ordering::AcqRel);
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if worker_panicked {
            panic!("a parallel chunk panicked on a team worker");
        }
    }
}

fn run_chunks(sh: &Shared, f: &(dyn Fn(usize) + Sync), chunks: usize) {
    loop {
        let c = sh.next.fetch_add(1, Ordering::Relaxed);
        if c >= chunks {
            break;
        }
        f(c);
    }
}

/// A worker: wait for a new open job, enter it, take chunks, leave.
fn worker(sh: &'static Shared) {
    INSIDE.with(|c| c.set(true));
    let mut seen = 0u64;
    loop {
        let s = wait_for_job(sh, seen);
        seen = s >> GEN_SHIFT;
        // enter: add ourselves while the job of generation `seen` is open
        let mut cur = s;
        let entered = loop {
            if cur & OPEN == 0 || cur >> GEN_SHIFT != seen {
                break false;
            }
            match sh
                .state
                .compare_exchange_weak(cur, cur + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break true,
                Err(now) => cur = now,
            }
        };
        if !entered {
            continue;
        }
        // SAFETY: we are inside an open job (see the module protocol): the
        // caller keeps `job` and its closure alive until we leave.
        let job = unsafe { *sh.job.get() };
        let f = unsafe { &*job.f };
        if catch_unwind(AssertUnwindSafe(|| run_chunks(sh, f, job.chunks))).is_err() {
            sh.panicked.store(true, Ordering::Release);
        }
        sh.state.fetch_sub(1, Ordering::Release);
    }
}

/// The state once a job newer than generation `seen` is open: spin for the
/// budget, then sleep until the caller wakes us.
fn wait_for_job(sh: &Shared, seen: u64) -> u64 {
    let fresh = |s: u64| s & OPEN != 0 && s >> GEN_SHIFT != seen;
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let s = sh.state.load(Ordering::Acquire);
        if fresh(s) {
            return s;
        }
        std::hint::spin_loop();
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(256) && start.elapsed() >= sh.spin {
            break;
        }
    }
    let mut lock = sh.sleep_lock.lock().unwrap_or_else(|p| p.into_inner());
    sh.sleepers.fetch_add(1, Ordering::SeqCst);
    let s = loop {
        let s = sh.state.load(Ordering::SeqCst);
        if fresh(s) {
            break s;
        }
        lock = sh.wake.wait(lock).unwrap_or_else(|p| p.into_inner());
    };
    sh.sleepers.fetch_sub(1, Ordering::SeqCst);
    drop(lock);
    s
}

/// Run `f(c)` for `c` in `0..chunks` on the process-wide [`Team`].
pub fn for_each(chunks: usize, f: &(dyn Fn(usize) + Sync)) {
    Team::get().for_each(chunks, f);
}

/// Threads the process-wide team uses (workers plus the caller).
pub fn threads() -> usize {
    Team::get().threads()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chunk_runs_exactly_once() {
        let team = Team::start(3, Duration::from_micros(200));
        for chunks in [0usize, 1, 2, 3, 7, 64, 1000] {
            let hits: Vec<AtomicUsize> = (0..chunks).map(|_| AtomicUsize::new(0)).collect();
            team.for_each(chunks, &|c| {
                hits[c].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "{chunks}"
            );
        }
    }

    #[test]
    fn many_jobs_after_sleeping_workers() {
        // a zero spin budget sends the workers to sleep between jobs, so
        // every job goes through the wake-up path
        let team = Team::start(2, Duration::ZERO);
        let total = AtomicUsize::new(0);
        for j in 0..2000usize {
            team.for_each(5, &|c| {
                total.fetch_add(c + j, Ordering::Relaxed);
            });
            if j % 500 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let want: usize = (0..2000usize).map(|j| 10 + 5 * j).sum();
        assert_eq!(total.load(Ordering::Relaxed), want);
    }

    #[test]
    fn nested_and_concurrent_calls_run_serially() {
        let team: &'static Team = Box::leak(Box::new(Team::start(1, Duration::from_micros(50))));
        let sum = AtomicUsize::new(0);
        team.for_each(4, &|_| {
            team.for_each(3, &|c| {
                sum.fetch_add(c + 1, Ordering::Relaxed);
            });
        });
        assert_eq!(sum.load(Ordering::Relaxed), 4 * 6);
        let handles: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    let s = AtomicUsize::new(0);
                    for _ in 0..200 {
                        team.for_each(8, &|c| {
                            s.fetch_add(c, Ordering::Relaxed);
                        });
                    }
                    s.load(Ordering::Relaxed)
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().ok(), Some(200 * 28));
        }
    }

    #[test]
    fn a_panicking_chunk_is_reraised_and_the_team_survives() {
        let team = Team::start(2, Duration::from_micros(100));
        let r = catch_unwind(AssertUnwindSafe(|| {
            team.for_each(64, &|c| {
                if c == 40 {
                    panic!("chunk 40");
                }
            })
        }));
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        team.for_each(16, &|_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 16);
    }
}
