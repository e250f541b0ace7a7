"""encore.CrossEncoder (issue 12 item 1) against sentence-transformers' CrossEncoder, run live on random-initialised
BertForSequenceClassification checkpoints saved by transformers (with MiniLM's tokenizer): one label (a re-ranker:
sigmoid scores, rank()), three labels (NLI-style: identity, apply_softmax), and an activation named in config.json
(sentence_transformers.activation_fn = Tanh, and Identity on a one-label model).

Tolerances: scores within 1e-5 * max(1, max |score|) of sentence-transformers' (float32; the wide initializer makes
logits of size ~4: measured max differences 9.5e-7 for sigmoid scores, 6.1e-6 for 3-label logits of max 4.5, 4.1e-6
after tanh, so the margin is 7-10x); rank() gives the same corpus ids in the same order (the test's scores are spread by a wide
initializer_range so that no two are within 1e-4) and the same top_k / return_documents shapes.
"""
import json
import os
import shutil

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
import transformers as T  # noqa: E402
from sentence_transformers import CrossEncoder as STCrossEncoder  # noqa: E402
from train_data import MINILM, TOKENIZER_FILES  # noqa: E402

import encore  # noqa: E402

QUERY = "how old is the moon"
DOCS = ["The Moon formed about 4.5 billion years ago.", "Paris is the capital of France.", "x",
        "Lunar rocks brought back by Apollo astronauts were dated with radiometric methods, giving ages close to "
        "that of the Earth itself, and the oldest samples are more than four billion years old.",
        "The moon is old.", "", "Cheese is made from milk; the moon is not made of cheese, whatever stories say."]
PAIRS = [(QUERY, d) for d in DOCS] + [("A man is eating food.", "A man eats."), ("one", "two three four")]
ATOL = 1e-5


def tolerance(want):
    return ATOL * max(1.0, float(np.abs(want).max()))


def save_classifier(d, num_labels, activation=None):
    torch.manual_seed(num_labels)
    cfg = T.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=64, max_position_embeddings=128, num_labels=num_labels, initializer_range=0.5)
    T.BertForSequenceClassification(cfg).eval().save_pretrained(d, safe_serialization=True)
    for f in TOKENIZER_FILES:
        shutil.copy(MINILM / f, d / f)
    if activation:
        c = json.loads((d / "config.json").read_text())
        c["sentence_transformers"] = {"activation_fn": activation}
        (d / "config.json").write_text(json.dumps(c))
    return d


# sentence-transformers' torch on both cores (conftest's torch_two_threads), as test_sentence_encoder does.
pytestmark = pytest.mark.usefixtures("torch_two_threads")


@pytest.mark.parametrize("num_labels,activation", [(1, None), (3, None), (1, "torch.nn.modules.linear.Identity"),
                                                   (3, "torch.nn.modules.activation.Tanh")])
def test_predict_matches_sentence_transformers(tmp_path, num_labels, activation):
    d = save_classifier(tmp_path / "ce", num_labels, activation)
    st, ce = STCrossEncoder(str(d), device="cpu"), encore.CrossEncoder(d)
    assert ce.num_labels == num_labels and ce.max_length == st.max_seq_length
    want, got = st.predict(PAIRS, batch_size=4), ce.predict(PAIRS, batch_size=4)
    assert got.shape == want.shape and got.dtype == np.float32
    assert np.abs(got - want).max() <= tolerance(want), np.abs(got - want).max()
    assert np.ptp(got) > 1e-2  # the scores are not all alike: the comparison can tell pairs apart
    one = ce.predict(PAIRS[0])
    if num_labels == 1:
        assert isinstance(one, float) and abs(one - float(want[0])) <= ATOL
        np.testing.assert_allclose(ce.predict(PAIRS, activation=False), np.log(want / (1 - want)) if activation is None
                                   else want, atol=1e-4)
    else:
        assert one.shape == (num_labels,) and np.abs(one - want[0]).max() <= tolerance(want)
        soft_want, soft_got = st.predict(PAIRS, apply_softmax=True), ce.predict(PAIRS, apply_softmax=True)
        assert np.abs(soft_got - soft_want).max() <= ATOL
        np.testing.assert_allclose(soft_got.sum(1), 1.0, atol=1e-6)


def test_rank_matches_sentence_transformers(tmp_path):
    d = save_classifier(tmp_path / "ce", 1)
    st, ce = STCrossEncoder(str(d), device="cpu"), encore.CrossEncoder(d)
    scores = np.sort(st.predict([(QUERY, doc) for doc in DOCS]))
    assert np.diff(scores).min() > 1e-4, "scores too close to fix an order"
    for top_k, docs in ((None, False), (3, True), (0, False), (100, True)):
        want = st.rank(QUERY, DOCS, top_k=top_k, return_documents=docs)
        got = ce.rank(QUERY, DOCS, top_k=top_k, return_documents=docs)
        assert [r["corpus_id"] for r in got] == [r["corpus_id"] for r in want], (top_k, got, want)
        assert all(abs(g["score"] - w["score"]) <= ATOL for g, w in zip(got, want))
        assert all(set(g) == set(w) for g, w in zip(got, want))
        if docs:
            assert [g["text"] for g in got] == [w["text"] for w in want]


def test_errors_name_the_problem(tmp_path):
    d = save_classifier(tmp_path / "nli", 3)
    ce = encore.CrossEncoder(d)
    with pytest.raises(encore.UsageError, match="rank\\(\\) needs a re-ranker.*3 labels"):
        ce.rank(QUERY, DOCS)
    with pytest.raises(encore.UsageError, match="pair"):
        ce.predict(["just one string", "and another", "and a third"])
    with pytest.raises(encore.UsageError, match="batch_size"):
        ce.predict(PAIRS, batch_size=0)
    plain = tmp_path / "plain"
    torch.manual_seed(0)
    T.BertModel(T.BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                             intermediate_size=24)).save_pretrained(plain, safe_serialization=True)
    for f in TOKENIZER_FILES:
        shutil.copy(MINILM / f, plain / f)
    with pytest.raises(encore.ModelFormatError, match="sequence-classification head"):
        encore.CrossEncoder(plain)
    bad = save_classifier(tmp_path / "bad", 1, "torch.nn.modules.activation.Mish")
    with pytest.raises(encore.ModelFormatError, match="activation_fn.*Mish"):
        encore.CrossEncoder(bad)


def test_cli_rerank_matches_sentence_transformers(tmp_path):
    import pathlib
    import subprocess
    bin_path = pathlib.Path(os.environ.get("ENCORE_BIN", pathlib.Path(__file__).resolve().parents[2] / "build" / "encore"))
    d = save_classifier(tmp_path / "ce", 1)
    want = STCrossEncoder(str(d), device="cpu").rank(QUERY, DOCS, top_k=3, return_documents=True)
    res = subprocess.run([str(bin_path), "rerank", "--model", d, "-q", QUERY, "--top-k", "3", *DOCS],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert [r["corpus_id"] for r in got] == [r["corpus_id"] for r in want]
    assert [r["text"] for r in got] == [r["text"] for r in want]
    assert all(abs(g["score"] - w["score"]) <= ATOL for g, w in zip(got, want))
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(DOCS)))
    res = subprocess.run([str(bin_path), "rerank", "--model", d, "-q", QUERY, "-i", docs, "--field", "body",
                          "--no-documents"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert [r["corpus_id"] for r in json.loads(res.stdout)] == \
        [r["corpus_id"] for r in STCrossEncoder(str(d), device="cpu").rank(QUERY, DOCS)]
    res = subprocess.run([str(bin_path), "rerank", "--model", save_classifier(tmp_path / "nli", 3), "-q", QUERY, "a"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "needs a re-ranker" in res.stderr, res.stderr
