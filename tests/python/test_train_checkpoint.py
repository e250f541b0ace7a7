"""encore train --output / --resume / --grad-accum / --plot, checked against references nobody here wrote:
transformers loads the checkpoint and computes the same logits as encore; a resumed run repeats an uninterrupted
one bit for bit; gradient accumulation matches one big batch; the PNG decodes with zlib and has the curves."""
import csv
import hashlib
import json
import os
import pathlib
import resource
import shutil
import signal
import subprocess

import numpy as np
import pytest
import torch
import transformers as T
from safetensors.numpy import load_file
from train_data import TOKENIZER_FILES, read_plot_svg, save_tiny_bert, sentiment_files

import encore

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("ENCORE_BIN", ROOT / "build" / "encore"))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    # 40 examples = 3 steps of 16 per epoch: runs below cross epoch boundaries; 400 are enough for the tiny
    # model to learn the task (the plot's curve must fall)
    return sentiment_files(tmp_path_factory.mktemp("data"), {"train.jsonl": 40, "eval.jsonl": 20, "more.jsonl": 400})


def train(model, data, *extra, check=True, env=None, preexec_fn=None):
    extra = [str(a) for a in extra]
    args = [str(BIN), "train", "--eval-data", str(data / "eval.jsonl"), "--threads", "1", "-q"]
    for flag, default in [("--batch-size", "16"), ("--lr", "1e-3"), ("--data", str(data / "train.jsonl"))]:
        if flag not in extra:
            args += [flag, default]
    if model is not None:
        args += ["--model", str(model)]
    res = subprocess.run(args + extra, capture_output=True, text=True, timeout=600, env=env, preexec_fn=preexec_fn)
    if check:
        assert res.returncode == 0, res.stderr
    return res


def digest(d):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(pathlib.Path(d).iterdir())}


SENTENCES = ["the movie was great , really", "the hotel was dreadful , really", "a pair", "x"]


def test_checkpoint_loads_in_transformers_with_the_same_logits(tiny_bert, data, tmp_path):
    out = tmp_path / "ckpt"
    train(tiny_bert, data, "--steps", "5", "--output", out)
    files = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "config.json", "optimizer.safetensors", "trainer_state.json",
            "training.svg"} | set(TOKENIZER_FILES) <= files, files
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind
    cfg, src = json.loads((out / "config.json").read_text()), json.loads((tiny_bert / "config.json").read_text())
    assert cfg["architectures"] == ["BertForSequenceClassification"]
    assert cfg["id2label"] == {"0": "neg", "1": "pos"} and cfg["label2id"] == {"neg": 0, "pos": 1}
    for k in ["hidden_size", "num_hidden_layers", "vocab_size", "layer_norm_eps", "hidden_act", "type_vocab_size"]:
        assert cfg[k] == src[k], k

    hf, info = T.AutoModelForSequenceClassification.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    assert hf.config.id2label == {0: "neg", 1: "pos"}
    hf.eval()
    tok = T.AutoTokenizer.from_pretrained(out)  # the copied tokenizer files load in transformers
    batch = tok(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        ref = hf(**batch).logits.numpy()
    ours = encore.AutoModel.load(str(out))(batch["input_ids"].numpy(), batch["attention_mask"].numpy(),
                                           batch["token_type_ids"].numpy(), return_dict=True)["logits"]
    # fp32 both sides, 2 tiny layers: summation order is the only difference
    np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=0)
    # and training changed the model: the base weights are not the source's any more
    trained, source = load_file(out / "model.safetensors"), load_file(tiny_bert / "model.safetensors")
    assert set(trained) == {"bert." + k for k in source if not k.endswith("position_ids")} | {
        "classifier.weight", "classifier.bias"}
    w = "encoder.layer.0.attention.self.query.weight"
    assert np.abs(trained["bert." + w] - source[w]).max() > 1e-4


def test_save_failures_leave_the_previous_checkpoint(tiny_bert, data, tmp_path):
    out = tmp_path / "ckpt"
    train(tiny_bert, data, "--steps", "2", "--output", out)
    before = digest(out)

    # Writes fail with EFBIG part-way through model.safetensors (1 MB file size limit, SIGXFSZ ignored).
    def limit_ignored():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    res = train(tiny_bert, data, "--steps", "3", "--output", out, check=False, preexec_fn=limit_ignored)
    assert res.returncode == 4 and "model.safetensors" in res.stderr and "File too large" in res.stderr, res.stderr
    assert digest(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # the staging directory was removed

    # The process dies mid-write (SIGXFSZ's default action): the previous checkpoint is untouched and loads.
    def limit_killed():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    res = train(tiny_bert, data, "--steps", "3", "--output", out, check=False, preexec_fn=limit_killed)
    assert res.returncode == -signal.SIGXFSZ, (res.returncode, res.stderr)
    assert digest(out) == before
    T.AutoModelForSequenceClassification.from_pretrained(out)
    assert [p.name[:10] for p in tmp_path.iterdir() if p.name != "ckpt"] == [".ckpt.tmp-"]  # the killed save's
    train(tiny_bert, data, "--steps", "3", "--output", out)  # the next save completes and clears it away
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3

    # Unwritable locations fail before training, naming the path.
    (tmp_path / "afile").write_text("x")
    for bad, why in [(tmp_path / "afile" / "ckpt", "is not a directory"), ("/proc/encore-ckpt", "cannot create"),
                     (tmp_path / "afile" / "sub" / "ckpt", "cannot create the directory")]:
        res = train(tiny_bert, data, "--steps", "1", "--output", bad, check=False)
        assert res.returncode == 3 and str(bad) in res.stderr and why in res.stderr, res.stderr
    # Missing parents are created, as mkdir -p does (issue 13: the README's `--output runs/sentiment`).
    train(tiny_bert, data, "--steps", "1", "--output", tmp_path / "no" / "such" / "ckpt")
    T.AutoModelForSequenceClassification.from_pretrained(tmp_path / "no" / "such" / "ckpt")
    # A directory holding something else is never replaced.
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    res = train(tiny_bert, data, "--steps", "1", "--output", other, check=False)
    assert res.returncode == 3 and "refusing to replace" in res.stderr
    assert (other / "notes.txt").read_text() == "keep me"


def read_log(path):
    return list(csv.DictReader(open(path)))


@pytest.mark.parametrize("dropout", ["0", "0.2"])
def test_resume_repeats_an_uninterrupted_run_bitwise(tiny_bert, data, tmp_path, dropout):
    # Constant schedule after warmup: the lr of a step does not depend on the run's length, so k steps then
    # resume to N must equal N steps. 8 steps of 16 over 40 examples cross two epoch boundaries (reshuffles);
    # the checkpoint at step 4 sits mid-epoch. Dropout masks are seeded per step, so they repeat too.
    common = ["--schedule", "constant", "--warmup-steps", "3", "--seed", "7", "--dropout", dropout]
    full, part = tmp_path / "full", tmp_path / "part"
    train(tiny_bert, data, "--steps", "8", "--output", full, "--log", tmp_path / "full.csv", *common)
    train(tiny_bert, data, "--steps", "4", "--output", part, "--log", tmp_path / "part.csv", *common)
    res = train(None, data, "--steps", "8", "--resume", part, "--output", part, "--log", tmp_path / "part.csv",
                *common)
    assert "resumed at step 4" in res.stdout
    a, b = read_log(tmp_path / "full.csv"), read_log(tmp_path / "part.csv")
    assert [r["step"] for r in a] == [str(i) for i in range(1, 9)] and list(a[0])[:3] == ["step", "loss", "lr"]
    # every row, loss, lr and grad norm as printed (6 digits; full precision below); the short run also
    # evaluated at its last step, 4
    assert [(r["loss"], r["lr"], r["grad_norm"]) for r in a] == [(r["loss"], r["lr"], r["grad_norm"]) for r in b]
    assert [r["eval_accuracy"] for r in a] == [r["eval_accuracy"] if r["step"] != "4" else "" for r in b]
    sa = json.loads((full / "trainer_state.json").read_text())
    sb = json.loads((part / "trainer_state.json").read_text())
    assert sa["losses"] == sb["losses"] and sa["global_step"] == sb["global_step"] == 8  # full double precision
    assert sa["epoch"] == sb["epoch"] == 2
    for f in ["model.safetensors", "optimizer.safetensors"]:
        ta, tb = load_file(full / f), load_file(part / f)
        assert ta.keys() == tb.keys()
        for k in ta:
            assert np.array_equal(ta[k], tb[k]), (f, k)  # bitwise (tolerance 0): same ops in the same order


def test_resume_refuses_mismatched_or_corrupt_state(tiny_bert, data, tmp_path):
    ck = tmp_path / "ck"
    train(tiny_bert, data, "--steps", "2", "--output", ck)
    res = train(None, data, "--steps", "4", "--resume", ck, "--batch-size", "8", check=False)
    assert res.returncode == 3 and "batch_size" in res.stderr, res.stderr
    res = train(None, data, "--steps", "4", "--resume", ck, "--seed", "3", check=False)
    assert res.returncode == 3 and "seed" in res.stderr, res.stderr
    res = train(None, data, "--steps", "2", "--resume", ck, check=False)
    assert res.returncode == 3 and "nothing left to train" in res.stderr, res.stderr
    other = tmp_path / "other.jsonl"
    lines = (data / "train.jsonl").read_text().splitlines()
    other.write_text("\n".join(lines[1:] + lines[:1]) + "\n")  # same examples, other order
    res = subprocess.run([str(BIN), "train", "--data", other, "--resume", ck, "--steps", "4", "--eval-fraction", "0",
                          "-q"], capture_output=True, text=True)
    assert res.returncode == 3 and "data_fingerprint" in res.stderr, res.stderr
    log = tmp_path / "bad.csv"
    log.write_text("step,loss,lr,grad_norm,eval_accuracy\ngarbage\n")
    res = train(None, data, "--steps", "4", "--resume", ck, "--log", log, check=False)
    assert res.returncode == 3 and "does not start with a step number" in res.stderr, res.stderr
    res = train(None, data, "--steps", "4", "--resume", tmp_path / "missing", check=False)
    assert res.returncode == 3 and "missing" in res.stderr, res.stderr

    def corrupt(name, mutate, expect):
        bad = tmp_path / f"bad-{len(list(tmp_path.glob('bad-*')))}"
        shutil.copytree(ck, bad)
        mutate(bad / name)
        r = train(None, data, "--steps", "4", "--resume", bad, check=False)
        assert r.returncode == 3 and expect in r.stderr, r.stderr
    corrupt("trainer_state.json", lambda p: p.write_text("{not json"), "not valid JSON")
    corrupt("trainer_state.json", lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "order": [0, 0]})),
            "order")
    corrupt("optimizer.safetensors", lambda p: p.write_bytes(p.read_bytes()[:1000]), "optimizer.safetensors")
    corrupt("optimizer.safetensors", lambda p: p.unlink(), "optimizer.safetensors")
    corrupt("trainer_state.json", lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "losses": ["x", 1]})),
            "'losses' must hold numbers")
    # A diverged step's NaN loss is stored as JSON null; resuming reads it back.
    nan = tmp_path / "nan"
    shutil.copytree(ck, nan)
    state = json.loads((nan / "trainer_state.json").read_text())
    (nan / "trainer_state.json").write_text(json.dumps({**state, "losses": [None] + state["losses"][1:]}))
    train(None, data, "--steps", "3", "--resume", nan, "--output", nan)
    assert json.loads((nan / "trainer_state.json").read_text())["losses"][0] is None


def test_gradient_accumulation_equals_one_big_batch(tiny_bert, data, tmp_path):
    # dropout 0: a micro-batch draws other masks than the same rows inside one big batch
    common = ["--steps", "6", "--seed", "5", "--warmup-steps", "2", "--dropout", "0"]
    train(tiny_bert, data, "--batch-size", "8", "--output", tmp_path / "big", *common)
    train(tiny_bert, data, "--batch-size", "4", "--grad-accum", "2", "--output", tmp_path / "acc", *common)
    sa = json.loads((tmp_path / "big" / "trainer_state.json").read_text())
    sb = json.loads((tmp_path / "acc" / "trainer_state.json").read_text())
    # Same examples per step; only padding lengths and summation order differ.
    np.testing.assert_allclose(sb["losses"], sa["losses"], rtol=1e-6, atol=0)  # measured 2.4e-9
    ta, tb = load_file(tmp_path / "big" / "model.safetensors"), load_file(tmp_path / "acc" / "model.safetensors")
    for k in ta:
        np.testing.assert_allclose(tb[k], ta[k], atol=1e-6, rtol=0, err_msg=k)  # measured 1.2e-8


def test_plot_svg(tiny_bert, data, tmp_path):
    """The plot read as a user reads it: titles and axis labels are text, and the loss curve and accuracy markers,
    mapped back through the printed tick labels, are the losses and accuracies of the CSV log."""
    svg, log = tmp_path / "curve.svg", tmp_path / "log.csv"
    train(tiny_bert, data, "--epochs", "4", "--lr", "3e-3", "--warmup-steps", "10", "--plot", svg, "--log", log,
          "--data", data / "more.jsonl")
    plot = read_plot_svg(svg)
    assert {"training loss", "held-out accuracy", "optimizer step", "loss", "accuracy"} <= plot["texts"], plot["texts"]
    rows = read_log(log)
    losses = [float(r["loss"]) for r in rows]
    span = max(losses) - min(losses)
    assert len(plot["loss"]) == len(losses)
    for i, ((step, value), want) in enumerate(zip(plot["loss"], losses)):
        # coordinates carry 2 decimals over a ~280-unit panel: 2e-5 of the range; tolerance 1e-4 of it, and
        # steps within 0.01 of the integer
        assert abs(step - (i + 1)) < 0.01 and abs(value - want) < 1e-4 * span, (i, step, value, want)
    evals = [(int(r["step"]), float(r["eval_accuracy"])) for r in rows if r["eval_accuracy"]]
    assert len(plot["eval"]) == len(evals) == 4
    for (step, acc), (want_step, want_acc) in zip(plot["eval"], evals):
        assert abs(step - want_step) < 0.01 and abs(acc - want_acc) < 1e-4, (step, acc, want_step, want_acc)
    assert losses[-1] < losses[0]  # the curve falls
    # With --output and no --plot the checkpoint gets training.svg; a --plot that is not .svg is refused
    train(tiny_bert, data, "--steps", "2", "--output", tmp_path / "ck")
    assert len(read_plot_svg(tmp_path / "ck" / "training.svg")["loss"]) == 2
    res = train(tiny_bert, data, "--steps", "1", "--plot", tmp_path / "curve.png", check=False)
    assert res.returncode == 2 and "name it .svg" in res.stderr, res.stderr


def test_python_entry_point_saves_and_resumes(tiny_bert, data, tmp_path):
    kw = dict(eval_data=str(data / "eval.jsonl"), batch_size=16, lr=1e-3, schedule="constant", seed=3)
    full = encore.train_classifier(str(tiny_bert), str(data / "train.jsonl"), steps=5, **kw)
    encore.train_classifier(str(tiny_bert), str(data / "train.jsonl"), steps=2, output=str(tmp_path / "c"), **kw)
    rest = encore.train_classifier("", str(data / "train.jsonl"), steps=5, resume=str(tmp_path / "c"), **kw)
    assert rest["first_step"] == 2 and rest["losses"] == full["losses"][2:]


def test_save_every(tiny_bert, data, tmp_path):
    env = {**os.environ, "ENCORE_VERBOSE": "1"}
    res = train(tiny_bert, data, "--steps", "7", "--save-every", "3", "--output", tmp_path / "ck", env=env)
    saved = [line for line in res.stderr.splitlines() if "saved the checkpoint" in line]
    assert [s.split("step ")[1].split(" ")[0] for s in saved] == ["3", "6", "7"], res.stderr
    assert json.loads((tmp_path / "ck" / "trainer_state.json").read_text())["global_step"] == 7
    res = train(tiny_bert, data, "--steps", "2", "--save-every", "1", check=False)
    assert res.returncode == 2 and "save_every needs an output directory" in res.stderr


@pytest.fixture(scope="module")
def tiny_classifier(tmp_path_factory):
    """A random 2-layer BertForSequenceClassification (transformers' init, head included) with config dropout 0.1."""
    d = save_tiny_bert(tmp_path_factory.mktemp("tiny_classifier"))
    torch.manual_seed(1)
    cfg = T.BertConfig.from_pretrained(d, num_labels=2, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
    m = T.BertForSequenceClassification(cfg)
    with torch.no_grad():
        m.classifier.weight.normal_(0, 3.0)  # logits of order 1 (transformers' 0.02 init gives ~0): dropout shows
    m.save_pretrained(d, safe_serialization=True)
    return d


def test_dropout(tiny_classifier, data, tmp_path):
    def first_loss(*extra):
        train(tiny_classifier, data, "--steps", "2", "--no-shuffle", "--lr", "0", "--log", tmp_path / "l.csv", *extra)
        return [(float(r["loss"]), float(r["grad_norm"])) for r in read_log(tmp_path / "l.csv")]
    # Reference: transformers in eval mode (no dropout) on the first batch of 16, the loss encore logs for step 1.
    hf = T.AutoModelForSequenceClassification.from_pretrained(tiny_classifier).eval()
    tok = T.AutoTokenizer.from_pretrained(tiny_classifier)
    rows = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines()[:16]]
    batch = tok([r["text"] for r in rows], padding=True, return_tensors="pt")
    labels = torch.tensor([["neg", "pos"].index(r["label"]) for r in rows])
    with torch.no_grad():
        eval_loss = torch.nn.functional.cross_entropy(hf(**batch).logits, labels).item()
    off = first_loss("--dropout", "0")
    assert off[0][0] == pytest.approx(eval_loss, rel=1e-5, abs=0)  # dropout 0: the training forward is the eval one
    on = first_loss("--dropout", "0.8")
    # masks change the loss of every step (a random post-LN model: the residual dominates, hence p = 0.8)
    assert abs(on[0][0] - eval_loss) > 1e-3 and abs(on[1][0] - off[1][0]) > 1e-3, (on, off)
    assert first_loss("--dropout", "0.8") == on  # same seed, same masks
    assert first_loss("--dropout", "0.8", "--seed", "9") != on
    res = train(tiny_classifier, data, "--steps", "1", "--dropout", "1.5", check=False)
    assert res.returncode != 0 and "--dropout" in res.stderr


def tiny_family(family, head):
    """A tiny random transformers model of `family`: the base model, or with head=True its
    ForSequenceClassification (2 labels)."""
    torch.manual_seed(0)
    small = dict(vocab_size=100, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96, num_labels=2)
    if family == "albert":
        cfg = T.AlbertConfig(embedding_size=16, hidden_size=64, **small)
    elif family == "distilbert":
        cfg = T.DistilBertConfig(vocab_size=100, dim=64, n_layers=2, n_heads=4, hidden_dim=96, num_labels=2)
    else:
        cfg = {"bert": T.BertConfig, "roberta": T.RobertaConfig, "mpnet": T.MPNetConfig,
               "electra": T.ElectraConfig}[family](hidden_size=64, **small)
    return (T.AutoModelForSequenceClassification if head else T.AutoModel).from_config(cfg)


@pytest.mark.parametrize("head", [False, True], ids=["base", "classifier"])
@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert", "albert", "electra", "mpnet"])
def test_export_gives_back_every_checkpoint_tensor(family, head, tmp_path):
    """The loaders' name record, reversed: a loaded checkpoint exports exactly the tensors it was read from, under
    the same names (Q/K/V split back out of encore's packed in_proj, ALBERT's shared layer once, the head under
    the root and the base model under its prefix), for every family; only buffers (position_ids) are not
    parameters."""
    m = tiny_family(family, head)
    m.save_pretrained(tmp_path, safe_serialization=True)
    source = load_file(tmp_path / "model.safetensors")
    arch, tensors = encore.AutoModel.load(str(tmp_path)).export_hf()
    assert arch == type(m).__name__
    assert set(tensors) == {k for k in source if not k.endswith("position_ids")}, set(tensors) ^ set(source)
    for k, v in tensors.items():
        assert np.array_equal(v, source[k]), k  # bitwise: the very values loaded
