"""encore.TextClassifier / `encore classify` (issue 12 item 6) against transformers' pipeline("text-classification"),
run live on random-initialised *ForSequenceClassification checkpoints saved by transformers: BERT (MiniLM's
tokenizer) single-label with named labels (softmax), multi_label_classification (sigmoid, LABEL_i names), one label
(sigmoid), regression (none), and RoBERTa (a trained byte-level BPE) single-label; plus a checkpoint `encore train`
wrote.

Tolerance: scores within 1e-5 * max(1, |score|) of the pipeline's (float32 forward; the function in float64 here
vs float32 numpy there). Measured on this machine with initializer_range 0.2 (scores spread 0.09-0.77 across the
texts): <= 3.0e-7 for sigmoid/softmax probabilities and <= 1.1e-6 for raw logits of size <= 1.7, a margin of 9x or
more (test_scores_match_the_pipeline prints its maxima with -s). Labels and their order are the pipeline's; two
labels whose oracle scores are within 2x the tolerance may come in either order (the test checks the order wherever
the gap is larger).
"""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import transformers as T  # noqa: E402
from pipeline_models import save_config_fields, save_model  # noqa: E402
from train_data import save_tiny_bert, sentiment_files  # noqa: E402

import encore  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("ENCORE_BIN", ROOT / "build" / "encore"))
TEXTS = ["This movie was great, really wonderful!", "That meal was awful.", "x", "Paris is the capital of France.",
         "The moon formed about 4.5 billion years ago, and lunar rocks were dated with radiometric methods.",
         "A man is eating food.", "¿Dónde está la biblioteca? 北京 🙂"]
ATOL = 1e-5
MEASURED = {}

# name -> (family, model class, config fields, expected default function)
CASES = {
    "bert-single-label": ("bert", "BertForSequenceClassification",
                          dict(num_labels=3, id2label={0: "negative", 1: "neutral", 2: "positive"},
                               label2id={"negative": 0, "neutral": 1, "positive": 2}), "softmax"),
    "bert-multi-label": ("bert", "BertForSequenceClassification",
                         dict(num_labels=4, problem_type="multi_label_classification"), "sigmoid"),
    "bert-one-label": ("bert", "BertForSequenceClassification", dict(num_labels=1), "sigmoid"),
    "bert-regression": ("bert", "BertForSequenceClassification", dict(num_labels=2, problem_type="regression"), "none"),
    "roberta-single-label": ("roberta", "RobertaForSequenceClassification",
                             dict(num_labels=3, id2label={0: "a", 1: "b", 2: "c"}, label2id={"a": 0, "b": 1, "c": 2}),
                             "softmax"),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("classifiers")
    out = {}
    for i, (name, (family, cls, cfg, _)) in enumerate(CASES.items()):
        out[name] = save_model(root / name, family, getattr(T, cls), seed=i, **cfg)
    return out


def oracle(d):
    return T.pipeline("text-classification", model=str(d), device="cpu")


def check_rows(got, want, tol=ATOL, name=""):
    """One input's label lists: same labels, scores within tol, order as the oracle's wherever the gap > 2 tol."""
    assert len(got) == len(want), (got, want)
    err = 0.0
    for g, o in zip(got, want):
        assert set(g) == {"label", "score"} and isinstance(g["score"], float)
        if g["label"] != o["label"]:  # only a tie within the tolerance may reorder
            assert abs(g["score"] - o["score"]) <= 2 * tol * max(1, abs(o["score"])), (got, want)
        else:
            err = max(err, abs(g["score"] - o["score"]) / max(1.0, abs(o["score"])))
    assert err <= tol, (name, err, got, want)
    MEASURED[name] = max(MEASURED.get(name, 0.0), err)


@pytest.mark.parametrize("name", list(CASES))
def test_scores_match_the_pipeline(checkpoints, name):
    d = checkpoints[name]
    pipe, clf = oracle(d), encore.TextClassifier(d)
    assert clf.function_to_apply == CASES[name][3]
    assert clf.labels == [pipe.model.config.id2label[i] for i in range(pipe.model.config.num_labels)]
    # the pipeline's default call: one {label, score} per text (a str gives a one-element list)
    want, got = pipe(TEXTS), clf(TEXTS, batch_size=3)
    assert isinstance(got, list) and all(isinstance(r, dict) for r in got)
    for g, w in zip(got, want, strict=True):
        check_rows([g], [w], name=name)
    one = clf(TEXTS[0])
    assert isinstance(one, list) and len(one) == 1
    check_rows(one, pipe(TEXTS[0]), name=name)
    # top_k: every label sorted (None), the best two, for a list and a str
    for top_k in (None, 2):
        for g, w in zip(clf(TEXTS, top_k=top_k), pipe(TEXTS, top_k=top_k), strict=True):
            check_rows(g, w, name=name)
        check_rows(clf(TEXTS[1], top_k=top_k), pipe(TEXTS[1], top_k=top_k), name=name)
    # function_to_apply overrides the default (raw logits: tolerance relative to their size)
    for fn in ("none", "sigmoid", "softmax"):
        for g, w in zip(clf(TEXTS, top_k=None, function_to_apply=fn), pipe(TEXTS, top_k=None, function_to_apply=fn),
                        strict=True):
            check_rows(g, w, name=name)
    spread = [r["score"] for r in clf(TEXTS)]
    assert np.ptp(spread) > 1e-3, spread  # the texts are told apart: the comparison can fail
    print(f"{name}: max |encore - transformers| / max(1, |score|) = {MEASURED[name]:.2e}")


def test_text_pairs_and_truncation(checkpoints):
    d = checkpoints["bert-single-label"]
    pipe, clf = oracle(d), encore.TextClassifier(d)
    pair = {"text": "A man is eating food.", "text_pair": "Someone is eating."}
    check_rows([clf(pair)], [pipe(pair)], name="pairs")
    for g, w in zip(clf([pair, {"text": "x", "text_pair": "y z"}], top_k=None),
                    pipe([pair, {"text": "x", "text_pair": "y z"}], top_k=None), strict=True):
        check_rows(g, w, name="pairs")
    long_text = " ".join(["the moon is old and made of rock"] * 40)  # ~320 tokens, max_position_embeddings 128
    assert clf.max_length == 128
    check_rows(clf(long_text, top_k=None), pipe(long_text, top_k=None, truncation=True, max_length=128), name="long")
    with pytest.raises(encore.InputError, match="text 1 is 3.. tokens long, more than max_seq_length 128"):
        clf(["short", long_text], truncation=False)


def test_cli_classify_matches_the_pipeline(checkpoints, tmp_path):
    d = checkpoints["roberta-single-label"]
    pipe = oracle(d)
    texts = tmp_path / "texts.txt"
    texts.write_text("".join(t + "\n" for t in TEXTS))
    res = subprocess.run([str(BIN), "classify", "--model", d, "-i", texts, "--all-labels"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == len(TEXTS)
    for line, w in zip(lines, pipe(TEXTS, top_k=None), strict=True):
        check_rows(json.loads(line), w, name="cli")
    res = subprocess.run([str(BIN), "classify", "--model", d, "--function", "sigmoid", "-k", "2", *TEXTS[:2]],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    for line, w in zip(res.stdout.splitlines(), pipe(TEXTS[:2], top_k=2, function_to_apply="sigmoid"), strict=True):
        check_rows(json.loads(line), w, name="cli")


def test_a_model_encore_train_wrote(tmp_path):
    """encore train --output writes a checkpoint that `encore classify` and transformers' pipeline both read, with
    the labels of the training data."""
    data = sentiment_files(tmp_path, {"train.jsonl": 64})
    out = tmp_path / "trained"
    res = subprocess.run([str(BIN), "train", "--model", save_tiny_bert(tmp_path / "base"), "--data",
                          data / "train.jsonl", "--eval-fraction", "0", "--epochs", "1", "--batch-size", "16",
                          "--output", out, "--threads", "2", "-q"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    texts = ["the movie was great , really", "the meal was awful , really", "the trip was boring"]
    res = subprocess.run([str(BIN), "classify", "--model", out, "--all-labels", *texts], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    want = oracle(out)(texts, top_k=None)
    for line, w in zip(res.stdout.splitlines(), want, strict=True):
        check_rows(json.loads(line), w, name="trained")
    assert {r["label"] for r in want[0]} == {"neg", "pos"}


def test_errors_name_the_problem(checkpoints, tmp_path):
    clf = encore.TextClassifier(checkpoints["bert-multi-label"])
    with pytest.raises(encore.UsageError, match="function_to_apply 'tanh'"):
        clf(TEXTS, function_to_apply="tanh")
    with pytest.raises(encore.UsageError, match="cannot be mixed"):
        clf(["a", {"text": "b", "text_pair": "c"}])
    with pytest.raises(encore.UsageError, match="text_pair"):
        clf({"text": "b"})
    with pytest.raises(encore.UsageError, match="top_k must be"):
        clf(TEXTS, top_k=-1)
    with pytest.raises(encore.UsageError, match="batch_size"):
        clf(TEXTS, batch_size=0)
    with pytest.raises(encore.UsageError, match="inputs must be"):
        clf(3)
    assert clf(TEXTS, top_k=0) == [[] for _ in TEXTS]  # the pipeline's dict_scores[:0]
    assert clf([]) == []
    base = save_tiny_bert(tmp_path / "base")
    with pytest.raises(encore.ModelFormatError, match="BertModel checkpoint without a sequence-classification head"):
        encore.TextClassifier(base)
    bad = save_model(tmp_path / "bad", "bert", T.BertForSequenceClassification, num_labels=2)
    save_config_fields(bad, problem_type="ranking")
    with pytest.raises(encore.ModelFormatError, match="problem_type"):
        encore.TextClassifier(bad)
    res = subprocess.run([str(BIN), "classify", "--model", base, "hello"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 3 and "sequence-classification head" in res.stderr, res.stderr
    res = subprocess.run([str(BIN), "classify", "--model", checkpoints["bert-one-label"]], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and "nothing to classify" in res.stderr, res.stderr
