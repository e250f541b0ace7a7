"""state_dict / load_state_dict contract and input validation.

* encore.state_dict() has exactly torch's keys and shapes (float32 arrays),
  for every module class and the constructor variants that change the key set.
* load(torch state) -> state_dict() round trip is bit-exact.
* missing key, unexpected key, wrong shape, float64 array -> ValueError (or a
  subclass, e.g. encore.Error) whose message names the key; for a wrong shape
  it also names the expected shape.  Checked for EVERY key of every module.
* wrong forward input rank / width / mask shape -> ValueError naming the argument.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from conftest import randn, randomize_, require_encore, shape_pattern, to_numpy_state

encore = require_encore()
enn = encore.nn

# One constructor call, evaluated with nn = torch.nn and nn = encore.nn.
MODULES = {
    "MultiheadAttention": lambda nn: nn.MultiheadAttention(12, 4),
    "MultiheadAttention-kdim-vdim": lambda nn: nn.MultiheadAttention(12, 4, kdim=5, vdim=7),
    "MultiheadAttention-kdim-only": lambda nn: nn.MultiheadAttention(12, 4, kdim=5),
    "MultiheadAttention-nobias": lambda nn: nn.MultiheadAttention(12, 4, bias=False),
    "TransformerEncoderLayer": lambda nn: nn.TransformerEncoderLayer(12, 4, 20),
    "TransformerEncoderLayer-nobias": lambda nn: nn.TransformerEncoderLayer(12, 4, 20, bias=False),
    "TransformerEncoder": lambda nn: nn.TransformerEncoder(nn.TransformerEncoderLayer(12, 4, 20), 2),
    "TransformerEncoder-norm": lambda nn: nn.TransformerEncoder(
        nn.TransformerEncoderLayer(12, 4, 20), 3, norm=nn.LayerNorm(12)),
    "TransformerDecoderLayer": lambda nn: nn.TransformerDecoderLayer(12, 4, 20),
    "TransformerDecoderLayer-nobias": lambda nn: nn.TransformerDecoderLayer(12, 4, 20, bias=False),
    "TransformerDecoder": lambda nn: nn.TransformerDecoder(nn.TransformerDecoderLayer(12, 4, 20), 2),
    "TransformerDecoder-norm": lambda nn: nn.TransformerDecoder(
        nn.TransformerDecoderLayer(12, 4, 20), 2, norm=nn.LayerNorm(12)),
    "Transformer": lambda nn: nn.Transformer(12, 4, 1, 2, 20),
    "Transformer-nobias": lambda nn: nn.Transformer(12, 4, 2, 1, 20, bias=False),
    "LayerNorm": lambda nn: nn.LayerNorm(12),
    "LayerNorm-nobias": lambda nn: nn.LayerNorm(12, bias=False),
    "LayerNorm-noaffine": lambda nn: nn.LayerNorm(12, elementwise_affine=False),
    "RMSNorm": lambda nn: nn.RMSNorm(12),
    "RMSNorm-noaffine": lambda nn: nn.RMSNorm(12, eps=1e-6, elementwise_affine=False),
}
WITH_PARAMS = [k for k in MODULES if not k.endswith("noaffine")]


def pair(name):
    tm = randomize_(MODULES[name](torch.nn)).eval()
    return tm, MODULES[name](enn)


def load_error(em, sd) -> str:
    with pytest.raises(ValueError) as ei:
        em.load_state_dict(sd)
    return str(ei.value)


# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(MODULES))
def test_state_dict_keys_and_shapes_match_torch(name):
    tm, em = pair(name)
    got = em.state_dict()
    assert isinstance(got, dict)
    want = {k: tuple(v.shape) for k, v in tm.state_dict().items()}
    assert sorted(got) == sorted(want), (
        f"missing: {sorted(set(want) - set(got))}, extra: {sorted(set(got) - set(want))}")
    for k, v in got.items():
        assert isinstance(v, np.ndarray), k
        assert v.dtype == np.float32, (k, v.dtype)
        assert v.shape == want[k], (k, v.shape, want[k])


@pytest.mark.parametrize("name", list(MODULES))
def test_round_trip_is_exact(name):
    tm, em = pair(name)
    sd = to_numpy_state(tm)
    em.load_state_dict(sd)
    got = em.state_dict()
    assert sorted(got) == sorted(sd)
    for k in sd:
        assert np.array_equal(got[k], sd[k]), f"{k} changed in the round trip"
    # loading must copy (like torch's param.copy_): mutating the caller's
    # arrays afterwards has no effect
    snapshot = {k: v.copy() for k, v in sd.items()}
    for v in sd.values():
        v += 1.0
    for k, v in em.state_dict().items():
        assert np.array_equal(v, snapshot[k]), f"{k} aliases the loaded array"


@pytest.mark.parametrize("name", WITH_PARAMS)
def test_missing_key_names_the_key(name):
    tm, em = pair(name)
    sd = to_numpy_state(tm)
    for key in sd:
        bad = {k: v for k, v in sd.items() if k != key}
        msg = load_error(em, bad)
        assert key in msg, f"missing {key!r}: message does not name it: {msg!r}"


@pytest.mark.parametrize("name", list(MODULES))
def test_unexpected_key_names_the_key(name):
    tm, em = pair(name)
    sd = to_numpy_state(tm)
    bogus = "not_a_param.weight"
    msg = load_error(em, {**sd, bogus: np.zeros((12,), np.float32)})
    assert bogus in msg, msg
    if sd:  # a near-miss typo of a real key (the real key then also goes missing)
        real = sorted(sd)[0]
        typo = real.replace("weight", "wieght").replace("bias", "bais")
        bad = {(typo if k == real else k): v for k, v in sd.items()}
        msg = load_error(em, bad)
        assert typo in msg or real in msg, msg


@pytest.mark.parametrize("name", WITH_PARAMS)
def test_wrong_shape_names_key_and_expected_shape(name):
    tm, em = pair(name)
    sd = to_numpy_state(tm)
    for key, v in sd.items():
        wrong = np.zeros(v.shape[:-1] + (v.shape[-1] + 1,), np.float32)
        msg = load_error(em, {**sd, key: wrong})
        assert key in msg, f"wrong shape for {key!r}: message does not name it: {msg!r}"
        assert shape_pattern(v.shape).search(msg), (
            f"wrong shape for {key!r}: message does not give expected shape {v.shape}: {msg!r}")
        if v.ndim == 2 and v.shape[0] != v.shape[1]:  # transposed matrix, same numel
            msg = load_error(em, {**sd, key: np.ascontiguousarray(v.T)})
            assert key in msg, msg
        if v.ndim == 1:  # right numel, wrong rank
            msg = load_error(em, {**sd, key: v.reshape(1, -1)})
            assert key in msg, msg


@pytest.mark.parametrize("name", WITH_PARAMS)
def test_float64_array_rejected_naming_key(name):
    tm, em = pair(name)
    sd = to_numpy_state(tm)
    for key, v in sd.items():
        msg = load_error(em, {**sd, key: v.astype(np.float64)})
        assert key in msg, f"float64 {key!r}: message does not name it: {msg!r}"


def test_strict_false_ignores_missing_and_unexpected_but_not_shape():
    """torch semantics of load_state_dict(strict=False)."""
    tm, em = pair("TransformerEncoderLayer")
    sd = to_numpy_state(tm)
    before = em.state_dict()["linear2.weight"].copy()
    partial = {k: v for k, v in sd.items() if k != "linear2.weight"}
    partial["extra.weight"] = np.zeros(3, np.float32)
    em.load_state_dict(partial, strict=False)
    got = em.state_dict()
    assert np.array_equal(got["linear1.weight"], sd["linear1.weight"])
    assert np.array_equal(got["linear2.weight"], before)
    msg = load_error_kw(em, {**sd, "linear1.weight": np.zeros((3, 3), np.float32)}, strict=False)
    assert "linear1.weight" in msg


def load_error_kw(em, sd, **kw) -> str:
    with pytest.raises(ValueError) as ei:
        em.load_state_dict(sd, **kw)
    return str(ei.value)


def test_error_class_is_value_error():
    if hasattr(encore, "Error"):
        assert issubclass(encore.Error, ValueError)
    em = enn.LayerNorm(4)
    with pytest.raises(ValueError):
        em.load_state_dict({"weight": np.ones(5, np.float32), "bias": np.zeros(4, np.float32)})


# ---------------------------------------------------------------------------
# Forward input validation
# ---------------------------------------------------------------------------
def _eval(name):
    tm, em = pair(name)
    em.load_state_dict(to_numpy_state(tm))
    return em.eval()


def _raises_naming(arg_regex, fn, *a, **kw):
    with pytest.raises(ValueError) as ei:
        fn(*a, **kw)
    assert re.search(arg_regex, str(ei.value)), f"message should name {arg_regex!r}: {ei.value}"


E, T, S, B = 12, 5, 4, 2


def test_encoder_layer_bad_src():
    m = _eval("TransformerEncoderLayer")
    m(randn(T, B, E))  # sanity: the good call works
    _raises_naming(r"\bsrc\b", m, randn(T, B, E + 1))  # width
    _raises_naming(r"\bsrc\b", m, randn(T, B, 1, E))  # rank 4
    _raises_naming(r"\bsrc\b", m, randn(E))  # rank 1


def test_encoder_stack_bad_src():
    m = _eval("TransformerEncoder-norm")
    m(randn(T, B, E))
    _raises_naming(r"\bsrc\b", m, randn(T, B, E - 1))
    _raises_naming(r"\bsrc\b", m, randn(1, T, B, E))


def test_encoder_bad_masks():
    m = _eval("TransformerEncoderLayer")
    x = randn(T, B, E)
    _raises_naming(r"src_mask|attn_mask", m, x, src_mask=np.zeros((T + 1, T), bool))
    _raises_naming(r"src_mask|attn_mask", m, x, src_mask=np.zeros((B * 4 + 1, T, T), np.float32))
    _raises_naming(r"key_padding_mask", m, x, src_key_padding_mask=np.zeros((B, T + 1), bool))
    _raises_naming(r"key_padding_mask", m, x, src_key_padding_mask=np.zeros((B + 1, T), bool))


def test_mha_bad_inputs():
    m = _eval("MultiheadAttention-kdim-vdim")  # E=12, kdim=5, vdim=7
    q, k, v = randn(T, B, E), randn(S, B, 5), randn(S, B, 7)
    m(q, k, v)
    _raises_naming(r"\bquery\b", m, randn(T, B, E + 1), k, v)
    _raises_naming(r"\bkey\b", m, q, randn(S, B, 6), v)
    _raises_naming(r"\bvalue\b", m, q, k, randn(S, B, 8))
    _raises_naming(r"\bquery\b", m, randn(T, B, 1, E), k, v)
    _raises_naming(r"\bkey\b|\bvalue\b", m, q, randn(S, B + 1, 5), randn(S, B + 1, 7))  # batch
    _raises_naming(r"\bkey\b|\bvalue\b", m, q, k, randn(S + 1, B, 7))  # key/value length
    _raises_naming(r"attn_mask", m, q, k, v, attn_mask=np.zeros((T, S + 1), bool))
    _raises_naming(r"attn_mask", m, q, k, v, attn_mask=np.zeros((B * 4 + 1, T, S), np.float32))
    _raises_naming(r"key_padding_mask", m, q, k, v, key_padding_mask=np.zeros((B, S + 1), bool))


def test_decoder_bad_inputs():
    m = _eval("TransformerDecoderLayer")
    tgt, mem = randn(T, B, E), randn(S, B, E)
    m(tgt, mem)
    _raises_naming(r"\btgt\b", m, randn(T, B, E + 1), mem)
    _raises_naming(r"\bmemory\b", m, tgt, randn(S, B, E + 1))
    _raises_naming(r"\bmemory\b", m, tgt, randn(S, B, 1, E))
    _raises_naming(r"tgt_mask|attn_mask", m, tgt, mem, tgt_mask=np.zeros((T, T + 1), bool))
    _raises_naming(r"memory_mask|attn_mask", m, tgt, mem, memory_mask=np.zeros((T, S + 1), bool))
    _raises_naming(r"key_padding_mask", m, tgt, mem, memory_key_padding_mask=np.zeros((B, S + 1), bool))
    d = _eval("TransformerDecoder-norm")
    d(tgt, mem)
    _raises_naming(r"\bmemory\b", d, tgt, randn(S, B, E - 1))


def test_transformer_bad_inputs():
    m = _eval("Transformer")
    src, tgt = randn(S, B, E), randn(T, B, E)
    m(src, tgt)
    _raises_naming(r"\bsrc\b", m, randn(S, B, E + 1), tgt)
    _raises_naming(r"\btgt\b", m, src, randn(T, B, E + 1))
    with pytest.raises(ValueError):  # batch size mismatch between src and tgt (torch: RuntimeError)
        m(src, randn(T, B + 1, E))


def test_norm_bad_width():
    for name in ("LayerNorm", "RMSNorm"):
        m = _eval(name)
        m(randn(3, E))
        with pytest.raises(ValueError):
            m(randn(3, E + 1))


@pytest.mark.parametrize("what", ["float64", "int32"])
def test_non_float32_input_rejected(what):
    """Inputs must be float32 numpy arrays (ValueError or TypeError)."""
    m = _eval("TransformerEncoderLayer")
    x = randn(T, B, E)
    bad = {"float64": x.astype(np.float64), "int32": x.astype(np.int32)}[what]
    with pytest.raises((ValueError, TypeError)):
        m(bad)
