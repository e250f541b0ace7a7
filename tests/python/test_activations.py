"""encore's activation extensions: "gelu_tanh", "silu" and the gated
"swiglu" / "geglu".

Gated FFN (encore definition): linear1 has out_features 2*dim_feedforward;
h = x @ W1.T + b1; a, b = h.chunk(2, -1) (a = first half = gate);
hidden = act(a) * b with act = silu (swiglu) or erf-gelu (geglu);
out = hidden @ W2.T + b2.

References:
  * isolated FFN: attention switched off (out_proj = 0) and norm2 = identity
    affine, so a pre-LN layer computes x + FFN(LayerNorm(x)); compared with the
    hand-written chain above.
  * whole layers / stacks / Transformer: torch's own modules with linear1
    replaced by Linear(d, 2*dff) and activation = the hand-written gate
    (torch applies linear2(activation(linear1(x)))).
  * gelu_tanh / silu: torch modules with callable activations.

Tolerances: TOL_SINGLE = 1e-5 (one layer / isolated FFN), TOL_STACK = 1e-4
(6-layer stacks, Transformer).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import (
    TOL_SINGLE,
    TOL_STACK,
    assert_close,
    causal_mask,
    key_padding_mask,
    make_twin,
    randn,
    randomize_,
    require_encore,
    t,
    to_numpy_state,
)

encore = require_encore()
enn = encore.nn

GATE_ACTS = {"swiglu": F.silu, "geglu": F.gelu}  # F.gelu default = exact erf form
PLAIN_ACTS = {"gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu}


def gated(act):
    """Hand-written gate: chunk(2, -1) -> act(a) * b."""
    def f(h):
        a, b = h.chunk(2, dim=-1)
        return act(a) * b
    return f


def gated_ffn_ref(x, W1, b1, W2, b2, act):
    """x @ W1.T + b1 -> chunk(2, -1) -> act(a) * b -> @ W2.T + b2 (torch, float32)."""
    h = x @ W1.T
    if b1 is not None:
        h = h + b1
    a, b = h.chunk(2, dim=-1)
    y = (act(a) * b) @ W2.T
    return y + b2 if b2 is not None else y


def torch_layer(kind, d, h, dff, activation, **kw):
    """torch encoder/decoder layer whose FFN computes encore's `activation`."""
    cls = torch.nn.TransformerEncoderLayer if kind == "enc" else torch.nn.TransformerDecoderLayer
    if activation in GATE_ACTS:
        m = cls(d, h, dff, activation=gated(GATE_ACTS[activation]), **kw)
        m.linear1 = torch.nn.Linear(d, 2 * dff, bias=kw.get("bias", True))
    elif activation in PLAIN_ACTS:
        m = cls(d, h, dff, activation=PLAIN_ACTS[activation], **kw)
    else:
        m = cls(d, h, dff, activation=activation, **kw)
    return m


# ---------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("activation", list(GATE_ACTS))
def test_gated_ffn_matches_hand_written_reference(activation, bias):
    d, h, dff = 36, 4, 50
    em = enn.TransformerEncoderLayer(d, h, dff, dropout=0.0, activation=activation,
                                     norm_first=True, bias=bias)
    sd = em.state_dict()
    assert sd["linear1.weight"].shape == (2 * dff, d), "gated linear1 has 2*dim_feedforward outputs"
    assert sd["linear2.weight"].shape == (d, dff)
    if bias:
        assert sd["linear1.bias"].shape == (2 * dff,)
    W1 = torch.empty(2 * dff, d).uniform_(-d ** -0.5, d ** -0.5)
    W2 = torch.empty(d, dff).uniform_(-dff ** -0.5, dff ** -0.5)
    b1 = 0.2 * torch.randn(2 * dff) if bias else None
    b2 = 0.2 * torch.randn(d) if bias else None
    new = {k: np.zeros_like(v) for k, v in sd.items()}  # attention out_proj = 0 -> no attention
    new["self_attn.in_proj_weight"] = randn(3 * d, d)
    new.update({"linear1.weight": W1.numpy(), "linear2.weight": W2.numpy(),
                "norm1.weight": np.ones(d, np.float32), "norm2.weight": np.ones(d, np.float32)})
    if bias:
        new.update({"linear1.bias": b1.numpy(), "linear2.bias": b2.numpy()})
    em.load_state_dict(new)
    em.eval()
    x = randn(5, 3, d)
    with torch.no_grad():
        xt = t(x)
        expected = (xt + gated_ffn_ref(F.layer_norm(xt, (d,)), W1, b1, W2, b2,
                                       GATE_ACTS[activation])).numpy()
    assert_close(em(x), expected, TOL_SINGLE, f"{activation} FFN vs hand-written")
    # the gate is really act(first half) * second half, not the other way round
    with torch.no_grad():
        a_swapped = torch.cat([W1[dff:], W1[:dff]])
        b_swapped = torch.cat([b1[dff:], b1[:dff]]) if bias else None
        swapped = (xt + gated_ffn_ref(F.layer_norm(xt, (d,)), a_swapped, b_swapped, W2, b2,
                                      GATE_ACTS[activation])).numpy()
    assert np.abs(swapped - expected).max() > 1e-3


# (kind, activation, norm_first, num_layers, tol)
LAYER_CASES = [
    (kind, act, nf, n, TOL_SINGLE if n == 0 else TOL_STACK)
    for kind in ("enc", "dec")
    for act in (*GATE_ACTS, *PLAIN_ACTS)
    for nf in (False, True)
    for n in ((0, 6) if nf else (0,))
]


@pytest.mark.parametrize("kind,activation,norm_first,num_layers,tol", LAYER_CASES,
                         ids=[f"{k}-{a}-{'preLN' if nf else 'postLN'}-{'layer' if n == 0 else f'stack{n}'}"
                              for k, a, nf, n, _ in LAYER_CASES])
def test_extension_activation_layer_parity(kind, activation, norm_first, num_layers, tol):
    d, h, dff, B, T, S = 40, 5, 56, 3, 7, 6
    kw = dict(dropout=0.1, norm_first=norm_first)
    tl = torch_layer(kind, d, h, dff, activation, **kw)
    ecls = enn.TransformerEncoderLayer if kind == "enc" else enn.TransformerDecoderLayer
    el = ecls(d, h, dff, activation=activation, **kw)
    if num_layers:
        if kind == "enc":
            tm = torch.nn.TransformerEncoder(tl, num_layers, norm=torch.nn.LayerNorm(d),
                                             enable_nested_tensor=False)
            em = enn.TransformerEncoder(el, num_layers, norm=enn.LayerNorm(d))
        else:
            tm = torch.nn.TransformerDecoder(tl, num_layers, norm=torch.nn.LayerNorm(d))
            em = enn.TransformerDecoder(el, num_layers, norm=enn.LayerNorm(d))
    else:
        tm, em = tl, el
    randomize_(tm).eval()
    em = make_twin(tm, em)
    x = randn(T, B, d)
    kpm = key_padding_mask(B, T)
    with torch.no_grad():
        if kind == "enc":
            expected = tm(t(x), src_key_padding_mask=t(kpm)).numpy()
        else:
            mem = randn(S, B, d)
            expected = tm(t(x), t(mem), tgt_mask=t(causal_mask(T)), tgt_is_causal=True,
                          memory_key_padding_mask=t(key_padding_mask(B, S, lengths=[S, 2, 4]))).numpy()
    if kind == "enc":
        actual = em(x, src_key_padding_mask=kpm)
    else:
        actual = em(x, mem, tgt_is_causal=True,
                    memory_key_padding_mask=key_padding_mask(B, S, lengths=[S, 2, 4]))
    assert_close(actual, expected, tol, f"{kind}/{activation}")


def test_activations_are_distinguishable():
    """Guard: the activations differ enough on unit-scale data that swapping
    any two would fail the 1e-5 comparisons above."""
    x = torch.from_numpy(randn(1000))
    outs = {"relu": F.relu(x), "gelu": F.gelu(x), **{k: f(x) for k, f in PLAIN_ACTS.items()}}
    names = list(outs)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert (outs[a] - outs[b]).abs().max() > 1e-4, (a, b)


@pytest.mark.parametrize("activation", ["geglu", "swiglu"])
def test_transformer_with_gated_activation(activation):
    d, h, dff = 32, 4, 48
    tm = torch.nn.Transformer(d, h, 2, 2, dff, activation=gated(GATE_ACTS[activation]))
    for mod in tm.modules():
        if isinstance(mod, (torch.nn.TransformerEncoderLayer, torch.nn.TransformerDecoderLayer)):
            mod.linear1 = torch.nn.Linear(d, 2 * dff)
    randomize_(tm).eval()
    em = make_twin(tm, enn.Transformer(d, h, 2, 2, dff, activation=activation))
    src, tgt = randn(6, 2, d), randn(5, 2, d)
    with torch.no_grad():
        expected = tm(t(src), t(tgt), tgt_mask=t(causal_mask(5)), tgt_is_causal=True).numpy()
    assert_close(em(src, tgt, tgt_is_causal=True), expected, TOL_STACK, f"Transformer/{activation}")


def test_plain_activation_state_dict_shapes():
    for act in ("relu", "gelu", *PLAIN_ACTS):
        sd = enn.TransformerEncoderLayer(12, 4, 20, activation=act).state_dict()
        assert sd["linear1.weight"].shape == (20, 12), act


def test_unknown_activation_rejected():
    with pytest.raises((ValueError, RuntimeError)):
        enn.TransformerEncoderLayer(12, 4, 20, activation="tanh")
    with pytest.raises((ValueError, RuntimeError)):
        enn.TransformerDecoderLayer(12, 4, 20, activation="mish")  # HF aliases like "swish" are accepted


def test_gated_weights_must_have_doubled_shape():
    """Loading a plain (non-gated) state dict into a gated layer fails with the
    key and expected shape in the message."""
    tl = randomize_(torch.nn.TransformerEncoderLayer(12, 4, 20))
    el = enn.TransformerEncoderLayer(12, 4, 20, activation="swiglu")
    with pytest.raises(ValueError, match=r"linear1\.(weight|bias)") as ei:
        el.load_state_dict(to_numpy_state(tl))
    assert "40" in str(ei.value)
