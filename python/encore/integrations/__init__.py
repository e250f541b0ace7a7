"""Adapters that put encore where people already run batch jobs, pipelines and retrieval.

Each adapter is a thin client of :class:`encore.SentenceEncoder` (no second implementation): the vectors are
exactly what ``SentenceEncoder.encode`` returns. Import the one you need; each imports its framework:

* :mod:`encore.integrations.langchain` - ``EncoreEmbeddings`` (``langchain_core.embeddings.Embeddings``)
* :mod:`encore.integrations.llama_index` - ``EncoreEmbedding`` (``llama_index.core`` ``BaseEmbedding``)
* :mod:`encore.integrations.haystack` - ``EncoreTextEmbedder`` and ``EncoreDocumentEmbedder`` (Haystack 2.x components)
* :mod:`encore.integrations.ray`, :mod:`encore.integrations.spark` - batch embedding on Ray Data and Spark
"""
from __future__ import annotations

from typing import Optional, Union
import os

from .._encore import SentenceEncoder

ModelPath = Union[str, "os.PathLike[str]", None]


def load_encoder(model: ModelPath = None, dtype: str = "fp32", encoder: Optional[SentenceEncoder] = None
                 ) -> SentenceEncoder:
    """The SentenceEncoder an adapter wraps: ``encoder`` when given, else one loaded from ``model`` (a
    sentence-transformers or Hugging Face directory; None: the default model, see encore.default_model_dir)."""
    if encoder is not None:
        return encoder
    return SentenceEncoder(None if model is None else os.fspath(model), dtype)
