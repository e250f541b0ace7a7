"""End-to-end retrieval: ingest a corpus into a faiss index with encore embeddings, then answer queries.

    python examples/python/retrieval_faiss.py [corpus.txt] [--query "text" ...]

The corpus is one passage per line (default: a small built-in one). Embeddings are unit length, so an
inner-product index (faiss.IndexFlatIP) ranks by cosine similarity. The index and the passages are saved next
to each other with --save DIR and loaded back with --load DIR.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import faiss
import numpy as np
import numpy.typing as npt

import encore

BUILT_IN_CORPUS = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris, completed in 1889.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "The Great Barrier Reef is the world's largest coral reef system, off Queensland, Australia.",
    "Python is a high-level programming language known for its readability.",
    "Mount Everest is Earth's highest mountain above sea level, in the Himalayas.",
    "The mitochondrion is the powerhouse of the cell, producing ATP.",
    "Shakespeare wrote Hamlet, Macbeth and Romeo and Juliet.",
    "The Amazon rainforest covers much of the Amazon basin in South America.",
    "Interest rates are set by central banks to control inflation.",
    "A transformer encoder maps a sequence of tokens to contextual vectors with self-attention.",
]
DEFAULT_QUERIES = [
    "Which tower was finished in 1889?",
    "How do plants make sugar from sunlight?",
    "What is the tallest mountain?",
    "Who wrote Hamlet?",
    "What does self-attention do in a transformer?",
]


class Retriever:
    """A faiss inner-product index over encore embeddings of `passages`."""

    def __init__(self, encoder: encore.SentenceEncoder, passages: list[str],
                 index: faiss.Index | None = None) -> None:
        self.encoder = encoder
        self.passages = passages
        if index is None:
            vectors = self.embed(passages)
            index = faiss.IndexFlatIP(vectors.shape[1])
            index.add(vectors)
        self.index = index

    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        vectors = self.encoder.encode(texts, batch_size=64, normalize_embeddings=True)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def search(self, queries: list[str], k: int = 3) -> list[list[tuple[float, str]]]:
        """For each query, the k best passages with their cosine similarity, best first."""
        scores, ids = self.index.search(self.embed(queries), k)
        return [[(float(s), self.passages[int(i)]) for s, i in zip(row_s, row_i) if i >= 0]
                for row_s, row_i in zip(scores, ids)]

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self.index, str(directory / "index.faiss"))
        (directory / "passages.json").write_text(json.dumps(self.passages))

    @classmethod
    def load(cls, encoder: encore.SentenceEncoder, directory: Path) -> "Retriever":
        passages: list[str] = json.loads((directory / "passages.json").read_text())
        return cls(encoder, passages, faiss.read_index(str(directory / "index.faiss")))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="?", type=Path, help="one passage per line")
    parser.add_argument("--query", action="append", help="a question (repeatable)")
    parser.add_argument("-k", type=int, default=3)
    parser.add_argument("--model", help="model directory (default: encore's default model)")
    parser.add_argument("--save", type=Path, help="write the index and passages here")
    parser.add_argument("--load", type=Path, help="read the index and passages from here instead of ingesting")
    args = parser.parse_args(argv)

    encoder = encore.SentenceEncoder(args.model)
    if args.load is not None:
        retriever = Retriever.load(encoder, args.load)
    else:
        passages = (args.corpus.read_text(encoding="utf-8").splitlines() if args.corpus is not None
                    else BUILT_IN_CORPUS)
        retriever = Retriever(encoder, [p for p in passages if p.strip()])
    print(f"{retriever.index.ntotal} passages indexed ({encoder.get_sentence_embedding_dimension()} dimensions)")
    if args.save is not None:
        retriever.save(args.save)

    queries: list[str] = args.query or DEFAULT_QUERIES
    for query, hits in zip(queries, retriever.search(queries, args.k)):
        print(f"\n? {query}")
        for score, passage in hits:
            print(f"  {score:.3f}  {passage}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
