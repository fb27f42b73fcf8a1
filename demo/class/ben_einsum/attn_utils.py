"""Small helpers I kept reusing while working through Day 13."""
import torch


def masked_softmax(scores, mask=None):
    """Softmax over the last axis (the keys), ignoring positions where mask is 0 / False.

    I subtract the row max before exp() so big scores don't overflow; it cancels out in the ratio.
    """
    if mask is not None:
        allowed = mask != 0  # works for bool and for 0/1 float masks
        scores = torch.where(allowed, scores, torch.full_like(scores, float("-inf")))
    shifted = scores - scores.amax(dim=-1, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)
