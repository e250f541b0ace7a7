"""The first hour from Python (issue 13 item 5, issue 16 item 4): Ctrl-C stops encode() and training promptly,
modules print as torch prints them, AutoModel / SentenceEncoder say what they are, sinusoidal positions and
per-site dropout are reachable, and encore.train takes TrainConfig's options by keyword from one table.
Oracles: torch's own reprs and its tutorial's positional encoding, transformers' parameter count, the clock."""
import json
import os
import pathlib
import select
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch
import transformers as T
from train_data import MINILM, save_tiny_bert, sentiment_files

import encore

ROOT = pathlib.Path(__file__).resolve().parents[2]


def interrupt_after_start(script, tmp_path, wait_s=1.0):
    """Runs `script` in a fresh Python; once it prints 'started' (and wait_s more), sends SIGINT and returns
    (seconds from SIGINT to exit, stdout). The script prints 'interrupted <n>' when KeyboardInterrupt reaches it."""
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(script))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # SIGINT back to its default in the child, as a terminal gives it: a test run started in the background of a
    # non-interactive shell (CI) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler.
    proc = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = proc.stdout.readline()
        assert line.strip() == "started", (line, proc.stderr.read() if proc.poll() is not None else "")
        time.sleep(wait_s)
        assert proc.poll() is None, "the job ended before the interrupt: make it longer"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        return time.monotonic() - t0, line + out, err
    finally:
        proc.kill()
        proc.wait()


def test_ctrl_c_stops_encode_promptly(tmp_path):
    # 40,000 texts take ~40 s on 2 cores; without signal checks SIGINT only lands when encode() returns.
    elapsed, out, err = interrupt_after_start("""
        import time, encore
        enc = encore.SentenceEncoder()
        texts = [f"sentence number {i} about a topic that takes a few tokens" for i in range(40000)]
        enc.encode(texts[:64])
        print("started", flush=True)
        try:
            enc.encode(texts, batch_size=32)
            print("finished")
        except KeyboardInterrupt:
            print("interrupted")
        """, tmp_path)
    assert "interrupted" in out, (out, err)
    assert elapsed < 1.5, f"KeyboardInterrupt took {elapsed:.2f} s"  # one batch of 32 is ~0.05 s


def test_ctrl_c_stops_training_promptly(tmp_path):
    d = save_tiny_bert(tmp_path / "tiny")
    data = sentiment_files(tmp_path, {"train.jsonl": 400})
    elapsed, out, err = interrupt_after_start(f"""
        import encore
        print("started", flush=True)
        try:
            encore.train_classifier({str(d)!r}, {str(data / "train.jsonl")!r}, steps=100000, batch_size=8)
            print("finished")
        except KeyboardInterrupt:
            print("interrupted")
        """, tmp_path, wait_s=3.0)
    assert "interrupted" in out, (out, err)
    assert elapsed < 1.5, f"KeyboardInterrupt took {elapsed:.2f} s"


def test_signal_handlers_during_encode_leave_vectors_intact(tmp_path):
    # oneDNN's f32 GEMM kernels run with their stack pointer in a heap buffer (src/runtime/signals.hpp): a signal
    # handler that ran meanwhile wrote its frame there. Python's handlers (SIGINT's among them) made encode() die
    # (SIGSEGV, SIGBUS, or glibc's "corrupted size vs. prev_size") or return other vectors: 4 of 4 runs of this storm
    # on an AVX2 host before the fix, 3 of 30 Ctrl-C runs of the test above.
    path = tmp_path / "storm.py"
    path.write_text(textwrap.dedent("""
        import signal, encore, numpy as np
        handled = 0
        def count(signum, frame):
            global handled
            handled += 1
        signal.signal(signal.SIGUSR1, count)
        enc = encore.SentenceEncoder()
        texts = [f"sentence number {i} about a topic that takes a few tokens" for i in range(1500)]
        want = enc.encode(texts, batch_size=32)
        print("started", flush=True)
        rounds, same = 0, True
        while rounds < 20 and (rounds < 2 or handled < 20):  # a fast machine gets more rounds, all compared
            same = np.array_equal(enc.encode(texts, batch_size=32), want) and same
            rounds += 1
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        print("handled", handled, "rounds", rounds, "same" if same else "differ", flush=True)
        """))
    # oneDNN held to AVX2, so its fp32 Linears are the gemm:jit matmul whose kernel moved the stack on any host
    # (an AVX-512 CPU runs them as brgemm, where this storm would find nothing to break).
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "DNNL_MAX_CPU_ISA": "AVX2"}
    proc = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert select.select([proc.stdout], [], [], 120)[0], "the child printed nothing in 120 s"
        line = proc.stdout.readline()
        assert line.strip() == "started", (line, proc.stderr.read() if proc.poll() is not None else "")
        sent, deadline = 0, time.monotonic() + 120
        while proc.poll() is None and sent < 200_000 and time.monotonic() < deadline:  # bounded storm
            try:
                os.kill(proc.pid, signal.SIGUSR1)
            except ProcessLookupError:
                break
            sent += 1
            time.sleep(0.0005)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, (proc.returncode, err[-2000:])
    words = out.split()
    assert words[0] == "handled" and words[4] == "same", out
    assert sent > 100 and int(words[1]) >= 20, (sent, out)  # the storm reached the handler while encode() ran


def test_modules_print_as_torch_does():
    layer = encore.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
    ref = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
    text = repr(layer)
    assert text.startswith("TransformerEncoderLayer(\n  d_model=64, nhead=4, dim_feedforward=128, activation=relu"), text
    # leaf modules print exactly as torch prints the same module
    assert f"(linear1): {ref.linear1!r}" in text and f"(linear2): {ref.linear2!r}" in text, text
    assert f"(norm1): {ref.norm1!r}" in text and f"(norm2): {ref.norm2!r}" in text, text
    # a module with children prints its extra_repr on its own line, as torch does
    assert "(self_attn): MultiheadAttention(\n    embed_dim=64, num_heads=4, head_dim=16" in text, text
    assert "dropout(attention_probs=0.1, attention_output=0.1, ffn_hidden=0.1, ffn_output=0.1)" in text
    enc = repr(encore.nn.TransformerEncoder(layer, 3))
    assert "(0-2): 3 x TransformerEncoderLayer(" in enc, enc  # torch's ModuleList collapse
    assert repr(encore.nn.Linear(3, 5, bias=False)) == repr(torch.nn.Linear(3, 5, bias=False))
    assert repr(encore.nn.LayerNorm(7)) == repr(torch.nn.LayerNorm(7))


def test_model_and_encoder_reprs_name_what_they_are():
    total = sum(p.numel() for p in T.AutoModel.from_pretrained(MINILM).parameters())
    m = repr(encore.AutoModel.load(str(MINILM)))
    assert m.startswith("AutoModel(family='bert', architecture='BertModel', dtype=float32"), m
    assert "hidden_size=384" in m and "layers=6" in m and f"parameters={total}" in m, m
    s = repr(encore.SentenceEncoder())
    assert s.startswith("SentenceEncoder(family='bert', dtype=float32, dimension=384, max_seq_length=256, "
                        "pooling=mean, normalize=True"), s


def test_sinusoidal_positions_match_the_pytorch_tutorial():
    # The PositionalEncoding of PyTorch's "Language Modeling with nn.Transformer" tutorial
    d_model, length, start = 64, 50, 3
    position = torch.arange(start, start + length, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-np.log(10000.0) / d_model))
    pe = torch.zeros(length, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    ours = encore.nn.sinusoidal_positions(length, d_model, start=start)
    assert ours.shape == (length, d_model) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, pe.numpy(), atol=1e-6, rtol=0)  # float32 rounding of values in [-1, 1]


def test_per_site_dropout_from_python():
    encore.manual_seed(0)
    layer = encore.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    x = np.random.default_rng(0).standard_normal((2, 5, 32)).astype(np.float32)
    layer.eval()
    ref = layer(x)
    layer.train()
    np.testing.assert_allclose(layer(x), ref, atol=1e-5)  # every site 0: training forward == eval forward
    layer.set_dropout(ffn_hidden=0.5)
    assert layer.dropout_sites() == {"attention_probs": 0.0, "attention_output": 0.0, "ffn_hidden": 0.5,
                                     "ffn_output": 0.0}
    assert np.abs(layer(x) - ref).max() > 1e-3  # the one site drops
    with pytest.raises(encore.Error):
        layer.set_dropout(attention_probs=1.5)


def test_train_keywords_come_from_one_table(tmp_path):
    d = save_tiny_bert(tmp_path / "tiny")
    data = sentiment_files(tmp_path, {"train.jsonl": 64})
    signature = encore.train.__doc__.splitlines()[0]  # what help() and the stub generator read
    assert signature.startswith("train(model: str, data: str, *, task: str = 'classification', ") and \
        signature.endswith(") -> dict"), signature
    # defaults and types printed from a default TrainConfig (trainer.hpp's values)
    for name, typed in [("batch_size", "int = 16"), ("lr", "float = 2e-05"), ("max_length", "int = 128"),
                        ("plot", "str = ''"), ("gradient_checkpointing", "bool = False"),
                        ("eval_fraction", "float = 0.1"), ("seed", "int = 42"), ("schedule", "str = 'linear'")]:
        assert f", {name}: {typed}" in signature, signature
    with pytest.raises(TypeError, match="unexpected keyword argument 'batchsize'"):
        encore.train_classifier(str(d), str(data / "train.jsonl"), batchsize=4)
    with pytest.raises(TypeError, match="shuffle must be a bool"):
        encore.train_classifier(str(d), str(data / "train.jsonl"), shuffle=1)
    r = encore.train_classifier(str(d), str(data / "train.jsonl"), steps=2, batch_size=4, eval_fraction=0.25,
                                plot=str(tmp_path / "plots" / "p.svg"), output=str(tmp_path / "runs" / "a"))
    assert r["examples_trained"] == 8 and r["train_examples"] == 48 and r["total_steps"] == 2
    # missing parents are created by the library, so Python gets what the CLI does
    assert (tmp_path / "plots" / "p.svg").read_text().startswith("<?xml")
    assert (tmp_path / "runs" / "a" / "model.safetensors").exists()
