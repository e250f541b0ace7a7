"""encore: a C++ Transformer encoder engine. `encore.nn` is a numpy twin of torch.nn's Transformer modules."""
from ._encore import AutoModel, Error, get_num_threads, manual_seed, runtime_info, set_num_threads
from . import nn

__all__ = ["AutoModel", "Error", "get_num_threads", "manual_seed", "runtime_info", "set_num_threads", "nn"]
