"""`encore train --task rerank` (issue 12 item 1, training) against the same fine-tune in PyTorch, as
sentence-transformers trains a CrossEncoder with BinaryCrossEntropyLoss: one logit per (query, document) pair,
torch.nn.functional.binary_cross_entropy_with_logits against the relevance label (soft labels included).

Same start: one BertForSequenceClassification checkpoint with num_labels=1 written here (2 layers, hidden 32,
dropout 0, seeded, all-MiniLM-L6-v2's WordPiece tokenizer) that both libraries load. Same run: 48 generated
(query, document, relevance) rows - relevant documents hold the query's topic words, irrelevant ones chatter, a
few labels are 0.25 / 0.75 - in file order (--no-shuffle), pairs truncated longest-first at max_length 32, batches
of 8 padded to their longest member, AdamW (lr 1e-2, weight decay 0.01 on every parameter), linear warm-up over 3
steps then linear decay to 0 at step 20, clipping at global norm 1.0, 20 steps.

Checks: each of the 20 steps' loss within 1e-4 relative of torch's (measured: printed by the test; the CSV log
keeps 6 significant digits); the loss falls; the checkpoint loads in transformers with no missing or unexpected
weights, and sentence-transformers' CrossEncoder and encore.CrossEncoder give the same scores on it (within
1e-5 * max(1, |score|), test_cross_encoder.py's tolerance); a base checkpoint gets a fresh one-label head (and Python's encore.train(task="rerank") logs the CLI's losses); bad rows
and a many-label head are refused naming the problem.
"""
import csv
import json
import os
import pathlib
import random
import subprocess

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
import transformers as T  # noqa: E402
from sentence_transformers import CrossEncoder as StCrossEncoder  # noqa: E402
from train_data import NO_DROPOUT, save_tiny_bert, train_cli_args  # noqa: E402

import encore  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("ENCORE_BIN", REPO / "build" / "encore"))
TOPICS = {"moon": ["lunar", "crater", "orbit", "apollo"], "bread": ["flour", "yeast", "oven", "dough"],
          "chess": ["knight", "bishop", "checkmate", "opening"], "rain": ["cloud", "storm", "umbrella", "forecast"]}
NOISE = ["seven", "purple", "yesterday", "quickly", "invoice", "guitar", "velvet"]
STEPS, BATCH, LR, WD, WARMUP, CLIP, MAX_LEN = 20, 8, 1e-2, 0.01, 3, 1.0, 32
REL = 1e-4


def rows(n, seed=0):
    rng = random.Random(seed)
    names = sorted(TOPICS)
    out = []
    for i in range(n):
        topic = rng.choice(names)
        relevant = i % 2 == 0
        # irrelevant documents are off-topic chatter, so a 2-layer model learns the task within 20 steps
        words = (rng.sample(TOPICS[topic], 3) if relevant else rng.sample(NOISE, 3)) + ["the", "a", "of", "and"][: rng.randint(1, 4)]
        rng.shuffle(words)
        label = 1.0 if relevant else 0.0
        if i % 11 == 5:
            label = 0.75 if relevant else 0.25  # soft labels
        doc = " ".join(words * (4 if i % 9 == 0 else 1))  # some long enough to be truncated
        out.append({"text": f"what about the {topic}?", "text_pair": doc, "label": label})
    return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("rerank_train")
    data = rows(48)
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
    start = save_tiny_bert(root / "start", T.BertForSequenceClassification, seed=5, num_labels=1, **NO_DROPOUT)
    return root, data, start


def torch_finetune(start, data):
    tok = T.AutoTokenizer.from_pretrained(str(start))
    model = T.BertForSequenceClassification.from_pretrained(str(start)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD, betas=(0.9, 0.999), eps=1e-8)
    sched = T.get_linear_schedule_with_warmup(opt, WARMUP, STEPS)
    losses, pos = [], 0
    with torch.enable_grad():
        for _ in range(STEPS):
            if pos >= len(data):
                pos = 0
            chunk, pos = data[pos:pos + BATCH], pos + BATCH
            x = tok([r["text"] for r in chunk], [r["text_pair"] for r in chunk], truncation=True,
                    max_length=MAX_LEN, padding=True, return_tensors="pt")
            y = torch.tensor([r["label"] for r in chunk], dtype=torch.float32)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(**x).logits.view(-1), y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            sched.step()
            losses.append(loss.item())
    return losses


def train_cli(model, data, out, log, *extra, check=True):
    r = subprocess.run(train_cli_args(BIN, "rerank", model, data, out, log, STEPS, BATCH, LR, WD, WARMUP, CLIP, MAX_LEN)
                       + list(extra), capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_losses_match_pytorch_and_the_checkpoint_reranks(setup, tmp_path):
    root, data, start = setup
    train_cli(start, root / "train.jsonl", tmp_path / "out", tmp_path / "log.csv")
    got = [float(row["loss"]) for row in csv.DictReader(open(tmp_path / "log.csv"))]
    want = torch_finetune(start, data)
    assert len(got) == STEPS
    rel = max(abs(g - w) / abs(w) for g, w in zip(got, want))
    print(f"max relative loss difference over {STEPS} steps: {rel:.2e}; loss {want[0]:.4f} -> {want[-1]:.4f}")
    assert rel <= REL, (got, want)
    assert want[-1] < 0.8 * want[0]  # it learns: the comparison is over a run that moves the weights

    _, info = T.BertForSequenceClassification.from_pretrained(str(tmp_path / "out"), output_loading_info=True)
    assert not any(info.values()), info
    pairs = [(r["text"], r["text_pair"]) for r in data[:12]]
    theirs = StCrossEncoder(str(tmp_path / "out"), device="cpu").predict(pairs)
    ours = encore.CrossEncoder(str(tmp_path / "out")).predict(pairs)
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=1e-5)
    ranked = encore.CrossEncoder(str(tmp_path / "out")).rank("what about the moon?",
                                                             ["seven purple invoice", "lunar crater orbit"])
    assert ranked[0]["corpus_id"] == 1  # the trained reranker puts the on-topic document first


def test_base_checkpoint_gets_a_one_label_head(setup, tiny_bert, tmp_path):
    root, _, _ = setup
    train_cli(tiny_bert, root / "train.jsonl", tmp_path / "out", tmp_path / "log.csv")
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["architectures"] == ["BertForSequenceClassification"] and len(cfg["id2label"]) == 1
    scores = encore.CrossEncoder(str(tmp_path / "out")).predict([("a", "b"), ("c", "d")])
    assert scores.shape == (2,) and np.all((scores > 0) & (scores < 1))  # one label: sigmoid scores
    logged = [float(row["loss"]) for row in csv.DictReader(open(tmp_path / "log.csv"))]
    report = encore.train(str(tiny_bert), str(root / "train.jsonl"), task="rerank", steps=STEPS, batch_size=BATCH,
                          lr=LR, weight_decay=WD, warmup_steps=WARMUP, max_grad_norm=CLIP, max_length=MAX_LEN,
                          shuffle=False, dropout=0.0, eval_fraction=0.0)
    assert report["losses"] == pytest.approx(logged, rel=1e-5)  # Python's train() is the CLI's run


def test_rerank_train_errors(setup, tmp_path):
    root, _, start = setup
    bad = tmp_path / "bad.jsonl"
    for row, message in [({"text": "q", "label": 1}, "has no 'text_pair'"),
                         ({"text": "q", "text_pair": "d", "label": 2}, "label '2' is not a relevance in [0, 1]"),
                         ({"text": "q", "text_pair": "d", "label": "yes"}, "label 'yes' is not a relevance")]:
        bad.write_text(json.dumps(row) + "\n")
        r = train_cli(start, bad, tmp_path / "o", tmp_path / "l.csv", check=False)
        assert r.returncode == 3 and message in r.stderr, (message, r.stderr)
    three = save_tiny_bert(tmp_path / "three", T.BertForSequenceClassification, num_labels=3)
    r = train_cli(three, root / "train.jsonl", tmp_path / "o2", tmp_path / "l2.csv", check=False)
    assert r.returncode == 3 and "head has 3 labels (use --task classification)" in r.stderr, r.stderr
