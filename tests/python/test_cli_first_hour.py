"""The first hour with the CLI, tried as a new user would (issue 13 item 5): each finding on the old main, run as a
subprocess, checked against what a user reads (stdout, stderr, exit code, the files written) and, for numbers,
against references nobody here wrote (transformers' parameter count, the file sizes on disk, numpy's reading of
the written files, encore.SentenceEncoder checked elsewhere against sentence-transformers)."""
import csv
import json
import os
import pathlib
import pty
import re
import select
import subprocess
import time

import numpy as np
import pytest
import torch
import transformers as T
from train_data import MINILM, sentiment_files

import encore

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("ENCORE_BIN", ROOT / "build" / "encore"))


def run(*args, ok=True, input=None, timeout=300):
    res = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                         input=input if input is not None else "", errors="replace")
    if ok:
        assert res.returncode == 0, res.stderr
    return res


def refused(*args, needle):
    """The command fails before any work: exit code != 0, nothing on stdout, the message names the problem."""
    res = run(*args, ok=False)
    assert res.returncode != 0 and res.stdout == "" and needle in res.stderr, (args, res.stdout[:200], res.stderr)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return sentiment_files(tmp_path_factory.mktemp("data"), {"train.jsonl": 120, "eval.jsonl": 40})


# ---- validation before any work, saying what was changed --------------------------------------------------------
def test_options_are_validated_before_any_output(tmp_path):
    txt = tmp_path / "in.txt"
    txt.write_text('{"text": "a json line in a text file"}\n')
    refused("embed", "-i", txt, "--field", "text", needle="read as plain text")  # was: embedded the raw JSON line
    refused("embed", "--field", "text", "x", needle="-i FILE")
    for bad in ["-3", "500"]:  # 0..256 (0, the default, = all cores: docs/errors.md)
        refused("embed", "--threads", bad, "x", needle="--threads")
        refused("trace", "--threads", bad, needle="--threads")
    refused("trace", "--heads", "7", needle="divisible")  # was: the header line, then the error
    refused("trace", "--dtype", "fp16", needle="--dtype")  # was: the header line, then the error
    refused("embed", "--dtype", "fp16", "x", needle="--dtype")
    refused("accuracy", "--dtype", "fp16", needle="--dtype")  # (fp32 is valid since the task metric: fp32 vs fp32)
    refused("embed", "-o", tmp_path / "out.txt", "x", needle=".npy, .jsonl, .json or .csv")
    assert not (tmp_path / "out.txt").exists()


def test_changed_values_are_said():
    res = run("embed", "--max-length", "1000", "one two three")  # was: silently clamped to 512
    assert "--max-length 1000" in res.stderr and "using 512" in res.stderr, res.stderr
    np.testing.assert_allclose(json.loads(res.stdout)[0]["embedding"],
                               encore.SentenceEncoder().encode(["one two three"])[0], atol=1e-6)
    cores = os.cpu_count()
    res = run("embed", "--threads", "100", "x")  # was: accepted without a word
    assert f"more than this machine's {cores} cores" in res.stderr, res.stderr


# ---- embed: fields carried, formats, streaming -----------------------------------------------------------------------
def test_embed_carries_input_fields_and_writes_csv(tmp_path):
    texts = ["A man is eating food.", "Café crème", ""]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": i * 10, "text": t, "lang": "x"}) + "\n" for i, t in enumerate(texts)))
    want = encore.SentenceEncoder().encode(texts)
    run("embed", "-i", src, "-o", tmp_path / "out.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    # each record: its index in the input (what --shard/--resume check), the input's fields, the embedding
    assert [list(r) for r in rows] == [["index", "id", "text", "lang", "embedding"]] * 3
    assert [(r["index"], r["id"], r["text"], r["lang"]) for r in rows] == [
        (i, i * 10, t, "x") for i, t in enumerate(texts)]
    np.testing.assert_allclose([r["embedding"] for r in rows], want, atol=1e-7)
    run("embed", "-i", src, "-o", tmp_path / "out.csv")
    with open(tmp_path / "out.csv", newline="") as f:
        table = list(csv.reader(f))
    assert table[0][:4] == ["index", "id", "text", "lang"] and table[0][4:] == [f"embedding_{c}" for c in range(384)]
    assert [r[:4] for r in table[1:]] == [[str(i), str(i * 10), t, "x"] for i, t in enumerate(texts)]
    np.testing.assert_allclose(np.array([r[4:] for r in table[1:]], np.float32), want, atol=1e-7)
    # --format overrides the extension; CSV input is read by its header. An earlier output read back: its index
    # and embedding_N columns are replaced by this run's (said on stderr), not written twice.
    res = run("embed", "-i", tmp_path / "out.csv", "--field", "text", "-o", tmp_path / "again.bin", "--format", "npy")
    assert "the input's field 'index'" in res.stderr and "is replaced" in res.stderr, res.stderr
    np.testing.assert_allclose(np.load(tmp_path / "again.bin"), want, atol=1e-7)
    run("embed", "-i", tmp_path / "out.csv", "--field", "text", "-o", tmp_path / "again.csv")
    with open(tmp_path / "again.csv", newline="") as f:
        again = list(csv.reader(f))
    assert again[0] == table[0] and [r[:4] for r in again[1:]] == [r[:4] for r in table[1:]]
    res = run("embed", "-i", tmp_path / "out.jsonl", "--format", "jsonl")
    assert [list(json.loads(line)) for line in res.stdout.splitlines()] == [["index", "id", "text", "lang",
                                                                             "embedding"]] * 3


def test_embed_stdin_streams_in_batches():
    """`embed -i -` writes the first batch's embeddings while standard input is still open (was: waited for EOF)."""
    proc = subprocess.Popen([str(BIN), "embed", "-i", "-", "--format", "jsonl", "--batch-size", "2"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdin.write("first text\nsecond text\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "no output while standard input stays open"
        first = json.loads(proc.stdout.readline())
        assert first["index"] == 0 and first["text"] == "first text"
        np.testing.assert_allclose(first["embedding"], encore.SentenceEncoder().encode(["first text"])[0], atol=1e-6)
        proc.stdin.write("third\n")
        proc.stdin.close()
        rest = [json.loads(line) for line in proc.stdout.read().splitlines()]
        assert [r["text"] for r in rest] == ["second text", "third"] and [r["index"] for r in rest] == [1, 2]
        assert proc.wait(60) == 0
    finally:
        proc.kill()
        proc.wait()


def test_embed_reads_a_pipe_without_dash():
    res = run("embed", "--format", "jsonl", input="piped one\npiped two\n")
    assert [json.loads(line)["text"] for line in res.stdout.splitlines()] == ["piped one", "piped two"]
    # nothing given and nothing piped in: a usage error (exit 2) saying how to give texts, not an empty result
    for cmd in ("embed", "tokenize"):
        res = run(cmd, ok=False, input="")
        assert res.returncode == 2 and res.stdout == "" and "give texts as arguments" in res.stderr, res


# ---- tokenize ------------------------------------------------------------------------------------------------------
def test_tokenize_defaults_and_stdin(tmp_path):
    ref = T.AutoTokenizer.from_pretrained(MINILM)
    out = json.loads(run("tokenize", "Hello world!").stdout)
    assert out["ids"] == ref("Hello world!")["input_ids"]  # was: padded to 128
    lines = run("tokenize", input="hi\nthere you\n").stdout.splitlines()  # was: nothing, exit 0
    assert [json.loads(line)["ids"] for line in lines] == [ref("hi")["input_ids"], ref("there you")["input_ids"]]
    padded = json.loads(run("tokenize", "--tokenizer-padding", "hi").stdout)["ids"]
    assert padded == ref("hi", padding="max_length", max_length=128)["input_ids"]
    # the same input options as embed: -i FILE with --input-format/--field; --jsonl-in stays an alias
    src = tmp_path / "in.jsonl"
    src.write_text('{"body": "hi"}\n')
    assert json.loads(run("tokenize", "-i", src, "--field", "body").stdout)["ids"] == ref("hi")["input_ids"]
    (tmp_path / "old.jsonl").write_text('"hi"\n["a", "b"]\n')
    old = [json.loads(line)["ids"] for line in run("tokenize", "--jsonl-in", tmp_path / "old.jsonl").stdout.splitlines()]
    assert old == [ref("hi")["input_ids"], ref("a", "b")["input_ids"]]


# ---- info and quantize ---------------------------------------------------------------------------------------------
def test_info_counts_parameters_names_dtype_and_task(tmp_path):
    info = run("info").stdout
    reference = T.AutoModel.from_pretrained(MINILM)
    total = sum(p.numel() for p in reference.parameters())
    assert f"{total:,} in all" in info, info  # was: only the encoder layers' count
    # counted while loading (the layers' Q/K/V weight is not built then: MultiheadAttention::use_in_proj_rows)
    layers = sum(p.numel() for p in reference.encoder.parameters())
    assert f"({layers:,} in the encoder layers)" in info, info
    assert "task             sentence embedding" in info
    clf = tmp_path / "clf"
    torch.manual_seed(0)
    cfg = T.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=64, num_labels=3, id2label={0: "neg", 1: "neutral", 2: "pos"},
                       label2id={"neg": 0, "neutral": 1, "pos": 2})
    hf = T.BertForSequenceClassification(cfg)
    hf.save_pretrained(clf, safe_serialization=True)
    for f in ["tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"]:
        (clf / f).write_bytes((MINILM / f).read_bytes())
    info = run("info", clf).stdout
    assert "sequence classification, 3 labels: neg, neutral, pos" in info, info  # was: "embedding 32 dimensions"
    assert "embedding" not in info and "Pooling" not in info, info
    assert f"{sum(p.numel() for p in hf.parameters()):,} in all" in info, info
    # quantize says the true ratio (was: "4x smaller" for 86.6 -> 56.4 MiB)
    q = tmp_path / "q"
    res = run("quantize", MINILM, q)
    ratio = float(re.search(r"\(([0-9.]+)x smaller", res.stdout).group(1))
    on_disk = (MINILM / "model.safetensors").stat().st_size / (q / "model.safetensors").stat().st_size
    assert ratio == pytest.approx(on_disk, rel=0.01), (res.stdout, on_disk)  # headers differ by a few KiB
    info = run("info", q).stdout
    assert "int8 in the checkpoint" in info, info  # was: "as float32"


# ---- train ---------------------------------------------------------------------------------------------------------
def test_train_output_parents_examples_and_warmup(tiny_bert, data, tmp_path):
    out = tmp_path / "runs" / "sentiment"  # the README's command; was: "parent directory 'runs' does not exist"
    res = run("train", "--model", tiny_bert, "--data", data / "train.jsonl", "--steps", "3", "--batch-size", "4",
              "--warmup-steps", "50", "--output", out, "--log", tmp_path / "logs" / "a" / "log.csv", "-q")
    assert (out / "model.safetensors").exists() and (tmp_path / "logs" / "a" / "log.csv").exists()
    # 3 steps of 4 (was: "trained on 108 examples", the size of the training split)
    assert "trained on 12 examples" in res.stdout and "the data holds 108 examples" in res.stdout, res.stdout
    assert "--warmup-steps 50 is more than the run's 3 optimizer steps" in res.stderr, res.stderr
    res = run("train", "--model", tiny_bert, "--data", data / "train.jsonl", "--steps", "3", "--warmup-steps", "2", "-q")
    assert "--warmup-steps" not in res.stderr


def test_train_resume_names_the_true_epoch(tiny_bert, data, tmp_path):
    common = ["--data", data / "train.jsonl", "--eval-data", data / "eval.jsonl", "--batch-size", "40", "-q"]
    run("train", "--model", tiny_bert, "--epochs", "2", "--output", tmp_path / "ck", *common)
    res = run("train", "--resume", tmp_path / "ck", "--epochs", "4", "--output", tmp_path / "ck", *common)
    found = re.findall(r"after epoch (\d+):", res.stdout)
    assert found == ["3", "4"], res.stdout  # was: "after epoch 1", "after epoch 2"


def test_train_shows_an_evaluation_progress_bar(tiny_bert, data):
    """With a terminal on stderr, the held-out evaluation draws its own bar (was: silence while it ran)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(BIN), "train", "--model", tiny_bert, "--data", data / "train.jsonl", "--eval-data",
                             data / "eval.jsonl", "--batch-size", "16", "--steps", "2"],
                            stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    err = b""
    deadline = time.time() + 300
    while time.time() < deadline:
        r, _, _ = select.select([master], [], [], 1)
        if r:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            err += chunk
        elif proc.poll() is not None:
            break
    assert proc.wait(60) == 0, err
    os.close(master)
    text = err.decode(errors="replace")
    assert "evaluating [" in text and "40/40" in text, text


# ---- trace ---------------------------------------------------------------------------------------------------------
def trace_steps(*args):
    lines = run("trace", *args).stdout.splitlines()[1:]  # after the header
    return [(line[:38].strip(), line[38:].strip()) for line in lines]


@pytest.mark.parametrize("norm_first", [False, True])
def test_trace_lists_every_step_of_the_layer(norm_first):
    """Every step torch.nn.TransformerEncoderLayer runs, in its order (was: no dropout, no second norm, no Pre-LN
    norms, and the heads only as (2, 10, 512))."""
    steps = trace_steps(*(["--norm-first"] if norm_first else []))
    names = [n.removeprefix("layers.0.") for n, _ in steps]
    shapes = dict((n.removeprefix("layers.0."), s) for n, s in steps)
    # the 8 heads of 64 each, as torch's (B, H, T, head_dim)
    for t in ["q_heads", "k_heads", "v_heads", "attn_heads"]:
        assert shapes.get(f"self_attn.{t}") == "(2, 8, 10, 64)", (t, steps)
    assert shapes["self_attn.heads"] == "(2, 10, 512)" and shapes["ffn.hidden"] == "(2, 10, 2048)"
    if norm_first:  # x = x + dropout1(sa(norm1(x))); x = x + dropout2(ff(norm2(x)))
        order = ["norm1", "self_attn.qkv", "self_attn.attn_heads", "self_attn.out", "dropout1", "attn_residual",
                 "norm2", "ffn.hidden", "ffn.dropout", "ffn.linear2", "dropout2", "ffn_residual", "out"]
    else:  # x = norm1(x + dropout1(sa(x))); x = norm2(x + dropout2(ff(x)))
        order = ["self_attn.qkv", "self_attn.attn_heads", "self_attn.out", "dropout1", "norm1", "ffn.hidden",
                 "ffn.dropout", "ffn.linear2", "dropout2", "norm2", "out"]
    assert [n for n in names if n in order] == order, names
    # every submodule torch's layer has shows up (dropout = the FFN's)
    torch_children = {n for n, _ in torch.nn.TransformerEncoderLayer(512, 8).named_children()}
    assert torch_children == {"self_attn", "linear1", "dropout", "linear2", "norm1", "norm2", "dropout1", "dropout2"}
    shown = {"self_attn": "self_attn.out", "linear1": "ffn.hidden", "dropout": "ffn.dropout", "linear2": "ffn.linear2"}
    assert all(shown.get(c, c) in names for c in torch_children), names
