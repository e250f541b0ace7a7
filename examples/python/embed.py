"""Embed sentences and print their cosine similarities (the model normalizes, so cosine is a dot product).

    python examples/python/embed.py ["text" ...]
"""
from __future__ import annotations

import sys

import numpy as np
import numpy.typing as npt

import encore


def cosine_matrix(embeddings: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Pairwise cosine similarity of the rows of `embeddings` (n, dim) -> (n, n)."""
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    result: npt.NDArray[np.float32] = unit @ unit.T
    return result


def main(argv: list[str]) -> int:
    texts = argv or ["A man is eating food.", "A man is eating pasta.", "The girl is carrying a baby."]
    model = encore.SentenceEncoder()  # the default model, or SentenceEncoder("/path/to/model", dtype="bf16")
    embeddings = model.encode(texts, batch_size=32)
    print(f"encore {encore.__version__}: {embeddings.shape[0]} texts -> {embeddings.shape[1]} dimensions")
    sims = cosine_matrix(embeddings)
    for i, text in enumerate(texts):
        print(" ".join(f"{s:6.3f}" for s in sims[i]), " ", text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
