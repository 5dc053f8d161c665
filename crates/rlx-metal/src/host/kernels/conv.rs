//! conv kernels (stub).
