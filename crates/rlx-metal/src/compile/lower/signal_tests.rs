//! Lowering of the signal family: thunk fields, exact io ranges, dtype
//! conversions around the f32 log-mel / Welch thunks, c64 FFT rows.

use super::super::{lower, CompileOptions, Compiled};
use crate::thunk::io::ByteRange;
use crate::thunk::Thunk;
use rlx_ir::op::FftNorm;
use rlx_ir::{DType, Graph, NodeId, Op, Shape};

fn leaf(g: &mut Graph, name: &str, d: &[usize], dt: DType) -> NodeId {
    g.add(
        Op::Input {
            shape: Shape::of(d, dt),
        },
        &[],
        name,
    )
    .unwrap()
}

fn lower1(g: &Graph) -> Compiled {
    lower(g, &CompileOptions::default()).unwrap()
}

fn range(c: &Compiled, id: NodeId) -> ByteRange {
    ByteRange::new(c.offsets[id], c.shapes[id].size_bytes().unwrap())
}

#[test]
fn fft_lowers_per_dtype() {
    for (dt, last, n) in [
        (DType::F32, 14, 7),
        (DType::F64, 200, 100),
        (DType::F16, 4, 2),
        (DType::C64, 257, 257),
    ] {
        let mut g = Graph::new("fft");
        let x = leaf(&mut g, "x", &[2, 3, last], dt);
        let op = Op::Fft {
            inverse: true,
            norm: FftNorm::Ortho,
        };
        let y = g.add(op, &[x], "y").unwrap();
        g.set_outputs(&[y]).unwrap();
        let c = lower1(&g);
        assert_eq!(c.schedule.thunks.len(), 1, "{dt}");
        let Thunk::Fft1d(t) = &c.schedule.thunks[0] else {
            panic!("{:?}", c.schedule.thunks[0]);
        };
        assert_eq!((t.outer, t.n_complex, t.norm_tag), (6, n, 1));
        assert!(t.inverse && !t.real_input);
        assert_eq!(t.dtype, dt);
        let io = c.schedule.thunks[0].io();
        assert_eq!(io.reads, vec![range(&c, x)]);
        assert_eq!(io.writes, vec![range(&c, y)]);
    }
}

#[test]
fn bf16_fft_goes_through_f32() {
    let mut g = Graph::new("fft");
    let x = leaf(&mut g, "x", &[3, 8], DType::BF16);
    let op = Op::Fft {
        inverse: false,
        norm: FftNorm::Backward,
    };
    let y = g.add(op, &[x], "y").unwrap();
    g.set_outputs(&[y]).unwrap();
    let c = lower1(&g);
    let names: Vec<&str> = c.schedule.thunks.iter().map(|t| t.name()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert_eq!(names[1], "fft1d");
    let Thunk::Fft1d(t) = &c.schedule.thunks[1] else {
        unreachable!()
    };
    assert_eq!(t.dtype, DType::F32);
}

#[test]
fn log_mel_and_welch_fields_and_io() {
    let mut g = Graph::new("mel");
    let (rows, n_fft, bins, mels) = (6, 16, 9, 4);
    let spec = leaf(&mut g, "spec", &[rows, 2 * n_fft], DType::F32);
    let filt = leaf(&mut g, "filters", &[mels, bins], DType::F32);
    let m = g.add(Op::LogMel { n_fft }, &[spec, filt], "m").unwrap();
    let op = Op::WelchPeaks {
        n_fft,
        n_segments: 3,
        k: 4,
    };
    let w = g.add(op, &[spec], "w").unwrap();
    g.set_outputs(&[m, w]).unwrap();
    let c = lower1(&g);
    let [Thunk::LogMel(lm), Thunk::WelchPeaks(wp)] = &c.schedule.thunks[..] else {
        panic!("{:?}", c.schedule.thunks);
    };
    assert_eq!((lm.outer, lm.n_fft, lm.n_bins, lm.n_mels), (6, 16, 9, 4));
    assert_eq!(
        (wp.welch_batch, wp.n_fft, wp.n_segments, wp.k),
        (2, 16, 3, 4)
    );
    // log-mel reads only bins [0, 9) and [16, 25) of each 32-wide row
    let io = c.schedule.thunks[0].io();
    let s0 = c.offsets[spec];
    assert_eq!(io.reads[0], ByteRange::new(s0, 9 * 4));
    assert_eq!(io.reads[1], ByteRange::new(s0 + 16 * 4, 9 * 4));
    assert_eq!(*io.reads.last().unwrap(), range(&c, filt));
    assert_eq!(io.writes, vec![range(&c, m)]);
    let io = c.schedule.thunks[1].io();
    assert_eq!(io.reads, vec![range(&c, spec)]);
    assert_eq!(io.writes, vec![range(&c, w)]);
}

#[test]
fn f16_log_mel_converts_and_casts_back() {
    let mut g = Graph::new("mel");
    let spec = leaf(&mut g, "spec", &[2, 8], DType::F16);
    let filt = leaf(&mut g, "filters", &[5, 3], DType::F16);
    let m = g.add(Op::LogMel { n_fft: 4 }, &[spec, filt], "m").unwrap();
    g.set_outputs(&[m]).unwrap();
    let c = lower1(&g);
    let names: Vec<&str> = c.schedule.thunks.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["cast", "cast", "log_mel", "cast"]);
}
