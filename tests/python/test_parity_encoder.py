"""encore.nn.TransformerEncoderLayer / TransformerEncoder vs torch.nn.

Structured sampling instead of the full cartesian product (every value of
every axis appears at least once):

  MASK_MATRIX        every mask kind x norm_first x activation, single layer
  STACK_MASK_MATRIX  every mask kind x norm_first x final LayerNorm, 6 layers
  SHAPE_SWEEP        B=1, T=1, odd T=67, d_model in {36,40,44,56} (none a
                     multiple of 16), nhead 1..8, odd dim_feedforward;
                     each shape as single layer and as 6-layer stack
  BIAS_LAYOUT        bias x batch_first x norm_first x {layer, stack}
  MISC               layer_norm_eps, short stacks

Tolerance (max abs diff): TOL_SINGLE = 1e-5 for one layer, TOL_STACK = 1e-4
for stacks.  Dropout is left at torch's default 0.1 so that eval() must
really disable it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from conftest import (
    SELF_MASK_KINDS,
    TOL_SINGLE,
    TOL_STACK,
    assert_close,
    call_kwargs,
    layout,
    make_twin,
    randn,
    randomize_,
    self_attn_masks,
    t,
    require_encore,
    to_numpy_state,
)

encore = require_encore()
enn = encore.nn


@dataclass(frozen=True)
class EncCase:
    name: str
    tol: float
    mask: str = "none"
    norm_first: bool = False
    activation: str = "relu"
    bias: bool = True
    batch_first: bool = False
    B: int = 3
    T: int = 7
    d_model: int = 36
    nhead: int = 4
    dff: int = 72
    eps: float = 1e-5
    num_layers: int = 0  # 0: bare TransformerEncoderLayer; N: TransformerEncoder of N layers
    final_norm: bool = False  # TransformerEncoder(norm=LayerNorm) (stacks only)

    def __str__(self):
        return self.name


def layer_case(name, **kw) -> EncCase:
    return EncCase(name=f"layer-{name}", tol=TOL_SINGLE, num_layers=0, **kw)


def stack_case(name, num_layers=6, **kw) -> EncCase:
    return EncCase(name=f"stack{num_layers}-{name}", tol=TOL_STACK, num_layers=num_layers, **kw)


def _ln(nf):
    return "preLN" if nf else "postLN"


MASK_MATRIX = [
    layer_case(f"{m}-{_ln(nf)}-{act}", mask=m, norm_first=nf, activation=act)
    for m in SELF_MASK_KINDS
    for nf in (False, True)
    for act in ("relu", "gelu")
]

STACK_MASK_MATRIX = [
    stack_case(f"{m}-{_ln(nf)}-{'norm' if fn else 'nonorm'}-{act}", mask=m, norm_first=nf,
               final_norm=fn, activation=act)
    for i, m in enumerate(SELF_MASK_KINDS)
    for nf in (False, True)
    for fn, act in ((False, ("relu", "gelu")[i % 2]), (True, ("gelu", "relu")[i % 2]))
]

# (B, T, d_model, nhead, dim_feedforward, mask)
_SHAPES = [
    (1, 1, 36, 4, 72, "none"),  # B=1, T=1
    (1, 1, 36, 3, 50, "causal_flag"),  # causal on a single token
    (1, 67, 44, 2, 50, "causal_flag"),  # B=1, odd T
    (1, 9, 36, 4, 72, "key_padding"),  # B=1 padded
    (2, 67, 44, 4, 130, "key_padding"),  # odd T, padded
    (3, 5, 36, 1, 72, "bool_mask"),  # single head
    (2, 9, 36, 3, 37, "float_mask"),
    (4, 6, 40, 5, 80, "pad_causal"),
    (2, 11, 36, 6, 72, "none"),  # head_dim 6
    (3, 8, 56, 7, 112, "key_padding"),
    (2, 13, 40, 8, 64, "pad_float_mask"),  # head_dim 5
    (5, 1, 44, 4, 88, "key_padding"),  # T=1, B=5
    (2, 3, 6, 6, 7, "causal_mask"),  # head_dim 1
]
SHAPE_SWEEP = []
for _i, (_B, _T, _d, _h, _f, _m) in enumerate(_SHAPES):
    _common = dict(B=_B, T=_T, d_model=_d, nhead=_h, dff=_f, mask=_m,
                   norm_first=bool(_i % 2), activation=("relu", "gelu")[(_i // 2) % 2],
                   batch_first=bool((_i // 3) % 2))
    _tag = f"B{_B}-T{_T}-d{_d}-h{_h}-ff{_f}-{_m}"
    SHAPE_SWEEP.append(layer_case(_tag, **_common))
    SHAPE_SWEEP.append(stack_case(_tag, final_norm=bool(_i % 3 == 0), **_common))

BIAS_LAYOUT = [
    (layer_case if n == 0 else stack_case)(
        f"bias{int(b)}-bf{int(bf)}-{_ln(nf)}", B=2, T=10, d_model=44, nhead=4, dff=90,
        mask="pad_causal", bias=b, batch_first=bf, norm_first=nf,
        activation="gelu" if bf else "relu", final_norm=(n > 0 and nf))
    for b in (True, False)
    for bf in (False, True)
    for nf in (False, True)
    for n in (0, 6)
]

MISC = [
    layer_case("eps1e-3-postLN", eps=1e-3, mask="key_padding"),
    layer_case("eps1e-3-preLN", eps=1e-3, norm_first=True, mask="key_padding"),
    stack_case("eps1e-6", eps=1e-6, final_norm=True, mask="float_mask"),
    stack_case("1layer-norm", num_layers=1, final_norm=True, mask="pad_causal"),
    stack_case("2layers", num_layers=2, mask="bool_mask", norm_first=True),
]

CASES = MASK_MATRIX + STACK_MASK_MATRIX + SHAPE_SWEEP + BIAS_LAYOUT + MISC
assert len({c.name for c in CASES}) == len(CASES), "duplicate case names"


# ---------------------------------------------------------------------------
def build_pair(c: EncCase):
    """torch module (randomized, eval) and its encore twin with the same weights."""
    kw = dict(dim_feedforward=c.dff, dropout=0.1, activation=c.activation,
              layer_norm_eps=c.eps, batch_first=c.batch_first, norm_first=c.norm_first,
              bias=c.bias)
    tl = torch.nn.TransformerEncoderLayer(c.d_model, c.nhead, **kw)
    el = enn.TransformerEncoderLayer(c.d_model, c.nhead, **kw)
    if c.num_layers == 0:
        tm, em = tl, el
    else:
        tnorm = torch.nn.LayerNorm(c.d_model, eps=c.eps, bias=c.bias) if c.final_norm else None
        enorm = enn.LayerNorm(c.d_model, eps=c.eps, bias=c.bias) if c.final_norm else None
        tm = torch.nn.TransformerEncoder(tl, c.num_layers, norm=tnorm, enable_nested_tensor=False)
        em = enn.TransformerEncoder(el, c.num_layers, norm=enorm)
    randomize_(tm).eval()
    return tm, make_twin(tm, em)


def run_torch(c: EncCase, tm, x, masks, *, use_masks=True):
    with torch.no_grad():
        if not use_masks:
            return tm(t(x)).numpy()
        if c.num_layers == 0:
            y = tm(t(x), src_mask=t(masks.torch_mask), src_key_padding_mask=t(masks.torch_kpm),
                   is_causal=masks.is_causal)
        else:
            y = tm(t(x), mask=t(masks.torch_mask), src_key_padding_mask=t(masks.torch_kpm),
                   is_causal=True if masks.is_causal else None)
    return y.numpy()


def run_encore(c: EncCase, em, x, masks):
    if c.num_layers == 0:
        return em(x, **call_kwargs(src_mask=masks.mask, src_key_padding_mask=masks.kpm),
                  is_causal=masks.is_causal)
    return em(x, **call_kwargs(mask=masks.mask, src_key_padding_mask=masks.kpm,
                               is_causal=True if masks.is_causal else None))


@pytest.mark.parametrize("c", CASES, ids=str)
def test_encoder_parity(c: EncCase):
    tm, em = build_pair(c)
    x = layout(randn(c.B, c.T, c.d_model), c.batch_first)
    masks = self_attn_masks(c.mask, c.B, c.T)

    expected = run_torch(c, tm, x, masks)
    if c.mask != "none" and c.T > 1:
        # guard: the mask must actually change the oracle, else the case is vacuous
        unmasked = run_torch(c, tm, x, masks, use_masks=False)
        effect = float(np.abs(unmasked - expected).max())
        assert effect > 1e-3, f"{c}: mask changes torch output by only {effect:.1e} (vacuous case)"

    actual = run_encore(c, em, x, masks)
    # torch 2.13's encoder path (SDPA, need_weights=False) gives fully masked
    # rows zero probabilities - finite, identical to encore's documented
    # behaviour - so everything is compared.  Should a future torch return NaN
    # there, those positions are skipped and encore must still be finite.
    assert_close(actual, expected, c.tol, str(c), expected_nan_ok=masks.fully_masked_rows)


# ---------------------------------------------------------------------------
# API details not covered by the matrix
# ---------------------------------------------------------------------------
def test_positional_constructor_args_match_torch_order():
    # d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
    # batch_first, norm_first, bias  -- all positional
    args = (40, 5, 60, 0.0, "gelu", 1e-4, True, True, False)
    tl = randomize_(torch.nn.TransformerEncoderLayer(*args)).eval()
    el = make_twin(tl, enn.TransformerEncoderLayer(*args))
    x = randn(2, 6, 40)  # batch_first=True
    with torch.no_grad():
        expected = tl(t(x)).numpy()
    assert_close(el(x), expected, TOL_SINGLE, "positional-args layer")


def test_explicit_none_arguments_equal_defaults():
    c = layer_case("none-args")
    tm, em = build_pair(c)
    x = layout(randn(c.B, c.T, c.d_model), c.batch_first)
    with torch.no_grad():
        expected = tm(t(x)).numpy()
    assert_close(em(x, src_mask=None, src_key_padding_mask=None, is_causal=False),
                 expected, TOL_SINGLE, "layer with explicit None args")
    cs = stack_case("none-args", num_layers=2)
    tm, em = build_pair(cs)
    with torch.no_grad():
        expected = tm(t(x)).numpy()
    assert_close(em(x, mask=None, src_key_padding_mask=None, is_causal=None),
                 expected, TOL_STACK, "stack with explicit None args")


def test_non_contiguous_input():
    """A strided numpy view must give the same result as its contiguous copy."""
    c = layer_case("strided", mask="key_padding")
    tm, em = build_pair(c)
    big = randn(c.T, 2 * c.B, c.d_model)
    x_view = big[:, ::2, :]  # (T, B, E), non-contiguous
    assert not x_view.flags.c_contiguous
    masks = self_attn_masks(c.mask, c.B, c.T)
    expected = run_torch(c, tm, np.ascontiguousarray(x_view), masks)
    assert_close(run_encore(c, em, x_view, masks), expected, TOL_SINGLE, "non-contiguous src")


def test_inputs_not_modified():
    c = layer_case("inplace", mask="pad_float_mask")
    _, em = build_pair(c)
    x = layout(randn(c.B, c.T, c.d_model), c.batch_first)
    masks = self_attn_masks(c.mask, c.B, c.T)
    x0, m0, k0 = x.copy(), masks.mask.copy(), masks.kpm.copy()
    run_encore(c, em, x, masks)
    assert np.array_equal(x, x0) and np.array_equal(masks.mask, m0) and np.array_equal(masks.kpm, k0)


def test_training_flag_and_eval_train():
    el = enn.TransformerEncoderLayer(36, 4, 72)
    assert el.training is True, "modules must start in training mode like torch"
    ret = el.eval()
    assert el.training is False
    assert ret is el, "eval() returns the module itself (torch chaining)"
    el.train()
    assert el.training is True
    el.train(False)
    assert el.training is False
    el.train(mode=True)
    assert el.training is True
    enc = enn.TransformerEncoder(enn.TransformerEncoderLayer(36, 4, 72), 2)
    assert enc.training is True
    enc.eval()
    assert enc.training is False


@pytest.mark.parametrize("norm_first", [False, True], ids=["postLN", "preLN"])
def test_training_mode_with_zero_dropout_matches_torch(norm_first):
    """dropout=0.0 in train mode is the identity too (1e-5)."""
    tl = randomize_(torch.nn.TransformerEncoderLayer(36, 4, 72, 0.0, norm_first=norm_first))
    el = enn.TransformerEncoderLayer(36, 4, 72, 0.0, norm_first=norm_first)
    el.load_state_dict(to_numpy_state(tl))
    tl.train()
    el.train()
    x = randn(5, 2, 36)
    with torch.no_grad():
        expected = tl(t(x)).numpy()
    assert_close(el(x), expected, TOL_SINGLE, "train mode, dropout=0")


def test_stack_layers_are_independent_copies():
    """Loading different weights per layer must give per-layer results: an
    encore stack that aliased its layers would fail here (randomize_ gives
    each torch layer distinct weights)."""
    c = stack_case("independent", num_layers=3)
    tm, em = build_pair(c)
    sd = to_numpy_state(tm)
    assert not np.array_equal(sd["layers.0.linear1.weight"], sd["layers.1.linear1.weight"])
    got = em.state_dict()
    for k, v in sd.items():
        assert np.array_equal(got[k], v), k
    x = layout(randn(c.B, c.T, c.d_model), c.batch_first)
    with torch.no_grad():
        expected = tm(t(x)).numpy()
    assert_close(em(x), expected, TOL_STACK, str(c))


def test_case_table_covers_every_axis_value():
    """Meta-test: the structured sampling really hits every value of every axis."""
    def values(attr):
        return {getattr(c, attr) for c in CASES}

    assert values("mask") == set(SELF_MASK_KINDS)
    assert values("norm_first") == {False, True}
    assert values("activation") == {"relu", "gelu"}
    assert values("bias") == {False, True}
    assert values("batch_first") == {False, True}
    assert {0, 6} <= values("num_layers")
    assert values("final_norm") == {False, True}
    assert set(range(1, 9)) <= values("nhead")
    assert 1 in values("B") and 1 in values("T") and 67 in values("T")
    assert any(d % 16 for d in values("d_model"))
    for c in CASES:
        assert c.d_model % c.nhead == 0, c
        assert c.tol == (TOL_SINGLE if c.num_layers == 0 else TOL_STACK), c
    # single-layer and 6-layer stack with and without final norm, for every mask kind
    for m in SELF_MASK_KINDS:
        assert any(c.mask == m and c.num_layers == 0 for c in CASES)
        assert any(c.mask == m and c.num_layers == 6 and c.final_norm for c in CASES)
        assert any(c.mask == m and c.num_layers == 6 and not c.final_norm for c in CASES)


def test_dropout_only_in_training_mode():
    """Dropout is the identity in eval(); in train() with dropout > 0 it really
    drops (output changes), and encore.manual_seed makes the draws repeatable."""
    tl = randomize_(torch.nn.TransformerEncoderLayer(36, 4, 72, dropout=0.5)).eval()
    el = make_twin(tl, enn.TransformerEncoderLayer(36, 4, 72, dropout=0.5))
    x = randn(6, 2, 36)
    with torch.no_grad():
        expected = tl(t(x)).numpy()
    y_eval = el(x)
    assert_close(y_eval, expected, TOL_SINGLE, "eval with dropout=0.5")
    el.train()
    if hasattr(encore, "manual_seed"):
        encore.manual_seed(1234)
    y_train = el(x)
    assert np.isfinite(y_train).all()
    assert np.abs(y_train - y_eval).max() > 1e-2, "train() with dropout=0.5 must change the output"
    if hasattr(encore, "manual_seed"):
        encore.manual_seed(1234)
        assert np.array_equal(el(x), y_train), "same manual_seed -> same dropout draws"
    el.eval()
    assert np.array_equal(el(x), y_eval), "back in eval(): deterministic, dropout off"


def test_share_parameters_albert():
    """encore extension (docs/torch_differences.md): TransformerEncoder(...,
    share_parameters=True) applies one layer's weights num_layers times; its
    state_dict has layers.0.* only.  Reference: the torch layer applied 3x."""
    d, h, n = 36, 4, 3
    tl = randomize_(torch.nn.TransformerEncoderLayer(d, h, 72, norm_first=True)).eval()
    tnorm = randomize_(torch.nn.LayerNorm(d)).eval()
    em = enn.TransformerEncoder(enn.TransformerEncoderLayer(d, h, 72, norm_first=True), n,
                                norm=enn.LayerNorm(d), share_parameters=True)
    sd = {**{f"layers.0.{k}": v for k, v in to_numpy_state(tl).items()},
          **{f"norm.{k}": v for k, v in to_numpy_state(tnorm).items()}}
    assert sorted(em.state_dict()) == sorted(sd)
    em.load_state_dict(sd)
    em.eval()
    x = randn(7, 3, d)
    kpm = self_attn_masks("key_padding", 3, 7).kpm
    with torch.no_grad():
        y = t(x)
        for _ in range(n):
            y = tl(y, src_key_padding_mask=t(kpm))
        expected = tnorm(y).numpy()
    assert_close(em(x, src_key_padding_mask=kpm), expected, TOL_STACK, "shared-parameter stack")
