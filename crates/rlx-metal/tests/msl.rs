//! Every Metal kernel family run through msl-sim (clang + the metal_stdlib
//! shim, on the CPU) and compared with a plain f64 Rust reference, f32 and
//! f16, on odd sizes and partial simdgroups / threadgroups. Needs clang++
//! (scripts/setup.sh installs it); without it these tests fail.

mod msl {
    pub mod attention;
    pub mod backward;
    pub mod backward_attention;
    pub mod binary;
    pub mod common;
    pub mod conv;
    pub mod decode_fused;
    pub mod elementwise;
    pub mod fused_mlp;
    pub mod gather_elements;
    pub mod gdn;
    pub mod indexing;
    pub mod matmul;
    pub mod moe;
    pub mod norm;
    pub mod norm_fused;
    pub mod quant;
    pub mod quant_t;
    pub mod recurrent;
    pub mod reduce;
    pub mod region;
    pub mod rng;
    pub mod rope;
    pub mod shape;
    pub mod signal;
    pub mod softmax;
    pub mod spd;
    pub mod spd_common;
    pub mod spd_mean;
    pub mod splat;
    pub mod ssm;
    pub mod vision;
}
