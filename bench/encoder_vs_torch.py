#!/usr/bin/env python3
"""encore vs torch.nn.TransformerEncoder on the same weights and inputs, in one process, interleaved.

Default: BERT-base shape (12 layers, d_model 768, 12 heads, d_ff 3072, GELU, post-LN), batch 8 x 128 tokens,
fp32, all cores. Each round runs every engine once, in rotating order; the report gives median tokens/s per
engine and the ratio encore / torch. torch is measured twice: with its inference fast path (the default for
an eval-mode nn.TransformerEncoder under no_grad) and with the fast path disabled (the plain math path).

    PYTHONPATH=python python3 bench/encoder_vs_torch.py [--batch 8 --seq 128 --rounds 10 --threads 2]
"""
import argparse
import statistics
import time

import numpy as np
import torch

import encore


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--d-ff", type=int, default=3072)
    ap.add_argument("--activation", default="gelu")
    ap.add_argument("--norm-first", action="store_true")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="0 = all cores")
    a = ap.parse_args()

    if a.threads:
        torch.set_num_threads(a.threads)
        encore.set_num_threads(a.threads)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(a.d_model, a.heads, a.d_ff, dropout=0.0, activation=a.activation,
                                             batch_first=True, norm_first=a.norm_first)
    ref = torch.nn.TransformerEncoder(layer, a.layers, enable_nested_tensor=False).eval()
    state = {k: v.detach().numpy().copy() for k, v in ref.state_dict().items()}
    enc_layer = encore.nn.TransformerEncoderLayer(a.d_model, a.heads, a.d_ff, dropout=0.0, activation=a.activation,
                                                  batch_first=True, norm_first=a.norm_first)
    mine = encore.nn.TransformerEncoder(enc_layer, a.layers).eval()
    mine.load_state_dict(state)

    x = np.random.default_rng(0).standard_normal((a.batch, a.seq, a.d_model), dtype=np.float32)
    xt = torch.from_numpy(x)

    def run_torch(fastpath):
        torch.backends.mha.set_fastpath_enabled(fastpath)
        with torch.inference_mode():
            return ref(xt).numpy()

    engines = {
        "encore": lambda: mine(x),
        "torch (fast path)": lambda: run_torch(True),
        "torch (math path)": lambda: run_torch(False),
    }
    # Same answer first: a benchmark of a wrong result is worthless.
    out_e, out_t = engines["encore"](), engines["torch (math path)"]()
    max_diff = float(np.abs(out_e - out_t).max())
    assert max_diff < 1e-3, f"encore and torch disagree: max abs diff {max_diff}"

    for _ in range(a.warmup):
        for fn in engines.values():
            fn()
    times = {k: [] for k in engines}
    names = list(engines)
    for r in range(a.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for k in order:
            t0 = time.perf_counter()
            engines[k]()
            times[k].append(time.perf_counter() - t0)

    tokens = a.batch * a.seq
    print(f"encore {encore.runtime_info()}; torch {torch.__version__} threads={torch.get_num_threads()}")
    print(f"shape: {a.layers} layers x d_model {a.d_model}, {a.heads} heads, d_ff {a.d_ff}, {a.activation}, "
          f"{'pre' if a.norm_first else 'post'}-LN; batch {a.batch} x {a.seq} tokens; fp32; {a.rounds} rounds")
    print(f"max |encore - torch| = {max_diff:.2e}")
    med = {k: statistics.median(v) for k, v in times.items()}
    for k in names:
        print(f"{k:20s} median {med[k] * 1e3:8.1f} ms  {tokens / med[k]:8.0f} tokens/s")
    for k in names[1:]:
        print(f"ratio encore / {k}: {med[k] / med['encore']:.2f}x tokens/s")


if __name__ == "__main__":
    main()
