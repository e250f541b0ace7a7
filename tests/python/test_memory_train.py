"""`encore memory --train`: the predicted peak of live tensor bytes for one training step (weights, gradients, AdamW
state, input/output gradient, saved activations, backward working set) against the peak the tracked allocator
measures for a real step (forward + backward + AdamW, second step), with and without gradient checkpointing.
Tolerance: |predicted / measured - 1| <= 1% (the plan counts every tensor the step allocates; what it leaves out
is a few small buffers such as LayerNorm partial sums). Checkpointing must lower the measured peak."""
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("ENCORE_BIN", ROOT / "build" / "encore"))

SHAPES = [
    ["--layers", "4", "--d-model", "128", "--heads", "4", "--d-ff", "512", "--batch", "8", "--seq", "64"],
    ["--layers", "3", "--d-model", "96", "--heads", "3", "--d-ff", "200", "--batch", "3", "--seq", "37",
     "--activation", "geglu", "--norm-first"],
    ["--layers", "2", "--d-model", "64", "--heads", "2", "--d-ff", "300", "--batch", "2", "--seq", "200",
     "--activation", "swiglu"],
]


def run(args):
    res = subprocess.run([str(BIN), "memory", "--train", *args], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return res.stdout


def ratio(out):
    return float(re.search(r"predicted / measured = ([0-9.]+)", out).group(1))


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("shape", SHAPES, ids=["post-ln", "pre-ln-geglu", "long-swiglu"])
def test_predicted_training_peak_matches_measured(shape, threads):
    plain = run(shape + ["--threads", threads])
    ckpt = run(shape + ["--threads", threads, "--gradient-checkpointing"])
    assert abs(ratio(plain) - 1) <= 0.01, plain
    assert abs(ratio(ckpt) - 1) <= 0.01, ckpt
    saving = float(re.search(r"checkpointing saves ([0-9.]+)% of the peak", ckpt).group(1))
    assert saving > 10, ckpt
    for part in ("weights", "gradients", "AdamW state", "saved after forward", "predicted peak", "measured peak"):
        assert part in plain and part in ckpt


def test_gradient_checkpointing_needs_train():
    res = subprocess.run([str(BIN), "memory", "--gradient-checkpointing"], capture_output=True, text=True)
    assert res.returncode != 0 and "--gradient-checkpointing needs --train" in res.stderr
