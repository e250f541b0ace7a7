"""Batch embedding on Ray Data with encore: a callable class for ``Dataset.map_batches``, run as a pool of actors
that each load the model once.

    import ray
    from encore.integrations.ray import EncoreEmbedder

    ds = ray.data.read_parquet("s3://bucket/texts/")            # columns: id, text, ...
    ds = ds.map_batches(EncoreEmbedder, fn_constructor_kwargs={"model": "/models/all-MiniLM-L6-v2"},
                        concurrency=8, num_cpus=4, batch_size=1024)
    ds.write_parquet("s3://bucket/embeddings/")                 # id, text, ..., embedding

or, for files, ``embed_files("texts.jsonl", "out_dir/", model=..., concurrency=8, num_cpus=4)``.

Each actor sets encore's threads to the CPUs Ray assigned it (``num_cpus``), so actors x threads never
oversubscribes a node. Every input column passes through unchanged (ids stay with their rows); the embedding is
added as a float32 column of shape (rows, dimension). docs/scale.md shows a cluster run.
"""
from __future__ import annotations

import numpy as np

from encore.integrations import _batch


class EncoreEmbedder:
    """``map_batches`` callable class. Constructor arguments (pass them as ``fn_constructor_kwargs``):

    model: a sentence-transformers or Hugging Face model directory (None: encore's default model), visible on
        every node at the same path.
    text_column / embedding_column: the column read and the column added.
    encode_batch_size: texts per forward pass inside one Ray batch (the Ray batch is sorted by token length and
        cut into forward passes of this size).
    threads: encore threads per actor; None: the CPUs Ray assigned to the actor.
    dtype: "fp32", "bf16" or "int8" encoder GEMMs; normalize: None follows the model's pipeline.
    """

    def __init__(self, model: str | None = None, text_column: str = "text", embedding_column: str = "embedding",
                 encode_batch_size: int = 32, threads: int | None = None, dtype: str = "fp32",
                 normalize: bool | None = None, max_length: int | None = None):
        if threads is None:
            threads = _assigned_cpus()
        self.threads = _batch.set_threads(threads)
        self.encoder = _batch.cached_encoder(model, dtype, max_length)
        self.text_column, self.embedding_column = text_column, embedding_column
        self.encode_batch_size, self.normalize = int(encode_batch_size), normalize

    def __call__(self, batch: dict) -> dict:
        if self.text_column not in batch:
            raise KeyError(f"EncoreEmbedder: the batch has no column '{self.text_column}' "
                           f"(columns: {sorted(batch)}); set text_column=")
        texts = _batch.texts_of(batch[self.text_column], self.text_column)
        out = dict(batch)
        out[self.embedding_column] = _batch.embed(self.encoder, texts, self.encode_batch_size, self.normalize)
        return out


def _assigned_cpus() -> int | None:
    """The CPUs Ray reserved for the current actor (None outside Ray: all CPUs the process may use)."""
    try:
        import ray
        if ray.is_initialized():
            cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
            if cpus:
                return max(1, int(cpus))
    except Exception:  # not inside a Ray worker: fall back to the process's CPUs
        pass
    return None


# Reads and writes request no CPU: when the embedding actors hold every CPU of the cluster (actors x num_cpus = the
# cluster's CPUs, the efficient setting), a read or write task that needed one would wait for it forever. Ray
# 2.60's DataSourceV2 Parquet reader adds a file-listing task that always asks for a CPU, so Parquet is read with
# the V1 reader, whose tasks honour ray_remote_args (the switch is scoped to this call: a Dataset keeps a copy of
# the context it was created in).
_IO_REMOTE_ARGS = {"num_cpus": 0}


def read_texts(path: str | list, **kwargs):
    """A Ray Dataset from Parquet (``.parquet`` files or a directory of them) or JSON lines (``.jsonl``/``.json``),
    read by tasks that need no CPU (see above)."""
    import ray
    kwargs.setdefault("num_cpus", 0)
    first = path[0] if isinstance(path, (list, tuple)) else path
    if str(first).endswith((".jsonl", ".json", ".jsonl.gz")):
        return ray.data.read_json(path, **kwargs)
    ctx = ray.data.DataContext.get_current()
    saved = getattr(ctx, "use_datasource_v2", None)
    if saved is not None:
        ctx.use_datasource_v2 = False
    try:
        return ray.data.read_parquet(path, **kwargs)
    finally:
        if saved is not None:
            ctx.use_datasource_v2 = saved


def embed_dataset(ds, *, concurrency: int | tuple = 1, num_cpus: float = 1, batch_size: int = 1024, **embedder_kwargs):
    """``ds`` with an embedding column added by a pool of ``concurrency`` EncoreEmbedder actors of ``num_cpus``
    CPUs each (lazy: nothing runs until the dataset is consumed or written)."""
    import ray
    if isinstance(concurrency, int):
        pool = ray.data.ActorPoolStrategy(size=concurrency)
    else:  # (min, max) or (min, max, initial): an autoscaling pool
        pool = ray.data.ActorPoolStrategy(min_size=concurrency[0], max_size=concurrency[1],
                                          initial_size=concurrency[2] if len(concurrency) > 2 else None)
    return ds.map_batches(EncoreEmbedder, fn_constructor_kwargs=embedder_kwargs, compute=pool, num_cpus=num_cpus,
                          batch_size=batch_size, batch_format="numpy")


def embed_files(input_path: str | list, output_dir: str, *, concurrency: int | tuple = 1, num_cpus: float = 1,
                batch_size: int = 1024, **embedder_kwargs) -> None:
    """Reads Parquet or JSONL texts, embeds them and writes Parquet files to output_dir, every input column
    (ids included) kept beside the embedding."""
    ds = embed_dataset(read_texts(input_path), concurrency=concurrency, num_cpus=num_cpus, batch_size=batch_size,
                       **embedder_kwargs)
    ds.write_parquet(output_dir, ray_remote_args=_IO_REMOTE_ARGS)


def embeddings_matrix(column) -> np.ndarray:
    """An embedding column read back (a Ray tensor column, a list of arrays, or pyarrow lists) as (rows, dim)."""
    if hasattr(column, "to_numpy") and not isinstance(column, np.ndarray):
        column = column.to_numpy(zero_copy_only=False) if "pyarrow" in type(column).__module__ else column.to_numpy()
    arr = np.asarray(column)
    if arr.dtype == object:
        arr = np.stack([np.asarray(r, np.float32) for r in arr])
    return arr.astype(np.float32, copy=False)


__all__ = ["EncoreEmbedder", "embed_dataset", "embed_files", "read_texts", "embeddings_matrix"]
