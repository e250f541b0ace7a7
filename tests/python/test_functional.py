"""encore.functional's op pairs vs torch, run live: rotary position embedding and gated activations.

Rotary (RoPE): the oracle is Hugging Face's convention written out below in torch (rotate_half,
apply_rotary_pos_emb with cos/sin from the default RotaryEmbedding: inv_freq = 1 / theta^(arange(0, R, 2) / R),
freqs = position_ids.float() * inv_freq, emb = cat(freqs, freqs)); partial rotary as HF's partial_rotary_factor
models apply it (rotate the first R dims of each head, pass the rest). It is checked once against transformers'
own Qwen3RotaryEmbedding and apply_rotary_pos_emb. Cases cover the RoPE bases of docs/anchors (NomicBERT 1000,
ModernBERT local 10000 / global 160000, GTE 500000, Qwen3 1000000), head dims 2..128, partial rotary, shared
(T) and per-sequence (B, T) position ids, and positions up to 8191 (ModernBERT's 8,192-token inputs).
Tolerances (float32):
  * tables: |cos, sin - HF's| <= TOL_TABLE absolute;
  * rotation with HF's own tables: |y - HF| <= TOL_ROTATE * max|x| (one product-sum per element);
  * end to end (encore's tables and rotation vs HF's): TOL_SINGLE = 1e-5 absolute;
  * backward vs torch autograd: max|dx - torch| <= TOL_GRAD_REL * max|torch|.
Gated activations: x (..., 2F) -> act(x0)*x1 (gate="first") or act(x1)*x0 (gate="second"), each family's
split written out in torch as its modeling code does it; forward TOL_SINGLE absolute, backward TOL_GRAD_REL.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import TOL_SINGLE, assert_close, randn, require_encore

encore = require_encore()
ef = encore.functional

TOL_TABLE = 1e-6
TOL_ROTATE = 1e-6
TOL_GRAD_REL = 1e-5


def rel_err(actual, expected) -> float:
    expected = np.asarray(expected)
    return float(np.abs(np.asarray(actual) - expected).max() / max(np.abs(expected).max(), 1e-30))


# ---------------------------------------------------------------------------------------------- HF's RoPE in torch
def hf_cos_sin(position_ids: torch.Tensor, rotary_dim: int, theta: float):
    """transformers' default RotaryEmbedding.forward: (cos, sin) of shape position_ids.shape + (rotary_dim,)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))
    freqs = position_ids[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_apply_rotary(q, cos, sin, unsqueeze_dim=1):
    """apply_rotary_pos_emb for one tensor q (B, H, T, D), cos/sin (B, T, R) or (T, R); the first R dims of each
    head rotate, the rest pass through (HF's partial_rotary_factor models)."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    R = cos.shape[-1]
    q_rot, q_pass = q[..., :R], q[..., R:]
    return torch.cat(((q_rot * cos) + (rotate_half(q_rot) * sin), q_pass), dim=-1)


@dataclass(frozen=True)
class RopeCase:
    name: str
    B: int
    T: int
    H: int
    D: int
    R: int  # rotary dims per head (== D: full rotary)
    theta: float
    positions: str = "arange"  # arange (shared (T) ids) | per_sequence ((B, T), offsets) | long (up to 8191)

    def __str__(self):
        return self.name


ROPE_CASES = [
    RopeCase("qwen3-D128-theta1e6", 2, 9, 3, 128, 128, 1_000_000.0),
    RopeCase("modernbert-global-D64-theta160000", 2, 7, 2, 64, 64, 160_000.0),
    RopeCase("modernbert-local-D64-theta10000", 1, 11, 2, 64, 64, 10_000.0, "per_sequence"),
    RopeCase("nomic-D64-theta1000", 3, 5, 2, 64, 64, 1_000.0, "per_sequence"),
    RopeCase("gte-D64-theta500000", 2, 6, 4, 64, 64, 500_000.0),
    RopeCase("partial-D80-R32", 2, 5, 2, 80, 32, 10_000.0),
    RopeCase("partial-D64-R16-per-sequence", 2, 6, 3, 64, 16, 10_000.0, "per_sequence"),
    RopeCase("odd-D6", 2, 4, 3, 6, 6, 10_000.0),
    RopeCase("tiny-D2", 1, 3, 1, 2, 2, 10_000.0),
    RopeCase("D34-tail", 2, 5, 2, 34, 34, 10_000.0),
    RopeCase("modernbert-global-8k-positions", 1, 64, 2, 64, 64, 160_000.0, "long"),
    RopeCase("qwen3-8k-positions", 2, 48, 1, 128, 128, 1_000_000.0, "long"),
    RopeCase("modernbert-local-8k-positions", 1, 64, 2, 64, 64, 10_000.0, "long"),
]


def position_ids(c: RopeCase) -> np.ndarray:
    if c.positions == "arange":
        return np.arange(c.T, dtype=np.int64)
    if c.positions == "per_sequence":  # left padding / packed sequences: each row starts elsewhere
        return np.stack([np.arange(c.T, dtype=np.int64) + 3 * b for b in range(c.B)])
    assert c.positions == "long"
    ids = np.sort(np.random.choice(8192, size=(c.B, c.T), replace=True), axis=-1).astype(np.int64)
    ids[:, -1] = 8191
    return ids


@pytest.mark.parametrize("c", ROPE_CASES, ids=str)
def test_rotary_embedding_matches_hf(c: RopeCase):
    ids = position_ids(c)
    cos, sin = ef.rotary_cos_sin(ids, c.R, c.theta)
    assert cos.shape == ids.shape + (c.R // 2,) and sin.shape == cos.shape and cos.dtype == np.float32
    tcos, tsin = hf_cos_sin(torch.from_numpy(ids), c.R, c.theta)
    assert torch.equal(tcos[..., : c.R // 2], tcos[..., c.R // 2:])  # HF's table is the half, twice
    e_tab = max(np.abs(cos - tcos[..., : c.R // 2].numpy()).max(), np.abs(sin - tsin[..., : c.R // 2].numpy()).max())
    print(f"{c}: cos/sin max abs err {e_tab:.2e}")
    assert e_tab <= TOL_TABLE, f"{c}: cos/sin max abs err {e_tab:.2e}"

    # the rotation alone is checked on HF's own tables (their half)
    hcos = np.ascontiguousarray(tcos[..., : c.R // 2].numpy())
    hsin = np.ascontiguousarray(tsin[..., : c.R // 2].numpy())
    if tcos.dim() == 2:  # HF's position_ids are (B, T): a shared (T) row is batch 1, broadcast
        tcos, tsin = tcos[None], tsin[None]
    x = (2 * randn(c.B, c.T, c.H, c.D)).astype(np.float32)  # encore's layout (B, T, heads, head_dim)
    q = torch.from_numpy(x).transpose(1, 2)  # HF's (B, heads, T, head_dim)
    expected = hf_apply_rotary(q, tcos, tsin).transpose(1, 2).contiguous().numpy()
    y_hf_tables = ef.rotary_embedding(x, hcos, hsin)
    e_rot = np.abs(y_hf_tables - expected).max() / np.abs(x).max()
    print(f"{c}: rotation on HF's tables, max err / max|x| {e_rot:.2e}")
    assert e_rot <= TOL_ROTATE, f"{c}: rotation err {e_rot:.2e}"
    if c.R < c.D:  # the pass-through dims are copied exactly
        assert np.array_equal(y_hf_tables[..., c.R:], x[..., c.R:])
    # end to end
    y = ef.rotary_embedding(x, cos, sin)
    e_end = assert_close(y, expected, TOL_SINGLE, f"{c} end to end")
    print(f"{c}: end to end max abs err {e_end:.2e}")
    assert np.abs(expected - x).max() > 1e-2, "the case rotates something (not the identity)"

    # backward: torch autograd through HF's formula
    g = randn(c.B, c.T, c.H, c.D)
    with torch.enable_grad():
        qt = torch.from_numpy(x.copy()).transpose(1, 2).requires_grad_(True)
        yt = hf_apply_rotary(qt, tcos, tsin).transpose(1, 2)
        (yt * torch.from_numpy(g)).sum().backward()
    want = qt.grad.transpose(1, 2).numpy()
    dx = ef.rotary_embedding_backward(g, cos, sin)
    e = rel_err(dx, want)
    print(f"{c}: backward rel err {e:.2e}")
    assert dx.shape == x.shape and e <= TOL_GRAD_REL, f"{c}: backward rel err {e:.2e}"


def test_rotary_oracle_is_transformers_own():
    """The torch oracle above equals transformers' Qwen3RotaryEmbedding + apply_rotary_pos_emb (bit for bit on the
    tables, 1e-6 on the rotation), so the cases test HF's convention, not a private reading of it."""
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding, apply_rotary_pos_emb

    B, T, H, D, theta = 2, 9, 3, 32, 1_000_000.0
    cfg = Qwen3Config(hidden_size=H * D, num_attention_heads=H, num_key_value_heads=H, head_dim=D,
                      rope_parameters={"rope_type": "default", "rope_theta": theta})
    ids = torch.from_numpy(np.stack([np.arange(T) + 5 * b for b in range(B)]).astype(np.int64))
    q = torch.from_numpy(randn(B, H, T, D))
    cos, sin = Qwen3RotaryEmbedding(cfg)(q, ids)
    mine_cos, mine_sin = hf_cos_sin(ids, D, theta)
    assert torch.equal(cos, mine_cos) and torch.equal(sin, mine_sin)
    q_hf, _ = apply_rotary_pos_emb(q, q, cos, sin)
    assert torch.allclose(q_hf, hf_apply_rotary(q, cos, sin), rtol=0, atol=1e-6)
    y = ef.rotary_embedding(np.ascontiguousarray(q.transpose(1, 2).numpy()), *ef.rotary_cos_sin(ids.numpy(), D, theta))
    assert_close(y, q_hf.transpose(1, 2).contiguous().numpy(), TOL_SINGLE, "vs transformers' Qwen3 RoPE")


def test_rotary_errors_name_the_argument():
    x = randn(2, 5, 3, 8)
    cos, sin = ef.rotary_cos_sin(np.arange(5), 8)
    with pytest.raises(encore.Error, match="rotary_dim = 2·cos.size\\(-1\\) = 10 must be in"):
        ef.rotary_embedding(x, *ef.rotary_cos_sin(np.arange(5), 10))
    with pytest.raises(encore.Error, match="cos/sin: expected"):
        ef.rotary_embedding(x, cos[:4], sin[:4])
    with pytest.raises(encore.Error, match="rotary_dim must be even"):
        ef.rotary_cos_sin(np.arange(5), 7)
    with pytest.raises(encore.Error, match="position -2 at index 1"):
        ef.rotary_cos_sin(np.array([0, -2]), 8)
    with pytest.raises(encore.Error, match="expected an integer dtype"):
        ef.rotary_cos_sin(np.arange(5, dtype=np.float32), 8)
    with pytest.raises(encore.Error, match="expected \\(..., T, heads, head_dim\\)"):
        ef.rotary_embedding_backward(randn(5, 8), cos, sin)


# ---------------------------------------------------------------------------------------------- gated activations
def modernbert_geglu(h):  # ModernBertMLP: input, gate = Wi(x).chunk(2); act(input) * gate
    inp, gate = h.chunk(2, dim=-1)
    return F.gelu(inp) * gate


def qwen3_swiglu(h):  # Qwen3MLP: act(gate_proj(x)) * up_proj(x), the two projections stacked [gate | up]
    gate, up = h.chunk(2, dim=-1)
    return F.silu(gate) * up


def gte_geglu(h):  # GTE (NewGatedMLP): up_gate_proj, first half up, second half gate, act on the gate
    up, gate = h.chunk(2, dim=-1)
    return F.gelu(gate) * up


def nomic_swiglu(h):  # NomicBERT: fc11(x) * act(fc12(x)), stacked [fc11 | fc12]
    y, gate = h.chunk(2, dim=-1)
    return y * F.silu(gate)


def t5_gated_gelu(h):  # T5 v1.1 gated-gelu: gelu_new(wi_0(x)) * wi_1(x), stacked [wi_0 | wi_1]
    a, b = h.chunk(2, dim=-1)
    return F.gelu(a, approximate="tanh") * b


def relu_glu(h):
    a, b = h.chunk(2, dim=-1)
    return F.relu(a) * b


# (name, torch oracle, encore activation, encore gate, F, leading shape)
GATED_CASES = [
    ("modernbert-geglu", modernbert_geglu, "gelu", "first", 1152 // 8, (2, 5)),
    ("modernbert-geglu-alias", modernbert_geglu, "geglu", "first", 17, (3,)),
    ("qwen3-swiglu", qwen3_swiglu, "silu", "first", 96, (2, 3)),
    ("qwen3-swiglu-alias", qwen3_swiglu, "swiglu", "first", 33, (4,)),
    ("gte-geglu-second", gte_geglu, "gelu", "second", 64, (2, 3)),
    ("nomic-swiglu-second", nomic_swiglu, "silu", "second", 31, (2, 2, 2)),
    ("t5-gated-gelu-tanh", t5_gated_gelu, "gelu_new", "first", 40, (3, 2)),
    ("relu-glu", relu_glu, "relu", "first", 7, (5,)),
    ("F1", qwen3_swiglu, "silu", "first", 1, (3,)),
]


@pytest.mark.parametrize("case", GATED_CASES, ids=[c[0] for c in GATED_CASES])
def test_gated_activation_matches_torch(case):
    name, oracle, activation, gate, Fdim, lead = case
    x = (2 * randn(*lead, 2 * Fdim)).astype(np.float32)
    expected = oracle(torch.from_numpy(x)).numpy()
    y = ef.gated_activation(x, activation, gate)
    assert_close(y, expected, TOL_SINGLE, f"{name} forward")
    other = ef.gated_activation(x, activation, "second" if gate == "first" else "first")
    assert np.abs(other - expected).max() > 1e-2, f"{name}: the two gate orders must differ (non-vacuous)"
    g = randn(*lead, Fdim)
    with torch.enable_grad():
        xt = torch.from_numpy(x.copy()).requires_grad_(True)
        (oracle(xt) * torch.from_numpy(g)).sum().backward()
    dx = ef.gated_activation_backward(g, x, activation, gate)
    e = rel_err(dx, xt.grad.numpy())
    print(f"{name}: backward rel err {e:.2e}")
    assert dx.shape == x.shape and e <= TOL_GRAD_REL, f"{name}: backward rel err {e:.2e}"


def test_gated_activation_errors():
    with pytest.raises(encore.UsageError, match="gate should be 'first'"):
        ef.gated_activation(randn(2, 8), "silu", "middle")
    with pytest.raises(encore.Error, match="activation should be one of"):
        ef.gated_activation(randn(2, 8), "swish-ish")
    with pytest.raises(encore.Error, match="expected an even last dimension"):
        ef.gated_activation(randn(2, 7), "silu")
    with pytest.raises(encore.Error, match="gated dout"):
        ef.gated_activation_backward(randn(2, 3), randn(2, 8), "silu")
