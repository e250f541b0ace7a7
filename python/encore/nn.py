"""torch.nn-compatible Transformer modules over numpy arrays (implemented in C++; see docs/torch_differences.md)."""
from ._encore import nn as _nn

LayerNorm = _nn.LayerNorm
Linear = _nn.Linear
Module = _nn.Module
MultiheadAttention = _nn.MultiheadAttention
RMSNorm = _nn.RMSNorm
Transformer = _nn.Transformer
TransformerDecoder = _nn.TransformerDecoder
TransformerDecoderLayer = _nn.TransformerDecoderLayer
TransformerEncoder = _nn.TransformerEncoder
TransformerEncoderLayer = _nn.TransformerEncoderLayer
sinusoidal_positions = _nn.sinusoidal_positions

__all__ = [
    "LayerNorm", "Linear", "Module", "MultiheadAttention", "RMSNorm", "Transformer", "TransformerDecoder",
    "TransformerDecoderLayer", "TransformerEncoder", "TransformerEncoderLayer",
    "sinusoidal_positions",
]
