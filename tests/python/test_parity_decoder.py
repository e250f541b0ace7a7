"""encore.nn.TransformerDecoderLayer / TransformerDecoder / Transformer vs torch.

Tables:
  LAYER_TGT_MATRIX   every tgt mask kind x norm_first (memory mask rotating)
  LAYER_MEM_MATRIX   every memory mask kind x activation (tgt causal)
  STACK_MATRIX       6-layer TransformerDecoder x final norm x norm_first x tgt mask
  BIAS_LAYOUT        bias x batch_first x {layer, 6-layer stack}
  SHAPES             B=1, T=1, S=1, odd T/S=67, nhead 1..8, d_model not a multiple of 16
  TRANSFORMER        full nn.Transformer: small (d_model 32..48, 2+2 layers) and
                     torch's default shape (d_model 512, 6+6 layers) on tiny inputs

Tolerances (max abs diff): TOL_SINGLE = 1e-5 for one decoder layer,
TOL_STACK = 1e-4 for decoder stacks and the full Transformer.
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
    allow_first_key,
    assert_close,
    bool_to_float,
    call_kwargs,
    key_padding_mask,
    layout,
    make_twin,
    randn,
    randomize_,
    random_bool_mask,
    random_float_mask,
    require_encore,
    self_attn_masks,
    t,
)

encore = require_encore()
enn = encore.nn

MEM_MASK_KINDS = (
    "none",
    "mem_kpm",  # memory_key_padding_mask (bool, right padded)
    "mem_bool",  # memory_mask (T, S) bool
    "mem_float",  # memory_mask (T, S) additive float
    "mem_kpm_float",  # bool memory kpm + float memory_mask (torch gets the kpm as float)
)


@dataclass
class MemMasks:
    mask: np.ndarray | None = None
    kpm: np.ndarray | None = None
    torch_mask: np.ndarray | None = None
    torch_kpm: np.ndarray | None = None


def memory_masks(kind: str, B: int, T: int, S: int) -> MemMasks:
    if kind == "none":
        return MemMasks()
    if kind == "mem_kpm":
        kpm = key_padding_mask(B, S)
        return MemMasks(kpm=kpm, torch_kpm=kpm)
    if kind == "mem_bool":
        m = random_bool_mask(T, S)
        return MemMasks(mask=m, torch_mask=m)
    if kind == "mem_float":
        m = random_float_mask(T, S)
        return MemMasks(mask=m, torch_mask=m)
    if kind == "mem_kpm_float":
        kpm = key_padding_mask(B, S)
        m = allow_first_key(random_float_mask(T, S))
        return MemMasks(mask=m, kpm=kpm, torch_mask=m, torch_kpm=bool_to_float(kpm))
    raise ValueError(kind)


@dataclass(frozen=True)
class DecCase:
    name: str
    tol: float
    kind: str  # "layer" | "decoder" | "transformer"
    tgt_mask: str = "none"  # one of SELF_MASK_KINDS
    mem_mask: str = "none"  # one of MEM_MASK_KINDS
    src_mask: str = "none"  # transformer only: one of SELF_MASK_KINDS
    norm_first: bool = False
    activation: str = "relu"
    bias: bool = True
    batch_first: bool = False
    B: int = 3
    T: int = 6  # tgt length
    S: int = 8  # memory / src length
    d_model: int = 36
    nhead: int = 4
    dff: int = 72
    num_layers: int = 6  # decoder stack
    final_norm: bool = False  # decoder stack
    n_enc: int = 2  # transformer
    n_dec: int = 2  # transformer
    default_shape: bool = False  # transformer: torch's default hyper-parameters

    def __str__(self):
        return self.name


def layer(name, **kw):
    return DecCase(f"layer-{name}", TOL_SINGLE, "layer", **kw)


def stack(name, **kw):
    return DecCase(f"decoder-{name}", TOL_STACK, "decoder", **kw)


def transformer(name, **kw):
    return DecCase(f"transformer-{name}", TOL_STACK, "transformer", **kw)


def _ln(nf):
    return "preLN" if nf else "postLN"


LAYER_TGT_MATRIX = [
    layer(f"tgt_{m}-{_ln(nf)}", tgt_mask=m, norm_first=nf,
          mem_mask=MEM_MASK_KINDS[(2 * i + nf) % len(MEM_MASK_KINDS)],
          activation=("relu", "gelu")[(i + nf) % 2])
    for i, m in enumerate(SELF_MASK_KINDS)
    for nf in (False, True)
]
LAYER_MEM_MATRIX = [
    layer(f"{mm}-{act}", tgt_mask="causal_flag", mem_mask=mm, activation=act,
          norm_first=bool(i % 2))
    for i, mm in enumerate(MEM_MASK_KINDS)
    for act in ("relu", "gelu")
]
STACK_MATRIX = [
    stack(f"{'norm' if fn else 'nonorm'}-{_ln(nf)}-tgt_{tm}",
          final_norm=fn, norm_first=nf, tgt_mask=tm,
          mem_mask=MEM_MASK_KINDS[(i + 2 * fn + nf) % len(MEM_MASK_KINDS)],
          activation=("relu", "gelu")[(i + fn) % 2])
    for i, tm in enumerate(("none", "causal_flag", "pad_causal", "float_mask", "causal_mask"))
    for fn in (False, True)
    for nf in (False, True)
]
BIAS_LAYOUT = [
    (layer if k == "layer" else stack)(
        f"bias{int(b)}-bf{int(bf)}", bias=b, batch_first=bf, tgt_mask="pad_causal",
        mem_mask="mem_kpm", norm_first=bf, activation="gelu" if b else "relu",
        final_norm=(k == "decoder"), B=2, T=7, S=5, d_model=44, nhead=4, dff=90)
    for b in (True, False)
    for bf in (False, True)
    for k in ("layer", "decoder")
]
# (B, T, S, d_model, nhead, dff, tgt_mask, mem_mask)
_SHAPES = [
    (1, 1, 1, 36, 4, 72, "causal_flag", "none"),
    (1, 67, 5, 44, 2, 50, "causal_flag", "mem_kpm"),
    (2, 1, 67, 40, 8, 64, "none", "mem_kpm_float"),
    (2, 5, 3, 36, 1, 37, "bool_mask", "mem_bool"),
    (3, 9, 4, 56, 7, 112, "pad_causal", "mem_float"),
    (2, 4, 9, 40, 5, 80, "key_padding", "mem_kpm"),
    (2, 8, 8, 36, 3, 72, "left_pad_causal", "mem_kpm"),
    (2, 6, 7, 36, 6, 50, "causal_mask", "mem_bool"),
]
SHAPES = []
for _i, (_B, _T, _S, _d, _h, _f, _tm, _mm) in enumerate(_SHAPES):
    _kw = dict(B=_B, T=_T, S=_S, d_model=_d, nhead=_h, dff=_f, tgt_mask=_tm, mem_mask=_mm,
               norm_first=bool(_i % 2), activation=("relu", "gelu")[(_i // 2) % 2],
               batch_first=bool((_i // 3) % 2))
    _tag = f"B{_B}-T{_T}-S{_S}-d{_d}-h{_h}"
    SHAPES.append(layer(_tag, **_kw))
    SHAPES.append(stack(_tag, final_norm=bool(_i % 3 == 0), **_kw))

TRANSFORMER = [
    transformer("d32-postLN-relu", d_model=32, nhead=4, dff=64, B=3, S=7, T=5,
                src_mask="key_padding", tgt_mask="causal_flag", mem_mask="mem_kpm"),
    transformer("d48-preLN-gelu-bf", d_model=48, nhead=6, dff=96, B=2, S=9, T=6,
                norm_first=True, activation="gelu", batch_first=True,
                src_mask="float_mask", tgt_mask="pad_causal", mem_mask="none"),
    transformer("d40-nobias-causal", d_model=40, nhead=5, dff=80, B=2, S=6, T=6, bias=False,
                src_mask="causal_flag", tgt_mask="causal_mask", mem_mask="mem_float"),
    transformer("d36-1enc-3dec", d_model=36, nhead=3, dff=50, B=2, S=5, T=4, n_enc=1, n_dec=3,
                norm_first=True, src_mask="pad_float_mask", tgt_mask="bool_mask",
                mem_mask="mem_kpm_float"),
    transformer("d44-B1-T1", d_model=44, nhead=4, dff=88, B=1, S=3, T=1,
                tgt_mask="causal_flag", mem_mask="mem_kpm", activation="gelu"),
    transformer("torch-default-shape", default_shape=True, B=2, S=5, T=4, d_model=512, nhead=8,
                src_mask="key_padding", tgt_mask="causal_flag", mem_mask="mem_kpm"),
]

CASES = LAYER_TGT_MATRIX + LAYER_MEM_MATRIX + STACK_MATRIX + BIAS_LAYOUT + SHAPES + TRANSFORMER
assert len({c.name for c in CASES}) == len(CASES)


def build_pair(c: DecCase):
    kw = dict(dim_feedforward=c.dff, dropout=0.1, activation=c.activation,
              layer_norm_eps=1e-5, batch_first=c.batch_first, norm_first=c.norm_first, bias=c.bias)
    if c.kind == "transformer":
        if c.default_shape:
            tm, em = torch.nn.Transformer(), enn.Transformer()
        else:
            tkw = dict(d_model=c.d_model, nhead=c.nhead, num_encoder_layers=c.n_enc,
                       num_decoder_layers=c.n_dec, **kw)
            tm, em = torch.nn.Transformer(**tkw), enn.Transformer(**tkw)
    else:
        tl = torch.nn.TransformerDecoderLayer(c.d_model, c.nhead, **kw)
        el = enn.TransformerDecoderLayer(c.d_model, c.nhead, **kw)
        if c.kind == "layer":
            tm, em = tl, el
        else:
            tn = torch.nn.LayerNorm(c.d_model, bias=c.bias) if c.final_norm else None
            en = enn.LayerNorm(c.d_model, bias=c.bias) if c.final_norm else None
            tm = torch.nn.TransformerDecoder(tl, c.num_layers, norm=tn)
            em = enn.TransformerDecoder(el, c.num_layers, norm=en)
    randomize_(tm).eval()
    return tm, make_twin(tm, em)


def run(c: DecCase, tm, em, use_masks=True):
    """Returns (encore output or None, torch output)."""
    tgt = layout(randn(c.B, c.T, c.d_model), c.batch_first)
    src = layout(randn(c.B, c.S, c.d_model), c.batch_first)  # memory for layer/decoder
    tg = self_attn_masks(c.tgt_mask, c.B, c.T)
    mm = memory_masks(c.mem_mask, c.B, c.T, c.S)
    sm = self_attn_masks(c.src_mask, c.B, c.S)
    if c.kind == "transformer" and c.mem_mask in ("mem_kpm", "mem_kpm_float") and sm.kpm is not None:
        # the usual setup: memory padding == source padding
        mm.kpm = sm.kpm
        mm.torch_kpm = bool_to_float(sm.kpm) if mm.torch_mask is not None else sm.kpm
    flag = lambda b: True if b else None  # noqa: E731  (stack-level is_causal defaults to None)

    if c.kind == "layer":
        tcall = dict(tgt_mask=tg.torch_mask, memory_mask=mm.torch_mask,
                     tgt_key_padding_mask=tg.torch_kpm, memory_key_padding_mask=mm.torch_kpm,
                     tgt_is_causal=tg.is_causal)
        ecall = call_kwargs(tgt_mask=tg.mask, memory_mask=mm.mask, tgt_key_padding_mask=tg.kpm,
                            memory_key_padding_mask=mm.kpm)
        ecall["tgt_is_causal"] = tg.is_causal
        args = (tgt, src)
    elif c.kind == "decoder":
        tcall = dict(tgt_mask=tg.torch_mask, memory_mask=mm.torch_mask,
                     tgt_key_padding_mask=tg.torch_kpm, memory_key_padding_mask=mm.torch_kpm,
                     tgt_is_causal=flag(tg.is_causal))
        ecall = call_kwargs(tgt_mask=tg.mask, memory_mask=mm.mask, tgt_key_padding_mask=tg.kpm,
                            memory_key_padding_mask=mm.kpm, tgt_is_causal=flag(tg.is_causal))
        args = (tgt, src)
    else:
        tcall = dict(src_mask=sm.torch_mask, tgt_mask=tg.torch_mask, memory_mask=mm.torch_mask,
                     src_key_padding_mask=sm.torch_kpm, tgt_key_padding_mask=tg.torch_kpm,
                     memory_key_padding_mask=mm.torch_kpm, src_is_causal=flag(sm.is_causal),
                     tgt_is_causal=flag(tg.is_causal))
        ecall = call_kwargs(src_mask=sm.mask, tgt_mask=tg.mask, memory_mask=mm.mask,
                            src_key_padding_mask=sm.kpm, tgt_key_padding_mask=tg.kpm,
                            memory_key_padding_mask=mm.kpm, src_is_causal=flag(sm.is_causal),
                            tgt_is_causal=flag(tg.is_causal))
        args = (src, tgt)  # nn.Transformer.forward(src, tgt, ...)
    tcall = {k: t(v) if isinstance(v, np.ndarray) else v for k, v in tcall.items()}
    with torch.no_grad():
        expected = tm(*map(t, args), **(tcall if use_masks else {})).numpy()
    actual = em(*args, **ecall) if use_masks else None
    return actual, expected


@pytest.mark.parametrize("c", CASES, ids=str)
def test_decoder_parity(c: DecCase):
    tm, em = build_pair(c)
    np_state = np.random.get_state()
    actual, expected = run(c, tm, em)
    masked = (c.tgt_mask, c.mem_mask, c.src_mask) != ("none", "none", "none")
    if masked and max(c.T, c.S) > 1:
        np.random.set_state(np_state)  # same inputs, no masks
        _, unmasked = run(c, tm, em, use_masks=False)
        effect = float(np.abs(unmasked - expected).max())
        assert effect > 1e-3, f"{c}: masks change torch output by only {effect:.1e} (vacuous case)"
    assert_close(actual, expected, c.tol, str(c))


def test_transformer_custom_encoder_decoder_rejected():
    """Documented deviation: custom_encoder / custom_decoder raise (compose
    TransformerEncoder + TransformerDecoder instead)."""
    d, h = 36, 4
    e_enc = enn.TransformerEncoder(enn.TransformerEncoderLayer(d, h, 60), 2)
    e_dec = enn.TransformerDecoder(enn.TransformerDecoderLayer(d, h, 60), 2)
    with pytest.raises(ValueError, match="custom"):
        enn.Transformer(d, h, custom_encoder=e_enc)
    with pytest.raises(ValueError, match="custom"):
        enn.Transformer(d, h, custom_decoder=e_dec)


def test_composed_encoder_decoder_equals_transformer():
    """The documented replacement for custom_encoder/decoder: encoder then
    decoder, against torch's nn.Transformer with the same weights (1e-4)."""
    d, h = 36, 4
    tm = randomize_(torch.nn.Transformer(d, h, 2, 3, 60)).eval()
    sd = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
    enc = enn.TransformerEncoder(enn.TransformerEncoderLayer(d, h, 60), 2, norm=enn.LayerNorm(d))
    dec = enn.TransformerDecoder(enn.TransformerDecoderLayer(d, h, 60), 3, norm=enn.LayerNorm(d))
    enc.load_state_dict({k[len("encoder."):]: v for k, v in sd.items() if k.startswith("encoder.")})
    dec.load_state_dict({k[len("decoder."):]: v for k, v in sd.items() if k.startswith("decoder.")})
    enc.eval()
    dec.eval()
    src, tgt = randn(7, 2, d), randn(5, 2, d)
    with torch.no_grad():
        expected = tm(t(src), t(tgt), tgt_mask=t(causal_mask_np(5)), tgt_is_causal=True).numpy()
    assert_close(dec(tgt, enc(src), tgt_is_causal=True), expected, TOL_STACK, "encoder+decoder")


def test_generate_square_subsequent_mask_matches_torch():
    for n in (1, 2, 7):
        got = enn.Transformer.generate_square_subsequent_mask(n)
        want = causal_mask_np(n)
        assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == (n, n)
        assert np.array_equal(got, want)


def causal_mask_np(T):
    return torch.nn.Transformer.generate_square_subsequent_mask(T).numpy()


def test_tgt_is_causal_flag_is_causal():
    """Decoder layer with tgt_is_causal=True and no mask: output at position i
    is independent of tgt positions > i (memory fully visible)."""
    d, h, T, S = 36, 4, 6, 5
    tl = randomize_(torch.nn.TransformerDecoderLayer(d, h, 72)).eval()
    el = make_twin(tl, enn.TransformerDecoderLayer(d, h, 72))
    tgt, mem = randn(T, 2, d), randn(S, 2, d)
    y1 = el(tgt, mem, tgt_is_causal=True)
    tgt2 = tgt.copy()
    tgt2[4:] += 1.0
    y2 = el(tgt2, mem, tgt_is_causal=True)
    assert np.abs(y1[:4] - y2[:4]).max() <= 1e-6
    assert np.abs(y1[4:] - y2[4:]).max() > 1e-3
    with torch.no_grad():
        expected = tl(t(tgt), t(mem), tgt_mask=t(causal_mask_np(T)), tgt_is_causal=True).numpy()
    assert_close(y1, expected, TOL_SINGLE, "tgt_is_causal flag")


def test_case_table_covers_every_axis_value():
    dec = [c for c in CASES if c.kind != "transformer"]
    assert {c.tgt_mask for c in dec} == set(SELF_MASK_KINDS)
    assert {c.mem_mask for c in dec} == set(MEM_MASK_KINDS)
    for attr in ("norm_first", "bias", "batch_first", "final_norm"):
        assert {getattr(c, attr) for c in dec} == {False, True}, attr
    assert {c.activation for c in CASES} == {"relu", "gelu"}
    assert set(range(1, 9)) <= {c.nhead for c in dec}
    assert {"layer", "decoder", "transformer"} == {c.kind for c in CASES}
    for k in ("layer", "decoder"):
        for nf in (False, True):
            for act in ("relu", "gelu"):
                assert any(c.kind == k and c.norm_first == nf and c.activation == act for c in dec)
    tr = [c for c in CASES if c.kind == "transformer"]
    assert {c.norm_first for c in tr} == {False, True}
    assert any(c.default_shape for c in tr)
    for c in CASES:
        assert c.d_model % c.nhead == 0
        assert c.tol == (TOL_SINGLE if c.kind == "layer" else TOL_STACK)
