"""A key that changes whenever a parameter's values may have: part of the key of every inference cache derived from
weights (the LSTMs' pre-packed matrices, the remembered token vectors, a token cache).

PyTorch's version counter sees in-place ops and ``load_state_dict``, but not fused optimiser steps (``fused=True``
Adagrad / Adam update in place without bumping it), so a cache keyed on it alone would serve the old weights after
such a step. One global post-step hook, registered on import, counts the steps of every optimiser on each parameter
it stepped: those with a gradient (every torch optimiser leaves a parameter without one untouched, so a frozen part
of a model, ``freeze_bilm_steps``, keeps its caches; a few attribute writes per step)."""

from __future__ import annotations

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

_STEPS = "_elmo_optimizer_steps"


def _count_step(optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                setattr(p, _STEPS, getattr(p, _STEPS, 0) + 1)


_HOOK = register_optimizer_step_post_hook(_count_step)


def weights_version(p: torch.Tensor) -> tuple[int, int, int]:
    """Changes whenever ``p`` is replaced, updated in place, or stepped by any optimiser."""
    return p.data_ptr(), p._version, getattr(p, _STEPS, 0)
