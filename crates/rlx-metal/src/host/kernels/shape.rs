//! shape kernels (stub).
