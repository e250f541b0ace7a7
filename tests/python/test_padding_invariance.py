"""Padding invariance (encore vs encore, no torch oracle involved except as a
source of random weights).

A sequence run alone must give the same outputs as the same sequence placed
inside a padded batch with a key_padding_mask, on its real positions, to
TOL_INVARIANCE = 1e-6 max abs diff.  Padded positions are filled with large
junk, so any leak through the mask is visible.  Fully masked rows (left
padding + causal, or a batch element that is all padding) must be finite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from conftest import (
    TOL_INVARIANCE,
    assert_close,
    key_padding_mask,
    layout,
    randn,
    randomize_,
    require_encore,
    to_numpy_state,
    unlayout,
)

encore = require_encore()
enn = encore.nn


@dataclass(frozen=True)
class PadCase:
    name: str
    num_layers: int  # 0: bare TransformerEncoderLayer
    norm_first: bool
    left: bool = False  # left padding instead of right padding
    causal: bool = False  # is_causal=True (no mask) on both runs
    batch_first: bool = False
    final_norm: bool = False
    d_model: int = 36
    nhead: int = 4
    B: int = 3
    T: int = 10
    L: int = 6  # real length of the probed sequence (batch index 1)
    tol: float = TOL_INVARIANCE

    def __str__(self):
        return self.name


CASES = [
    PadCase(f"{'layer' if n == 0 else f'stack{n}'}-{'preLN' if nf else 'postLN'}"
            f"-{'left' if left else 'right'}{'-causal' if causal else ''}",
            num_layers=n, norm_first=nf, left=left, causal=causal,
            batch_first=bool(i % 2), final_norm=(n > 0 and nf))
    for i, (n, nf, left, causal) in enumerate(
        (n, nf, left, causal)
        for n in (0, 6)
        for nf in (False, True)
        for left, causal in ((False, False), (False, True), (True, False), (True, True)))
]
CASES += [
    PadCase("layer-T67-L1", 0, False, T=67, L=1, B=2),
    PadCase("stack6-T67-L66-d44-h2", 6, True, T=67, L=66, B=2, d_model=44, nhead=2, causal=True),
]


def build(c: PadCase):
    tl = torch.nn.TransformerEncoderLayer(c.d_model, c.nhead, 2 * c.d_model,
                                          batch_first=c.batch_first, norm_first=c.norm_first)
    el = enn.TransformerEncoderLayer(c.d_model, c.nhead, 2 * c.d_model,
                                     batch_first=c.batch_first, norm_first=c.norm_first)
    if c.num_layers == 0:
        tm, em = tl, el
    else:
        tm = torch.nn.TransformerEncoder(tl, c.num_layers, norm=torch.nn.LayerNorm(c.d_model)
                                         if c.final_norm else None, enable_nested_tensor=False)
        em = enn.TransformerEncoder(el, c.num_layers,
                                    norm=enn.LayerNorm(c.d_model) if c.final_norm else None)
    randomize_(tm)
    em.load_state_dict(to_numpy_state(tm))
    return em.eval()


def run(c, em, x_btE, kpm=None):
    kw = {"src_key_padding_mask": kpm} if kpm is not None else {}
    if c.causal:
        kw["is_causal"] = True
    return unlayout(em(layout(x_btE, c.batch_first), **kw), c.batch_first)


@pytest.mark.parametrize("c", CASES, ids=str)
def test_sequence_alone_equals_padded_batch(c: PadCase):
    em = build(c)
    lengths = np.random.randint(1, c.T + 1, size=c.B)
    lengths[0], lengths[1] = c.T, c.L  # batch 0 full, batch 1 is the probe
    kpm = key_padding_mask(c.B, c.T, left=c.left, lengths=lengths)
    x = randn(c.B, c.T, c.d_model)
    x[kpm] = 5.0 * randn(int(kpm.sum()), c.d_model)  # junk in padded slots
    real = ~kpm[1]
    seq = x[1:2, real]  # (1, L, E)

    alone = run(c, em, seq)[0]  # (L, E)
    batched = run(c, em, x, kpm)
    assert np.isfinite(batched).all(), "padded / fully masked positions must be finite"
    assert_close(batched[1, real], alone, c.tol, f"{c}: probe sequence")
    # batch 0 is unpadded: also equals its own solo run
    assert_close(batched[0], run(c, em, x[0:1])[0], c.tol, f"{c}: full-length sequence")
    # guard: without the padding mask the junk must change the probe's outputs
    # (not applicable to right padding + causal: later junk is never visible)
    if c.L < c.T and not (c.causal and not c.left):
        unmasked = run(c, em, x)
        leak = float(np.abs(unmasked[1, real] - alone).max())
        assert leak > 1e-3, f"{c}: junk padding does not influence unmasked run ({leak:.1e})"


@pytest.mark.parametrize("num_layers", [0, 6], ids=["layer", "stack6"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["postLN", "preLN"])
def test_all_padding_batch_element_is_finite(num_layers, norm_first):
    """A batch element whose keys are all padding: every one of its query rows
    is fully masked.  encore must give finite outputs there, and must not
    disturb the other batch elements."""
    c = PadCase("allpad", num_layers, norm_first)
    em = build(c)
    x = randn(c.B, c.T, c.d_model)
    kpm = np.zeros((c.B, c.T), bool)
    kpm[2, :] = True
    kpm[1, 7:] = True
    y = run(c, em, x, kpm)
    assert np.isfinite(y).all(), "fully masked rows must be finite"
    assert_close(y[1, :7], run(c, em, x[1:2, :7])[0], c.tol, "neighbour of an all-padding element")
    assert_close(y[0], run(c, em, x[0:1])[0], c.tol, "unpadded neighbour")


def test_fully_masked_rows_mha_output_is_out_proj_bias():
    """Single MHA, all keys padded for one batch element: output = out_proj.bias."""
    E, H, B, T = 36, 4, 2, 5
    tm = randomize_(torch.nn.MultiheadAttention(E, H))
    em = enn.MultiheadAttention(E, H)
    em.load_state_dict(to_numpy_state(tm))
    em.eval()
    x = randn(T, B, E)
    kpm = np.zeros((B, T), bool)
    kpm[0, :] = True
    out, w = em(x, x, x, key_padding_mask=kpm)
    bias = tm.out_proj.bias.detach().numpy()
    assert np.isfinite(out).all() and np.isfinite(w).all()
    assert np.abs(out[:, 0] - bias).max() <= 1e-6
    assert np.all(w[0] == 0.0)
    np.testing.assert_allclose(w[1].sum(-1), 1.0, atol=1e-6)
