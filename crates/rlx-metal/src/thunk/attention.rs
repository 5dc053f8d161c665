//! Attention and positional encodings: SDPA (MHA / GQA, BSHD or BHSD), its
//! gradient, the fused attention core, RoPE and SAM2 axial RoPE.
//!
//! Q and the output hold `batch · seq · heads · head_dim` elements and K / V
//! `batch · kv_seq · kv_heads · head_dim` in either layout (BSHD
//! `[b, s, heads·d]` or BHSD `[b, heads, s, d]`; the layout changes the
//! order, not the size). Mask codes are the seed's: 0 none, 1 causal,
//! 2 custom (reads `[batch, seq, kv_seq]`), 3 bias (reads
//! `[batch, heads, seq, kv_seq]`), 4 sliding window; only 2 and 3 read
//! `mask`.

use super::io::{bytes, ThunkIo, F32, IDX};
use super::offsets::Off;
use super::{HalfFlag, ThunkOp};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Mask kind: custom binary mask `[batch, seq, kv_seq]`.
pub const MASK_CUSTOM: u32 = 2;
/// Mask kind: additive bias `[batch, heads, seq, kv_seq]`.
pub const MASK_BIAS: u32 = 3;

/// Bytes of the mask operand for `mask_kind` (0 when the kind reads none).
pub fn mask_bytes(
    mask_kind: u32,
    batch: u32,
    heads: u32,
    seq: u32,
    kv_seq: u32,
    elem: usize,
) -> usize {
    match mask_kind {
        MASK_CUSTOM => bytes(&[batch, seq, kv_seq], elem),
        MASK_BIAS => bytes(&[batch, heads, seq, kv_seq], elem),
        _ => 0,
    }
}

/// Scaled dot-product attention.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attention {
    /// Queries.
    pub q: usize,
    /// Keys.
    pub k: usize,
    /// Values.
    pub v: usize,
    /// Mask or bias (kinds 2 and 3 only).
    pub mask: usize,
    /// Output (q's shape).
    pub out: usize,
    /// Batch.
    pub batch: u32,
    /// Query length.
    pub seq: u32,
    /// Key/value length (`== seq` for self-attention without cache).
    pub kv_seq: u32,
    /// Query heads.
    pub heads: u32,
    /// Key/value heads (`< heads` for GQA).
    pub kv_heads: u32,
    /// Head dimension.
    pub head_dim: u32,
    /// Mask code (see the module docs).
    pub mask_kind: u32,
    /// Lookback for sliding window (kind 4), else 0.
    pub window: u32,
    /// Element type of q, the mask and the output (and of k / v unless
    /// `kv_dt` says otherwise).
    pub dt: HalfFlag,
    /// 1 iff operands are BHSD.
    pub bhsd: u32,
    /// Score scale; 0.0 means `1/sqrt(head_dim)`.
    pub score_scale: f32,
    /// Logit softcap; 0.0 disables.
    pub attn_logit_softcap: f32,
    /// Not in the seed: offset of an i32 `[1]` run-time key length `L`
    /// (`1 ≤ L ≤ kv_seq`). Only keys `0..L` are attended and query `i` sits
    /// at absolute position `L - seq + i`; `None` means `L = kv_seq`. K / V
    /// are still declared read in full (which rows count is a run-time fact).
    #[serde(default)]
    pub kv_len: Option<usize>,
    /// Not in the seed: `kv_len` holds `batch` lengths (i32 `[batch]`), one
    /// per batch entry (several sequences decoded in one step), instead of
    /// one for all.
    #[serde(default)]
    pub kv_len_per_batch: bool,
    /// Not in the seed: element type of k and v when it differs from `dt`
    /// (`None`: `dt`). Only `F16` under an f32 `dt` occurs (a half KV cache:
    /// keys and values widened to f32 on load, f32 scores, softmax and
    /// accumulation).
    #[serde(default)]
    pub kv_dt: Option<HalfFlag>,
}

impl Attention {
    /// Element type of k and v.
    pub fn kv_elem(&self) -> HalfFlag {
        self.kv_dt.unwrap_or(self.dt)
    }
}

impl ThunkOp for Attention {
    const NAME: &'static str = "attention";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        let q = bytes(&[self.batch, self.seq, self.heads, self.head_dim], es);
        let kv = bytes(
            &[self.batch, self.kv_seq, self.kv_heads, self.head_dim],
            self.kv_elem().size(),
        );
        let mask = mask_bytes(
            self.mask_kind,
            self.batch,
            self.heads,
            self.seq,
            self.kv_seq,
            es,
        );
        ThunkIo::new()
            .read(self.q, q)
            .read(self.k, kv)
            .read(self.v, kv)
            .read(self.mask, mask)
            .read_if(
                self.kv_len.is_some(),
                self.kv_len.unwrap_or(0),
                if self.kv_len_per_batch {
                    IDX * self.batch as usize
                } else {
                    IDX
                },
            )
            .write(self.out, q)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let layout = if self.bhsd == 1 { "bhsd" } else { "bshd" };
        write!(
            f,
            "b={} s={} kv_s={} heads={} kv_heads={} d={} mask={} {layout} {}",
            self.batch,
            self.seq,
            self.kv_seq,
            self.heads,
            self.kv_heads,
            self.head_dim,
            self.mask_kind,
            self.dt
        )?;
        if let Some(kv) = self.kv_dt.filter(|&kv| kv != self.dt) {
            write!(f, " kv={kv}")?;
        }
        let (q, k, v, o) = (Off(self.q), Off(self.k), Off(self.v), Off(self.out));
        write!(f, " q={q} k={k} v={v} out={o}")?;
        match self.kv_len {
            Some(l) if self.kv_len_per_batch => write!(f, " kv_len[b]={}", Off(l)),
            Some(l) => write!(f, " kv_len={}", Off(l)),
            None => Ok(()),
        }
    }
}

/// Fused attention core, f32: NeoX RoPE (when `has_rope != 0`) + SDPA over
/// packed `qkv [batch, seq, 3·heads·head_dim]` → `out [batch, seq,
/// heads·head_dim]`. cos / sin are `[seq, head_dim / 2]`; the mask is
/// self-attention sized (`kv_seq = seq`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedAttn {
    /// Packed Q, K, V.
    pub qkv: usize,
    /// Mask (kinds 2 and 3 only).
    pub mask: usize,
    /// RoPE cos table.
    pub cos: usize,
    /// RoPE sin table.
    pub sin: usize,
    /// Output.
    pub out: usize,
    /// Batch.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// Heads.
    pub heads: u32,
    /// Head dimension.
    pub head_dim: u32,
    /// Mask code.
    pub mask_kind: u32,
    /// Score scale as f32 bits.
    pub scale_bits: u32,
    /// Nonzero when cos / sin are applied.
    pub has_rope: u32,
}

impl ThunkOp for FusedAttn {
    const NAME: &'static str = "fused_attn";
    fn io(&self) -> ThunkIo {
        let inner = bytes(&[self.batch, self.seq, self.heads, self.head_dim], F32);
        let table = bytes(&[self.seq, self.head_dim / 2], F32);
        let rope = self.has_rope != 0;
        ThunkIo::new()
            .read(self.qkv, inner.saturating_mul(3))
            .read(
                self.mask,
                mask_bytes(
                    self.mask_kind,
                    self.batch,
                    self.heads,
                    self.seq,
                    self.seq,
                    F32,
                ),
            )
            .read_if(rope, self.cos, table)
            .read_if(rope, self.sin, table)
            .write(self.out, inner)
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scale = f32::from_bits(self.scale_bits);
        write!(
            f,
            "b={} s={} heads={} d={} mask={} scale={scale} rope={} qkv={} out={}",
            self.batch,
            self.seq,
            self.heads,
            self.head_dim,
            self.mask_kind,
            self.has_rope,
            Off(self.qkv),
            Off(self.out)
        )
    }
}

/// Rotary embedding on `[batch, seq, hidden]` (`hidden = heads · head_dim`),
/// the first `n_rot` dims of each head rotated.
///
/// Source row `r` (of `batch · seq`) starts `r · src_row_stride` elements
/// after `src` (stride 0 means `hidden`) and `hidden` elements of it are
/// read. cos / sin tables are f32 `[seq, n_rot / 2]`, or
/// `[batch · seq, n_rot / 2]` with `cos_per_token`. `dst` is dense.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rope {
    /// Input (possibly a column window of a wider parent).
    pub src: usize,
    /// cos table (f32).
    pub cos: usize,
    /// sin table (f32).
    pub sin: usize,
    /// Output `[batch, seq, hidden]`.
    pub dst: usize,
    /// Batch.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// Row width.
    pub hidden: u32,
    /// Head dimension.
    pub head_dim: u32,
    /// Rotated dims per head.
    pub n_rot: u32,
    /// Element type of src / dst.
    pub dt: HalfFlag,
    /// Elements between source rows (0 = `hidden`).
    pub src_row_stride: u32,
    /// Tables have one row per token rather than per position.
    pub cos_per_token: bool,
    /// GPT-J interleaved pairs (else NeoX rotate-half).
    pub interleaved: bool,
}

impl ThunkOp for Rope {
    const NAME: &'static str = "rope";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        let rows = (self.batch as usize).saturating_mul(self.seq as usize);
        let stride = if self.src_row_stride == 0 {
            self.hidden
        } else {
            self.src_row_stride
        };
        let row = bytes(&[self.hidden], es);
        let table_rows = if self.cos_per_token {
            rows
        } else {
            self.seq as usize
        };
        let table = bytes(&[self.n_rot / 2], F32).saturating_mul(table_rows);
        ThunkIo::new()
            .read_rows(self.src, rows, bytes(&[stride], es), &[(0, row)])
            .read(self.cos, table)
            .read(self.sin, table)
            .write(self.dst, row.saturating_mul(rows))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.interleaved {
            "interleaved"
        } else {
            "neox"
        };
        write!(
            f,
            "b={} s={} hidden={} d={} n_rot={} {kind} {}",
            self.batch, self.seq, self.hidden, self.head_dim, self.n_rot, self.dt
        )?;
        if self.src_row_stride != 0 && self.src_row_stride != self.hidden {
            write!(f, " stride={}", self.src_row_stride)?;
        }
        if self.cos_per_token {
            f.write_str(" per_token")?;
        }
        write!(f, " src={} dst={}", Off(self.src), Off(self.dst))
    }
}

/// SAM2 axial 2-D RoPE on `[batch, seq, hidden]`, f32 (tables computed
/// from `theta`, nothing else read).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AxialRope2dHost {
    /// Input.
    pub src: usize,
    /// Output.
    pub dst: usize,
    /// Batch.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// Row width.
    pub hidden: u32,
    /// Grid width.
    pub end_x: u32,
    /// Grid height.
    pub end_y: u32,
    /// Head dimension.
    pub head_dim: u32,
    /// Heads.
    pub num_heads: u32,
    /// Frequency base.
    pub theta: f32,
    /// Grid rows repeated along the sequence.
    pub repeat_factor: u32,
}

impl ThunkOp for AxialRope2dHost {
    const NAME: &'static str = "axial_rope2d_host";
    fn io(&self) -> ThunkIo {
        let n = bytes(&[self.batch, self.seq, self.hidden], F32);
        ThunkIo::new().read(self.src, n).write(self.dst, n)
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "b={} s={} hidden={} grid={}x{} heads={} d={} src={} dst={}",
            self.batch,
            self.seq,
            self.hidden,
            self.end_x,
            self.end_y,
            self.num_heads,
            self.head_dim,
            Off(self.src),
            Off(self.dst)
        )
    }
}

/// Attention gradient w.r.t. one operand (`wrt` 0 = q, 1 = k, 2 = v).
/// q / dy `[batch, seq, heads, head_dim]`, k / v `[batch, kv_seq, heads,
/// head_dim]` (no GQA here), mask as [`Attention`]; the
/// output has the chosen operand's size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttentionBackward {
    /// Queries.
    pub q: usize,
    /// Keys.
    pub k: usize,
    /// Values.
    pub v: usize,
    /// Upstream gradient (q's size).
    pub dy: usize,
    /// Mask or bias (kinds 2 and 3 only).
    pub mask: usize,
    /// Gradient of the chosen operand.
    pub out: usize,
    /// Batch.
    pub batch: u32,
    /// Query length.
    pub seq: u32,
    /// Key length.
    pub kv_seq: u32,
    /// Heads.
    pub heads: u32,
    /// Head dimension.
    pub head_dim: u32,
    /// Mask code.
    pub mask_kind: u32,
    /// Sliding-window lookback.
    pub window: u32,
    /// 0 = q, 1 = k, 2 = v.
    pub wrt: u32,
    /// 1 iff BHSD.
    pub bhsd: u32,
}

impl ThunkOp for AttentionBackward {
    const NAME: &'static str = "attention_bwd";
    fn io(&self) -> ThunkIo {
        let q = bytes(&[self.batch, self.seq, self.heads, self.head_dim], F32);
        let kv = bytes(&[self.batch, self.kv_seq, self.heads, self.head_dim], F32);
        let out = if self.wrt == 0 { q } else { kv };
        ThunkIo::new()
            .read(self.q, q)
            .read(self.k, kv)
            .read(self.v, kv)
            .read(self.dy, q)
            .read(
                self.mask,
                mask_bytes(
                    self.mask_kind,
                    self.batch,
                    self.heads,
                    self.seq,
                    self.kv_seq,
                    F32,
                ),
            )
            .write(self.out, out)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let wrt = ["q", "k", "v"]
            .get(self.wrt as usize)
            .copied()
            .unwrap_or("?");
        write!(
            f,
            "wrt={wrt} b={} s={} kv_s={} heads={} d={} mask={} dy={} out={}",
            self.batch,
            self.seq,
            self.kv_seq,
            self.heads,
            self.head_dim,
            self.mask_kind,
            Off(self.dy),
            Off(self.out)
        )
    }
}
