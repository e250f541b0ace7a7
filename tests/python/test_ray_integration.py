"""encore.integrations.ray on a real 2-node Ray cluster on this machine: `ray start --head` and a second
`ray start --address` node, 1 CPU each, on 127.0.0.1 with ephemeral ports; stopped at the end even on failure.
20,000 texts with shuffled int64 ids go Parquet -> 2 EncoreEmbedder actors -> Parquet; every id comes back once,
with its own text, and its vector equals encore.SentenceEncoder's in this process within 1e-6 (max abs; the
actors run the same engine, so only batch composition differs: measured differences are ~1e-7 or 0)."""
import json
import pathlib
import shutil
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ray

import encore
from clusters import Daemons, free_port, python_env, wait_for
from encore.integrations import ray as encore_ray
from train_data import save_tiny_bert

N_TEXTS = 20_000
TOL = 1e-6
WORDS = "the a quick brown fox dog jumps over lazy river bank money loan embedding vector search café".split()


def make_texts(n, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 24)))) for _ in range(n)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("ray")
    temp = pathlib.Path("/tmp") / f"ray-enc-{free_port()}"  # short: Ray's unix socket paths must fit 107 bytes
    port = free_port()
    ray_bin = pathlib.Path(sys.executable).with_name("ray")
    common = ["--block", "--node-ip-address", "127.0.0.1", "--num-cpus", 1, "--num-gpus", 0,
              "--object-store-memory", 200_000_000, "--disable-usage-stats"]

    def node_ports():
        return ["--node-manager-port", free_port(), "--object-manager-port", free_port(),
                "--dashboard-agent-listen-port", free_port(), "--dashboard-agent-grpc-port", free_port(),
                "--runtime-env-agent-port", free_port(), "--metrics-export-port", free_port(),
                "--min-worker-port", 0, "--max-worker-port", 0]

    env = python_env(RAY_USAGE_STATS_ENABLED=0)
    daemons = Daemons()
    try:
        daemons.start([ray_bin, "start", "--head", "--port", port, "--include-dashboard", "false",
                       "--temp-dir", temp, *common, *node_ports()],
                      d / "head.log", env)
        wait_for(lambda: (temp / "session_latest").exists(), 120, "ray head", [d / "head.log"], daemons)
        daemons.start([ray_bin, "start", "--address", f"127.0.0.1:{port}", *common, *node_ports()],
                      d / "worker.log", env)
        ray.init(address=f"127.0.0.1:{port}", logging_level="ERROR", log_to_driver=False)
        wait_for(lambda: sum(n["Alive"] for n in ray.nodes()) == 2, 120, "2 Ray nodes",
                 [d / "head.log", d / "worker.log"], daemons)
        assert ray.cluster_resources().get("CPU") == 2
        yield d
    finally:
        if ray.is_initialized():
            ray.shutdown()
        daemons.stop()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def corpus(cluster):
    d = cluster
    model = save_tiny_bert(d / "tiny")
    texts = make_texts(N_TEXTS)
    ids = np.random.default_rng(1).permutation(N_TEXTS).astype(np.int64) * 7919 + 11  # unique, not in order
    pq.write_table(pa.table({"id": ids, "text": texts}), d / "texts.parquet", row_group_size=2500)
    return d, model, texts, ids


def read_back(out_dir):
    table = pq.read_table(out_dir)
    emb = encore_ray.embeddings_matrix(table.column("embedding").combine_chunks())
    return table.column("id").to_numpy(), table.column("text").to_pylist(), emb


def test_two_node_cluster_embeds_parquet_with_ids(corpus):
    d, model, texts, ids = corpus
    encore_ray.embed_files(str(d / "texts.parquet"), str(d / "out"), model=str(model), concurrency=2, num_cpus=1,
                           batch_size=1000, encode_batch_size=32)
    got_ids, got_texts, emb = read_back(d / "out")
    assert len(got_ids) == N_TEXTS and len(set(got_ids.tolist())) == N_TEXTS  # none lost, none duplicated
    assert set(got_ids.tolist()) == set(ids.tolist())
    pos = {int(i): k for k, i in enumerate(ids)}
    order = np.array([pos[int(i)] for i in got_ids])
    assert [texts[k] for k in order] == got_texts  # every id kept its own text
    ref = encore.SentenceEncoder(str(model)).encode(texts, batch_size=32)[order]
    assert emb.shape == ref.shape
    diff = float(np.abs(emb - ref).max())
    print(f"ray: {N_TEXTS} rows, max |diff| vs SentenceEncoder {diff:.3g}")
    assert diff <= TOL


def test_jsonl_input_and_errors(corpus):
    d, model, texts, _ = corpus
    with open(d / "small.jsonl", "w") as f:
        for i, t in enumerate(texts[:300]):
            f.write(json.dumps({"doc": f"d{i}", "body": t}) + "\n")
    encore_ray.embed_files(str(d / "small.jsonl"), str(d / "out_jsonl"), model=str(model), concurrency=1,
                           num_cpus=1, batch_size=64, text_column="body", normalize=True)
    table = pq.read_table(d / "out_jsonl")
    emb = encore_ray.embeddings_matrix(table.column("embedding").combine_chunks())
    docs = table.column("doc").to_pylist()
    ref = encore.SentenceEncoder(str(model)).encode([texts[int(x[1:])] for x in docs], normalize_embeddings=True)
    assert sorted(docs) == sorted(f"d{i}" for i in range(300))
    assert np.abs(emb - ref).max() <= TOL
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-6)
    embedder = encore_ray.EncoreEmbedder(model=str(model), threads=1)
    with pytest.raises(KeyError, match="no column 'text'"):
        embedder({"body": np.array(["x"])})
    with pytest.raises(TypeError, match="column 'text' row 1: expected a string"):
        embedder({"text": np.array(["x", None], dtype=object)})
