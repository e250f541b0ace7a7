"""Shared fixtures and helpers for the encore <-> torch parity suite.

Oracle: torch 2.13 (CPU), always run
  * in eval() mode and under torch.no_grad(),
  * with the MHA / TransformerEncoderLayer fast path disabled
    (torch.backends.mha.set_fastpath_enabled(False)), so torch runs its
    plain-math reference path,
  * TransformerEncoder constructed with enable_nested_tensor=False.

Every parameter of the torch module is re-drawn at random before the weights
are copied into the encore twin (see ``randomize_``): torch's default init
sets every bias to 0 and every LayerNorm to (1, 0), which would make the
biases/affine parameters untestable.

Helpers are plain functions imported by the test modules with
``from conftest import ...`` (pytest's default "prepend" import mode puts this
directory on sys.path).

Environment knobs:
  ENCORE_ALLOW_MISSING=1  skip (instead of fail) when ``import encore`` fails,
                          e.g. to run the suite before the binding is built.
"""

from __future__ import annotations

import os
import pathlib
import re
import sys
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

# The binding lives in <repo>/python once built.  PYTHONPATH wins if it is set
# (we append, not prepend).
_REPO_PYTHON_DIR = pathlib.Path(__file__).resolve().parents[2] / "python"
if _REPO_PYTHON_DIR.is_dir() and str(_REPO_PYTHON_DIR) not in sys.path:
    sys.path.append(str(_REPO_PYTHON_DIR))

# ---------------------------------------------------------------------------
# Tolerances (max abs diff), stated once and used everywhere.
# ---------------------------------------------------------------------------
TOL_SINGLE = 1e-5  # one layer / one MHA / one norm vs torch
TOL_STACK = 1e-4  # 6-layer stacks, full nn.Transformer vs torch
TOL_INVARIANCE = 1e-6  # encore vs encore (padded batch vs sequence alone)


def require_encore():
    """Import and return the ``encore`` module.

    A missing/broken binding is a test *failure* (the whole suite would
    otherwise silently pass as "skipped"), unless ENCORE_ALLOW_MISSING=1.
    """
    try:
        import encore  # noqa: PLC0415
        import encore.nn  # noqa: F401, PLC0415
    except ImportError as exc:  # pragma: no cover - depends on build state
        if os.environ.get("ENCORE_ALLOW_MISSING") == "1":
            pytest.skip(f"encore not importable: {exc}", allow_module_level=True)
        raise ImportError(
            f"cannot import encore ({exc}); build the binding and put "
            f"{_REPO_PYTHON_DIR} on PYTHONPATH (or set ENCORE_ALLOW_MISSING=1 to skip)"
        ) from exc
    return encore


# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------
def pytest_configure(config):
    # torch.nn.TransformerEncoder/Transformer warn that their (default)
    # enable_nested_tensor=True cannot be honoured for some configurations;
    # irrelevant here (the fast path is disabled).
    config.addinivalue_line("filterwarnings", "ignore:enable_nested_tensor is True:UserWarning")


@pytest.fixture(scope="session", autouse=True)
def torch_reference_mode():
    """Plain-math torch: no MHA fast path, float32 default, deterministic."""
    prev_fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    prev_grad = torch.is_grad_enabled()
    prev_threads = torch.get_num_threads()
    # tiny matrices: threads only add spin-wait contention (2-core CI boxes)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(False)  # == running every oracle under torch.no_grad()
    yield
    torch.set_grad_enabled(prev_grad)
    torch.set_num_threads(prev_threads)
    torch.backends.mha.set_fastpath_enabled(prev_fastpath)


@pytest.fixture(autouse=True)
def seeded(request):
    """Seed numpy's global RNG and torch per test (seed derived from file name +
    test name incl. parameters, so every case gets different but reproducible
    data, independent of the directory pytest is started from)."""
    key = f"{pathlib.Path(str(request.node.fspath)).name}::{request.node.name}"
    seed = zlib.crc32(key.encode()) & 0x7FFFFFFF
    np.random.seed(seed)
    torch.manual_seed(seed)
    return seed


@pytest.fixture(scope="module")
def torch_two_threads():
    """torch on two threads for the module (the reference pipelines of sentence-transformers tests), then back."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    """The small random BERT of train_data.save_tiny_bert (transformers' init, seed 0, MiniLM's tokenizer), saved
    once per run; tests read it and write their outputs elsewhere."""
    from train_data import save_tiny_bert
    return save_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


# ---------------------------------------------------------------------------
# Data helpers
# ---------------------------------------------------------------------------
def randn(*shape) -> np.ndarray:
    """Unit-scale float32 data from the (seeded) global numpy RNG."""
    return np.random.randn(*shape).astype(np.float32)


def to_numpy_state(m: torch.nn.Module) -> dict[str, np.ndarray]:
    """torch state_dict -> {key: float32 C-contiguous numpy array} (copies)."""
    out = {}
    for k, v in m.state_dict().items():
        a = v.detach().cpu().numpy()
        assert a.dtype == np.float32, (k, a.dtype)
        out[k] = np.ascontiguousarray(a).copy()
    return out


def randomize_(m: torch.nn.Module) -> torch.nn.Module:
    """Re-draw every parameter (torch RNG, seeded by the ``seeded`` fixture).

    matrices: U(-1/sqrt(fan_in), 1/sqrt(fan_in))  (keeps activations unit-scale)
    1-D weights (norms): 1 + 0.2*N(0,1)
    biases, bias_k, bias_v: 0.2*N(0,1)
    Each clone in a stack gets its own values (torch deep-copies one layer, so
    by default all layers would be identical).
    """
    with torch.no_grad():
        for name, p in m.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf in ("bias_k", "bias_v") or leaf.endswith("bias"):
                p.copy_(0.2 * torch.randn_like(p))
            elif p.dim() >= 2:
                bound = 1.0 / float(p.shape[1]) ** 0.5
                p.uniform_(-bound, bound)
            else:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    return m


def t(a: np.ndarray | None) -> torch.Tensor | None:
    """numpy -> torch (shares memory; None passes through)."""
    return None if a is None else torch.from_numpy(np.ascontiguousarray(a))


def layout(x_btE: np.ndarray, batch_first: bool) -> np.ndarray:
    """(B, T, E) -> module layout: (B, T, E) if batch_first else (T, B, E)."""
    return np.ascontiguousarray(x_btE if batch_first else x_btE.transpose(1, 0, 2))


def unlayout(y: np.ndarray, batch_first: bool) -> np.ndarray:
    """Module layout -> (B, T, E)."""
    return y if batch_first else y.transpose(1, 0, 2)


def make_twin(torch_module: torch.nn.Module, encore_module):
    """Load torch's weights into the encore twin, put both in eval mode."""
    torch_module.eval()
    encore_module.load_state_dict(to_numpy_state(torch_module))
    encore_module.eval()
    assert encore_module.training is False
    return encore_module


# ---------------------------------------------------------------------------
# Masks (numpy, torch semantics: bool True = NOT allowed; float is additive)
# ---------------------------------------------------------------------------
NEG_INF = np.float32(-np.inf)


def causal_mask(T: int) -> np.ndarray:
    """Exactly torch's nn.Transformer.generate_square_subsequent_mask(T) (float32,
    -inf above the diagonal, 0 elsewhere)."""
    m = torch.nn.Transformer.generate_square_subsequent_mask(T).numpy().astype(np.float32)
    assert m.dtype == np.float32 and m.shape == (T, T)
    return m


def bool_to_float(m: np.ndarray | None) -> np.ndarray | None:
    """Bool mask -> equivalent additive float32 mask (True -> -inf)."""
    if m is None or m.dtype != np.bool_:
        return m
    return np.where(m, NEG_INF, np.float32(0)).astype(np.float32)


def random_lengths(B: int, T: int) -> np.ndarray:
    """Per-sequence lengths in [1, T]; the first sequence is full when B > 1,
    and (if T > 1) the last one is genuinely padded (also when B == 1)."""
    lengths = np.random.randint(1, T + 1, size=B)
    if B > 1:
        lengths[0] = T
    if T > 1:
        lengths[-1] = max(1, T // 2)
    return lengths


def key_padding_mask(B: int, S: int, *, left: bool = False, lengths=None) -> np.ndarray:
    """(B, S) bool, True = padding.  Right-padded unless ``left``."""
    lengths = random_lengths(B, S) if lengths is None else np.asarray(lengths)
    pos = np.arange(S)[None, :]
    if left:
        return pos < (S - lengths)[:, None]
    return pos >= lengths[:, None]


def random_bool_mask(*shape, p: float = 0.3) -> np.ndarray:
    """Random bool attn mask with at least one allowed key per query row."""
    m = np.random.rand(*shape) < p
    rows = m.reshape(-1, shape[-1])
    keep = np.random.randint(0, shape[-1], size=rows.shape[0])
    rows[np.arange(rows.shape[0]), keep] = False
    return rows.reshape(shape)


def random_float_mask(*shape, p_inf: float = 0.2) -> np.ndarray:
    """Random additive float32 mask: N(0,1) values plus some -inf, with at
    least one finite entry per query row."""
    m = np.random.randn(*shape).astype(np.float32)
    m[random_bool_mask(*shape, p=p_inf)] = NEG_INF
    return m


def allow_first_key(m: np.ndarray) -> np.ndarray:
    """Make key 0 allowed in every row of a bool/float attn mask.  Key 0 is
    never padding in a right-padded key_padding_mask, so combining the two
    cannot produce a fully masked row by accident."""
    m = m.copy()
    if m.dtype == np.bool_:
        m[..., 0] = False
    elif not np.isfinite(m[..., 0]).all():
        m[..., 0] = np.where(np.isfinite(m[..., 0]), m[..., 0], np.float32(0.5))
    return m


@dataclass
class SelfAttnMasks:
    """Mask arguments for one self-attention call, for both sides.

    encore gets exactly ``mask`` / ``kpm`` / ``is_causal``; torch gets
    ``torch_mask`` (the causal mask materialised when encore relies on the
    is_causal flag alone, which torch rejects) and ``torch_kpm`` (converted to
    float when the attn mask is float, avoiding torch's mismatched-type
    deprecation path).
    """

    mask: np.ndarray | None = None
    kpm: np.ndarray | None = None
    is_causal: bool = False
    torch_mask: np.ndarray | None = None
    torch_kpm: np.ndarray | None = None
    fully_masked_rows: bool = False  # some query rows see no key at all


# mask kinds understood by ``self_attn_masks``
SELF_MASK_KINDS = (
    "none",
    "key_padding",  # right-padded bool key padding mask
    "causal_flag",  # encore: is_causal=True, no mask; torch: causal mask + is_causal=True
    "causal_mask",  # both: float causal mask + is_causal=True
    "bool_mask",  # random bool (T, T)
    "float_mask",  # random additive float (T, T) incl. -inf
    "pad_causal",  # bool key padding + causal flag (encore) / mask (torch)
    "pad_float_mask",  # bool key padding + float mask (mixed types on encore side)
    "left_pad_causal",  # left padding + causal: leading rows fully masked
)


def self_attn_masks(kind: str, B: int, T: int) -> SelfAttnMasks:
    if kind == "none":
        return SelfAttnMasks()
    if kind == "key_padding":
        kpm = key_padding_mask(B, T)
        return SelfAttnMasks(kpm=kpm, torch_kpm=kpm)
    if kind == "causal_flag":
        return SelfAttnMasks(is_causal=True, torch_mask=causal_mask(T))
    if kind == "causal_mask":
        cm = causal_mask(T)
        return SelfAttnMasks(mask=cm, is_causal=True, torch_mask=cm)
    if kind == "bool_mask":
        m = random_bool_mask(T, T)
        return SelfAttnMasks(mask=m, torch_mask=m)
    if kind == "float_mask":
        m = random_float_mask(T, T)
        return SelfAttnMasks(mask=m, torch_mask=m)
    if kind == "pad_causal":
        kpm = key_padding_mask(B, T)
        return SelfAttnMasks(kpm=kpm, is_causal=True, torch_mask=causal_mask(T),
                             torch_kpm=bool_to_float(kpm))
    if kind == "pad_float_mask":
        kpm = key_padding_mask(B, T)
        m = allow_first_key(random_float_mask(T, T))  # no accidental fully masked rows
        return SelfAttnMasks(mask=m, kpm=kpm, torch_mask=m, torch_kpm=bool_to_float(kpm))
    if kind == "left_pad_causal":
        kpm = key_padding_mask(B, T, left=True)
        return SelfAttnMasks(kpm=kpm, is_causal=True, torch_mask=causal_mask(T),
                             torch_kpm=bool_to_float(kpm),
                             fully_masked_rows=bool(kpm[:, 0].any()))
    raise ValueError(f"unknown mask kind {kind!r}")


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------
def assert_close(actual, expected, atol: float, what: str, *,
                 expected_nan_ok: bool = False, min_scale: float = 1e-2) -> float:
    """Assert max|actual - expected| <= atol and return that max.

    * ``actual`` (encore) must be a float32 numpy array of the same shape, and
      entirely finite.
    * ``expected`` (usually torch) must be finite everywhere, unless
      ``expected_nan_ok``: then positions where torch is NaN/inf are excluded
      from the comparison (encore must still be finite there).
    * Guards against vacuous comparisons: the compared part of ``expected``
      must have some value with |x| >= ``min_scale`` (pass 0 to disable when
      an all-zero result is legitimately expected).
    Prints the max abs diff and its location (visible with ``pytest -s`` or
    on failure).
    """
    assert isinstance(actual, np.ndarray), f"{what}: encore returned {type(actual).__name__}, not np.ndarray"
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != torch {expected.shape}"
    assert actual.dtype == np.float32, f"{what}: dtype {actual.dtype}, expected float32"
    bad = ~np.isfinite(actual)
    assert not bad.any(), (
        f"{what}: encore produced {int(bad.sum())} non-finite values, first at "
        f"{tuple(int(i) for i in np.argwhere(bad)[0])}")
    valid = np.isfinite(expected)
    if not expected_nan_ok:
        assert valid.all(), f"{what}: torch oracle produced non-finite values (test bug?)"
    assert valid.any(), f"{what}: torch oracle is entirely non-finite; nothing to compare"
    if min_scale > 0:
        scale = float(np.abs(expected[valid]).max())
        assert scale >= min_scale, (
            f"{what}: torch oracle max|x|={scale:.3e} < {min_scale}; comparison would be vacuous")
    diff = np.where(valid, np.abs(actual.astype(np.float64) - expected.astype(np.float64)), 0.0)
    idx = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.size else ()
    max_diff = float(diff[idx]) if diff.size else 0.0
    msg = (f"{what}: max|diff|={max_diff:.3e} at {tuple(int(i) for i in idx)} "
           f"(actual={float(actual[idx]) if diff.size else 0:.7g}, "
           f"expected={float(expected[idx]) if diff.size else 0:.7g}), atol={atol:.0e}, "
           f"compared {int(valid.sum())}/{valid.size}")
    print(msg)
    assert max_diff <= atol, msg
    return max_diff


def shape_pattern(shape) -> re.Pattern:
    """Regex matching a shape written in any usual way: (36, 108), [36,108],
    36x108, {36, 108} ...: the dims in order, separated by 1-4 non-digits."""
    dims = [str(int(d)) for d in shape]
    return re.compile(r"(?<!\d)" + r"\D{1,4}".join(dims) + r"(?!\d)")


def call_kwargs(**kw) -> dict[str, Any]:
    """Drop None-valued kwargs (so defaults are exercised) but keep explicit
    False/True flags."""
    return {k: v for k, v in kw.items() if v is not None}


# ---------------------------------------------------------------------------
# Hugging Face model families (test_modernbert, test_qwen3, test_t5,
# test_deberta_v2): random checkpoints built with save_pretrained, padded
# batches, the checks every family runs the same way.
# ---------------------------------------------------------------------------
def perturbed(model: torch.nn.Module, scale: float = 0.05) -> torch.nn.Module:
    """Every parameter + N(0, scale) from torch's generator (transformers' init puts norms at 1 and biases at 0,
    which would leave them untested); the model in eval mode."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale)
    return model.eval()


def save_random_checkpoints(tmp_path_factory, cases, make_model, seed: int, rewrite=None) -> dict:
    """name -> (directory, torch model in eval mode): for cases[i] (a tuple whose first item is its name),
    make_model(case) under torch.manual_seed(seed + i), perturbed, written with save_pretrained into a fresh
    directory; rewrite(name, directory), when given, may then edit what was written."""
    out = {}
    for i, case in enumerate(cases):
        torch.manual_seed(seed + i)
        model = perturbed(make_model(case))
        d = tmp_path_factory.mktemp(case[0])
        model.save_pretrained(d, safe_serialization=True)
        if rewrite:
            rewrite(case[0], d)
        out[case[0]] = (str(d), model)
    return out


def padded_batch(lengths, vocab_size: int, pad_token_id: int, seed: int, *, first_id: int = 3,
                 side: str = "right"):
    """(ids, mask) int64 (B, max(lengths)): row b has lengths[b] ids drawn from [first_id, vocab_size) by
    numpy's default_rng(seed), padded with pad_token_id on the right (or the left)."""
    rng = np.random.default_rng(seed)
    width = max(lengths)
    ids = np.full((len(lengths), width), pad_token_id, dtype=np.int64)
    mask = np.zeros_like(ids)
    for b, n in enumerate(lengths):
        cols = slice(0, n) if side == "right" else slice(width - n, width)
        ids[b, cols] = rng.integers(first_id, vocab_size, n)
        mask[b, cols] = 1
    return ids, mask


def max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a) - np.asarray(b)).max())


def assert_attentions_match(got, ref, real: np.ndarray, layers: int, tol: float) -> list:
    """Per layer (B, heads, T, T) probabilities: as many layers as the reference's (layers), the same shapes, and
    within tol on every sequence's real keys (real: (B, T) bool). Returns encore's as numpy arrays."""
    assert len(got) == len(ref) == layers
    out = []
    for i, (a, b) in enumerate(zip(got, ref)):
        a, b = np.asarray(a), b.numpy()
        assert a.shape == b.shape
        for s in range(a.shape[0]):
            d = max_diff(a[s][:, real[s]], b[s][:, real[s]])
            assert d <= tol, f"layer {i} sequence {s}: attention weights differ by {d:.2e}"
        out.append(a)
    return out


def write_config(src: str, dst: pathlib.Path, **changes) -> str:
    """A copy of the checkpoint directory src at dst with config.json's keys set to changes (None: removed)."""
    import json
    import shutil
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (dst / "config.json").write_text(json.dumps(cfg))
    return str(dst)


def assert_load_refused(path: str, message: str, *, names: str = "") -> None:
    """encore.AutoModel.load(path) raises encore.Error matching the regex message (and containing names)."""
    encore = require_encore()
    with pytest.raises(encore.Error, match=message) as e:
        encore.AutoModel.load(path)
    assert names in str(e.value)


def assert_missing_weight_named(src: str, dst: pathlib.Path, name: str) -> None:
    """A copy of src without the tensor `name` fails to load with an error naming it."""
    import re
    from safetensors.numpy import load_file, save_file
    path = write_config(src, dst)
    weights = load_file(f"{path}/model.safetensors")
    del weights[name]
    save_file(weights, f"{path}/model.safetensors", metadata={"format": "pt"})
    assert_load_refused(path, re.escape(name))


def assert_low_precision_close(got, ref, floor: float, what: str) -> None:
    """Rows of got (bf16 / int8) within cosine floor of ref's (fp32), and not ref's bits (the dtype ran)."""
    a, b = np.asarray(got), np.asarray(ref)
    cos = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
    assert cos.min() >= floor, f"{what}: min cosine {cos.min():.6f}"
    assert max_diff(a, b) > 1e-5, f"{what}: identical to fp32, the dtype did not apply"


def backward_through_reference(target: torch.Tensor, real: np.ndarray, seed: int = 4) -> np.ndarray:
    """R ~ N(0, 1) from default_rng(seed) shaped as target (0 at padded positions real == False of a (B, T, ...)
    target: nothing reads them); runs torch's backward of loss = sum(R * target) and returns R."""
    r = np.random.default_rng(seed).standard_normal(tuple(target.shape)).astype(np.float32)
    if target.dim() == 3:
        r[~real] = 0
    (target * torch.from_numpy(r)).sum().backward()
    return r


def assert_loss_close(got, target: torch.Tensor, r: np.ndarray, rel: float) -> None:
    """sum(R * got) within rel · sum|R * target| of sum(R * target)."""
    want = target.detach().numpy() * r
    assert abs(float((np.asarray(got) * r).sum()) - float(want.sum())) <= rel * float(np.abs(want).sum())


def assert_every_gradient_matches(grads: dict, reference: dict, hf_name, rel: float, what: str,
                                  near_zero=None) -> float:
    """Every encore gradient grads[n] vs torch's reference[hf_name(n)].grad within rel relative per tensor,
    max|g - g_ref| / max|g_ref| (a zero reference gradient fails: it would not see a wrong one), and every
    reference parameter compared. near_zero(n), when given, names gradients that are 0 in exact arithmetic: both
    sides must then be within 1e-5 of the largest reference gradient. Returns the worst relative difference."""
    scale = max(float(p.grad.abs().max()) for p in reference.values()) if near_zero else 0.0
    covered, worst = set(), 0.0
    for n, g in grads.items():
        ref_name = hf_name(n)
        covered.add(ref_name)
        want = reference[ref_name].grad.numpy()
        assert g.shape == want.shape, n
        if near_zero and near_zero(n):
            assert max(np.abs(g).max(), np.abs(want).max()) <= 1e-5 * scale, f"{what} {n}: not ~0"
            continue
        assert np.abs(want).max() > 0, f"{what} {n}: reference gradient is zero - the test would not see a wrong one"
        d = float(np.abs(g - want).max() / np.abs(want).max())
        worst = max(worst, d)
        assert d <= rel, f"{what} {n}: gradient rel diff {d:.2e}"
    assert covered == set(reference), f"not compared: {sorted(set(reference) ^ covered)}"
    return worst


def assert_checkpointing_is_bitwise(path: str, inputs: tuple, output: str, r: np.ndarray,
                                    dropout: float = 0.2) -> None:
    """Training with dropout at every site: the same seed gives bitwise the same output (output: "logits" or
    "last_hidden_state", whose gradient r is) and every parameter's gradient with and without gradient
    checkpointing; every parameter gets one; and dropout does act (the output differs from eval by > 1e-3)."""
    encore = require_encore()
    runs = []
    for checkpointing in [False, True]:
        enc = encore.AutoModel.load(path).train()
        enc.set_dropout(dropout)
        enc.gradient_checkpointing = checkpointing
        params = enc.parameters_module()
        params.zero_grad()
        encore.manual_seed(123)
        out = np.asarray(enc(*inputs, return_dict=True)[output])
        enc.backward(**{"d_logits" if output == "logits" else "d_last_hidden_state": r})
        runs.append((out, {n: np.array(g) for n, g in params.grads().items()}))
    (o0, g0), (o1, g1) = runs
    np.testing.assert_array_equal(o0, o1)
    assert g0.keys() == g1.keys() == encore.AutoModel.load(path).parameters_module().state_dict().keys()
    for n in g0:
        np.testing.assert_array_equal(g0[n], g1[n], err_msg=n)
    plain = np.asarray(encore.AutoModel.load(path)(*inputs, return_dict=True)[output])
    assert max_diff(o0, plain) > 1e-3
