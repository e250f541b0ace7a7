"""encore.integrations.spark on a Spark standalone cluster on this machine: a master and one worker (1 core)
started from the pyspark distribution (bin/spark-class, Java from Debian's openjdk-17-jre-headless) on 127.0.0.1
with ephemeral ports, stopped at the end even on failure; the driver connects to spark://127.0.0.1:PORT (not
local[*]). 20,000 texts with shuffled ids: mapInPandas adds the embedding column, every id comes back once with
its own text, and every vector equals encore.SentenceEncoder's in this process within 1e-6 (max abs)."""
import os
import pathlib
import shutil
import sys

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pyspark
import pytest
from pyspark.sql import SparkSession

import encore
from clusters import Daemons, free_port, python_env, wait_for
from encore.integrations import spark as encore_spark
from train_data import save_tiny_bert

N_TEXTS = 20_000
TOL = 1e-6
WORDS = "the a quick brown fox dog jumps over lazy river bank money loan embedding vector search café".split()
SPARK_CLASS = pathlib.Path(pyspark.__file__).parent / "bin" / "spark-class"


def make_texts(n, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 24)))) for _ in range(n)]


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    assert shutil.which("java"), "java not found: scripts/setup.sh installs openjdk-17-jre-headless"
    d = tmp_path_factory.mktemp("spark")
    port = free_port()
    # The master's REST submission server would listen on the fixed port 6066: off (jobs come from this driver).
    env = python_env(SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_DIRS=d, SPARK_WORKER_DIR=d / "work",
                     PYSPARK_PYTHON=sys.executable, SPARK_HOME=SPARK_CLASS.parent.parent,
                     SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
    daemons = Daemons()
    session = None
    try:
        daemons.start([SPARK_CLASS, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", port,
                       "--webui-port", free_port()], d / "master.log", env)
        wait_for(lambda: "I have been elected leader" in (d / "master.log").read_text(errors="replace"), 120,
                 "spark master", [d / "master.log"], daemons)
        daemons.start([SPARK_CLASS, "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}",
                       "--host", "127.0.0.1", "--port", free_port(), "--webui-port", free_port(), "--cores", 1,
                       "--memory", "2g", "--work-dir", d / "work"], d / "worker.log", env)
        wait_for(lambda: "Successfully registered with master" in (d / "worker.log").read_text(errors="replace"),
                 120, "spark worker", [d / "master.log", d / "worker.log"], daemons)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        session = (SparkSession.builder.master(f"spark://127.0.0.1:{port}").appName("encore-test")
                   .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.driver.port", free_port()).config("spark.blockManager.port", free_port())
                   .config("spark.ui.enabled", "false").config("spark.executor.memory", "1g")
                   .config("spark.executor.cores", "1").config("spark.cores.max", "1")
                   .config("spark.executorEnv.PYTHONPATH", python_env()["PYTHONPATH"])
                   .config("spark.pyspark.python", sys.executable)
                   .config("spark.sql.execution.arrow.pyspark.enabled", "true")
                   .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
                   .config("spark.local.dir", str(d)).getOrCreate())
        yield session, d
    finally:
        if session is not None:
            session.stop()
        daemons.stop()


def test_standalone_cluster_embeds_with_ids(spark):
    session, d = spark
    assert session.sparkContext.master.startswith("spark://127.0.0.1:")
    model = save_tiny_bert(d / "tiny")
    texts = make_texts(N_TEXTS, seed=2)
    ids = np.random.default_rng(3).permutation(N_TEXTS).astype(np.int64) * 7919 + 11
    df = session.createDataFrame(pd.DataFrame({"id": ids, "text": texts})).repartition(4)
    out = encore_spark.embed_dataframe(df, model=str(model), encode_batch_size=32)
    assert out.columns == ["id", "text", "embedding"]
    out.write.parquet(str(d / "out"))
    table = pq.read_table(d / "out")
    got_ids = table.column("id").to_numpy()
    assert len(got_ids) == N_TEXTS and len(set(got_ids.tolist())) == N_TEXTS
    assert set(got_ids.tolist()) == set(ids.tolist())
    pos = {int(i): k for k, i in enumerate(ids)}
    order = np.array([pos[int(i)] for i in got_ids])
    assert [texts[k] for k in order] == table.column("text").to_pylist()
    emb = np.stack(table.column("embedding").to_numpy(zero_copy_only=False)).astype(np.float32)
    ref = encore.SentenceEncoder(str(model)).encode(texts, batch_size=32)[order]
    diff = float(np.abs(emb - ref).max())
    print(f"spark: {N_TEXTS} rows, max |diff| vs SentenceEncoder {diff:.3g}")
    assert emb.shape == ref.shape and diff <= TOL


def test_iterator_udf_and_errors(spark):
    session, d = spark
    model = d / "tiny"
    texts = make_texts(500, seed=4)
    df = session.createDataFrame(pd.DataFrame({"k": np.arange(500), "body": texts}))
    udf = encore_spark.embedding_udf(model=str(model))
    rows = df.select("k", udf("body").alias("v")).toPandas().sort_values("k")
    ref = encore.SentenceEncoder(str(model)).encode(texts)
    assert np.abs(np.stack(rows["v"].to_numpy()) - ref).max() <= TOL
    with pytest.raises(KeyError, match="no column 'text'"):
        encore_spark.embed_dataframe(df, model=str(model))
