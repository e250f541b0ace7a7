"""encore.integrations against the real LangChain, LlamaIndex and Haystack packages (PyPI: langchain-core,
llama-index-core, haystack-ai): each adapter subclasses/registers with the framework's own base class, runs in a
real pipeline call of that framework, and its vectors equal encore.SentenceEncoder.encode's exactly (float32
values carried as Python floats: no tolerance, == on every component).
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import require_encore

encore = require_encore()

CORPUS = [
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "The stock market fell sharply on Monday.",
    "A woman is playing violin.",
    "The cat sits outside.",
]
QUERIES = [("Someone is having a meal.", 0), ("Shares dropped at the start of the week.", 3),
           ("A primate plays percussion.", 2)]


@pytest.fixture(scope="module")
def encoder():
    return encore.SentenceEncoder()


@pytest.fixture(scope="module")
def reference(encoder):
    return encoder.encode(CORPUS), encoder.encode([q for q, _ in QUERIES])


def assert_exact(vectors, expected):
    """The adapter's vectors are encore's: equal to 1e-6. Not bitwise: an adapter embeds a query alone or texts in
    its own batches, and GEMMs of other row counts sum in another order on CPUs where oneDNN's f32 kernel depends
    on the row count (AVX2's gemm:jit: up to 9e-8 seen; bitwise under AVX-512's brgemm)."""
    got = np.asarray(vectors, dtype=np.float64)
    assert got.shape == expected.shape
    assert np.abs(got - expected.astype(np.float64)).max() <= 1e-6, np.abs(got - expected).max()


def test_langchain_embeddings_and_vector_store(encoder, reference):
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import InMemoryVectorStore
    from encore.integrations.langchain import EncoreEmbeddings

    emb = EncoreEmbeddings(encoder=encoder)
    assert isinstance(emb, Embeddings)
    docs, queries = reference
    assert_exact(emb.embed_documents(CORPUS), docs)
    assert_exact([emb.embed_query(q) for q, _ in QUERIES], queries)
    assert emb.embed_documents([]) == []

    store = InMemoryVectorStore.from_texts(CORPUS, emb)
    for (query, want), qvec in zip(QUERIES, queries):
        hits = store.similarity_search_with_score(query, k=2)
        assert hits[0][0].page_content == CORPUS[want]
        # the store's score is its cosine over our vectors (float64 there): same as numpy's within rounding
        expected = float(qvec @ docs[want] / (np.linalg.norm(qvec) * np.linalg.norm(docs[want])))
        assert abs(hits[0][1] - expected) < 1e-6


def test_langchain_loads_the_default_model_itself(reference):
    from encore.integrations.langchain import EncoreEmbeddings

    assert_exact(EncoreEmbeddings().embed_documents(CORPUS[:2]), reference[0][:2])


def test_llama_index_embedding_and_retriever(encoder, reference):
    from llama_index.core import Document, Settings, VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.node_parser import SentenceSplitter
    from encore.integrations.llama_index import EncoreEmbedding

    emb = EncoreEmbedding(encoder=encoder, embed_batch_size=4)
    assert isinstance(emb, BaseEmbedding)
    docs, queries = reference
    assert_exact(emb.get_text_embedding_batch(CORPUS), docs)
    assert_exact([emb.get_query_embedding(q) for q, _ in QUERIES], queries)
    assert_exact([emb.get_text_embedding(CORPUS[1])], docs[1:2])

    import asyncio
    assert_exact([asyncio.run(emb.aget_query_embedding(QUERIES[0][0]))], queries[:1])

    Settings.llm = None  # no LLM anywhere: retrieval only
    index = VectorStoreIndex.from_documents([Document(text=t) for t in CORPUS], embed_model=emb,
                                            transformations=[SentenceSplitter(chunk_size=512)])
    retriever = index.as_retriever(similarity_top_k=2)
    for query, want in QUERIES:
        nodes = retriever.retrieve(query)
        assert nodes[0].node.get_content() == CORPUS[want]


def test_haystack_components_in_a_pipeline(reference):
    from haystack import Document, Pipeline
    from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from encore.integrations.haystack import EncoreDocumentEmbedder, EncoreTextEmbedder

    docs, queries = reference
    embedded = EncoreDocumentEmbedder().run([Document(content=t) for t in CORPUS])["documents"]
    assert_exact([d.embedding for d in embedded], docs)

    store = InMemoryDocumentStore(embedding_similarity_function="cosine")
    store.write_documents(embedded)
    pipe = Pipeline()
    pipe.add_component("embedder", EncoreTextEmbedder())
    pipe.add_component("retriever", InMemoryEmbeddingRetriever(document_store=store, top_k=2))
    pipe.connect("embedder.embedding", "retriever.query_embedding")
    for (query, want), qvec in zip(QUERIES, queries):
        result = pipe.run({"embedder": {"text": query}}, include_outputs_from={"embedder"})
        assert_exact([result["embedder"]["embedding"]], qvec[None, :])
        assert result["retriever"]["documents"][0].content == CORPUS[want]

    # Components serialize with the pipeline and come back equal.
    # Haystack only deserializes classes from modules the caller trusts.
    again = Pipeline.loads(pipe.dumps(), allowed_modules=["encore.integrations.haystack"])
    assert isinstance(again.get_component("embedder"), EncoreTextEmbedder)
    with pytest.raises(TypeError, match="EncoreDocumentEmbedder"):
        EncoreTextEmbedder().run(["not", "a", "str"])  # type: ignore[arg-type]


def test_haystack_meta_fields_are_embedded_with_the_content(encoder):
    from haystack import Document
    from encore.integrations.haystack import EncoreDocumentEmbedder

    doc = Document(content="plays the violin", meta={"who": "A woman"})
    out = EncoreDocumentEmbedder(meta_fields_to_embed=["who"]).run([doc])["documents"][0]
    assert_exact([out.embedding], encoder.encode(["A woman\nplays the violin"]))
