"""Batch embedding on Spark with encore: ``mapInPandas`` (every column kept, an embedding column added) or an
iterator pandas UDF, with the model loaded once per executor Python worker.

    from encore.integrations.spark import embed_dataframe, embedding_udf

    df = spark.read.parquet("hdfs:///texts")                     # id, text, ...
    out = embed_dataframe(df, model="/models/all-MiniLM-L6-v2")  # id, text, ..., embedding: array<float>
    out.write.parquet("hdfs:///embeddings")

    df.select("id", embedding_udf(model="/models/all-MiniLM-L6-v2")("text").alias("embedding"))

The encoder is cached at module level in each Python worker (Spark reuses workers across tasks with
spark.python.worker.reuse, the default), since one invocation of an iterator UDF need not see a whole partition.
encore's threads follow ``spark.task.cpus`` (TaskContext.cpus()), so concurrent tasks x threads fit the executor's
cores. Arrow batch size: ``spark.sql.execution.arrow.maxRecordsPerBatch``. docs/scale.md shows a cluster run.
"""
from typing import Iterator

from encore.integrations import _batch


def _task_threads(threads: int | None) -> int:
    if threads:
        return _batch.set_threads(threads)
    try:
        from pyspark import TaskContext
        ctx = TaskContext.get()
        if ctx is not None:
            return _batch.set_threads(ctx.cpus())
    except Exception:  # outside a task (driver-side call): the process's CPUs
        pass
    return _batch.set_threads(None)


def embed_dataframe(df, *, model: str | None = None, text_column: str = "text", embedding_column: str = "embedding",
                    encode_batch_size: int = 32, threads: int | None = None, dtype: str = "fp32",
                    normalize: bool | None = None, max_length: int | None = None):
    """``df`` with ``embedding_column`` (array<float>) added, computed by ``mapInPandas`` on the executors. Every
    input column, ids included, stays with its row. ``model`` must be a path visible on every executor."""
    from pyspark.sql.types import ArrayType, FloatType, StructType

    if text_column not in df.columns:
        raise KeyError(f"embed_dataframe: no column '{text_column}' (columns: {df.columns}); set text_column=")
    if embedding_column in df.columns:
        raise ValueError(f"embed_dataframe: the DataFrame already has a column '{embedding_column}'")
    schema = StructType(list(df.schema.fields)).add(embedding_column, ArrayType(FloatType(), containsNull=False),
                                                    nullable=False)

    def embed_partition(frames: Iterator) -> Iterator:
        _task_threads(threads)
        encoder = _batch.cached_encoder(model, dtype, max_length)
        for frame in frames:
            texts = _batch.texts_of(frame[text_column], text_column)
            emb = _batch.embed(encoder, texts, encode_batch_size, normalize)
            frame[embedding_column] = list(emb)
            yield frame

    return df.mapInPandas(embed_partition, schema)


def embedding_udf(*, model: str | None = None, encode_batch_size: int = 32, threads: int | None = None,
                  dtype: str = "fp32", normalize: bool | None = None, max_length: int | None = None):
    """An iterator pandas UDF: a string column in, its embeddings (array<float>) out."""
    import pandas as pd
    from pyspark.sql.functions import pandas_udf
    from pyspark.sql.types import ArrayType, FloatType

    @pandas_udf(ArrayType(FloatType(), containsNull=False))
    def encore_embedding(batches: Iterator[pd.Series]) -> Iterator[pd.Series]:
        _task_threads(threads)
        encoder = _batch.cached_encoder(model, dtype, max_length)
        for texts in batches:
            emb = _batch.embed(encoder, _batch.texts_of(texts, "input"), encode_batch_size, normalize)
            yield pd.Series(list(emb), index=texts.index)

    return encore_embedding


__all__ = ["embed_dataframe", "embedding_udf"]
