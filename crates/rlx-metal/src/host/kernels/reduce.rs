//! reduce kernels (stub).
