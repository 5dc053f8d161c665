//! The simulator itself: shim features on odd threadgroup sizes, and the
//! errors it promises (divergent barrier, deadlock, buffer overrun, compile
//! error, bad bindings). These tests need clang++ (scripts/setup.sh).

use msl_sim::{Binding, Error, Grid, Lanes, Library};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn kernel_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/kernels")
        .join(name)
}

fn smoke_lib() -> Library {
    Library::compile(kernel_file("smoke.metal")).unwrap_or_else(|e| panic!("{e}"))
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn u32s(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn smoke_kernel_on_partial_simdgroups() {
    let lib = smoke_lib();
    assert_eq!(
        lib.kernels(),
        [
            "smoke",
            "divergent_barrier",
            "spin_forever",
            "overrun",
            "racy",
            "split_barriers",
            "barrier_vs_simd",
            "flag_handoff",
            "flag_never_set"
        ]
    );
    for (groups, tpg) in [(1u32, 1u32), (2, 33), (3, 64), (1, 100)] {
        let n = (groups * tpg) as usize;
        let mut args = Vec::new();
        args.extend(n.to_le_bytes()[..4].iter());
        args.extend(2.0f32.to_le_bytes());
        let mut out4 = vec![0u8; n * 16];
        let mut bits = vec![0u8; n * 4];
        let mut count = vec![0u8; 4];
        let mut scan = vec![0u8; n * 4];
        let mut red = vec![0u8; groups as usize * 12];
        lib.dispatch(
            "smoke",
            &args,
            &mut [&mut out4, &mut bits, &mut count, &mut scan, &mut red],
            Grid::d1(groups, tpg),
            &[tpg as usize * 4],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let out4 = f32s(&out4);
        let (bits, scan, red) = (u32s(&bits), f32s(&scan), f32s(&red));
        assert_eq!(u32s(&count), [n as u32]);
        for g in 0..n {
            let lid = g % tpg as usize;
            let lane = lid % 32;
            let sg_len = (tpg as usize - lid / 32 * 32).min(32);
            assert_eq!(
                &out4[g * 4..g * 4 + 4],
                [g as f32 * 2.0 + 0.5, 6.5, 4.5, 2.5]
            );
            assert_eq!(bits[g], (g as f32).to_bits());
            let down = if lane + 1 < sg_len { 1.0 } else { 0.0 };
            assert_eq!(scan[g], lane as f32 + 100.0 * down, "gid {g} tpg {tpg}");
        }
        for t in 0..groups as usize {
            let lo = t * tpg as usize;
            let sum: usize = (lo..lo + tpg as usize).sum();
            assert_eq!(red[t * 3], sum as f32, "group {t}");
            assert_eq!(red[t * 3 + 1], tpg as f32);
            assert_eq!(red[t * 3 + 2], (tpg - 1) as f32);
        }
    }
}

/// Every output of the smoke kernel, run with `lanes`.
fn smoke_outputs(lanes: Lanes, groups: u32, tpg: u32) -> Vec<Vec<u8>> {
    let lib = smoke_lib().with_lanes(lanes);
    let n = (groups * tpg) as usize;
    let mut args = n.to_le_bytes()[..4].to_vec();
    args.extend(2.0f32.to_le_bytes());
    let mut outs = vec![
        vec![0u8; n * 16],
        vec![0u8; n * 4],
        vec![0u8; 4],
        vec![0u8; n * 4],
        vec![0u8; groups as usize * 12],
    ];
    let mut bufs: Vec<&mut [u8]> = outs.iter_mut().map(|b| b.as_mut_slice()).collect();
    lib.dispatch(
        "smoke",
        &args,
        &mut bufs,
        Grid::d1(groups, tpg),
        &[tpg as usize * 4],
    )
    .unwrap_or_else(|e| panic!("{lanes:?}: {e}"));
    outs
}

#[test]
fn cooperative_and_threaded_lanes_agree() {
    for (groups, tpg) in [(1u32, 1u32), (3, 33), (5, 128), (2, 1024)] {
        let coop = smoke_outputs(Lanes::Coop, groups, tpg);
        let threads = smoke_outputs(Lanes::Threads, groups, tpg);
        assert_eq!(coop, threads, "{groups} x {tpg}");
        // and they computed something: the atomic count of every lane
        assert_eq!(u32s(&coop[2]), [groups * tpg]);
    }
}

#[test]
fn a_lane_spinning_on_an_atomic_lets_the_others_run() {
    for lanes in [Lanes::Coop, Lanes::Threads] {
        let lib = smoke_lib().with_lanes(lanes);
        let (mut flag, mut out) = (vec![0u8; 4], vec![0u8; 64 * 4]);
        lib.dispatch(
            "flag_handoff",
            &[],
            &mut [&mut flag, &mut out],
            Grid::d1(1, 64),
            &[],
        )
        .unwrap_or_else(|e| panic!("{lanes:?}: {e}"));
        let want: Vec<u32> = (0..64).map(|l| 7 + l).collect();
        assert_eq!(u32s(&out), want, "{lanes:?}");
    }
}

#[test]
fn every_lane_waiting_is_a_deadlock() {
    // cooperative lanes see at once that no lane can go on; threaded lanes
    // leave it to the watchdog. Either way it is a Timeout naming the lanes.
    for lanes in [Lanes::Coop, Lanes::Threads] {
        let lib = smoke_lib()
            .with_lanes(lanes)
            .with_timeout(Duration::from_millis(1000));
        let mut x = vec![0u8; 32 * 4];
        let t = Instant::now();
        let e = lib
            .dispatch("barrier_vs_simd", &[], &mut [&mut x], Grid::d1(1, 32), &[])
            .unwrap_err();
        let took = t.elapsed();
        let msg = e.to_string();
        assert!(matches!(e, Error::Timeout { .. }), "{lanes:?}: {msg}");
        assert!(
            msg.contains("lanes 0-15 at threadgroup_barrier")
                && msg.contains("lanes 16-31 in a simd function"),
            "{lanes:?}: {msg}"
        );
        // sanitizer runs always use threads
        match lib.lanes() {
            Lanes::Coop => {
                assert!(msg.contains("deadlock: every lane"), "{msg}");
                assert!(took < Duration::from_millis(500), "{took:?}");
            }
            Lanes::Threads => assert!(took >= Duration::from_millis(1000), "{took:?}"),
        }
    }
}

#[test]
fn lanes_spinning_on_a_flag_nobody_sets_are_stopped() {
    // no barrier, simd call or hand-over completes: the progress watchdog
    // stops the dispatch, and the spinning lanes unwind at their next atomic
    for lanes in [Lanes::Coop, Lanes::Threads] {
        let lib = smoke_lib()
            .with_lanes(lanes)
            .with_timeout(Duration::from_millis(300));
        let mut flag = vec![0u8; 4];
        let t = Instant::now();
        let e = lib
            .dispatch(
                "flag_never_set",
                &[],
                &mut [&mut flag],
                Grid::d1(2, 96),
                &[],
            )
            .unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        let msg = e.to_string();
        assert!(matches!(e, Error::Timeout { .. }), "{lanes:?}: {msg}");
        assert!(msg.contains("300 ms"), "{lanes:?}: {msg}");
        // with fibers lane 0 has surely returned; threads (slow to start
        // under a sanitizer) may all still be starting when the window ends
        if matches!(lib.lanes(), Lanes::Coop) {
            assert!(msg.contains("lanes 0 returned"), "{lanes:?}: {msg}");
        }
        // the library still works
        let (mut flag, mut out) = (vec![0u8; 4], vec![0u8; 8 * 4]);
        lib.dispatch(
            "flag_handoff",
            &[],
            &mut [&mut flag, &mut out],
            Grid::d1(1, 8),
            &[],
        )
        .unwrap_or_else(|e| panic!("{lanes:?}: {e}"));
    }
}

#[test]
fn divergent_barrier_is_an_error_naming_the_line() {
    let lib = smoke_lib();
    let mut x = vec![0u8; 32 * 4];
    let t = Instant::now();
    let e = lib
        .dispatch(
            "divergent_barrier",
            &[],
            &mut [&mut x],
            Grid::d1(1, 32),
            &[],
        )
        .unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(5));
    let msg = e.to_string();
    assert!(matches!(e, Error::Kernel { .. }), "{msg}");
    assert!(msg.starts_with("[divergent_barrier]"), "{msg}");
    assert!(
        msg.contains("line 66") && msg.contains("not reached by every lane"),
        "{msg}"
    );
}

#[test]
fn lanes_at_different_barriers_are_an_error() {
    let lib = smoke_lib();
    let mut x = vec![0u8; 32 * 4];
    let e = lib
        .dispatch("split_barriers", &[], &mut [&mut x], Grid::d1(1, 32), &[])
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Kernel { .. }), "{msg}");
    assert!(
        msg.contains("different threadgroup_barriers (lines"),
        "{msg}"
    );
}

#[test]
fn long_dispatches_that_make_progress_run_to_the_end() {
    // the watchdog measures time without progress (barriers, simd
    // exchanges, group hand-overs), not the length of the dispatch: grow
    // the grid until one dispatch outlasts the window three times over.
    // The window is 1 s, not less: the other tests of this binary run on
    // the same (2) cores, and at 200 ms a lane starved by them tripped the
    // watchdog on a 2-core EPYC
    let window = Duration::from_millis(1000);
    let lib = smoke_lib().with_timeout(window);
    let mut groups = 512u32;
    loop {
        let n = groups * 32;
        let mut x = vec![0u8; n as usize * 4];
        let t = Instant::now();
        lib.dispatch(
            "overrun",
            &n.to_le_bytes(),
            &mut [&mut x],
            Grid::d1(groups, 32),
            &[],
        )
        .unwrap_or_else(|e| panic!("{groups} groups: {e}"));
        let ones = x.chunks(4).filter(|c| c == &1.0f32.to_le_bytes()).count();
        assert_eq!(ones, n as usize);
        if t.elapsed() > 3 * window {
            break;
        }
        groups *= 2;
        assert!(groups <= 1 << 22, "dispatches stay faster than {window:?}");
    }
}

#[test]
fn deadlock_is_stopped_by_the_watchdog() {
    let lib = smoke_lib().with_timeout(Duration::from_millis(1500));
    let mut flag = vec![0u8; 4];
    let t = Instant::now();
    let e = lib
        .dispatch("spin_forever", &[], &mut [&mut flag], Grid::d1(1, 40), &[])
        .unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(e.to_string().contains("1500 ms"), "{e}");
    // the library is still usable afterwards
    let mut x = vec![0u8; 64];
    lib.dispatch(
        "overrun",
        &3u32.to_le_bytes(),
        &mut [&mut x],
        Grid::d1(1, 4),
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn write_past_the_end_is_caught() {
    if std::env::var_os("MSL_SIM_SANITIZE").is_some() {
        return; // no guard bytes under sanitizers (ASan reports it instead)
    }
    let lib = smoke_lib();
    let mut x = vec![0u8; 4 * 4];
    let e = lib
        .dispatch(
            "overrun",
            &4u32.to_le_bytes(),
            &mut [&mut x],
            Grid::d1(1, 8),
            &[],
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("wrote past the end of [[buffer(1)]]"),
        "{e}"
    );
}

#[test]
fn compile_error_names_the_file_and_clang_message() {
    let e = Library::compile(kernel_file("broken.metal")).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Compile { .. }), "{msg}");
    assert!(
        msg.starts_with('[') && msg.contains("broken.metal]"),
        "{msg}"
    );
    // clang points at the .metal line; erf is absent from Metal and the shim
    assert!(msg.contains("broken.metal:7:"), "{msg}");
    assert!(msg.contains("undeclared_name"), "{msg}");
    assert!(msg.contains("erf"), "{msg}");
}

#[test]
fn bad_bindings_and_names_are_errors() {
    let lib = smoke_lib();
    let e = lib
        .dispatch("nope", &[], &mut [], Grid::d1(1, 1), &[])
        .unwrap_err();
    assert!(e.to_string().contains("smoke, divergent_barrier"), "{e}");
    // smoke reads buffer(5) and threadgroup(0)
    let mut a = vec![0u8; 64];
    let e = lib
        .dispatch("smoke", &[0; 8], &mut [&mut a], Grid::d1(1, 1), &[4])
        .unwrap_err();
    assert!(e.to_string().contains("[[buffer(2)]] is not bound"), "{e}");
    // args struct too short
    let e = lib
        .dispatch("overrun", &[0; 2], &mut [&mut a], Grid::d1(1, 1), &[])
        .unwrap_err();
    assert!(e.to_string().contains("4-byte struct"), "{e}");
    let e = lib
        .dispatch("overrun", &[0; 4], &mut [&mut a], Grid::d1(1, 2000), &[])
        .unwrap_err();
    assert!(e.to_string().contains("1..=1024"), "{e}");
    // Apple GPUs have 32 KiB of threadgroup memory
    let (mut b1, mut b2, mut b3, mut b4, mut b5) = (
        vec![0u8; 16],
        vec![0u8; 4],
        vec![0u8; 4],
        vec![0u8; 4],
        vec![0u8; 12],
    );
    let e = lib
        .dispatch(
            "smoke",
            &[1, 0, 0, 0, 0, 0, 0, 0],
            &mut [&mut b1, &mut b2, &mut b3, &mut b4, &mut b5],
            Grid::d1(1, 1),
            &[40000],
        )
        .unwrap_err();
    assert!(e.to_string().contains("exceeds 32 KiB"), "{e}");
}

/// Negative controls for `make sanitize` (run there with `--ignored`, each
/// expected to fail with a sanitizer report): an out-of-bounds write under
/// AddressSanitizer, a threadgroup-memory race under ThreadSanitizer.
#[test]
#[ignore = "negative control: only meaningful under make sanitize"]
fn sanitizer_control_overrun() {
    let lib = smoke_lib();
    let mut x = vec![0u8; 4 * 4];
    lib.dispatch(
        "overrun",
        &4u32.to_le_bytes(),
        &mut [&mut x],
        Grid::d1(1, 8),
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// See [`sanitizer_control_overrun`].
#[test]
#[ignore = "negative control: only meaningful under make sanitize"]
fn sanitizer_control_race() {
    let lib = smoke_lib();
    let mut x = vec![0u8; 64 * 4];
    for _ in 0..4 {
        lib.dispatch("racy", &[], &mut [&mut x], Grid::d1(1, 64), &[])
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn simdgroup_matrices_multiply_accumulate() {
    let lib =
        Library::compile(kernel_file("simdgroup_matrix.metal")).unwrap_or_else(|e| panic!("{e}"));
    let val = |i: usize, s: usize| ((i * 7 + s * 3) % 11) as f32 - 5.0;
    for groups_of_32 in [1usize, 2] {
        let a: Vec<f32> = (0..64 * groups_of_32).map(|i| val(i, 1)).collect();
        let b: Vec<f32> = (0..64).map(|i| val(i, 2)).collect();
        let c: Vec<f32> = (0..64).map(|i| val(i, 3)).collect();
        let enc = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let (mut ab, mut bb, mut cb) = (enc(&a), enc(&b), enc(&c));
        let mut d = vec![0u8; 256 * groups_of_32];
        let mut d2 = vec![0u8; 256 * groups_of_32];
        let mut binds = vec![
            Binding::Buffer(&mut ab),
            Binding::Buffer(&mut bb),
            Binding::Buffer(&mut cb),
            Binding::Buffer(&mut d),
            Binding::Buffer(&mut d2),
        ];
        lib.dispatch_bindings(
            "mma",
            &mut binds,
            Grid::d1(1, 32 * groups_of_32 as u32),
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let (d, d2) = (f32s(&d), f32s(&d2));
        for s in 0..groups_of_32 {
            for r in 0..8 {
                for col in 0..8 {
                    let p: f32 = (0..8).map(|k| a[s * 64 + r * 8 + k] * b[k * 8 + col]).sum();
                    assert_eq!(
                        d[s * 64 + r * 8 + col],
                        p + c[r * 8 + col],
                        "d {s} {r} {col}"
                    );
                    assert_eq!(d2[s * 64 + r * 8 + col], p, "d2 {s} {r} {col}");
                }
            }
        }
    }
}
