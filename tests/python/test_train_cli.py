"""encore train end to end: a small BERT trained from its random initialisation (transformers' init, saved
offline) learns a sequence task - the polarity of the one sentiment word in a templated sentence - to >= 99%
held-out accuracy; the CSV log has one row per optimizer step; the CLI and Python entry points agree bitwise."""
import csv
import os
import pathlib
import subprocess

import numpy as np
import pytest
from train_data import sentiment_files

import encore

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("ENCORE_BIN", ROOT / "build" / "encore"))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return sentiment_files(tmp_path_factory.mktemp("data"), {"train.jsonl": 600, "eval.jsonl": 200})


def test_learns_a_sequence_task_to_99_percent(tiny_bert, data, tmp_path):
    log = tmp_path / "log.csv"
    res = subprocess.run([str(BIN), "train", "--model", tiny_bert, "--data", data / "train.jsonl", "--eval-data",
                          data / "eval.jsonl", "--epochs", "3", "--batch-size", "16", "--lr", "3e-3",
                          "--warmup-steps", "10", "--log", log, "--threads", "1", "-q"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(open(log)))
    assert len(rows) == 3 * 38 and list(rows[0]) == ["step", "loss", "lr", "grad_norm", "eval_accuracy"]
    accuracy = [float(r["eval_accuracy"]) for r in rows if r["eval_accuracy"]]
    assert len(accuracy) == 3, res.stdout
    assert accuracy[-1] >= 0.99, res.stdout
    losses = [float(r["loss"]) for r in rows]
    assert np.mean(losses[-10:]) < np.mean(losses[:10]) / 5
    py = encore.train_classifier(str(tiny_bert), str(data / "train.jsonl"), eval_data=str(data / "eval.jsonl"),
                                 epochs=3, batch_size=16, lr=3e-3, warmup_steps=10)
    assert py["labels"] == ["neg", "pos"]
    np.testing.assert_allclose(py["losses"], losses, rtol=1e-5)  # the log prints 6 significant digits


def test_train_errors(tiny_bert, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "x", "label": 0}\n{"label": 1}\n')
    res = subprocess.run([str(BIN), "train", "--model", tiny_bert, "--data", bad], capture_output=True, text=True)
    assert res.returncode == 3 and "bad.jsonl:2" in res.stderr
    one = tmp_path / "one.csv"
    one.write_text('text,label\n"a, quoted ""text""",0\nplain,0\n')
    res = subprocess.run([str(BIN), "train", "--model", tiny_bert, "--data", one, "--eval-fraction", "0"],
                         capture_output=True, text=True)
    assert res.returncode == 3 and "at least 2 classes" in res.stderr
