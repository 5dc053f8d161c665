//! Process-wide settings of the compiler and the host kernels: the pass
//! names `RLX_DISABLE_PASS` accepts and the int8-activation and AMX switches
//! of the quantised matmuls.

use pyo3::prelude::*;

/// Every name `RLX_DISABLE_PASS` accepts: the graph fusions, then the
/// thunk passes, each in running order.
#[pyfunction]
fn pass_names() -> Vec<String> {
    rlx_metal::compile::all_pass_names()
        .into_iter()
        .map(String::from)
        .collect()
}

/// Turns the host's int8-activation matmul paths on or off for the process
/// (`rlx_metal::host::kernels::quant::set_int8_activations`); returns the
/// previous setting.
#[pyfunction]
fn set_int8_activations(enabled: bool) -> bool {
    rlx_metal::host::kernels::quant::set_int8_activations(enabled)
}

/// Sets how many int8 code levels the host's int8-activation
/// matmuls for m ≤ 8 (decode and batched decode) use, 1 or 2 (prefill,
/// m > 8, always uses two)
/// (`rlx_metal::host::kernels::quant::set_int8_activation_levels`);
/// returns the previous count.
#[pyfunction]
fn set_int8_activation_levels(levels: u32) -> PyResult<u32> {
    if !(1..=2).contains(&levels) {
        return Err(crate::errors::RlxError::new_err(format!(
            "[set_int8_activation_levels] {levels} levels: need 1 or 2"
        )));
    }
    Ok(rlx_metal::host::kernels::quant::set_int8_activation_levels(
        levels,
    ))
}

/// Turns the host's integer-dot prefill GEMM (quantised matmuls with
/// m > 8, `rlx_metal::host::kernels::quant::set_int8_prefill_gemm`) on or
/// off for the process; off, they multiply f32 activations with f32
/// weight panels. Returns the previous setting.
#[pyfunction]
fn set_int8_prefill_gemm(enabled: bool) -> bool {
    rlx_metal::host::kernels::quant::set_int8_prefill_gemm(enabled)
}

/// Turns the AMX tile path of the host's prefill GEMM (m ≥ 16 on CPUs
/// with AMX-INT8, `rlx_metal::host::kernels::quant::set_amx_prefill_gemm`)
/// on or off for the process; off, the AVX-512 VNNI tiles run (same
/// results up to f32 summation order). Returns the previous setting.
#[pyfunction]
fn set_amx_prefill_gemm(enabled: bool) -> bool {
    rlx_metal::host::kernels::quant::set_amx_prefill_gemm(enabled)
}

/// Whether this machine can run the AMX tile path (AMX-INT8 present and
/// the tile state granted by the kernel), whatever the switch says.
#[pyfunction]
fn amx_available() -> bool {
    rlx_metal::host::kernels::quant::amx_available()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(pass_names, m)?)?;
    m.add_function(wrap_pyfunction!(set_int8_activations, m)?)?;
    m.add_function(wrap_pyfunction!(set_int8_activation_levels, m)?)?;
    m.add_function(wrap_pyfunction!(set_int8_prefill_gemm, m)?)?;
    m.add_function(wrap_pyfunction!(set_amx_prefill_gemm, m)?)?;
    m.add_function(wrap_pyfunction!(amx_available, m)?)?;
    Ok(())
}
