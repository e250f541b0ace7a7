"""The encore command line: embed / similarity / info / trace / memory / bench, run as a user would, checked
against the Python API (itself checked against sentence-transformers) and for clear errors on bad input."""
import json
import re
import os
import pathlib
import subprocess

import numpy as np
import pytest

import encore

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("ENCORE_BIN", ROOT / "build" / "encore"))
TEXTS = ["A man is eating food.", "Café crème 🍕", "我爱自然语言处理。", ""]


def run(*args, ok=True, env=None, **kw):
    res = subprocess.run([str(BIN), *map(str, args)], capture_output=True, timeout=300, env=env, **kw)
    if ok:
        assert res.returncode == 0, res.stderr.decode(errors="replace")
    return res


@pytest.fixture(scope="module")
def reference():
    return encore.SentenceEncoder().encode(TEXTS)


def test_embed_arguments_to_json_stdout(reference):
    out = json.loads(run("embed", *TEXTS).stdout)
    assert [o["text"] for o in out] == TEXTS
    np.testing.assert_allclose(np.array([o["embedding"] for o in out], np.float32), reference, atol=1e-7)


def test_embed_file_to_npy_and_jsonl(tmp_path, reference):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    run("embed", "-i", src, "-o", tmp_path / "out.npy", "--batch-size", 2)
    # Batches of 2 against the reference's one batch of 4: GEMMs of other row counts, bitwise the same under
    # oneDNN's brgemm (AVX-512) but summed in another order by its AVX2 gemm:jit (1.1e-7 seen): 1e-6.
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), reference, atol=1e-6)
    jl = tmp_path / "in.jsonl"
    jl.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(TEXTS)), encoding="utf-8")
    run("embed", "-i", jl, "-o", tmp_path / "out.jsonl")
    rows = [json.loads(l) for l in open(tmp_path / "out.jsonl")]
    np.testing.assert_allclose(np.array([r["embedding"] for r in rows], np.float32), reference, atol=1e-7)


def test_embed_options(tmp_path):
    raw = json.loads(run("embed", "--no-normalize", TEXTS[0]).stdout)[0]["embedding"]
    assert abs(np.linalg.norm(raw) - 1) > 1e-3
    np.testing.assert_allclose(raw, encore.SentenceEncoder().encode([TEXTS[0]], normalize_embeddings=False)[0], atol=1e-6)
    short = json.loads(run("embed", "--max-length", 4, "one two three four five six").stdout)[0]["embedding"]
    enc = encore.SentenceEncoder()
    enc.max_seq_length = 4
    np.testing.assert_allclose(short, enc.encode(["one two three four five six"])[0], atol=1e-7)


def test_invalid_utf8_input_is_replaced_not_fatal(tmp_path):
    src = tmp_path / "bad.txt"
    src.write_bytes(b"valid line\nbad \xff\xfe bytes \xc3\n")
    out = json.loads(run("embed", "-i", src).stdout)
    assert len(out) == 2 and out[1]["text"] == "bad \ufffd\ufffd bytes \ufffd"
    assert all(np.isfinite(o["embedding"]).all() for o in out)


def test_embed_errors(tmp_path):
    # exit codes (docs/errors.md): 2 usage, 3 bad input
    res = run("embed", ok=False)
    assert res.returncode == 2 and b"nothing to embed" in res.stderr
    res = run("embed", "--model", tmp_path / "missing", "x", ok=False)
    assert res.returncode == 3 and b"does not exist" in res.stderr
    src = tmp_path / "in.txt"
    src.write_text("hello\n")
    res = run("embed", "-i", src, "-o", src, ok=False)
    assert res.returncode == 2 and b"overwrite the input" in res.stderr and src.read_text() == "hello\n"
    res = run("embed", "-o", tmp_path / "out.txt", "x", ok=False)
    assert res.returncode == 2 and b".npy, .jsonl, .json or .csv" in res.stderr
    assert not (tmp_path / "out.txt").exists()
    res = run("embed", "--no-truncation", "word " * 400, ok=False)
    assert res.returncode == 3 and b"truncation is off" in res.stderr
    jl = tmp_path / "x.jsonl"
    jl.write_text('{"text": "fine"}\n{"txt": "wrong field"}\n')
    res = run("embed", "-i", jl, ok=False)
    assert res.returncode == 3 and b"x.jsonl:2" in res.stderr


def test_existing_output_survives_a_failed_run(tmp_path):
    out = tmp_path / "keep.npy"
    out.write_bytes(b"previous results")
    res = run("embed", "--model", tmp_path / "missing", "-o", out, "x", ok=False)
    assert res.returncode == 3 and out.read_bytes() == b"previous results"


def test_similarity_and_info():
    res = run("similarity", "A man is eating food.", "A man is eating pasta.", "The girl is carrying a baby.")
    rows = [l for l in res.stdout.decode().splitlines() if l.startswith("[ ")]
    matrix = np.array([[float(x) for x in l.split("]")[1].split()] for l in rows])
    emb = encore.SentenceEncoder().encode(["A man is eating food.", "A man is eating pasta.", "The girl is carrying a baby."])
    np.testing.assert_allclose(matrix, emb @ emb.T, atol=1e-3)  # printed with 3 decimals
    info = run("info").stdout.decode()
    for needle in ["BertModel", "6 x hidden 384", "12 heads", "WordPiece", "384 dimensions, L2-normalised", "Pooling: mean"]:
        assert needle in info, info


def test_seed_tools():
    trace = run("trace", "--d-model", 64, "--heads", 4, "--d-ff", 128, "--seq", 5).stdout.decode()
    assert "layers.0.self_attn.qkv                 (2, 5, 192)" in trace and "layers.0.ffn.hidden" in trace
    mem = run("memory", "--layers", 2, "--d-model", 64, "--heads", 4, "--d-ff", 128, "--batch", 2, "--seq", 16).stdout.decode()
    ratio = float(mem.split("predicted / measured = ")[1].split(")")[0])
    assert 0.9 <= ratio <= 1.1, mem
    bench = run("bench", "--layers", 1, "--d-model", 64, "--heads", 4, "--d-ff", 128, "--batch", 3, "--seq", 7,
                "--iters", 3).stdout.decode()
    # What bench prints must be what it ran: torch's parameter count for the same layer, the shapes, and a
    # throughput consistent with its own median (printed with 2 decimals: 1% slack) and min <= median <= max.
    import torch  # noqa: PLC0415
    n_torch = sum(p.numel() for p in torch.nn.TransformerEncoderLayer(64, 4, 128).parameters())
    assert f"; {n_torch} parameters;" in bench, bench
    assert "input (3, 7, 64) -> output (3, 7, 64)" in bench, bench
    m = re.search(r"3 iterations: median ([\d.]+) ms, min ([\d.]+) ms, max ([\d.]+) ms; (\d+) tokens/s", bench)
    assert m, bench
    median, lo, hi, tps = (float(g) for g in m.groups())
    assert lo <= median <= hi and median > 0, bench
    # the median is printed rounded to 0.01 ms: tokens/s must lie in the range that rounding allows
    assert 21 / ((median + 0.005) / 1000) - 1 <= tps <= 21 / (max(median - 0.005, 1e-6) / 1000) + 1, bench
