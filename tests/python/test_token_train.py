"""`encore train --task token-classification` (issue 12 item 2, training) against the same fine-tune in PyTorch, as
transformers' run_ner.py sets it up: words tokenized with is_split_into_words=True, each word's label on its first
sub-token and -100 on the rest and on the special tokens, BertForTokenClassification's loss (cross-entropy over the
labelled tokens of the batch).

Same start: one BertForTokenClassification checkpoint written here (2 layers, hidden 32, dropout 0, a seeded head,
all-MiniLM-L6-v2's WordPiece tokenizer, id2label O/B-PER/I-PER/B-LOC/I-LOC) that both libraries load. Same run: 48
sentences of generated words (names and places that split into sub-words, punctuation, a few long enough to be cut
at max_length 24) in file order (--no-shuffle), batches of 8 padded to their longest member (labels padded with
-100), AdamW (lr 2e-3, weight decay 0.01 on every parameter), linear warm-up over 3 steps then linear decay to 0
at step 20, clipping at global norm 1.0, 20 steps (3.3 passes over the data).

Checks: the loss of every one of the 20 steps within 1e-4 relative of torch's (measured: max 6.0e-6 relative, about
the CSV log's 6-digit rounding; the test prints it); the loss falls (1.66 -> 1.20); the checkpoint it writes loads
in transformers (no missing or unexpected weights) and gives the trained model's logits (within 1e-4 of max |logit|
of torch's trained model; measured 7.9e-6), and
encore.TokenClassifier reads it. A base checkpoint (BertModel) gets a new head and is saved as
BertForTokenClassification; Python's encore.train(task="token-classification") gives the CLI's losses (to the
log's 6 digits).
"""
import csv
import json
import os
import pathlib
import random
import subprocess

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch  # noqa: E402
import transformers as T  # noqa: E402
from train_data import NO_DROPOUT, save_tiny_bert, train_cli_args  # noqa: E402

import encore  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("ENCORE_BIN", REPO / "build" / "encore"))
LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
PEOPLE = [["Arnold", "Schwarzenegger"], ["Angela", "Merkel"], ["Zhang", "Wei"], ["Siobhán", "O'Sullivan"], ["Ada"]]
PLACES = [["Kraków"], ["New", "York"], ["São", "Paulo"], ["Reykjavík"], ["Llanfairpwllgwyngyll"]]
FILLER = ["met", "visited", "in", "the", "with", "yesterday", ",", ".", "and", "near", "tokenization", "!"]
STEPS, BATCH, LR, WD, WARMUP, CLIP, MAX_LEN = 20, 8, 2e-3, 0.01, 3, 1.0, 24
REL = 1e-4


def sentences(n, seed=0):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words, labels = [], []
        for _ in range(rng.randint(2, 6 if i % 7 else 14)):  # every 7th long enough to be truncated
            kind = rng.random()
            if kind < 0.25:
                span, tag = rng.choice(PEOPLE), "PER"
            elif kind < 0.5:
                span, tag = rng.choice(PLACES), "LOC"
            else:
                span, tag = [rng.choice(FILLER)], None
            words += span
            labels += ["O"] * len(span) if tag is None else [f"B-{tag}"] + [f"I-{tag}"] * (len(span) - 1)
        out.append({"tokens": words, "labels": labels})
    return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("token_train")
    data = sentences(48)
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
    start = save_tiny_bert(root / "start", T.BertForTokenClassification, seed=3, num_labels=len(LABELS),
                           id2label=dict(enumerate(LABELS)), label2id={l: i for i, l in enumerate(LABELS)},
                           **NO_DROPOUT)
    return root, data, start


def torch_finetune(start, data):
    """run_ner.py's alignment and transformers' loss, in file order, with encore's optimizer settings."""
    tok = T.AutoTokenizer.from_pretrained(str(start))
    model = T.BertForTokenClassification.from_pretrained(str(start)).train()
    label2id = model.config.label2id
    enc = []
    for r in data:
        e = tok(r["tokens"], is_split_into_words=True, truncation=True, max_length=MAX_LEN)
        labels, prev = [], None
        for w in e.word_ids():
            labels.append(-100 if w is None or w == prev else label2id[r["labels"][w]])
            prev = w
        enc.append((e["input_ids"], labels))
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD, betas=(0.9, 0.999), eps=1e-8)
    sched = T.get_linear_schedule_with_warmup(opt, WARMUP, STEPS)
    losses, pos = [], 0
    with torch.enable_grad():
        for _ in range(STEPS):
            if pos >= len(enc):
                pos = 0
            chunk, pos = enc[pos:pos + BATCH], pos + BATCH
            T_ = max(len(i) for i, _ in chunk)
            ids = torch.tensor([i + [0] * (T_ - len(i)) for i, _ in chunk])
            mask = torch.tensor([[1] * len(i) + [0] * (T_ - len(i)) for i, _ in chunk])
            lab = torch.tensor([l + [-100] * (T_ - len(l)) for _, l in chunk])
            loss = model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids), labels=lab).loss
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            sched.step()
            losses.append(loss.item())
    return losses, model.eval(), tok


def train_cli(model, data, out, log, *extra):
    r = subprocess.run(train_cli_args(BIN, "token-classification", model, data, out, log, STEPS, BATCH, LR, WD, WARMUP,
                                      CLIP, MAX_LEN) + list(extra), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [float(row["loss"]) for row in csv.DictReader(open(log))], r.stdout


def test_losses_match_pytorch_and_the_checkpoint_loads(setup, tmp_path):
    root, data, start = setup
    got, _ = train_cli(start, root / "train.jsonl", tmp_path / "out", tmp_path / "log.csv")
    want, ref, tok = torch_finetune(start, data)
    assert len(got) == STEPS
    rel = max(abs(g - w) / abs(w) for g, w in zip(got, want))
    print(f"max relative loss difference over {STEPS} steps: {rel:.2e}; loss {want[0]:.4f} -> {want[-1]:.4f}")
    assert rel <= REL, (got, want)
    assert want[-1] < 0.8 * want[0]  # it learns: the comparison is over a run that moves the weights

    trained, info = T.BertForTokenClassification.from_pretrained(str(tmp_path / "out"), output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched weights
    assert trained.config.id2label == ref.config.id2label
    batch = tok([" ".join(r["tokens"]) for r in data[:8]], padding=True, return_tensors="pt")
    with torch.no_grad():
        a, b = trained.eval()(**batch).logits, ref(**batch).logits
    diff = float((a - b).abs().max() / b.abs().max())
    print(f"trained logits vs torch's trained model: {diff:.2e} of max |logit|")
    assert diff <= REL
    clf = encore.TokenClassifier(tmp_path / "out")
    assert clf.labels == LABELS and clf(" ".join(data[0]["tokens"]), aggregation_strategy="simple") is not None


def test_base_checkpoint_gets_a_head_and_python_logs_the_same(setup, tiny_bert, tmp_path):
    root, data, _ = setup
    got, _ = train_cli(tiny_bert, root / "train.jsonl", tmp_path / "out", tmp_path / "log.csv")
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["architectures"] == ["BertForTokenClassification"]
    assert sorted(cfg["id2label"].values()) == sorted(LABELS)  # new head: labels as sorted strings
    _, info = T.BertForTokenClassification.from_pretrained(str(tmp_path / "out"), output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    report = encore.train(str(tiny_bert), str(root / "train.jsonl"), task="token-classification", steps=STEPS,
                          batch_size=BATCH, lr=LR, weight_decay=WD, warmup_steps=WARMUP, max_grad_norm=CLIP,
                          max_length=MAX_LEN, shuffle=False, dropout=0.0, eval_fraction=0.0)
    assert report["losses"] == pytest.approx(got, rel=1e-5)  # the CSV log holds 6 significant digits
    assert report["labels"] == sorted(LABELS)


def test_token_train_errors(setup, tmp_path):
    root, _, start = setup
    bad = tmp_path / "bad.jsonl"
    for line, message in [({"tokens": ["a", "b"], "labels": ["O"]}, "same length"),
                          ({"text": "a b", "label": "O"}, "'tokens' and 'labels'"),
                          ({"tokens": ["a"], "labels": ["B-ORG"]}, "'B-ORG' is not one of the checkpoint's 5 labels")]:
        bad.write_text(json.dumps(line) + "\n")
        r = subprocess.run([str(BIN), "train", "--task", "token-classification", "--model", str(start), "--data",
                            str(bad), "--steps", "1", "--eval-fraction", "0", "-q"], capture_output=True, text=True)
        assert r.returncode == 3 and message in r.stderr, (message, r.stderr)
