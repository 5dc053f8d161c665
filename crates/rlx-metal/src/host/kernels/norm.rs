//! norm kernels (stub).
