"""encore as LangChain's embedder: an in-memory vector store answering a question.

    python examples/python/langchain_store.py
"""
from __future__ import annotations

from langchain_core.vectorstores import InMemoryVectorStore

from encore.integrations.langchain import EncoreEmbeddings

texts = ["encore runs Transformer encoders on the CPU.", "Paris is the capital of France.",
         "LangChain composes LLM applications."]
store = InMemoryVectorStore.from_texts(texts, EncoreEmbeddings())
for doc in store.similarity_search("What is France's capital?", k=1):
    print(doc.page_content)
