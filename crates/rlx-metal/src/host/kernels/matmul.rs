//! matmul kernels (stub).
