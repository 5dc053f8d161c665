//! A seeded mutation fuzzer for graph deserialisation (`Graph::from_json`:
//! serde plus the IR verifier and shape inference), run as a test.
//!
//! cargo-fuzz needs a nightly toolchain; this harness needs nothing but
//! std: a xorshift generator mutates the committed seed graphs of
//! `fuzz/corpus/graph_json/` (bit flips, interesting integers and JSON
//! tokens over number literals, span deletion / duplication, splicing,
//! deep nesting) and every mutant must either load or return an
//! `IrError`: a panic (arithmetic overflow in debug builds included) or a
//! single input taking more than two seconds fails the test.
//!
//! `cargo test -p rlx-ir --test fuzz_graph_json` runs 20 000 inputs;
//! `RLX_FUZZ_ITERS=1000000 RLX_FUZZ_SEED=7 cargo test --release -p rlx-ir
//! --test fuzz_graph_json -- --nocapture` is a campaign.

use rlx_ir::Graph;
use std::panic;
use std::time::{Duration, Instant};

const SEEDS: [&str; 3] = [
    include_str!("../../../fuzz/corpus/graph_json/matmul.json"),
    include_str!("../../../fuzz/corpus/graph_json/sym.json"),
    include_str!("../../../fuzz/corpus/graph_json/ops.json"),
];

const TOKENS: [&str; 22] = [
    "0",
    "-1",
    "1",
    "2.5",
    "1e400",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "4611686018427387904",
    "null",
    "true",
    "[]",
    "{}",
    "\"\"",
    "\"n\"",
    "[[[[[[[[[[[[[[[[[[[[",
    "{\"Sym\":\"n\"}",
    "{\"Fixed\":0}",
    "\"f16\"",
    "\"u8\"",
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Byte spans of the number literals of `s`.
fn numbers(s: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if s[i].is_ascii_digit() || (s[i] == b'-' && s.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            let j = i + 1 + s[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
            out.push((i, j));
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

fn mutate(rng: &mut Rng, input: &[u8], corpus: &[String]) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        if b.is_empty() {
            b.extend_from_slice(b"{}");
        }
        let i = rng.below(b.len());
        match rng.below(8) {
            0 => b[i] ^= 1 << rng.below(8),
            1 | 2 => {
                let nums = numbers(&b);
                if !nums.is_empty() {
                    let (s, e) = nums[rng.below(nums.len())];
                    let t = TOKENS[rng.below(TOKENS.len())];
                    b.splice(s..e, t.bytes());
                }
            }
            3 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                b.splice(i..i, t.bytes());
            }
            4 => {
                let e = (i + 1 + rng.below(64)).min(b.len());
                b.drain(i..e);
            }
            5 => {
                let j = rng.below(b.len());
                let e = (j + 1 + rng.below(64)).min(b.len());
                let chunk = b[j..e].to_vec();
                b.splice(i..i, chunk);
            }
            6 => {
                let other = corpus[rng.below(corpus.len())].as_bytes();
                let j = rng.below(other.len());
                b.truncate(i);
                b.extend_from_slice(&other[j..]);
            }
            _ => {
                let depth = 1 + rng.below(400);
                let open: Vec<u8> = std::iter::repeat_n(b'[', depth).collect();
                b.splice(i..i, open);
            }
        }
    }
    b
}

#[test]
fn graph_json_mutants_never_panic() {
    let iters: usize = std::env::var("RLX_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let seed: u64 = std::env::var("RLX_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed);
    for s in SEEDS {
        Graph::from_json(s).expect("every seed is a valid graph");
    }
    let mut rng = Rng(seed | 1);
    // accepted mutants join the seeds as parents (they still parse)
    let mut corpus: Vec<String> = SEEDS.iter().map(|s| s.to_string()).collect();
    let (mut ok, mut rejected) = (0usize, 0usize);
    let hook = panic::take_hook();
    panic::set_hook(Box::new(|_| {}));
    for it in 0..iters {
        let base = corpus[rng.below(corpus.len())].as_bytes().to_vec();
        let m = mutate(&mut rng, &base, &corpus);
        let text = String::from_utf8_lossy(&m).into_owned();
        let t0 = Instant::now();
        let r = panic::catch_unwind(|| Graph::from_json(&text).map(|g| g.to_json()));
        let dt = t0.elapsed();
        match r {
            Ok(Ok(_)) => {
                ok += 1;
                if corpus.len() < SEEDS.len() + 64 {
                    corpus.push(text.clone());
                }
            }
            Ok(Err(_)) => rejected += 1,
            Err(_) => {
                panic::set_hook(hook);
                panic!("iteration {it}: Graph::from_json panicked on:\n{text}");
            }
        }
        assert!(
            dt < Duration::from_secs(2),
            "iteration {it}: {dt:?} on:\n{text}"
        );
    }
    panic::set_hook(hook);
    println!("graph_json: {iters} inputs, {ok} accepted, {rejected} rejected, 0 panics");
    assert_eq!(ok + rejected, iters);
}
