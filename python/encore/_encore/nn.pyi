"""
torch.nn-compatible Transformer modules on numpy arrays
"""
from __future__ import annotations
import collections.abc
import typing
__all__: list[str] = ['LayerNorm', 'Linear', 'Module', 'MultiheadAttention', 'RMSNorm', 'Transformer', 'TransformerDecoder', 'TransformerDecoderLayer', 'TransformerEncoder', 'TransformerEncoderLayer', 'sinusoidal_positions']
class Module:
    """
    Base of encore.nn modules (torch.nn.Module's state_dict / train / eval / grads over numpy arrays)
    """
    def __repr__(self) -> str:
        """
        torch's module repr: the class, extra_repr(), then each child indented
        """
    def eval(self) -> typing.Any:
        """
        Inference mode (train(False)). Returns self.
        """
    def extra_repr(self) -> str:
        """
        the module's own settings in its repr (torch's extra_repr)
        """
    def grads(self) -> dict:
        """
        parameter gradients by state_dict name (views of encore's buffers; backward accumulates into them); a parameter no backward reached since zero_grad() has none and is absent (torch: .grad is None)
        """
    def load_state_dict(self, state_dict: dict, strict: bool = True) -> None:
        """
        Copies arrays in by the keys torch uses; strict: missing or unexpected keys are an error
        """
    def num_parameters(self) -> int:
        """
        number of scalar parameters
        """
    def prepare_inference(self, dtype: str = 'fp32') -> typing.Any:
        """
        Snapshot the weights for fast eval-mode inference (fp32, bf16 or int8); dropped by load_state_dict/train()
        """
    def reset_parameters(self, seed: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        re-initializes the parameters as torch does, from seed
        """
    def state_dict(self) -> dict:
        """
        {name: float32 array}: parameters under the state_dict keys torch uses
        """
    def train(self, mode: bool = True) -> typing.Any:
        """
        Training mode (dropout on, forward saves what backward needs). Returns self.
        """
    def zero_grad(self, set_to_none: bool = True) -> None:
        """
        torch's zero_grad: drop the gradients (set_to_none), or fill the existing ones with zeros
        """
    @property
    def training(self) -> bool:
        """
        True in training mode (dropout, saved activations)
        """
class LayerNorm(Module):
    """
    torch.nn.LayerNorm: y = (x - mean) / sqrt(var + eps) * weight + bias over the last dims (normalized_shape)
    """
    def __call__(self, input: typing.Any) -> typing.Any:
        ...
    @typing.overload
    def __init__(self, normalized_shape: typing.SupportsInt | typing.SupportsIndex, eps: typing.SupportsFloat | typing.SupportsIndex = 1e-05, elementwise_affine: bool = True, bias: bool = True) -> None:
        ...
    @typing.overload
    def __init__(self, normalized_shape: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], eps: typing.SupportsFloat | typing.SupportsIndex = 1e-05, elementwise_affine: bool = True, bias: bool = True) -> None:
        ...
    def backward(self, grad_output: typing.Any) -> typing.Any:
        """
        gradient of the input for the last training-mode forward; accumulates parameter gradients (grads())
        """
    def extra_repr(self) -> str:
        """
        the module's own settings in its repr (torch's extra_repr)
        """
    def forward(self, input: typing.Any) -> typing.Any:
        """
        Normalizes input (..., *normalized_shape) float32; returns the same shape
        """
class RMSNorm(Module):
    """
    torch.nn.RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight over the last dims; eps None = float32 machine epsilon
    """
    def __call__(self, input: typing.Any) -> typing.Any:
        ...
    @typing.overload
    def __init__(self, normalized_shape: typing.SupportsInt | typing.SupportsIndex, eps: typing.SupportsFloat | typing.SupportsIndex | None = None, elementwise_affine: bool = True) -> None:
        ...
    @typing.overload
    def __init__(self, normalized_shape: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], eps: typing.SupportsFloat | typing.SupportsIndex | None = None, elementwise_affine: bool = True) -> None:
        ...
    def backward(self, grad_output: typing.Any) -> typing.Any:
        """
        gradient of the input for the last training-mode forward; accumulates parameter gradients (grads())
        """
    def extra_repr(self) -> str:
        """
        the module's own settings in its repr (torch's extra_repr)
        """
    def forward(self, input: typing.Any) -> typing.Any:
        """
        Normalizes input (..., *normalized_shape) float32; returns the same shape
        """
class MultiheadAttention(Module):
    """
    torch.nn.MultiheadAttention: same arguments, defaults (batch_first=False), masks (True / -inf = ignore) and state_dict keys
    """
    def __call__(self, query: typing.Any, key: typing.Any, value: typing.Any, key_padding_mask: typing.Any = None, need_weights: bool = True, attn_mask: typing.Any = None, average_attn_weights: bool = True, is_causal: bool = False) -> tuple[typing.Any, typing.Any]:
        ...
    def __init__(self, embed_dim: typing.SupportsInt | typing.SupportsIndex, num_heads: typing.SupportsInt | typing.SupportsIndex, dropout: typing.SupportsFloat | typing.SupportsIndex = 0.0, bias: bool = True, add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: typing.SupportsInt | typing.SupportsIndex | None = None, vdim: typing.SupportsInt | typing.SupportsIndex | None = None, batch_first: bool = False) -> None:
        ...
    def backward(self, grad_output: typing.Any) -> typing.Any:
        """
        gradient of the input for the last training-mode forward; accumulates parameter gradients (grads())
        """
    def extra_repr(self) -> str:
        """
        the module's own settings in its repr (torch's extra_repr)
        """
    def forward(self, query: typing.Any, key: typing.Any, value: typing.Any, key_padding_mask: typing.Any = None, need_weights: bool = True, attn_mask: typing.Any = None, average_attn_weights: bool = True, is_causal: bool = False) -> tuple[typing.Any, typing.Any]:
        """
        (attn_output, attn_weights or None): query (L, N, E), or (N, L, E) with batch_first; weights (N, L, S) averaged over heads, or per head
        """
    @property
    def batch_first(self) -> bool:
        """
        inputs are (N, L, E) instead of (L, N, E)
        """
    @property
    def embed_dim(self) -> int:
        """
        model width E
        """
    @property
    def num_heads(self) -> int:
        """
        attention heads
        """
class TransformerEncoderLayer(Module):
    """
    torch.nn.TransformerEncoderLayer: self-attention + feed-forward with residuals, Post-LN (norm_first=False) or Pre-LN
    """
    def __call__(self, src: typing.Any, src_mask: typing.Any = None, src_key_padding_mask: typing.Any = None, is_causal: bool = False) -> typing.Any:
        ...
    def __init__(self, d_model: typing.SupportsInt | typing.SupportsIndex, nhead: typing.SupportsInt | typing.SupportsIndex, dim_feedforward: typing.SupportsInt | typing.SupportsIndex = 2048, dropout: typing.SupportsFloat | typing.SupportsIndex = 0.1, activation: str = 'relu', layer_norm_eps: typing.SupportsFloat | typing.SupportsIndex = 1e-05, batch_first: bool = False, norm_first: bool = False, bias: bool = True, norm: str = 'layer_norm') -> None:
        """
        torch's arguments; norm="rms_norm" makes the layer's norms RMSNorm(d_model, layer_norm_eps) (as torch after `layer.norm1 = nn.RMSNorm(d_model)`)
        """
    def backward(self, grad_output: typing.Any) -> typing.Any:
        """
        gradient of the input for the last training-mode forward; accumulates parameter gradients (grads())
        """
    def dropout_sites(self) -> dict:
        """
        the dropout probability at each site, as set_dropout takes them
        """
    def extra_repr(self) -> str:
        """
        the module's own settings in its repr (torch's extra_repr)
        """
    def forward(self, src: typing.Any, src_mask: typing.Any = None, src_key_padding_mask: typing.Any = None, is_causal: bool = False) -> typing.Any:
        """
        src (S, N, E), or (N, S, E) with batch_first -> the same shape; src_key_padding_mask (N, S) True = padding
        """
    def set_dropout(self, attention_probs: typing.SupportsFloat | typing.SupportsIndex = 0.0, attention_output: typing.SupportsFloat | typing.SupportsIndex = 0.0, ffn_hidden: typing.SupportsFloat | typing.SupportsIndex = 0.0, ffn_output: typing.SupportsFloat | typing.SupportsIndex = 0.0) -> None:
        """
        dropout probability at each site of the training forward, each in [0, 1]: the attention probabilities, self_attn's output before the residual, the FFN hidden act(linear1(x)), and linear2's output before the residual
        """
    @property
    def batch_first(self) -> bool:
        """
        inputs are (N, S, E) instead of (S, N, E)
        """
    @property
    def norm_first(self) -> bool:
        """
        Pre-LN (True) or Post-LN (False)
        """
class TransformerEncoder(Module):
    """
    torch.nn.TransformerEncoder: num_layers copies of encoder_layer, then the optional final norm
    """
    def __call__(self, src: typing.Any, mask: typing.Any = None, src_key_padding_mask: typing.Any = None, is_causal: typing.Any = None) -> typing.Any:
        ...
    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: typing.SupportsInt | typing.SupportsIndex, norm: typing.Any = None, enable_nested_tensor: bool = True, mask_check: bool = True, share_parameters: bool = False) -> None:
        ...
    def backward(self, grad_output: typing.Any) -> typing.Any:
        """
        gradient of the input for the last training-mode forward; accumulates parameter gradients (grads())
        """
    def extra_repr(self) -> str:
        """
        the module's own settings in its repr (torch's extra_repr)
        """
    def forward(self, src: typing.Any, mask: typing.Any = None, src_key_padding_mask: typing.Any = None, is_causal: typing.Any = None) -> typing.Any:
        """
        src (S, N, E), or (N, S, E) with batch_first -> the same shape, through every layer and the norm
        """
    @property
    def gradient_checkpointing(self) -> bool:
        """
        training: keep only layer inputs and recompute each layer's forward during backward
        """
    @gradient_checkpointing.setter
    def gradient_checkpointing(self, arg0: bool) -> None:
        ...
    @property
    def num_layers(self) -> int:
        """
        number of layers
        """
class TransformerDecoderLayer(Module):
    """
    torch.nn.TransformerDecoderLayer: masked self-attention, cross-attention on memory, feed-forward
    """
    def __call__(self, tgt: typing.Any, memory: typing.Any, tgt_mask: typing.Any = None, memory_mask: typing.Any = None, tgt_key_padding_mask: typing.Any = None, memory_key_padding_mask: typing.Any = None, tgt_is_causal: bool = False, memory_is_causal: bool = False) -> typing.Any:
        ...
    def __init__(self, d_model: typing.SupportsInt | typing.SupportsIndex, nhead: typing.SupportsInt | typing.SupportsIndex, dim_feedforward: typing.SupportsInt | typing.SupportsIndex = 2048, dropout: typing.SupportsFloat | typing.SupportsIndex = 0.1, activation: str = 'relu', layer_norm_eps: typing.SupportsFloat | typing.SupportsIndex = 1e-05, batch_first: bool = False, norm_first: bool = False, bias: bool = True, norm: str = 'layer_norm') -> None:
        """
        torch's arguments; norm="rms_norm" makes the layer's norms RMSNorm(d_model, layer_norm_eps) (as torch after `layer.norm1 = nn.RMSNorm(d_model)`)
        """
    def backward(self, grad_output: typing.Any) -> tuple[typing.Any, typing.Any]:
        """
        (gradient of tgt, gradient of memory) for the last training-mode forward; accumulates parameter gradients
        """
    def extra_repr(self) -> str:
        """
        the module's own settings in its repr (torch's extra_repr)
        """
    def forward(self, tgt: typing.Any, memory: typing.Any, tgt_mask: typing.Any = None, memory_mask: typing.Any = None, tgt_key_padding_mask: typing.Any = None, memory_key_padding_mask: typing.Any = None, tgt_is_causal: bool = False, memory_is_causal: bool = False) -> typing.Any:
        """
        tgt (T, N, E) attending to memory (S, N, E) (batch-first with batch_first) -> the shape of tgt
        """
class TransformerDecoder(Module):
    """
    torch.nn.TransformerDecoder: num_layers copies of decoder_layer, then the optional final norm
    """
    def __call__(self, tgt: typing.Any, memory: typing.Any, tgt_mask: typing.Any = None, memory_mask: typing.Any = None, tgt_key_padding_mask: typing.Any = None, memory_key_padding_mask: typing.Any = None, tgt_is_causal: typing.Any = None, memory_is_causal: bool = False) -> typing.Any:
        ...
    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: typing.SupportsInt | typing.SupportsIndex, norm: typing.Any = None) -> None:
        ...
    def extra_repr(self) -> str:
        """
        the module's own settings in its repr (torch's extra_repr)
        """
    def forward(self, tgt: typing.Any, memory: typing.Any, tgt_mask: typing.Any = None, memory_mask: typing.Any = None, tgt_key_padding_mask: typing.Any = None, memory_key_padding_mask: typing.Any = None, tgt_is_causal: typing.Any = None, memory_is_causal: bool = False) -> typing.Any:
        """
        tgt (T, N, E) attending to memory (S, N, E) (batch-first with batch_first) -> the shape of tgt
        """
    @property
    def num_layers(self) -> int:
        """
        number of layers
        """
class Transformer(Module):
    """
    torch.nn.Transformer: encoder and decoder stacks with final LayerNorms
    """
    @staticmethod
    def generate_square_subsequent_mask(sz: typing.SupportsInt | typing.SupportsIndex) -> typing.Any:
        ...
    def __call__(self, src: typing.Any, tgt: typing.Any, src_mask: typing.Any = None, tgt_mask: typing.Any = None, memory_mask: typing.Any = None, src_key_padding_mask: typing.Any = None, tgt_key_padding_mask: typing.Any = None, memory_key_padding_mask: typing.Any = None, src_is_causal: typing.Any = None, tgt_is_causal: typing.Any = None, memory_is_causal: bool = False) -> typing.Any:
        ...
    def __init__(self, d_model: typing.SupportsInt | typing.SupportsIndex = 512, nhead: typing.SupportsInt | typing.SupportsIndex = 8, num_encoder_layers: typing.SupportsInt | typing.SupportsIndex = 6, num_decoder_layers: typing.SupportsInt | typing.SupportsIndex = 6, dim_feedforward: typing.SupportsInt | typing.SupportsIndex = 2048, dropout: typing.SupportsFloat | typing.SupportsIndex = 0.1, activation: str = 'relu', custom_encoder: typing.Any = None, custom_decoder: typing.Any = None, layer_norm_eps: typing.SupportsFloat | typing.SupportsIndex = 1e-05, batch_first: bool = False, norm_first: bool = False, bias: bool = True, norm: str = 'layer_norm') -> None:
        ...
    def extra_repr(self) -> str:
        """
        the module's own settings in its repr (torch's extra_repr)
        """
    def forward(self, src: typing.Any, tgt: typing.Any, src_mask: typing.Any = None, tgt_mask: typing.Any = None, memory_mask: typing.Any = None, src_key_padding_mask: typing.Any = None, tgt_key_padding_mask: typing.Any = None, memory_key_padding_mask: typing.Any = None, src_is_causal: typing.Any = None, tgt_is_causal: typing.Any = None, memory_is_causal: bool = False) -> typing.Any:
        """
        src (S, N, E), tgt (T, N, E) (batch-first with batch_first) -> (T, N, E), as torch.nn.Transformer.forward
        """
class Linear(Module):
    """
    torch.nn.Linear: y = x Wᵀ + b, weight (out, in)
    """
    def __call__(self, input: typing.Any) -> typing.Any:
        ...
    def __init__(self, in_features: typing.SupportsInt | typing.SupportsIndex, out_features: typing.SupportsInt | typing.SupportsIndex, bias: bool = True) -> None:
        """
        torch.nn.Linear(in_features, out_features, bias=True): weight (out_features, in_features), Xavier-uniform (encore's init for every layer, seeded by encore.manual_seed; torch's Linear uses Kaiming-uniform), bias zero
        """
    def extra_repr(self) -> str:
        """
        the module's own settings in its repr (torch's extra_repr)
        """
    def forward(self, input: typing.Any) -> typing.Any:
        """
        y = input Wᵀ + b for input (..., in_features) float32; returns (..., out_features)
        """
    @property
    def in_features(self) -> int:
        """
        size of each input sample (the last dimension)
        """
    @property
    def out_features(self) -> int:
        """
        size of each output sample
        """
def sinusoidal_positions(length: typing.SupportsInt | typing.SupportsIndex, d_model: typing.SupportsInt | typing.SupportsIndex, start: typing.SupportsInt | typing.SupportsIndex = 0) -> typing.Any:
    """
    the (length, d_model) sinusoidal positional-encoding table of 'Attention Is All You Need' for positions start .. start+length-1: pe[p, 2i] = sin(p / 10000^(2i/d_model)), pe[p, 2i+1] = cos(the same)
    """
