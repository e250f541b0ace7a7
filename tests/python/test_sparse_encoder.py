"""encore.SparseEncoder / `encore embed --sparse` (issue 12 item 3, SPLADE) against sentence-transformers 6.2's
SparseEncoder (MLMTransformer + SpladePooling max, relu) run live on random-initialised *ForMaskedLM checkpoints
(BERT with MiniLM's WordPiece, RoBERTa with a byte-level BPE trained in the test).

Tolerance: the non-zero indices identical; values within 1e-5 (float32 logits, max over tokens, log1p; measured
maxima printed with -s: 1.9e-6 / 1.7e-6 on weights up to 1.8, a margin of 5x; initializer_range 0.2 - at 0.5 the
logits grow and float32 rounding reached 2.7e-5). With max_active_dims the same k
indices are kept (the test checks the k-th and (k+1)-th weights are more than 1e-4 apart, so the choice is not a tie).
"""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import transformers as T  # noqa: E402
from pipeline_models import save_model  # noqa: E402
from sentence_transformers import SparseEncoder as STSparseEncoder  # noqa: E402

import encore  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("ENCORE_BIN", ROOT / "build" / "encore"))
TEXTS = ["how old is the moon", "The moon formed about 4.5 billion years ago, and lunar rocks were dated.", "x",
         "Paris is the capital of France.", "A man is eating food; someone is playing music."]
ATOL = 1e-5

pytestmark = pytest.mark.usefixtures("torch_two_threads")


@pytest.fixture(scope="module")
def splade(tmp_path_factory):
    root = tmp_path_factory.mktemp("splade")
    return {"bert": save_model(root / "bert", "bert", T.BertForMaskedLM),
            "roberta": save_model(root / "roberta", "roberta", T.RobertaForMaskedLM)}


def dense(rows, dim):
    out = np.zeros((len(rows), dim), np.float32)
    for i, r in enumerate(rows):
        for k, v in r.items():
            out[i, k] = v
    return out


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_sparse_vectors_match_sentence_transformers(splade, family):
    d = splade[family]
    st, enc = STSparseEncoder(str(d), device="cpu"), encore.SparseEncoder(d)
    assert enc.max_seq_length == st.max_seq_length
    want = st.encode(TEXTS, batch_size=2, convert_to_sparse_tensor=False).numpy()
    assert want.shape == (len(TEXTS), enc.dimension)
    rows = enc.encode(TEXTS, batch_size=2)
    assert all(list(r) == sorted(r) for r in rows)  # indices ascending
    got = dense(rows, enc.dimension)
    for g, w in zip(got, want):
        assert np.array_equal(np.flatnonzero(g), np.flatnonzero(w))
    err = np.abs(got - want).max()
    assert err <= ATOL, err
    assert 10 < min(len(r) for r in rows) < enc.dimension  # sparse, but not trivially empty
    print(f"{family}: max |encore - sentence-transformers| = {err:.1e} (max weight {want.max():.2f}, "
          f"{np.mean([len(r) for r in rows]):.0f} non-zeros per text)")
    one = enc.encode(TEXTS[0])
    assert isinstance(one, dict) and one.keys() == rows[0].keys()
    k = 16
    for w in want:
        top = np.sort(w)[::-1]
        assert top[k - 1] - top[k] > 1e-4, "the k-th weight ties the next: pruning could keep either"
    want_k = st.encode(TEXTS, convert_to_sparse_tensor=False, max_active_dims=k).numpy()
    got_k = dense(enc.encode(TEXTS, max_active_dims=k), enc.dimension)
    for g, w in zip(got_k, want_k):
        assert np.array_equal(np.flatnonzero(g), np.flatnonzero(w)) and np.count_nonzero(g) == k
    assert np.abs(got_k - want_k).max() <= ATOL
    data, indices, indptr, shape = enc.encode_csr(TEXTS, max_active_dims=k)
    assert shape == (len(TEXTS), enc.dimension) and list(indptr) == [i * k for i in range(len(TEXTS) + 1)]
    csr = np.zeros(shape, np.float32)
    for i in range(len(TEXTS)):
        csr[i, indices[indptr[i]:indptr[i + 1]]] = data[indptr[i]:indptr[i + 1]]
    assert np.array_equal(csr, got_k)


def test_cli_embed_sparse(splade, tmp_path):
    d = splade["bert"]
    want = STSparseEncoder(str(d), device="cpu").encode(TEXTS, convert_to_sparse_tensor=False,
                                                         max_active_dims=16).numpy()
    f = tmp_path / "texts.txt"
    f.write_text("".join(t + "\n" for t in TEXTS))
    out = tmp_path / "sparse.jsonl"
    res = subprocess.run([str(BIN), "embed", "--sparse", "--model", d, "-i", f, "-o", out, "--max-active-dims", "16"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == len(TEXTS)
    for line, w in zip(lines, want):
        assert [e["index"] for e in line] == list(np.flatnonzero(w))
        assert max(abs(e["value"] - w[e["index"]]) for e in line) <= ATOL
    for bad, msg in ((["--format", "csv"], "JSON lines"), (["--precision", "int8"], "--precision")):
        res = subprocess.run([str(BIN), "embed", "--sparse", "--model", d, *bad, "hello"], capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 2 and msg in res.stderr, res.stderr
    res = subprocess.run([str(BIN), "embed", "--max-active-dims", "4", "hello"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2 and "needs --sparse" in res.stderr, res.stderr


def test_sparse_errors(splade, tmp_path):
    enc = encore.SparseEncoder(splade["bert"])
    with pytest.raises(encore.UsageError, match="max_active_dims"):
        enc.encode(TEXTS, max_active_dims=0)
    with pytest.raises(encore.UsageError, match="sentences must be"):
        enc.encode(3)
    clf = save_model(tmp_path / "clf", "bert", T.BertForSequenceClassification, num_labels=2)
    with pytest.raises(encore.ModelFormatError, match="without a masked-LM head"):
        encore.SparseEncoder(clf)
    res = subprocess.run([str(BIN), "embed", "--sparse", "--model", clf, "hello"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 3 and "masked-LM head" in res.stderr, res.stderr
