"""What the batch-inference adapters (Ray Data, Spark) share: one encoder per process, its threads, and turning a
column of texts into a float32 matrix. SentenceEncoder.encode sorts the texts of each call by token length and
batches them (padding only within a batch), returning rows in input order, so a batch handed over by Ray or Spark
is length-sorted by the engine, not here."""
from __future__ import annotations

import os
import threading

import numpy as np

import encore

_LOCK = threading.Lock()
_ENCODERS: dict = {}


def cached_encoder(model: str | None, dtype: str, max_length: int | None) -> "encore.SentenceEncoder":
    """The process's encoder for (model, dtype, max_length), loaded on first use. Loading mmaps the safetensors
    file, so several worker processes on one machine share the weight pages."""
    key = (model, dtype, max_length)
    with _LOCK:
        enc = _ENCODERS.get(key)
        if enc is None:
            enc = encore.SentenceEncoder(model, dtype=dtype)
            if max_length is not None:
                enc.max_seq_length = int(max_length)
            _ENCODERS[key] = enc
        return enc


def set_threads(threads: int | float | None) -> int:
    """encore's threads for this process: `threads` when given (> 0), else the CPUs this process may use."""
    n = int(threads) if threads else len(os.sched_getaffinity(0))
    n = max(1, n)
    encore.set_num_threads(n)
    return n


def texts_of(column, name: str) -> list:
    """A column (numpy array, pandas Series, list) as a list of str; None/NaN is refused with the column named."""
    texts = column.tolist() if hasattr(column, "tolist") else list(column)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"column '{name}' row {i}: expected a string, got {type(t).__name__} ({t!r})")
    return texts


def embed(encoder: "encore.SentenceEncoder", texts: list, batch_size: int, normalize: bool | None) -> np.ndarray:
    if not texts:
        return np.zeros((0, encoder.get_sentence_embedding_dimension()), np.float32)
    return np.asarray(encoder.encode(texts, batch_size=batch_size, normalize_embeddings=normalize), np.float32)
