"""
stateless forward/backward op pairs (torch.nn.functional's role): rotary embedding, gated activations
"""
from __future__ import annotations
import typing
__all__: list[str] = ['gated_activation', 'gated_activation_backward', 'rotary_cos_sin', 'rotary_embedding', 'rotary_embedding_backward']
def gated_activation(input: typing.Any, activation: str = 'silu', gate: str = 'first') -> typing.Any:
    """
    input (..., 2F) = [x0 | x1] -> act(x0)*x1 (gate='first') or act(x1)*x0 (gate='second'), (..., F); activation silu (SwiGLU), gelu (erf GeGLU), gelu_tanh, relu (swiglu/geglu accepted)
    """
def gated_activation_backward(grad_output: typing.Any, input: typing.Any, activation: str = 'silu', gate: str = 'first') -> typing.Any:
    """
    gradient of gated_activation's input (..., 2F) for grad_output (..., F)
    """
def rotary_cos_sin(position_ids: typing.Any, rotary_dim: typing.SupportsInt | typing.SupportsIndex, theta: typing.SupportsFloat | typing.SupportsIndex = 10000.0) -> tuple[typing.Any, typing.Any]:
    """
    (cos, sin), each position_ids.shape + (rotary_dim/2,): Hugging Face's default RotaryEmbedding tables, angle = position / theta^(2i/rotary_dim) in float32 (HF's cos/sin are these concatenated twice)
    """
def rotary_embedding(input: typing.Any, cos: typing.Any, sin: typing.Any) -> typing.Any:
    """
    HF's apply_rotary_pos_emb on input (..., T, heads, head_dim): x*cos + rotate_half(x)*sin over the first rotary_dim = 2*cos.shape[-1] dims of each head, the rest passed through; cos/sin (T, rotary_dim/2) or input's leading dims + (T, rotary_dim/2)
    """
def rotary_embedding_backward(grad_output: typing.Any, cos: typing.Any, sin: typing.Any) -> typing.Any:
    """
    gradient of rotary_embedding's input: the inverse rotation of grad_output
    """
