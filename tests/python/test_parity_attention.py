"""encore.nn.MultiheadAttention vs torch.nn.MultiheadAttention.

Tables:
  SELF_MATRIX   self-attention (query is key is value), every mask kind x
                every weights mode (averaged / per-head / need_weights=False)
  CROSS_MATRIX  cross-attention (S != T), kdim/vdim variants (torch then has
                q_proj_weight/k_proj_weight/v_proj_weight) x bias x batch_first
  SHAPES        B=1/T=1/S=1, head_dim 1, single head, 7 heads, long T/S
add_bias_kv / add_zero_attn are documented as unsupported (they must raise).

Tolerance: TOL_SINGLE = 1e-5 max abs diff, for the output and for the
attention weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from conftest import (
    NEG_INF,
    TOL_SINGLE,
    allow_first_key,
    assert_close,
    bool_to_float,
    call_kwargs,
    causal_mask,
    key_padding_mask,
    layout,
    make_twin,
    randn,
    randomize_,
    random_bool_mask,
    random_float_mask,
    require_encore,
    t,
)

encore = require_encore()
enn = encore.nn

# (need_weights, average_attn_weights)
WEIGHT_MODES = {"avgW": (True, True), "headW": (True, False), "noW": (False, True)}

MHA_MASK_KINDS = (
    "none",
    "kpm_bool",
    "kpm_float",  # additive float key padding mask (N(0,1) values and -inf)
    "bool2d",  # (T, S)
    "float2d",
    "bool3d",  # (B*nhead, T, S), index b*nhead + h
    "float3d",
    "causal_flag",  # encore: is_causal=True only; torch: causal mask + is_causal=True (T == S)
    "causal_mask",  # both: causal mask + is_causal=True (T == S)
    "kpm_bool2d",  # bool key padding + bool (T, S)
    "kpm_float3d",  # bool key padding + float 3-D mask (torch gets the kpm as float)
    "kpm_causal_flag",  # bool key padding + causal flag (T == S)
)
CAUSAL_KINDS = {"causal_flag", "causal_mask", "kpm_causal_flag"}


@dataclass(frozen=True)
class AttnCase:
    name: str
    mask: str = "none"
    weights: str = "avgW"
    E: int = 36
    H: int = 4
    B: int = 3
    T: int = 7
    S: int | None = None  # None: self-attention, the same array as query/key/value
    kdim: int | None = None
    vdim: int | None = None
    bias: bool = True
    batch_first: bool = False
    tol: float = TOL_SINGLE

    def __str__(self):
        return self.name


SELF_MATRIX = [
    AttnCase(f"self-{m}-{w}-bf{int(bf)}", mask=m, weights=w, batch_first=bf)
    for i, m in enumerate(MHA_MASK_KINDS)
    for j, w in enumerate(WEIGHT_MODES)
    for bf in [bool((i + j) % 2)]
]

_CROSS_MASKS = ("none", "kpm_bool", "bool3d", "float2d", "kpm_float3d", "kpm_float", "bool2d", "float3d")
_KV_DIMS = ((None, None), (24, 20), (12, None), (None, 28))
CROSS_MATRIX = []
for _i, ((_kd, _vd), _b, _bf) in enumerate(
        (kv, b, bf) for kv in _KV_DIMS for b in (True, False) for bf in (False, True)):
    _m = _CROSS_MASKS[_i % len(_CROSS_MASKS)]
    _w = list(WEIGHT_MODES)[_i % 3]
    CROSS_MATRIX.append(AttnCase(
        f"cross-k{_kd}-v{_vd}-bias{int(_b)}-bf{int(_bf)}-{_m}-{_w}", mask=_m, weights=_w,
        E=40, H=8, B=2, T=5, S=9, kdim=_kd, vdim=_vd, bias=_b, batch_first=_bf))

SHAPES = [
    AttnCase("B1-T1-self", B=1, T=1, mask="causal_flag", weights="headW"),
    AttnCase("B1-T1-S1-cross", B=1, T=1, S=1, mask="kpm_bool", weights="avgW"),
    AttnCase("B1-T1-S6-cross", B=1, T=1, S=6, mask="float3d", weights="headW"),
    AttnCase("headdim1", E=6, H=6, B=2, T=5, mask="bool3d", weights="headW"),
    AttnCase("single-head", E=36, H=1, B=2, T=8, S=3, kdim=10, vdim=10, mask="float2d"),
    AttnCase("7-heads", E=56, H=7, B=2, T=9, mask="kpm_causal_flag", weights="headW"),
    AttnCase("longT67-S33", E=44, H=4, B=2, T=67, S=33, mask="kpm_bool2d", weights="avgW", batch_first=True),
    AttnCase("long-self-T67", E=44, H=2, B=1, T=67, mask="causal_flag", weights="noW"),
    AttnCase("B5-T3-S2", E=40, H=5, B=5, T=3, S=2, vdim=7, mask="kpm_float3d", weights="headW"),
]

CASES = SELF_MATRIX + CROSS_MATRIX + SHAPES
assert len({c.name for c in CASES}) == len(CASES)


def mha_masks(kind: str, B: int, H: int, T: int, S: int):
    """(encore kwargs, torch kwargs) for a MultiheadAttention call."""
    if kind in CAUSAL_KINDS:
        assert T == S, kind
    kpm = key_padding_mask(B, S) if kind.startswith("kpm_") else None
    mask = None
    if kind in ("bool2d", "kpm_bool2d"):
        mask = random_bool_mask(T, S)
    elif kind == "float2d":
        mask = random_float_mask(T, S)
    elif kind == "bool3d":
        mask = random_bool_mask(B * H, T, S)
    elif kind in ("float3d", "kpm_float3d"):
        mask = random_float_mask(B * H, T, S)
    elif kind == "causal_mask":
        mask = causal_mask(T)
    if kpm is not None and mask is not None:
        mask = allow_first_key(mask)  # no accidental fully masked rows (tested separately)
    is_causal = kind in CAUSAL_KINDS
    if kind == "kpm_float":
        # additive float kpm; keep >=1 finite key per batch element
        kpm = np.random.randn(B, S).astype(np.float32)
        kpm[key_padding_mask(B, S)] = NEG_INF
    torch_mask = causal_mask(T) if (is_causal and mask is None) else mask
    torch_kpm = kpm
    if torch_mask is not None and torch_mask.dtype != np.bool_:
        torch_kpm = bool_to_float(kpm)  # torch deprecates mixed bool/float mask types
    enc_kw = call_kwargs(key_padding_mask=kpm, attn_mask=mask)
    enc_kw["is_causal"] = is_causal
    torch_kw = dict(key_padding_mask=t(torch_kpm), attn_mask=t(torch_mask), is_causal=is_causal)
    return enc_kw, torch_kw


def build_pair(c: AttnCase):
    kw = dict(dropout=0.1, bias=c.bias, kdim=c.kdim, vdim=c.vdim, batch_first=c.batch_first)
    tm = randomize_(torch.nn.MultiheadAttention(c.E, c.H, **kw)).eval()
    em = make_twin(tm, enn.MultiheadAttention(c.E, c.H, **kw))
    return tm, em


def make_inputs(c: AttnCase):
    q = layout(randn(c.B, c.T, c.E), c.batch_first)
    if c.S is None:
        return q, q, q
    k = layout(randn(c.B, c.S, c.kdim or c.E), c.batch_first)
    v = layout(randn(c.B, c.S, c.vdim or c.E), c.batch_first)
    return q, k, v


@pytest.mark.parametrize("c", CASES, ids=str)
def test_mha_parity(c: AttnCase):
    tm, em = build_pair(c)
    q, k, v = make_inputs(c)
    S = c.T if c.S is None else c.S
    need_weights, average = WEIGHT_MODES[c.weights]
    enc_kw, torch_kw = mha_masks(c.mask, c.B, c.H, c.T, S)

    with torch.no_grad():
        exp_out, exp_w = tm(t(q), t(k), t(v), need_weights=need_weights,
                            average_attn_weights=average, **torch_kw)
    if c.mask != "none" and c.T > 1:
        with torch.no_grad():
            plain, _ = tm(t(q), t(k), t(v), need_weights=False)
        effect = float((plain - exp_out).abs().max())
        assert effect > 1e-3, f"{c}: mask changes torch output by only {effect:.1e} (vacuous case)"

    result = em(q, k, v, need_weights=need_weights, average_attn_weights=average, **enc_kw)
    assert isinstance(result, tuple) and len(result) == 2, "forward returns (attn_output, attn_weights)"
    out, w = result
    assert_close(out, exp_out.numpy(), c.tol, f"{c} output")
    if not need_weights:
        assert w is None, f"{c}: need_weights=False must return None weights"
        return
    assert exp_w.shape == ((c.B, c.T, S) if average else (c.B, c.H, c.T, S))
    assert_close(w, exp_w.numpy(), c.tol, f"{c} weights")
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5, err_msg=f"{c}: weights rows sum to 1")


def test_mha_positional_forward_args():
    """torch order: query, key, value, key_padding_mask, need_weights, attn_mask,
    average_attn_weights, is_causal."""
    c = AttnCase("positional", T=6)
    tm, em = build_pair(c)
    q, k, v = make_inputs(c)
    kpm = key_padding_mask(c.B, c.T)
    am = random_bool_mask(c.T, c.T)
    with torch.no_grad():
        eo, ew = tm(t(q), t(k), t(v), t(kpm), True, t(am), False, False)
    out, w = em(q, k, v, kpm, True, am, False, False)
    assert_close(out, eo.numpy(), TOL_SINGLE, "positional output")
    assert_close(w, ew.numpy(), TOL_SINGLE, "positional per-head weights")


def test_mha_default_returns_averaged_weights():
    c = AttnCase("defaults", E=40, H=5, B=2, T=4, S=6)
    tm, em = build_pair(c)
    q, k, v = make_inputs(c)
    with torch.no_grad():
        eo, ew = tm(t(q), t(k), t(v))
    out, w = em(q, k, v)
    assert w is not None and w.shape == (2, 4, 6)
    assert_close(out, eo.numpy(), TOL_SINGLE, "default output")
    assert_close(w, ew.numpy(), TOL_SINGLE, "default weights")


@pytest.mark.parametrize("weights", list(WEIGHT_MODES))
@pytest.mark.parametrize("mask_type", ["bool", "float"])
def test_fully_masked_rows(weights, mask_type):
    """encore's documented deviation: a query row with no allowed key gets
    probability 0 everywhere, so its output is exactly out_proj.bias (finite).

    torch 2.13 agrees on its SDPA path (need_weights=False) but returns NaN
    output *and* weights on its need_weights=True path.  So: the output is
    compared against torch's need_weights=False result everywhere; weights are
    compared against torch where torch is finite, and must be exactly 0 on the
    fully masked rows.
    """
    E, H, B, T = 36, 4, 3, 5
    need_weights, average = WEIGHT_MODES[weights]
    tm = randomize_(torch.nn.MultiheadAttention(E, H)).eval()
    em = make_twin(tm, enn.MultiheadAttention(E, H))
    x = randn(T, B, E)
    kpm = key_padding_mask(B, T, lengths=[T, T, 2])
    kpm[1, :] = True  # batch element 1: every key is padding -> all its rows dead
    am = allow_first_key(random_bool_mask(T, T))  # key 0 is real in batch elements 0 and 2
    am[3, :] = True  # query row 3: no key allowed, in every batch element
    if mask_type == "float":
        kpm, am = bool_to_float(kpm), bool_to_float(am)
    dead = np.zeros((B, T), bool)
    dead[1, :] = True
    dead[:, 3] = True

    with torch.no_grad():
        ref_out, _ = tm(t(x), t(x), t(x), key_padding_mask=t(kpm), attn_mask=t(am), need_weights=False)
        _, ref_w = tm(t(x), t(x), t(x), key_padding_mask=t(kpm), attn_mask=t(am),
                      need_weights=True, average_attn_weights=average)
    out, w = em(x, x, x, key_padding_mask=kpm, need_weights=need_weights, attn_mask=am,
                average_attn_weights=average)
    assert_close(out, ref_out.numpy(), TOL_SINGLE, "output incl. fully masked rows")
    bias = to_np_bias(tm)
    dead_out = out.transpose(1, 0, 2)[dead]  # (n_dead, E)
    assert np.abs(dead_out - bias).max() <= 1e-6, "fully masked row output must equal out_proj.bias"
    if not need_weights:
        assert w is None
        return
    assert_close(w, ref_w.numpy(), TOL_SINGLE, "weights (live rows)", expected_nan_ok=True)
    w_bhts = w if not average else w[:, None]
    assert np.all(np.moveaxis(w_bhts, 2, 1)[dead] == 0.0), "fully masked rows must have all-zero weights"
    live = ~dead
    np.testing.assert_allclose(np.moveaxis(w_bhts, 2, 1)[live].sum(-1), 1.0, atol=1e-5)


def to_np_bias(tm):
    return tm.out_proj.bias.detach().numpy()


@pytest.mark.parametrize("batch_first", [False, True])
def test_causal_flag_without_mask_is_causal(batch_first):
    """is_causal=True with no mask applies j > i masking (encore deviation:
    torch raises).  Checked two ways: against torch with the materialised
    causal mask, and by the causal property itself (output at i does not
    depend on inputs after i)."""
    E, H, B, T = 36, 6, 2, 8
    tm = randomize_(torch.nn.MultiheadAttention(E, H, batch_first=batch_first)).eval()
    em = make_twin(tm, enn.MultiheadAttention(E, H, batch_first=batch_first))
    x_btE = randn(B, T, E)
    x = layout(x_btE, batch_first)
    with torch.no_grad():
        eo, ew = tm(t(x), t(x), t(x), attn_mask=t(causal_mask(T)), is_causal=True,
                    average_attn_weights=False)
    out, w = em(x, x, x, is_causal=True, average_attn_weights=False)
    assert_close(out, eo.numpy(), TOL_SINGLE, "is_causal flag output")
    assert_close(w, ew.numpy(), TOL_SINGLE, "is_causal flag weights")
    assert np.all(w[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] == 0.0)
    # perturb the last 3 positions: the first T-3 outputs must not move
    x2_btE = x_btE.copy()
    x2_btE[:, T - 3:] += 1.0
    out2, _ = em(layout(x2_btE, batch_first), layout(x2_btE, batch_first),
                 layout(x2_btE, batch_first), is_causal=True, need_weights=False)
    o1 = out if batch_first else out.transpose(1, 0, 2)
    o2 = out2 if batch_first else out2.transpose(1, 0, 2)
    assert np.abs(o1[:, : T - 3] - o2[:, : T - 3]).max() <= 1e-6
    assert np.abs(o1[:, T - 3:] - o2[:, T - 3:]).max() > 1e-3


@pytest.mark.parametrize("T,S", [(4, 7), (7, 4)])
def test_causal_flag_cross_attention_is_top_left_aligned(T, S):
    """T != S with is_causal=True and no mask: key j > query i is masked
    (top-left aligned, docs/torch_differences.md); torch gets that mask explicitly."""
    E, H, B = 40, 5, 2
    tm = randomize_(torch.nn.MultiheadAttention(E, H, kdim=24, vdim=24)).eval()
    em = make_twin(tm, enn.MultiheadAttention(E, H, kdim=24, vdim=24))
    q, kv = randn(T, B, E), randn(S, B, 24)
    explicit = np.triu(np.ones((T, S), bool), 1)
    with torch.no_grad():
        eo, ew = tm(t(q), t(kv), t(kv), attn_mask=t(explicit), average_attn_weights=False)
    out, w = em(q, kv, kv, is_causal=True, average_attn_weights=False)
    assert_close(out, eo.numpy(), TOL_SINGLE, f"cross causal T={T} S={S} output")
    assert_close(w, ew.numpy(), TOL_SINGLE, f"cross causal T={T} S={S} weights")


@pytest.mark.parametrize("option", ["add_bias_kv", "add_zero_attn"])
def test_unsupported_mha_options_raise(option):
    """Documented deviation: these torch options raise instead of being ignored."""
    with pytest.raises(ValueError, match="(?i)not supported"):
        enn.MultiheadAttention(12, 4, **{option: True})
    enn.MultiheadAttention(12, 4, **{option: False})  # the default value is fine


def test_mask_given_with_is_causal_uses_the_mask():
    """When a mask is passed, it is used even with is_causal=True (torch rule)."""
    E, H, B, T = 36, 4, 2, 6
    tm = randomize_(torch.nn.MultiheadAttention(E, H)).eval()
    em = make_twin(tm, enn.MultiheadAttention(E, H))
    x = randn(T, B, E)
    am = random_bool_mask(T, T)  # NOT causal
    with torch.no_grad():
        eo, ew = tm(t(x), t(x), t(x), attn_mask=t(am), is_causal=True)
    out, w = em(x, x, x, attn_mask=am, is_causal=True)
    assert_close(out, eo.numpy(), TOL_SINGLE, "mask + is_causal output")
    assert_close(w, ew.numpy(), TOL_SINGLE, "mask + is_causal weights")
    assert np.any(w[:, np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] > 0), \
        "non-causal mask must be used as given"


def test_oracle_assumptions():
    """The torch 2.13 behaviour this suite is built around (if torch changes,
    re-read the notes in test_fully_masked_rows / conftest.SelfAttnMasks)."""
    m = torch.nn.MultiheadAttention(8, 2).eval()
    x = torch.randn(3, 1, 8)
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        m(x, x, x, is_causal=True)
    with torch.no_grad():
        m.out_proj.bias.copy_(torch.randn(8))
        kpm = torch.ones(1, 3, dtype=torch.bool)
        o_sdpa, _ = m(x, x, x, key_padding_mask=kpm, need_weights=False)
        o_math, w_math = m(x, x, x, key_padding_mask=kpm, need_weights=True)
    assert torch.allclose(o_sdpa, m.out_proj.bias.expand_as(o_sdpa))
    assert torch.isnan(o_math).all() and torch.isnan(w_math).all()


def test_case_table_covers_every_axis_value():
    assert {c.mask for c in CASES} == set(MHA_MASK_KINDS)
    assert {c.weights for c in CASES} == set(WEIGHT_MODES)
    assert {c.bias for c in CASES} == {True, False}
    assert {c.batch_first for c in CASES} == {True, False}
    assert any(c.S is None for c in CASES) and any(c.S not in (None, c.T) for c in CASES)
    assert any(c.kdim not in (None, c.E) for c in CASES)
    assert any(c.vdim not in (None, c.E) for c in CASES)
    for m in MHA_MASK_KINDS:  # each mask kind with every weights mode
        assert {c.weights for c in CASES if c.mask == m} == set(WEIGHT_MODES), m


@pytest.mark.parametrize("batch_first", [False, True])
def test_zero_keys(batch_first):
    """Attention over no keys (S = 0): torch's output is out_proj of zeros (its bias) and the weights are (B, T, 0).
    encore aborted the process here (dnnl_sgemm refuses K = 0, and the error left an OpenMP region)."""
    c = AttnCase("zero-keys", B=2, T=5, S=0, batch_first=batch_first)
    tm, em = build_pair(c)
    q, k, v = make_inputs(c)
    assert float(tm.out_proj.bias.detach().abs().max()) > 1e-3  # the expected output is not all zeros
    for need_weights, average in WEIGHT_MODES.values():
        for mode in ("eval", "train"):  # train: the forward that keeps what backward needs (dropout p=0.1: on zeros)
            getattr(tm, mode)()
            getattr(em, mode)()
            with torch.no_grad():
                exp_out, exp_w = tm(t(q), t(k), t(v), need_weights=need_weights, average_attn_weights=average)
            out, w = em(q, k, v, need_weights=need_weights, average_attn_weights=average)
            assert_close(out, exp_out.numpy(), TOL_SINGLE, f"zero keys {mode} output")
            assert (w is None) == (exp_w is None) and (w is None or w.shape == tuple(exp_w.shape)), (mode, need_weights)
