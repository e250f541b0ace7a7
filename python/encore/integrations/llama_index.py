"""LlamaIndex: encore.SentenceEncoder as a ``llama_index.core`` embedding model.

    from encore.integrations.llama_index import EncoreEmbedding
    from llama_index.core import Document, VectorStoreIndex
    index = VectorStoreIndex.from_documents(docs, embed_model=EncoreEmbedding())
    index.as_retriever(similarity_top_k=3).retrieve("query")
"""
from __future__ import annotations

from typing import Any, List, Optional

from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import PrivateAttr

from .._encore import SentenceEncoder
from . import ModelPath, load_encoder


class EncoreEmbedding(BaseEmbedding):
    """LlamaIndex embeddings computed by encore (``BaseEmbedding``: sync and async, text and query).

    Args:
        model: model directory; None is the default model (all-MiniLM-L6-v2).
        dtype: 'fp32', 'bf16' or 'int8' encoder GEMMs.
        normalize_embeddings: None follows the model.
        encoder: an already loaded SentenceEncoder to share.
        **kwargs: BaseEmbedding's fields, e.g. ``embed_batch_size``: texts per call to encode (default 32).
    """

    _encoder: SentenceEncoder = PrivateAttr()
    _normalize: Optional[bool] = PrivateAttr(default=None)

    def __init__(self, model: ModelPath = None, dtype: str = "fp32", normalize_embeddings: Optional[bool] = None,
                 encoder: Optional[SentenceEncoder] = None, **kwargs: Any) -> None:
        kwargs.setdefault("model_name", "encore" if model is None else str(model))
        super().__init__(**kwargs)
        self._encoder = load_encoder(model, dtype, encoder)
        self._normalize = normalize_embeddings

    @classmethod
    def class_name(cls) -> str:
        return "EncoreEmbedding"

    def _embed(self, texts: List[str]) -> List[List[float]]:
        out = self._encoder.encode(list(texts), batch_size=self.embed_batch_size,
                                   normalize_embeddings=self._normalize)
        return [list(map(float, row)) for row in out]

    def _get_query_embedding(self, query: str) -> List[float]:
        return self._embed([query])[0]

    def _get_text_embedding(self, text: str) -> List[float]:
        return self._embed([text])[0]

    def _get_text_embeddings(self, texts: List[str]) -> List[List[float]]:
        return self._embed(texts) if texts else []

    async def _aget_query_embedding(self, query: str) -> List[float]:
        return self._get_query_embedding(query)

    async def _aget_text_embedding(self, text: str) -> List[float]:
        return self._get_text_embedding(text)
