"""`encore embed --shard I/N --block B --resume` (include/encore/shard.hpp): N shards concatenated in shard order are
byte-identical to one unsharded run; a run killed with SIGKILL mid-way and resumed is byte-identical to an
uninterrupted run; a torn tail is dropped; another shard's file is refused. Exact (bitwise) comparisons: a record's
vector depends on its block only, so there is no tolerance to state."""
import json
import os
import pathlib
import signal
import subprocess
import time

import numpy as np
import pytest

import encore

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("ENCORE_BIN", ROOT / "build" / "encore"))
WORDS = ("the quick brown fox jumps over a lazy dog while encore embeds every sentence of the corpus in "
         "blocks café naïve 我爱自然语言处理 🍕").split()


def corpus(n, seed=0):
    """n texts of 1..40 words (lengths vary so sorting by length within a block matters), a few empty."""
    rng = np.random.default_rng(seed)
    return ["" if i % 97 == 5 else " ".join(rng.choice(WORDS, size=int(rng.integers(1, 40)))) for i in range(n)]


def run(*args, ok=True):
    res = subprocess.run([str(BIN), *map(str, args)], capture_output=True, timeout=300)
    if ok:
        assert res.returncode == 0, res.stderr.decode(errors="replace")
    return res


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("shard")
    texts = corpus(203)  # 203 = 12 blocks of 16 + 11: the last block is short
    (d / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    run("embed", "-i", d / "in.txt", "-o", d / "full.jsonl", "--block", 16, "--batch-size", 8, "-q")
    run("embed", "-i", d / "in.txt", "-o", d / "full.npy", "--block", 16, "--batch-size", 8, "-q")
    return d, texts


@pytest.mark.parametrize("shards", [3, 13, 20])  # 13 blocks: one each; 20 > 13: some shards are empty
def test_shards_concatenated_equal_unsharded_run(data, shards):
    d, texts = data
    parts, npys = [], []
    for i in range(shards):
        run("embed", "-i", d / "in.txt", "-o", d / f"s{i}.jsonl", "--block", 16, "--batch-size", 8, "--shard",
            f"{i}/{shards}", "-q")
        parts.append((d / f"s{i}.jsonl").read_bytes())
        if shards in (3, 20):  # .npy shards are concatenated with numpy (each file has its own header)
            run("embed", "-i", d / "in.txt", "-o", d / f"s{i}.npy", "--block", 16, "--batch-size", 8, "--shard",
                f"{i}/{shards}", "-q")
            npys.append(np.load(d / f"s{i}.npy"))
    full = (d / "full.jsonl").read_bytes()
    assert b"".join(parts) == full
    sizes = [p.count(b"\n") for p in parts]
    assert sum(sizes) == len(texts) and max(sizes) - min(sizes) <= 16  # balanced to within one block
    if npys:
        assert np.array_equal(np.concatenate(npys), np.load(d / "full.npy"))
    rows = [json.loads(line) for line in full.splitlines()]
    assert [r["index"] for r in rows] == list(range(len(texts)))
    assert [r["text"] for r in rows] == texts


def test_block_vectors_match_python_encoder(data):
    """The CLI's blocks are an execution detail: vectors equal encore.SentenceEncoder on all texts at once
    (1e-6; measured differences are ~1e-7, batch composition only changes GEMM summation blocking)."""
    d, texts = data
    ref = encore.SentenceEncoder().encode(texts)
    np.testing.assert_allclose(np.load(d / "full.npy"), ref, atol=1e-6, rtol=0)


def test_killed_run_resumes_to_identical_output(tmp_path):
    texts = corpus(1500, seed=1)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    common = ["-i", src, "--block", 32, "--batch-size", 16, "--threads", 1, "-q", "--shard", "1/2"]
    run("embed", *common, "-o", tmp_path / "ref.jsonl")
    ref = (tmp_path / "ref.jsonl").read_bytes()
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen([str(BIN), "embed", *map(str, common), "-o", str(out)])
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not out.exists() or out.read_bytes().count(b"\n") < 3 * 32):
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    written = out.read_bytes()
    assert 3 * 32 <= written.count(b"\n") < ref.count(b"\n"), "the run was not interrupted mid-way"
    assert ref.startswith(written)
    # A torn tail, as a kill during a block's write leaves it: whole lines of an unfinished block, then half a line.
    with open(out, "ab") as f:
        f.write(ref[len(written):len(written) + 5000])
    run("embed", *common, "-o", out, "--resume")
    assert out.read_bytes() == ref
    run("embed", *common, "-o", out, "--resume")  # a finished output stays as it is
    assert out.read_bytes() == ref


def test_resume_refuses_another_shards_file_and_other_formats(data, tmp_path):
    d, _ = data
    other = tmp_path / "other.jsonl"
    other.write_bytes((d / "full.jsonl").read_bytes()[:20000])  # starts at record 0: shard 0's, not shard 1's
    res = run("embed", "-i", d / "in.txt", "-o", other, "--block", 16, "--shard", "1/3", "--resume", "-q", ok=False)
    assert res.returncode != 0 and b"record index 0 where 64 was expected" in res.stderr
    res = run("embed", "-i", d / "in.txt", "-o", tmp_path / "x.npy", "--resume", ok=False)
    assert res.returncode != 0 and b"--resume needs a .jsonl output" in res.stderr
    for bad in ("3/3", "1/0", "-1/2", "1", "a/b", "1/2/3"):
        res = run("embed", "-i", d / "in.txt", "--shard", bad, ok=False)
        assert res.returncode != 0 and b"expected I/N with 0 <= I < N" in res.stderr, bad
