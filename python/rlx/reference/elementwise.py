"""Element-wise thunks: casts, activations, binary / broadcast / ternary ops,
the fused element-wise region interpreter and SwiGLU.

Float operands are widened to float64, combined, and rounded once to the
output dtype on store (``dt="f16"`` buffers are float16), except inside
``elementwise_region`` chains, whose registers are float32 after every step
(the chain is an f32 program).
"""

from __future__ import annotations

import numpy as np

from . import Memory, reference
from ._act import (
    REGION_ACTIVATIONS,
    REGION_BINARY,
    activate,
    bf16_bits_to_f32,
    binary,
    compare,
    f32_to_bf16_bits,
    gelu_approx,
    round_bf16,
    silu,
    store,
)
from ._common import DTYPES, F32, fdt, strided_index

# ------------------------------------------------------------------- casts


@reference("cast")
def cast(t: dict, mem: Memory) -> None:
    """f32 ↔ f16 conversion of ``len`` elements (round to nearest even)."""
    n = t["len"]
    src = mem.view(t["src"], n, fdt(t, "src_dt"))
    store(mem.view(t["dst"], n, fdt(t, "dst_dt")), src.astype(np.float32))


def _to_float64(x: np.ndarray, dt: str) -> np.ndarray:
    if dt == "bf16":
        return bf16_bits_to_f32(x).astype(np.float64)
    if dt == "c64":
        return x.real.astype(np.float64)
    return x.astype(np.float64)


def _float_to_int(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Truncate toward zero, saturate at the type's range, NaN → 0 (Rust
    ``as`` semantics)."""
    info = np.iinfo(dtype)
    with np.errstate(invalid="ignore"):
        y = np.trunc(x)
        y = np.where(np.isnan(y), 0.0, y)
    y = np.clip(y, info.min, info.max)
    # float64 cannot hold i64/u64 extremes exactly; clamp through Python ints.
    out = np.empty(y.shape, dtype)
    flat = y.reshape(-1)
    if dtype.itemsize >= 8:
        out.reshape(-1)[:] = [min(max(int(v), info.min), info.max) for v in flat]
    else:
        out.reshape(-1)[:] = flat.astype(dtype)
    return out


@reference("cast_host")
def cast_host(t: dict, mem: Memory) -> None:
    """Cast between real dtypes. float → int truncates toward zero and
    saturates (NaN → 0); int → int wraps (two's complement); anything →
    bool is ``!= 0``; bool → number is 0/1; bf16 rounds to nearest even;
    c64 → real keeps the real part; real → c64 has zero imaginary part."""
    n = t["len"]
    sdt, ddt = t["src_dt"], t["dst_dt"]
    src = mem.view(t["src"], n, DTYPES[sdt])
    dst = mem.view(t["dst"], n, DTYPES[ddt])
    s_float = sdt in ("f32", "f16", "bf16", "f64", "c64")
    with np.errstate(over="ignore"):  # overflow to ±inf is the IEEE result
        _cast_into(dst, src, sdt, ddt, s_float)


def _cast_into(dst: np.ndarray, src: np.ndarray, sdt: str, ddt: str, s_float: bool) -> None:
    """Body of :func:`cast_host` (see its docstring)."""
    if ddt == "bool":
        dst[...] = (_to_float64(src, sdt) != 0) if s_float else (src != 0)
    elif ddt == "bf16":
        if sdt == "bf16":
            dst[...] = src
        else:  # via f32 (ints wider than 24 bits round twice, as on device)
            dst[...] = f32_to_bf16_bits((src.real if sdt == "c64" else src).astype(np.float32))
    elif ddt in ("f32", "f16", "f64"):
        if sdt == "bf16":
            dst[...] = bf16_bits_to_f32(src).astype(dst.dtype)
        elif sdt == "c64":
            dst[...] = src.real.astype(dst.dtype)
        else:
            dst[...] = src.astype(dst.dtype)
    elif ddt == "c64":
        dst[...] = _to_float64(src, sdt).astype(np.complex64) if sdt == "bf16" else src
    else:  # integer destination
        if s_float:
            dst[...] = _float_to_int(_to_float64(src, sdt), dst.dtype)
        else:
            dst[...] = src.astype(dst.dtype)  # wraps, like Rust `as`


@reference("cast_trunc_f32")
def cast_trunc_f32(t: dict, mem: Memory) -> None:
    """``dst = trunc(src)`` toward zero, f32 → f32."""
    n = t["len"]
    mem.view(t["dst"], n, F32)[...] = np.trunc(mem.view(t["src"], n, F32))


# ------------------------------------------------------------- activations


@reference("activation")
def activation(t: dict, mem: Memory) -> None:
    """In place ``data[i] = act(data[i])``."""
    x = mem.view(t["data"], t["len"], fdt(t))
    store(x, activate(t["act"], x))


@reference("activation_out")
def activation_out(t: dict, mem: Memory) -> None:
    """``dst[i] = act(src[i])``."""
    dt = fdt(t)
    store(mem.view(t["dst"], t["len"], dt), activate(t["act"], mem.view(t["src"], t["len"], dt)))


def _gelu_approx_f32(t: dict, mem: Memory) -> None:
    n = t["len"]
    store(mem.view(t["dst"], n, F32), gelu_approx(mem.view(t["src"], n, F32)))


@reference("gelu_approx_out")
def gelu_approx_out(t: dict, mem: Memory) -> None:
    """``dst = gelu_approx(src)``, f32."""
    _gelu_approx_f32(t, mem)


@reference("gelu_approx_host")
def gelu_approx_host(t: dict, mem: Memory) -> None:
    """``dst = gelu_approx(src)``, f32 (host path for >4 GiB arenas)."""
    _gelu_approx_f32(t, mem)


@reference("fused_binary_activation")
def fused_binary_activation(t: dict, mem: Memory) -> None:
    """``dst = act(lhs op rhs)``."""
    dt, n = fdt(t), t["len"]
    v = binary(t["op"], mem.view(t["lhs"], n, dt), mem.view(t["rhs"], n, dt))
    store(mem.view(t["dst"], n, dt), activate(t["act"], v))


@reference("fused_ternary_activation")
def fused_ternary_activation(t: dict, mem: Memory) -> None:
    """``dst = act((lhs op0 rhs0) op1 rhs1)``."""
    dt, n = fdt(t), t["len"]
    v = binary(t["op0"], mem.view(t["lhs"], n, dt), mem.view(t["rhs0"], n, dt))
    v = binary(t["op1"], v, mem.view(t["rhs1"], n, dt))
    store(mem.view(t["dst"], n, dt), activate(t["act"], v))


# ----------------------------------------------------------------- binary


@reference("binary")
def binary_full(t: dict, mem: Memory) -> None:
    """``dst = lhs op rhs`` over ``len`` elements."""
    dt, n = fdt(t), t["len"]
    v = binary(t["op"], mem.view(t["lhs"], n, dt), mem.view(t["rhs"], n, dt))
    store(mem.view(t["dst"], n, dt), v)


def _strided(
    mem: Memory, off: int, dims: list[int], strides: list[int], dt: np.dtype
) -> np.ndarray:
    idx = strided_index(dims, strides)
    src = mem.view(off, int(idx.max()) + 1 if idx.size else 0, dt)
    return src[idx]


@reference("binary_broadcast")
def binary_broadcast(t: dict, mem: Memory) -> None:
    """Output element at multi-index ``i`` (over ``out_dims``) is
    ``lhs[Σ i_d·lhs_strides[d]] op rhs[Σ i_d·rhs_strides[d]]``."""
    dt = fdt(t)
    rank = t["rank"]
    dims = [int(d) for d in t["out_dims"][:rank]]
    lhs = _strided(mem, t["lhs"], dims, t["lhs_strides"][:rank], dt)
    rhs = _strided(mem, t["rhs"], dims, t["rhs_strides"][:rank], dt)
    store(mem.view(t["dst"], lhs.size, dt), binary(t["op"], lhs, rhs))


@reference("bias_add")
def bias_add(t: dict, mem: Memory) -> None:
    """``dst[r, c] = src[r, c] + bias[c]`` over ``m × n``."""
    dt, m, n = fdt(t), t["m"], t["n"]
    with np.errstate(all="ignore"):  # inf + -inf is NaN, as IEEE says
        v = mem.view(t["src"], (m, n), dt).astype(np.float64) + mem.view(t["bias"], n, dt)
    store(mem.view(t["dst"], (m, n), dt), v)


@reference("compare")
def compare_ref(t: dict, mem: Memory) -> None:
    """``dst = (lhs op rhs) ? 1.0 : 0.0`` (f32); scalar flags broadcast one element."""
    n = t["len"]
    lhs = mem.view(t["lhs"], 1 if t.get("lhs_scalar") else n, F32)
    rhs = mem.view(t["rhs"], 1 if t.get("rhs_scalar") else n, F32)
    out = np.broadcast_to(compare(t["op"], lhs, rhs), (n,))
    mem.view(t["dst"], n, F32)[...] = out.astype(np.float32)


@reference("where")
def where(t: dict, mem: Memory) -> None:
    """``dst = cond != 0 ? on_true : on_false`` (f32); scalar flags broadcast."""
    n = t["len"]
    cond = mem.view(t["cond"], 1 if t.get("cond_scalar") else n, F32)
    a = mem.view(t["on_true"], 1 if t.get("true_scalar") else n, F32)
    b = mem.view(t["on_false"], 1 if t.get("false_scalar") else n, F32)
    mem.view(t["dst"], n, F32)[...] = np.broadcast_to(np.where(cond != 0, a, b), (n,))


@reference("fma")
def fma(t: dict, mem: Memory) -> None:
    """``dst = a·b + c`` (f32; the product is exact in float64)."""
    n = t["len"]
    a, b, c = (mem.view(t[k], n, F32).astype(np.float64) for k in ("a", "b", "c"))
    store(mem.view(t["dst"], n, F32), a * b + c)


# --------------------------------------------------------- region programs

_STEP = 0x8000_0000


def _run_chain(chain: list[int], num_steps: int, inputs: list[np.ndarray]) -> np.ndarray:
    """Interpret a region chain over float32 ``inputs`` (already broadcast);
    each step's result is rounded to float32."""
    regs: list[np.ndarray] = []

    def operand(w: int) -> np.ndarray:
        if w & _STEP:
            return regs[w & 0x7FFF_FFFF]
        return inputs[w]

    for s in range(num_steps):
        kind, sub, a, b = (int(v) for v in chain[4 * s : 4 * s + 4])
        x = operand(a)
        if kind == 0:
            r = activate(REGION_ACTIVATIONS[sub], x)
        elif kind == 1:
            if sub == 0:
                r = x
            elif sub == 1:
                with np.errstate(over="ignore"):
                    r = x.astype(np.float16)
            elif sub == 2:
                r = round_bf16(x)
            elif sub == 3:
                r = np.trunc(x)
            else:
                raise ValueError(f"[elementwise_region] unknown cast sub-code {sub}")
        elif kind == 2:
            r = binary(REGION_BINARY[sub], x, operand(b))
        else:
            raise ValueError(f"[elementwise_region] unknown step kind {kind}")
        with np.errstate(over="ignore"):
            regs.append(np.asarray(r).astype(np.float32))
    if not regs:
        raise ValueError("[elementwise_region] empty chain")
    return regs[-1]


def _chain_inputs(chain: list[int], num_steps: int) -> int:
    """Number of region inputs a chain references; they must be 0..n-1."""
    used: set[int] = set()
    for s in range(num_steps):
        kind, _, a, b = (int(v) for v in chain[4 * s : 4 * s + 4])
        for w in (a, b) if kind == 2 else (a,):
            if not w & _STEP:
                used.add(w)
    n = max(used) + 1 if used else 0
    if used != set(range(n)):
        raise ValueError(f"[batch_elementwise_region] chain inputs {sorted(used)} not 0..n-1")
    return n


def _region_input(
    mem: Memory, elem_off: int, i: int, n: int, scalar_mask: int, modulus: list[int]
) -> np.ndarray:
    """Input ``i`` read at f32 element index ``elem_off``, broadcast to ``n``."""
    if scalar_mask >> i & 1:
        return np.broadcast_to(mem.view(4 * elem_off, 1, F32), (n,))
    m = int(modulus[i]) if i < len(modulus) else 0
    if m > 0:
        return mem.view(4 * elem_off, m, F32)[np.arange(n) % m]
    return mem.view(4 * elem_off, n, F32)


@reference("elementwise_region")
def elementwise_region(t: dict, mem: Memory) -> None:
    """Fused N-ary element-wise program (f32 registers, one output).

    Chain: ``num_steps`` steps of 4 words ``[kind, sub, a, b]``; kind 0 =
    activation (sub indexes :data:`REGION_ACTIVATIONS`), 1 = cast (0 identity,
    1 round through f16, 2 round through bf16, 3 truncate toward zero), 2 =
    binary (sub indexes :data:`REGION_BINARY`). Operand words with bit 31 set
    name an earlier step's result, else a region input. ``input_offs`` are f32
    element indices into the arena. Input ``i`` is a scalar if bit ``i`` of
    ``scalar_input_mask`` is set, else reads element ``g % input_modulus[i]``
    when the modulus is non-zero, else element ``g``.

    ``prologue == 1``: input ``prologue_input`` is an NCHW tensor
    ``[out_n, out_c, out_h/2, out_w/2]`` read through a nearest 2× upsample —
    output element ``g`` = ``(n, c, y, x)`` of ``[out_n, out_c, out_h, out_w]``
    reads ``src[n, c, y//2, x//2]`` (scalar / modulus flags are ignored for
    that input).
    """
    n = t["len"]
    offs = t["input_offs"]
    inputs = [
        _region_input(
            mem, int(offs[i]), i, n, t.get("scalar_input_mask", 0), t.get("input_modulus", [])
        )
        for i in range(t["num_inputs"])
    ]
    if t.get("prologue", 0) == 1:
        on, oc, oh, ow = t["out_n"], t["out_c"], t["out_h"], t["out_w"]
        if on * oc * oh * ow != n or oh % 2 or ow % 2:
            raise ValueError("[elementwise_region] prologue dims do not match len")
        p = t.get("prologue_input", 0)
        src = mem.view(4 * int(offs[p]), (on, oc, oh // 2, ow // 2), F32)
        inputs[p] = src.repeat(2, axis=2).repeat(2, axis=3).reshape(-1)
    elif t.get("prologue", 0) != 0:
        raise ValueError(f"[elementwise_region] unknown prologue {t['prologue']}")
    out = _run_chain(t["chain"], t["num_steps"], inputs)
    mem.view(t["dst"], n, F32)[...] = np.broadcast_to(out, (n,))


@reference("batch_elementwise_region")
def batch_elementwise_region(t: dict, mem: Memory) -> None:
    """``num_batch`` independent slices of one region program (no prologue).

    Layout: with ``k`` = the number of region inputs the chain references
    (they must be exactly ``0..k-1``), slice ``b`` reads input ``i`` at f32
    element index ``batch_input_offs[b*k + i]`` and writes ``slice_len``
    f32 values at byte ``base_dst + 4·b·slice_elems``. Scalar / modulus
    flags apply per slice as in ``elementwise_region``.
    """
    steps = t["num_steps"]
    k = _chain_inputs(t["chain"], steps)
    nb, n = t["num_batch"], t["slice_len"]
    if nb * k > len(t["batch_input_offs"]):
        raise ValueError("[batch_elementwise_region] batch_input_offs too short")
    for b in range(nb):
        inputs = [
            _region_input(
                mem,
                int(t["batch_input_offs"][b * k + i]),
                i,
                n,
                t.get("scalar_input_mask", 0),
                t.get("input_modulus", []),
            )
            for i in range(k)
        ]
        out = _run_chain(t["chain"], steps, inputs)
        mem.view(t["base_dst"] + 4 * b * t["slice_elems"], n, F32)[...] = out


# ------------------------------------------------------------------ swiglu


@reference("fused_swiglu")
def fused_swiglu(t: dict, mem: Memory) -> None:
    """SwiGLU (Shazeer, "GLU Variants Improve Transformer", arXiv:2002.05202)
    over ``src [rows, 2·n_half]`` → ``dst [rows, n_half]`` with ``rows =
    total / n_half`` (``total`` counts output elements): ``x[:, :n]·silu(x[:,
    n:])``, or ``silu(x[:, :n])·x[:, n:]`` when ``gate_first``."""
    nh = t["n_half"]
    rows = t["total"] // nh
    x = mem.view(t["src"], (rows, 2 * nh), fdt(t, "src_dt")).astype(np.float64)
    a, g = x[:, :nh], x[:, nh:]
    out = silu(a) * g if t.get("gate_first") else a * silu(g)
    store(mem.view(t["dst"], (rows, nh), fdt(t, "dst_dt")), out)
