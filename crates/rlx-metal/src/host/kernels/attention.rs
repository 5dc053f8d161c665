//! attention kernels (stub).
