//! Shape inference for recurrences and scans.
//!
//! * `SelectiveScan`: Mamba's selective SSM, Gu & Dao, "Mamba: Linear-Time
//!   Sequence Modeling with Selective State Spaces" (2023), Algorithm 2:
//!   per channel `h_t = exp(Δ_t·A)·h_{t−1} + Δ_t·B_t·x_t`, `y_t = C_t·h_t`.
//! * `Mamba2`: the SSD scan of Dao & Gu, "Transformers are SSMs" (ICML 2024),
//!   with a scalar `A` per head.
//! * `GatedDeltaNet`: Yang, Kautz & Hatamizadeh, "Gated Delta Networks:
//!   Improving Mamba2 with Delta Rule" (ICLR 2025, arXiv 2412.06464):
//!   `S_t = S_{t−1}·(α_t(I − β_t k_t k_tᵀ)) + β_t v_t k_tᵀ`, `o_t = S_t q_t`.
//! * `Lstm` / `Gru` / `Rnn`: PyTorch's `nn.LSTM` / `nn.GRU` / `nn.RNN`
//!   equations and gate orders, batch-first, with the weights of all layers
//!   and directions packed into one tensor each (layout on the op docs).
//! * `Scan`: a generic loop whose body is a graph, checked here in full.
//!
//! All sequence ops except `Scan` take float operands of one shared dtype;
//! `Scan` carries may be of any dtype (counters are legitimate carries).

use super::common::*;
use crate::error::{IrError, Result};
use crate::graph::Graph;
use crate::op::{Op, Recurrent};
use crate::shape::{Dim, Shape};

pub(super) fn infer(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    match op {
        Op::SelectiveScan => selective_scan(op, inputs),
        Op::Mamba2 {
            heads,
            head_dim,
            state_size,
        } => mamba2(op, inputs, *heads, *head_dim, *state_size),
        Op::GatedDeltaNet { heads, state_size } => gated_delta_net(op, inputs, *heads, *state_size),
        Op::Lstm { net } => recurrent(op, inputs, Cell::Lstm, net),
        Op::Gru { net } => recurrent(op, inputs, Cell::Gru, net),
        Op::Rnn { net, .. } => recurrent(op, inputs, Cell::Rnn, net),
        Op::Scan { scan: s, .. } => scan(op, inputs, &s.body, s.num_carry, s.length),
        _ => Err(wrong_family(op, "sequence")),
    }
}

/// Fail unless every operand is a float of the first operand's dtype.
fn all_float_same(op: &Op, inputs: &[&Shape], names: &[&str]) -> Result<()> {
    let Some(first) = inputs.first() else {
        return Ok(());
    };
    for (s, what) in inputs.iter().zip(names) {
        float_dtype(op, s, what)?;
        if s.dtype != first.dtype {
            return Err(IrError::dtype(
                op.name(),
                format!(
                    "{what} must have the dtype of {} ({}), got {s}",
                    names.first().unwrap_or(&"the first operand"),
                    first.dtype
                ),
            ));
        }
    }
    Ok(())
}

/// Fail unless `s` is `[b, seq, last]` with `b`, `seq` equal to `x`'s.
fn bsx(op: &Op, s: &Shape, x: &Shape, last: &Dim, what: &str) -> Result<()> {
    rank_is(op, s, 3, what)?;
    dims_equal(
        op,
        &s.dims[0],
        &x.dims[0],
        &format!("{what} batch vs x batch"),
    )?;
    dims_equal(
        op,
        &s.dims[1],
        &x.dims[1],
        &format!("{what} length vs x length"),
    )?;
    dims_equal(op, &s.dims[2], last, &format!("{what} last dim"))
}

fn selective_scan(op: &Op, inputs: &[&Shape]) -> Result<Shape> {
    arity_range(op, inputs, 5, 6)?;
    all_float_same(op, inputs, &["x", "delta", "a", "b", "c", "state"])?;
    let (x, delta, a, b, c) = (inputs[0], inputs[1], inputs[2], inputs[3], inputs[4]);
    rank_is(op, x, 3, "x")?;
    bsx(op, delta, x, &x.dims[2], "delta")?;
    rank_is(op, a, 2, "a")?;
    dims_equal(op, &a.dims[0], &x.dims[2], "a rows vs x channels")?;
    let n = &a.dims[1];
    bsx(op, b, x, n, "b")?;
    bsx(op, c, x, n, "c")?;
    if let Some(state) = inputs.get(5) {
        rank_is(op, state, 3, "state")?;
        dims_equal(op, &state.dims[0], &x.dims[0], "state batch vs x batch")?;
        dims_equal(op, &state.dims[1], &x.dims[2], "state dim 1 vs x channels")?;
        dims_equal(op, &state.dims[2], n, "state dim 2 vs a's state size")?;
    }
    Ok(x.clone())
}

fn mamba2(
    op: &Op,
    inputs: &[&Shape],
    heads: usize,
    head_dim: usize,
    state_size: usize,
) -> Result<Shape> {
    arity_range(op, inputs, 5, 6)?;
    positive(op, heads, "heads")?;
    positive(op, head_dim, "head_dim")?;
    positive(op, state_size, "state_size")?;
    all_float_same(op, inputs, &["x", "dt", "a", "b", "c", "state"])?;
    let (x, dt, a, b, c) = (inputs[0], inputs[1], inputs[2], inputs[3], inputs[4]);
    rank_is(op, x, 3, "x")?;
    let inner = checked_mul(op, heads, head_dim, "heads·head_dim")?;
    dim_is(op, &x.dims[2], inner, "x last dim (heads·head_dim)")?;
    bsx(op, dt, x, &Dim::Static(heads), "dt")?;
    rank_is(op, a, 1, "a")?;
    dim_is(op, &a.dims[0], heads, "a length (heads)")?;
    bsx(op, b, x, &Dim::Static(state_size), "b")?;
    bsx(op, c, x, &Dim::Static(state_size), "c")?;
    if let Some(state) = inputs.get(5) {
        rank_is(op, state, 4, "state")?;
        dims_equal(op, &state.dims[0], &x.dims[0], "state batch vs x batch")?;
        dim_is(op, &state.dims[1], heads, "state dim 1 (heads)")?;
        dim_is(op, &state.dims[2], head_dim, "state dim 2 (head_dim)")?;
        dim_is(op, &state.dims[3], state_size, "state dim 3 (state_size)")?;
    }
    Ok(x.clone())
}

fn gated_delta_net(op: &Op, inputs: &[&Shape], heads: usize, state_size: usize) -> Result<Shape> {
    arity(op, inputs, 6)?;
    positive(op, heads, "heads")?;
    positive(op, state_size, "state_size")?;
    all_float_same(op, inputs, &["q", "k", "v", "g", "beta", "state"])?;
    let q = inputs[0];
    rank_is(op, q, 3, "q")?;
    let inner = checked_mul(op, heads, state_size, "heads·state_size")?;
    dim_is(op, &q.dims[2], inner, "q last dim (heads·state_size)")?;
    bsx(op, inputs[1], q, &q.dims[2], "k")?;
    bsx(op, inputs[2], q, &q.dims[2], "v")?;
    bsx(op, inputs[3], q, &Dim::Static(heads), "g")?;
    bsx(op, inputs[4], q, &Dim::Static(heads), "beta")?;
    let state = inputs[5];
    rank_is(op, state, 4, "state")?;
    dims_equal(op, &state.dims[0], &q.dims[0], "state batch vs q batch")?;
    dim_is(op, &state.dims[1], heads, "state dim 1 (heads)")?;
    dim_is(op, &state.dims[2], state_size, "state dim 2 (state_size)")?;
    dim_is(op, &state.dims[3], state_size, "state dim 3 (state_size)")?;
    Ok(q.clone())
}

/// The three recurrent cells.
#[derive(Clone, Copy, PartialEq)]
enum Cell {
    Lstm,
    Gru,
    Rnn,
}

impl Cell {
    /// Gate blocks stacked in the weight rows (PyTorch order).
    fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
            Cell::Rnn => 1,
        }
    }

    /// Operand names, in order.
    fn operands(self) -> &'static [&'static str] {
        match self {
            Cell::Lstm => &["x", "w_ih", "w_hh", "bias", "h0", "c0"],
            Cell::Gru => &["x", "w_ih", "w_hh", "b_ih", "b_hh", "h0"],
            Cell::Rnn => &["x", "w_ih", "w_hh", "bias", "h0"],
        }
    }

    /// Final-state rows appended per layer when `carry` is set (h, and c
    /// for the LSTM).
    fn carry_rows(self) -> usize {
        match self {
            Cell::Lstm => 2,
            Cell::Gru | Cell::Rnn => 1,
        }
    }
}

/// LSTM / GRU / RNN; the packed weight layout is documented on [`Recurrent`].
fn recurrent(op: &Op, inputs: &[&Shape], cell: Cell, net: &Recurrent) -> Result<Shape> {
    let Recurrent {
        hidden,
        num_layers,
        bidirectional,
        carry,
    } = *net;
    let names = cell.operands();
    arity(op, inputs, names.len())?;
    positive(op, hidden, "hidden")?;
    positive(op, num_layers, "num_layers")?;
    all_float_same(op, inputs, names)?;
    let x = inputs[0];
    rank_is(op, x, 3, "x")?;
    let input_size = static_dim(op, &x.dims[2], "x input size")?;
    positive(op, input_size, "x input size")?;
    let dirs = if bidirectional { 2 } else { 1 };
    let stacks = checked_mul(op, num_layers, dirs, "num_layers·dirs")?;
    let rows = checked_mul(op, cell.gates(), hidden, "gates·hidden")?;
    let out_feat = checked_mul(op, dirs, hidden, "dirs·hidden")?;
    let in_cols = if num_layers == 1 {
        input_size
    } else {
        input_size.max(out_feat)
    };
    let expect = |s: &Shape, dims: &[usize], what: &str| -> Result<()> {
        if s.rank() != dims.len()
            || s.dims
                .iter()
                .zip(dims)
                .any(|(d, &n)| d.as_static() != Some(n))
        {
            return Err(IrError::shape(
                op.name(),
                format!("{what} must be {dims:?}, got {s}"),
            ));
        }
        Ok(())
    };
    expect(inputs[1], &[stacks, rows, in_cols], "w_ih")?;
    expect(inputs[2], &[stacks, rows, hidden], "w_hh")?;
    let state_ops = match cell {
        Cell::Lstm => {
            expect(inputs[3], &[stacks, rows], "bias")?;
            &inputs[4..6]
        }
        Cell::Gru => {
            expect(inputs[3], &[stacks, rows], "b_ih")?;
            expect(inputs[4], &[stacks, rows], "b_hh")?;
            &inputs[5..6]
        }
        Cell::Rnn => {
            expect(inputs[3], &[stacks, rows], "bias")?;
            &inputs[4..5]
        }
    };
    for (s, what) in state_ops.iter().zip(["h0", "c0"]) {
        rank_is(op, s, 3, what)?;
        dim_is(
            op,
            &s.dims[0],
            stacks,
            &format!("{what} dim 0 (num_layers·dirs)"),
        )?;
        dims_equal(
            op,
            &s.dims[1],
            &x.dims[0],
            &format!("{what} batch vs x batch"),
        )?;
        dim_is(op, &s.dims[2], hidden, &format!("{what} dim 2 (hidden)"))?;
    }
    let seq = if carry {
        let s = static_dim(op, &x.dims[1], "sequence length (carry appends rows)")?;
        let extra = checked_mul(op, cell.carry_rows(), num_layers, "carry rows")?;
        let rows = s.checked_add(extra).ok_or_else(|| {
            IrError::shape(op.name(), "sequence length plus carry rows overflows")
        })?;
        Dim::Static(rows)
    } else {
        x.dims[1].clone()
    };
    Ok(x.with_dims(vec![x.dims[0].clone(), seq, Dim::Static(out_feat)]))
}

/// Shapes of the body's `Input` leaves, in node order.
fn body_inputs(body: &Graph) -> Vec<&Shape> {
    body.nodes
        .iter()
        .filter(|n| matches!(n.op, Op::Input { .. }))
        .map(|n| &n.shape)
        .collect()
}

/// The shape of body output number `i`.
fn body_output<'g>(op: &Op, body: &'g Graph, i: usize) -> Result<&'g Shape> {
    body.outputs
        .get(i)
        .and_then(|&id| body.nodes.get(id))
        .map(|n| &n.shape)
        .ok_or_else(|| IrError::shape(op.name(), format!("body has no output {i}")))
}

/// Check a scan body against its operands and return the stacked `y` shape
/// `[length, ..y]`. Shared with `ScanBackward`, which passes its own `op`
/// and its operands without the trailing `dy`.
pub(super) fn scan(
    op: &Op,
    inputs: &[&Shape],
    body: &Graph,
    num_carry: usize,
    length: usize,
) -> Result<Shape> {
    positive(op, length, "length")?;
    if inputs.len() < num_carry {
        return Err(IrError::Arity {
            op: op.name().to_string(),
            expected: format!("at least {num_carry} (the carries)"),
            got: inputs.len(),
        });
    }
    crate::verify::verify(body)
        .map_err(|e| IrError::attr(op.name(), format!("body graph is invalid: {e}")))?;
    let (carries, xs) = inputs.split_at(num_carry);
    let leaves = body_inputs(body);
    if leaves.len() != inputs.len() {
        return Err(IrError::shape(
            op.name(),
            format!(
                "body has {} Input leaves; expected {num_carry} carries + {} scanned operands",
                leaves.len(),
                xs.len()
            ),
        ));
    }
    for (i, (c, b)) in carries.iter().zip(&leaves).enumerate() {
        same_shape(op, b, c, &format!("carry {i}: body input vs carry_init"))?;
    }
    for (j, (x, b)) in xs.iter().zip(&leaves[num_carry..]).enumerate() {
        rank_at_least(op, x, 1, &format!("scanned operand {j}"))?;
        dim_is(
            op,
            &x.dims[0],
            length,
            &format!("scanned operand {j} axis 0 (length)"),
        )?;
        let slice = x.with_dims(x.dims[1..].to_vec());
        same_shape(
            op,
            b,
            &slice,
            &format!("scanned operand {j}: body input vs slice"),
        )?;
    }
    if body.outputs.len() != num_carry + 1 {
        return Err(IrError::shape(
            op.name(),
            format!(
                "body must have {num_carry} carry outputs then y ({} outputs), has {}",
                num_carry + 1,
                body.outputs.len()
            ),
        ));
    }
    for (i, c) in carries.iter().enumerate() {
        let out = body_output(op, body, i)?;
        same_shape(op, out, c, &format!("carry {i}: body output vs carry_init"))?;
    }
    let y = body_output(op, body, num_carry)?;
    let mut dims = vec![Dim::Static(length)];
    dims.extend(y.dims.iter().cloned());
    Ok(Shape::new(dims, y.dtype))
}
