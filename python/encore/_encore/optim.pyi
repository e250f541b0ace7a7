"""
optimisers with torch.optim's semantics
"""
from __future__ import annotations
import encore._encore.nn
import typing
__all__: list[str] = ['AdamW', 'clip_grad_norm_', 'learning_rate_at']
class AdamW:
    """
    torch.optim.AdamW (decoupled weight decay) over the parameters of an nn.Module
    """
    def __init__(self, module: encore._encore.nn.Module, lr: typing.SupportsFloat | typing.SupportsIndex = 0.001, betas: tuple[typing.SupportsFloat | typing.SupportsIndex, typing.SupportsFloat | typing.SupportsIndex] = (0.9, 0.999), eps: typing.SupportsFloat | typing.SupportsIndex = 1e-08, weight_decay: typing.SupportsFloat | typing.SupportsIndex = 0.01) -> None:
        """
        torch.optim.AdamW over every parameter of `module` (takes the module, not its parameters); a parameter without a gradient at step() is skipped, as torch skips .grad None
        """
    def step(self) -> None:
        """
        One AdamW update of every parameter that has a gradient
        """
    def zero_grad(self, set_to_none: bool = True) -> None:
        """
        Drops the module's gradients (set_to_none) or zeroes them
        """
    @property
    def lr(self) -> float:
        """
        the learning rate of the next step
        """
    @lr.setter
    def lr(self, arg1: typing.SupportsFloat | typing.SupportsIndex) -> None:
        ...
    @property
    def steps(self) -> int:
        """
        updates done so far
        """
def clip_grad_norm_(module: encore._encore.nn.Module, max_norm: typing.SupportsFloat | typing.SupportsIndex) -> float:
    """
    scale all gradients so their global norm is at most max_norm; returns the norm before clipping
    """
def learning_rate_at(step: typing.SupportsInt | typing.SupportsIndex, base_lr: typing.SupportsFloat | typing.SupportsIndex, warmup_steps: typing.SupportsInt | typing.SupportsIndex, total_steps: typing.SupportsInt | typing.SupportsIndex, schedule: str = 'linear') -> float:
    """
    The learning rate at optimizer step `step` (from 0): linear warm-up over warmup_steps, then 'constant', 'linear' decay to 0 at total_steps, or 'cosine' (transformers' schedules)
    """
