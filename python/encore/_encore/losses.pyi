"""
losses returning (mean loss, gradient(s) of the mean loss)
"""
from __future__ import annotations
import typing
__all__: list[str] = ['cross_entropy', 'mse', 'multiple_negatives_ranking']
def cross_entropy(logits: typing.Any, labels: typing.Any, ignore_index: typing.SupportsInt | typing.SupportsIndex = -100) -> tuple[float, typing.Any]:
    """
    torch.nn.functional.cross_entropy (mean over labels != ignore_index) of logits (N, C) float32 and labels (N,) int64: returns (loss, d loss / d logits)
    """
def mse(pred: typing.Any, target: typing.Any) -> tuple[float, typing.Any]:
    """
    torch.nn.functional.mse_loss (mean): returns (loss, d loss / d pred)
    """
def multiple_negatives_ranking(anchors: typing.Any, positives: typing.Any, scale: typing.SupportsFloat | typing.SupportsIndex = 20.0) -> tuple[float, typing.Any, typing.Any]:
    """
    sentence-transformers' MultipleNegativesRankingLoss on embeddings (N, D): cross-entropy of scale x cosine similarities with the other positives as negatives; returns (loss, d anchors, d positives)
    """
