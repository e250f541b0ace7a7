"""Gradients of encore's training-mode layers against torch autograd, run live.

For y = module(x) and a random upstream gradient g, both libraries compute d(sum(g*y))/dx and every parameter's
gradient. Tolerance: 1e-4 relative, i.e. max|encore - torch| <= 1e-4 * max|torch| for each tensor (fp32).
"""
import itertools

import numpy as np
import pytest
import torch

import encore
from encore import nn as enn

REL = 1e-4


@pytest.fixture(autouse=True)
def _torch_math_path():
    fastpath, threads = torch.backends.mha.get_fastpath_enabled(), torch.get_num_threads()
    torch.backends.mha.set_fastpath_enabled(False)
    torch.set_num_threads(1)
    with torch.enable_grad():  # conftest.py turns autograd off for the forward-parity tests
        yield
    torch.backends.mha.set_fastpath_enabled(fastpath)  # restore: other files rely on the session's settings
    torch.set_num_threads(threads)


def rel_err(a, b):
    b = np.asarray(b)
    return float(np.abs(np.asarray(a) - b).max() / max(np.abs(b).max(), 1e-12))


def randomize(module, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.3 if p.dim() > 1 else 0.5))
    return module


def masks(kind, B, T, nhead, rng):
    """(torch kwargs, encore kwargs) for the layer; key padding leaves at least one real key per sequence."""
    if kind == "none":
        return {}, {}
    if kind == "key_padding":
        kpm = np.zeros((B, T), bool)
        for b in range(B):
            kpm[b, rng.integers(1, T + 1):] = True
        return {"src_key_padding_mask": torch.from_numpy(kpm)}, {"src_key_padding_mask": kpm}
    if kind == "causal":
        m = torch.nn.Transformer.generate_square_subsequent_mask(T)
        return {"src_mask": m, "is_causal": True}, {"src_mask": m.numpy(), "is_causal": True}
    if kind == "bool":
        m = rng.random((T, T)) < 0.3
        np.fill_diagonal(m, False)
        return {"src_mask": torch.from_numpy(m)}, {"src_mask": m}
    if kind == "float":
        m = rng.standard_normal((T, T)).astype(np.float32)
        return {"src_mask": torch.from_numpy(m)}, {"src_mask": m}
    raise ValueError(kind)


def compare_module(tmod, emod, x, g, tkw, ekw, what):
    emod.load_state_dict({k: v.detach().numpy().copy() for k, v in tmod.state_dict().items()})
    tmod.train()
    emod.train()
    xt = torch.tensor(x, requires_grad=True)
    yt = tmod(xt, **tkw)
    (yt * torch.from_numpy(g)).sum().backward()
    ye = emod(x, **ekw)
    assert rel_err(ye, yt.detach().numpy()) <= REL, f"{what}: forward"
    dx = emod.backward(g)
    assert np.abs(xt.grad.numpy()).max() > 0, f"{what}: torch's input gradient is zero - a vacuous case"
    assert rel_err(dx, xt.grad.numpy()) <= REL, f"{what}: input gradient rel err {rel_err(dx, xt.grad.numpy()):.2e}"
    grads = emod.grads()
    for name, p in tmod.named_parameters():
        assert p.grad is not None, name
        e = rel_err(grads[name], p.grad.numpy())
        assert e <= REL, f"{what}: {name} rel err {e:.2e}"
    return grads


LAYER_CASES = [
    # (norm_first, activation, mask kind, bias, batch_first, B, T, d_model, nhead)
    *[(nf, act, mk, True, True, 2, 7, 16, 4)
      for nf, act, mk in itertools.product([False, True], ["relu", "gelu"], ["none", "key_padding", "causal", "bool", "float"])],
    (False, "gelu", "key_padding", False, True, 3, 9, 20, 5),
    (True, "relu", "causal", False, False, 2, 6, 12, 3),
    (False, "relu", "none", True, False, 1, 1, 8, 2),
    (True, "gelu", "float", True, True, 1, 13, 36, 6),
    (False, "gelu", "key_padding", True, False, 4, 11, 44, 4),
]


@pytest.mark.parametrize("case", LAYER_CASES, ids=lambda c: "-".join(map(str, c)))
def test_encoder_layer_gradients(case):
    nf, act, mk, bias, bf, B, T, D, H = case
    rng = np.random.default_rng(abs(hash(case)) % 2**32)
    torch.manual_seed(0)
    kw = dict(dim_feedforward=2 * D + 3, dropout=0.0, activation=act, batch_first=bf, norm_first=nf, bias=bias)
    tl = randomize(torch.nn.TransformerEncoderLayer(D, H, **kw), 1)
    el = enn.TransformerEncoderLayer(D, H, **kw)
    shape = (B, T, D) if bf else (T, B, D)
    x = rng.standard_normal(shape).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    tkw, ekw = masks(mk, B, T, H, rng)
    compare_module(tl, el, x, g, tkw, ekw, f"layer {case}")


@pytest.mark.parametrize("norm_first,final_norm", [(False, False), (False, True), (True, True), (True, False)])
def test_encoder_stack_gradients(norm_first, final_norm):
    rng = np.random.default_rng(5)
    torch.manual_seed(0)
    kw = dict(dim_feedforward=40, dropout=0.0, activation="gelu", batch_first=True, norm_first=norm_first)
    tl = torch.nn.TransformerEncoderLayer(24, 4, **kw)
    tstack = randomize(torch.nn.TransformerEncoder(tl, 3, norm=torch.nn.LayerNorm(24) if final_norm else None,
                                                   enable_nested_tensor=False), 2)
    estack = enn.TransformerEncoder(enn.TransformerEncoderLayer(24, 4, **kw), 3,
                                    norm=enn.LayerNorm(24) if final_norm else None)
    x = rng.standard_normal((3, 10, 24)).astype(np.float32)
    g = rng.standard_normal((3, 10, 24)).astype(np.float32)
    kpm = np.zeros((3, 10), bool)
    kpm[1, 6:] = True
    compare_module(tstack, estack, x, g, {"src_key_padding_mask": torch.from_numpy(kpm)}, {"src_key_padding_mask": kpm},
                   f"stack norm_first={norm_first} final_norm={final_norm}")


def test_shared_layer_gradients_accumulate_over_uses():
    """share_parameters: one layer applied 3 times = torch's 3 layers with tied weights (grads summed)."""
    rng = np.random.default_rng(6)
    torch.manual_seed(0)
    tl = randomize(torch.nn.TransformerEncoderLayer(16, 2, 20, 0.0, "relu", batch_first=True), 3)
    el = enn.TransformerEncoder(enn.TransformerEncoderLayer(16, 2, 20, 0.0, "relu", batch_first=True), 3,
                                share_parameters=True)
    el.load_state_dict({"layers.0." + k: v.detach().numpy().copy() for k, v in tl.state_dict().items()})
    el.train()
    x = rng.standard_normal((2, 5, 16)).astype(np.float32)
    g = rng.standard_normal((2, 5, 16)).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    y = xt
    for _ in range(3):
        y = tl(y)
    (y * torch.from_numpy(g)).sum().backward()
    el(x)
    dx = el.backward(g)
    assert rel_err(dx, xt.grad.numpy()) <= REL
    grads = el.grads()
    for name, p in tl.named_parameters():
        assert rel_err(grads["layers.0." + name], p.grad.numpy()) <= REL, name


@pytest.mark.parametrize("act", ["swiglu", "geglu"])
def test_gated_ffn_gradients(act):
    """Gated FFN has no torch module: compare with the same layer written out in torch (attention included)."""
    rng = np.random.default_rng(7)
    D, H, F = 16, 4, 12
    el = enn.TransformerEncoderLayer(D, H, F, 0.0, act, batch_first=True).train()
    sd = {k: (rng.standard_normal(v.shape) * 0.3).astype(np.float32) + (1 if k.endswith("norm1.weight") or k.endswith("norm2.weight") else 0)
          for k, v in el.state_dict().items()}
    el.load_state_dict(sd)
    tl = torch.nn.TransformerEncoderLayer(D, H, F, 0.0, batch_first=True)
    tl.linear1 = torch.nn.Linear(D, 2 * F)
    tl.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})
    gate = torch.nn.functional.silu if act == "swiglu" else torch.nn.functional.gelu

    def tforward(x):
        h = tl.norm1(x + tl.self_attn(x, x, x, need_weights=False)[0])
        a, b = tl.linear1(h).chunk(2, dim=-1)
        return tl.norm2(h + tl.linear2(gate(a) * b))

    x = rng.standard_normal((2, 6, D)).astype(np.float32)
    g = rng.standard_normal((2, 6, D)).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    (tforward(xt) * torch.from_numpy(g)).sum().backward()
    el(x)
    assert rel_err(el.backward(g), xt.grad.numpy()) <= REL
    grads = el.grads()
    for name, p in tl.named_parameters():
        assert rel_err(grads[name], p.grad.numpy()) <= REL, name


def test_attention_and_layernorm_modules():
    rng = np.random.default_rng(8)
    torch.manual_seed(0)
    tm = randomize(torch.nn.MultiheadAttention(20, 4, batch_first=True), 4)
    em = enn.MultiheadAttention(20, 4, batch_first=True)
    em.load_state_dict({k: v.detach().numpy().copy() for k, v in tm.state_dict().items()})
    tm.train(); em.train()
    x = rng.standard_normal((2, 7, 20)).astype(np.float32)
    g = rng.standard_normal((2, 7, 20)).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    (tm(xt, xt, xt, need_weights=False)[0] * torch.from_numpy(g)).sum().backward()
    em(x, x, x, need_weights=False)
    assert rel_err(em.backward(g), xt.grad.numpy()) <= REL
    for name, p in tm.named_parameters():
        assert rel_err(em.grads()[name], p.grad.numpy()) <= REL, name
    tn, en = randomize(torch.nn.LayerNorm(33), 5), enn.LayerNorm(33)
    compare_module(tn, en, rng.standard_normal((4, 33)).astype(np.float32) * 3 + 1,
                   rng.standard_normal((4, 33)).astype(np.float32), {}, {}, "LayerNorm")


def test_gradients_accumulate_and_zero_grad():
    rng = np.random.default_rng(9)
    el = enn.TransformerEncoderLayer(8, 2, 12, 0.0, batch_first=True).train()
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    g = rng.standard_normal((2, 3, 8)).astype(np.float32)
    el(x); el.backward(g)
    once = {k: v.copy() for k, v in el.grads().items()}
    el(x); el.backward(g)
    for k, v in el.grads().items():
        np.testing.assert_allclose(v, 2 * once[k], rtol=1e-6, atol=1e-7)
    el.zero_grad(set_to_none=False)  # torch's zero_grad(set_to_none=False): zeros, same names
    assert el.grads().keys() == once.keys() and all(not v.any() for v in el.grads().values())
    el.zero_grad()  # torch's default: no gradients at all (.grad None) until the next backward
    assert el.grads() == {}
    with pytest.raises(encore.Error, match="no saved forward pass"):
        el.backward(g)  # each backward needs its own forward
    el.eval()
    el(x)
    with pytest.raises(encore.Error, match="no saved forward pass"):
        el.backward(g)  # eval mode saves nothing


def test_dropout_gradient_is_consistent_with_the_forward():
    """With dropout, the backward must use the forward's masks: check d(sum(g*y))/dx against central differences
    of encore itself with the same seeds (encore.manual_seed before each forward)."""
    rng = np.random.default_rng(10)
    el = enn.TransformerEncoderLayer(8, 2, 16, 0.3, "gelu", batch_first=True).train()
    x = rng.standard_normal((1, 4, 8)).astype(np.float64).astype(np.float32)
    g = rng.standard_normal((1, 4, 8)).astype(np.float32)
    encore.manual_seed(123)
    el(x)
    dx = el.backward(g)
    eps = 1e-2
    for idx in [(0, 0, 0), (0, 1, 3), (0, 3, 7), (0, 2, 5)]:
        xp, xm = x.copy(), x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        encore.manual_seed(123)
        fp = float((el(xp) * g).sum())
        encore.manual_seed(123)
        fm = float((el(xm) * g).sum())
        num = (fp - fm) / (2 * eps)
        assert abs(num - dx[idx]) <= 2e-2 * max(1.0, abs(num)), (idx, num, dx[idx])


DECODER_CASES = [
    # (norm_first, activation, masks, batch_first, B, T, S, d_model, nhead)
    *[(nf, act, mk, True, 2, 6, 9, 16, 4)
      for nf, act, mk in itertools.product([False, True], ["relu", "gelu"], ["none", "causal+memory_padding"])],
    (False, "gelu", "causal+memory_padding", False, 3, 5, 4, 12, 3),
    (True, "relu", "none", False, 1, 1, 7, 8, 2),
]


@pytest.mark.parametrize("case", DECODER_CASES, ids=lambda c: "-".join(map(str, c)))
def test_decoder_layer_gradients(case):
    """TransformerDecoderLayer (masked self-attention + cross-attention + FFN) vs torch autograd: output, the
    gradients of tgt and of memory, and every parameter's, 1e-4 relative (dropout 0: the streams differ)."""
    nf, act, mk, bf, B, T, S, D, H = case
    rng = np.random.default_rng(20)
    torch.manual_seed(0)
    tl = randomize(torch.nn.TransformerDecoderLayer(D, H, 2 * D + 3, 0.0, act, batch_first=bf, norm_first=nf), 3)
    el = enn.TransformerDecoderLayer(D, H, 2 * D + 3, 0.0, act, batch_first=bf, norm_first=nf)
    el.load_state_dict({k: v.detach().numpy().copy() for k, v in tl.state_dict().items()})
    tl.train()
    el.train()
    shape = (lambda n: (B, n, D)) if bf else (lambda n: (n, B, D))
    x = rng.standard_normal(shape(T)).astype(np.float32)
    mem = rng.standard_normal(shape(S)).astype(np.float32)
    g = rng.standard_normal(shape(T)).astype(np.float32)
    tkw, ekw = {}, {}
    if mk != "none":
        causal = torch.nn.Transformer.generate_square_subsequent_mask(T)
        kpm = np.zeros((B, S), bool)
        for b in range(B):
            kpm[b, rng.integers(1, S + 1):] = True
        tkw = dict(tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=torch.from_numpy(kpm))
        ekw = dict(tgt_mask=causal.numpy(), tgt_is_causal=True, memory_key_padding_mask=kpm)
    xt, mt = torch.tensor(x, requires_grad=True), torch.tensor(mem, requires_grad=True)
    yt = tl(xt, mt, **tkw)
    (yt * torch.from_numpy(g)).sum().backward()
    ye = el(x, mem, **ekw)
    assert rel_err(ye, yt.detach().numpy()) <= REL, "forward"
    dx, dm = el.backward(g)
    assert rel_err(dx, xt.grad.numpy()) <= REL, f"tgt gradient rel err {rel_err(dx, xt.grad.numpy()):.2e}"
    assert rel_err(dm, mt.grad.numpy()) <= REL, f"memory gradient rel err {rel_err(dm, mt.grad.numpy()):.2e}"
    grads = el.grads()
    for name, p in tl.named_parameters():
        e = rel_err(grads[name], p.grad.numpy())
        if name.endswith("in_proj_bias"):  # the key bias' gradient is identically zero: compare q and v parts
            E = D
            want = np.concatenate([p.grad.numpy()[:E], p.grad.numpy()[2 * E:]])
            got = np.concatenate([grads[name][:E], grads[name][2 * E:]])
            assert np.abs(grads[name][E:2 * E]).max() <= 1e-5 * np.abs(want).max()
            e = rel_err(got, want)
        assert e <= REL, f"{name} rel err {e:.2e}"


def rms_norms(module, D, eps):
    """torch's way to put RMSNorm in its Transformer layers: replace every LayerNorm child by nn.RMSNorm."""
    for name, child in list(module.named_children()):
        if isinstance(child, torch.nn.LayerNorm):
            setattr(module, name, torch.nn.RMSNorm(D, eps=eps))
        else:
            rms_norms(child, D, eps)
    return module


@pytest.mark.parametrize("norm_first,act,mk", [(False, "relu", "key_padding"), (True, "gelu", "causal"),
                                               (True, "swiglu", "none"), (False, "gelu", "float")])
def test_rms_norm_encoder_layer(norm_first, act, mk):
    """TransformerEncoderLayer(norm="rms_norm") = torch's layer after `layer.norm1/norm2 = nn.RMSNorm(d_model)`:
    the same state_dict keys, training forward and every gradient within 1e-4 relative, and the eval-mode (fused
    inference) forward within 1e-5 relative."""
    D, H, B, T, eps = 24, 4, 3, 9, 1e-6
    rng = np.random.default_rng(31)
    torch.manual_seed(0)
    gated = act in ("swiglu", "geglu")
    kw = dict(dim_feedforward=40, dropout=0.0, batch_first=True, norm_first=norm_first)
    tl = rms_norms(torch.nn.TransformerEncoderLayer(D, H, activation="gelu" if gated else act, **kw), D, eps)
    el = enn.TransformerEncoderLayer(D, H, activation=act, layer_norm_eps=eps, norm="rms_norm", **kw)
    if gated:  # torch has no gated FFN: swap in SiLU-gated linear1 of twice the width, as test_gated_ffn_gradients
        tl.linear1 = torch.nn.Linear(D, 80)
        tl.activation = lambda a: torch.nn.functional.silu(a[..., :40]) * a[..., 40:]
    randomize(tl, 4)
    with torch.no_grad():  # RMSNorm weights away from 1 so they matter
        for name, p in tl.named_parameters():
            if name.startswith("norm"):
                p.copy_(1 + 0.3 * torch.randn(p.shape))
    assert sorted(el.state_dict()) == sorted(tl.state_dict())
    assert not any(k.endswith("norm1.bias") for k in el.state_dict())
    assert f"(norm1): {tl.norm1!r}" in repr(el) and ", norm=rms_norm" in repr(el), repr(el)  # torch's RMSNorm repr
    x = rng.standard_normal((B, T, D)).astype(np.float32) * 2
    g = rng.standard_normal((B, T, D)).astype(np.float32)
    tkw, ekw = masks(mk, B, T, H, rng)
    compare_module(tl, el, x, g, tkw, ekw, f"rms layer {norm_first} {act} {mk}")
    tl.eval()
    el.eval()
    with torch.no_grad():
        want = tl(torch.from_numpy(x), **tkw).numpy()
    assert rel_err(el(x, **ekw), want) <= 1e-5, "eval forward"


def test_rms_norm_decoder_layer_and_stacks():
    """TransformerDecoderLayer(norm="rms_norm") gradients vs torch with nn.RMSNorm norms (1e-4 relative), and
    TransformerEncoder / TransformerDecoder / Transformer taking an RMSNorm final norm (the same keys as torch)."""
    D, H, eps = 16, 2, 1e-5
    rng = np.random.default_rng(32)
    torch.manual_seed(0)
    tl = randomize(rms_norms(torch.nn.TransformerDecoderLayer(D, H, 36, 0.0, "gelu", batch_first=True,
                                                              norm_first=True), D, eps), 5)
    el = enn.TransformerDecoderLayer(D, H, 36, 0.0, "gelu", eps, batch_first=True, norm_first=True, norm="rms_norm")
    el.load_state_dict({k: v.detach().numpy().copy() for k, v in tl.state_dict().items()})
    tl.train()
    el.train()
    x, mem, g = (rng.standard_normal((2, n, D)).astype(np.float32) for n in (5, 7, 5))
    xt, mt = torch.tensor(x, requires_grad=True), torch.tensor(mem, requires_grad=True)
    yt = tl(xt, mt)
    (yt * torch.from_numpy(g)).sum().backward()
    assert rel_err(el(x, mem), yt.detach().numpy()) <= REL
    dx, dm = el.backward(g)
    assert rel_err(dx, xt.grad.numpy()) <= REL and rel_err(dm, mt.grad.numpy()) <= REL
    grads = el.grads()
    for name, p in tl.named_parameters():
        if name.endswith("in_proj_bias"):
            continue  # its key part's gradient is identically zero (test_decoder_layer_gradients checks it)
        assert rel_err(grads[name], p.grad.numpy()) <= REL, name

    tstack = randomize(torch.nn.TransformerEncoder(
        rms_norms(torch.nn.TransformerEncoderLayer(D, H, 36, 0.0, batch_first=True, norm_first=True), D, eps), 2,
        norm=torch.nn.RMSNorm(D, eps=eps), enable_nested_tensor=False), 6)
    estack = enn.TransformerEncoder(enn.TransformerEncoderLayer(D, H, 36, 0.0, layer_norm_eps=eps, batch_first=True,
                                                                norm_first=True, norm="rms_norm"), 2,
                                    norm=enn.RMSNorm(D, eps=eps))
    compare_module(tstack, estack, x, g, {}, {}, "rms encoder stack")

    full = enn.Transformer(D, H, 1, 1, 36, 0.0, norm="rms_norm")
    tfull = rms_norms(torch.nn.Transformer(D, H, 1, 1, 36, 0.0), D, eps)
    assert sorted(full.state_dict()) == sorted(tfull.state_dict())
    with pytest.raises(TypeError, match="norm: expected None"):
        enn.TransformerEncoder(enn.TransformerEncoderLayer(D, H), 2, norm="rms")
    with pytest.raises(encore.Error, match="norm should be one of layer_norm, rms_norm"):
        enn.TransformerEncoderLayer(D, H, norm="batch_norm")
