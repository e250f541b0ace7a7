"""encore: a C++ Transformer encoder engine.

encore.SentenceEncoder, encore.AutoModel and encore.Tokenizer load Hugging Face / sentence-transformers model
directories; encore.nn is a numpy twin of torch.nn's Transformer modules.
"""
import functools

from ._encore import (AutoModel, Encoding, Error, SentenceEncoder, Tokenizer, get_num_threads, manual_seed,
                      memory_stats, runtime_info, set_num_threads)
from . import nn
from ._encore import embedding_loss_backward, losses, optim, train  # noqa: F401

train_classifier = functools.partial(train, task="classification")  # encore train --task classification
train_embedding = functools.partial(train, task="embedding")  # encore train --task embedding

__all__ = ["AutoModel", "Encoding", "Error", "SentenceEncoder", "Tokenizer", "get_num_threads", "manual_seed",
           "memory_stats",
           "runtime_info", "set_num_threads", "nn", "losses", "optim", "train", "train_classifier", "train_embedding",
           "embedding_loss_backward"]
