//! Tests of the ONNX indexing kernels against explicit loops.

use super::*;

fn iota(n: usize) -> Vec<u32> {
    (0..n as u32).map(|x| x * 3 + 1).collect()
}

#[test]
fn scatter_nd_kv_rows_in_place_and_copied() {
    // a [C=6, kvd=4] cache, two rows written at 2 and 3
    let (c, kvd) = (6usize, 4usize);
    let data = iota(c * kvd);
    let upd: Vec<u32> = (100..108).collect();
    let idx = [2i32, 3];
    let mut want = data.clone();
    want[2 * kvd..4 * kvd].copy_from_slice(&upd);

    let mut copied = vec![0u32; c * kvd];
    scatter_nd(Some(&data), &idx, &upd, &mut copied, &[c, kvd], &[2, 1]).unwrap();
    assert_eq!(copied, want);

    let mut cache = data.clone();
    scatter_nd(None, &idx, &upd, &mut cache, &[c, kvd], &[2, 1]).unwrap();
    assert_eq!(cache, want);

    // negative index counts from the end; 2-byte words
    let mut c16: Vec<u16> = data.iter().map(|&x| x as u16).collect();
    let u16s: Vec<u16> = (7..11).collect();
    scatter_nd(None, &[-1], &u16s, &mut c16, &[c, kvd], &[1, 1]).unwrap();
    assert_eq!(&c16[5 * kvd..], &u16s[..]);
}

#[test]
fn scatter_nd_full_tuples_and_duplicates() {
    // q = rank: single elements; the later duplicate wins
    let data = iota(12);
    let idx = [0i32, 1, 2, 3, 0, 1];
    let upd = [9u32, 8, 7];
    let mut out = vec![0u32; 12];
    scatter_nd(Some(&data), &idx, &upd, &mut out, &[3, 4], &[3, 2]).unwrap();
    let mut want = data.clone();
    want[11] = 8;
    want[1] = 7;
    assert_eq!(out, want);
}

#[test]
fn out_of_range_index_is_an_error_and_writes_nothing() {
    let mut cache = iota(8);
    let before = cache.clone();
    let e = scatter_nd(None, &[1, 4], &[0u32; 4], &mut cache, &[4, 2], &[2, 1]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "[scatter_nd] indices index 4 out of range 0..4"
    );
    assert_eq!(cache, before, "no row may be written when an index is bad");
    let e = gather_nd(&before, &[-5], &mut [0u32; 2], &[4, 2], &[1, 1], 0).unwrap_err();
    assert!(e.to_string().contains("index -5 out of range 0..4"), "{e}");
    let e = gather_elements(&before, &[0, 2], &mut [0u32; 2], &[4, 2], &[1, 2], 1).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("[gather_elements] indices index 2"),
        "{e}"
    );
    let e = scatter_elements(None, &[9], &[1u32], &mut cache, &[4, 2], &[1, 1], 0).unwrap_err();
    assert!(e.to_string().starts_with("[scatter_elements]"), "{e}");
    assert_eq!(cache, before);
}

#[test]
fn elements_ops_match_loops() {
    // data [3, 4], indices [2, 3] along axis 1 and along axis 0
    let data = iota(12);
    let idx = [3i32, 0, -1, 1, 1, 2];
    let mut got = vec![0u32; 6];
    gather_elements(&data, &idx, &mut got, &[3, 4], &[2, 3], 1).unwrap();
    let want: Vec<u32> = (0..6)
        .map(|p| {
            let (i, j) = (p / 3, p % 3);
            let k = idx[p].rem_euclid(4) as usize;
            let _ = j;
            data[i * 4 + k]
        })
        .collect();
    assert_eq!(got, want);

    let idx0 = [2i32, 0, 1, 0, 1, 2];
    gather_elements(&data, &idx0, &mut got, &[3, 4], &[2, 3], 0).unwrap();
    let want0: Vec<u32> = (0..6).map(|p| data[idx0[p] as usize * 4 + p % 3]).collect();
    assert_eq!(got, want0);

    let upd = [50u32, 51, 52, 53, 54, 55];
    let mut out = vec![0u32; 12];
    scatter_elements(Some(&data), &idx, &upd, &mut out, &[3, 4], &[2, 3], 1).unwrap();
    let mut want_s = data.clone();
    for p in 0..6 {
        want_s[(p / 3) * 4 + idx[p].rem_euclid(4) as usize] = upd[p];
    }
    assert_eq!(out, want_s);
}

#[test]
fn gather_nd_with_batch_dims() {
    // data [2, 3, 2], indices [2, 2, 1] with one batch dim → [2, 2, 2]
    let data = iota(12);
    let idx = [2i32, 0, 1, -1];
    let mut got = vec![0u32; 8];
    gather_nd(&data, &idx, &mut got, &[2, 3, 2], &[2, 2, 1], 1).unwrap();
    let rows = [(0usize, 2usize), (0, 0), (1, 1), (1, 2)];
    let want: Vec<u32> = rows
        .iter()
        .flat_map(|&(b, r)| data[(b * 3 + r) * 2..(b * 3 + r) * 2 + 2].to_vec())
        .collect();
    assert_eq!(got, want);
}
