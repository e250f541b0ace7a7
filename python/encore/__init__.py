"""encore: a C++ Transformer encoder engine. `encore.nn` is a numpy twin of torch.nn's Transformer modules."""
from ._encore import AutoModel, Error, get_num_threads, manual_seed, runtime_info, set_num_threads
from . import nn

try:  # present when built with the tokenizer (the default)
    from ._encore import Encoding, SentenceEncoder, Tokenizer  # noqa: F401
    __all__ = ["Encoding", "SentenceEncoder", "Tokenizer"]
except ImportError:
    __all__ = []

__all__ += ["AutoModel", "Error", "get_num_threads", "manual_seed", "runtime_info", "set_num_threads", "nn"]
