"""Haystack 2.x: encore.SentenceEncoder as text and document embedder components.

    from haystack import Pipeline
    from encore.integrations.haystack import EncoreTextEmbedder, EncoreDocumentEmbedder
    docs = EncoreDocumentEmbedder().run(documents)["documents"]          # each Document gets .embedding
    query_vec = EncoreTextEmbedder().run("query")["embedding"]
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from haystack import Document, component, default_from_dict, default_to_dict

from .._encore import SentenceEncoder
from . import load_encoder


class _EncoreComponent:
    def __init__(self, model: Optional[str], dtype: str, batch_size: int,
                 normalize_embeddings: Optional[bool]) -> None:
        self.model = model
        self.dtype = dtype
        self.batch_size = batch_size
        self.normalize_embeddings = normalize_embeddings
        self._encoder: Optional[SentenceEncoder] = None

    def warm_up(self) -> None:
        """Loads the model (Haystack calls this before the first run; run() does it when needed)."""
        if self._encoder is None:
            self._encoder = load_encoder(self.model, self.dtype)

    def _encode(self, texts: List[str]) -> List[List[float]]:
        self.warm_up()
        assert self._encoder is not None
        if not texts:
            return []
        out = self._encoder.encode(texts, batch_size=self.batch_size,
                                   normalize_embeddings=self.normalize_embeddings)
        return [list(map(float, row)) for row in out]

    def to_dict(self) -> Dict[str, Any]:
        """Serializes the component's init parameters (pipeline YAML/JSON)."""
        return default_to_dict(self, model=self.model, dtype=self.dtype, batch_size=self.batch_size,
                               normalize_embeddings=self.normalize_embeddings)


@component
class EncoreTextEmbedder(_EncoreComponent):
    """Embeds one string (a query) with encore.

    Args:
        model: model directory; None is the default model (all-MiniLM-L6-v2).
        dtype: 'fp32', 'bf16' or 'int8'.
        batch_size: texts per forward pass.
        normalize_embeddings: None follows the model.
    """

    def __init__(self, model: Optional[str] = None, dtype: str = "fp32", batch_size: int = 32,
                 normalize_embeddings: Optional[bool] = None) -> None:
        _EncoreComponent.__init__(self, model, dtype, batch_size, normalize_embeddings)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "EncoreTextEmbedder":
        return default_from_dict(cls, data)

    @component.output_types(embedding=List[float])
    def run(self, text: str) -> Dict[str, Any]:
        """Returns {"embedding": list of float}."""
        if not isinstance(text, str):
            raise TypeError("EncoreTextEmbedder expects a str; use EncoreDocumentEmbedder for documents")
        return {"embedding": self._encode([text])[0]}


@component
class EncoreDocumentEmbedder(_EncoreComponent):
    """Sets ``Document.embedding`` on each document (its content; meta_fields_to_embed are prepended, one per
    line, as Haystack's own embedders do).

    Args:
        model: model directory; None is the default model (all-MiniLM-L6-v2).
        dtype: 'fp32', 'bf16' or 'int8'.
        batch_size: texts per forward pass.
        normalize_embeddings: None follows the model.
        meta_fields_to_embed: meta keys whose values are embedded with the content.
    """

    def __init__(self, model: Optional[str] = None, dtype: str = "fp32", batch_size: int = 32,
                 normalize_embeddings: Optional[bool] = None,
                 meta_fields_to_embed: Optional[List[str]] = None) -> None:
        # Haystack's @component re-creates the class, so zero-argument super() does not apply here.
        _EncoreComponent.__init__(self, model, dtype, batch_size, normalize_embeddings)
        self.meta_fields_to_embed = list(meta_fields_to_embed or [])

    def to_dict(self) -> Dict[str, Any]:
        return default_to_dict(self, model=self.model, dtype=self.dtype, batch_size=self.batch_size,
                               normalize_embeddings=self.normalize_embeddings,
                               meta_fields_to_embed=self.meta_fields_to_embed)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "EncoreDocumentEmbedder":
        return default_from_dict(cls, data)

    def _text(self, doc: Document) -> str:
        meta = [str(doc.meta[k]) for k in self.meta_fields_to_embed if doc.meta.get(k) is not None]
        return "\n".join([*meta, doc.content or ""])

    @component.output_types(documents=List[Document])
    def run(self, documents: List[Document]) -> Dict[str, Any]:
        """Returns {"documents": the same documents with .embedding set}."""
        if not isinstance(documents, list) or any(not isinstance(d, Document) for d in documents):
            raise TypeError("EncoreDocumentEmbedder expects a list of haystack.Document; use EncoreTextEmbedder "
                            "for strings")
        vectors = self._encode([self._text(d) for d in documents])
        for doc, vec in zip(documents, vectors):
            doc.embedding = vec
        return {"documents": documents}
