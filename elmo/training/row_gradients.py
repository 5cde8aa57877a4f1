"""The softmax weight's gradient kept as the rows a step touched, not as a (V, P) matrix (single-process Adagrad).

A training step reads a few thousand of the softmax's V rows (the targets and the sampled negatives), yet autograd's
gradient of a row lookup is a dense (V, P) matrix: zero-filled, scattered into, its norm taken, scaled by the clip
and swept by the optimizer, every step (50,003 x 64 for the tiny preset: about a tenth of its step). Here the lookup's
backward pass hands its rows to a ``RowGradients`` instead; the trainer folds them into the global norm and the clip
(``clip_with_rows``) and applies Adagrad to those rows only (``adagrad_rows``), keeping the accumulator in the
optimizer's own state, so checkpoints are unchanged. Adagrad leaves a row with a zero gradient exactly as it was,
so this is the same update as the dense one, to float rounding.
"""

from __future__ import annotations

import torch


class RowGradients:
    """Collects the gradients of rows looked up in one weight matrix during a backward pass."""

    def __init__(self) -> None:
        self.pending: list[tuple[torch.Tensor, torch.Tensor]] = []  # (ids (n,), gradient rows (n, P)) per lookup

    def gather(self, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """``weight[ids]`` (n, P) whose gradient comes here instead of ``weight.grad``."""
        return _GatherRows.apply(weight, ids, self)

    def take(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The collected gradient with each row once: distinct ids (U,) and summed rows (U, P); None if nothing came.
        Empties the collection."""
        if not self.pending:
            return None
        if len(self.pending) == 1:
            (ids, rows), = self.pending  # (n,), (n, P)
        else:
            ids, rows = torch.cat([i for i, _ in self.pending]), torch.cat([r for _, r in self.pending])
        self.pending = []
        unique, inverse = torch.unique(ids, return_inverse=True)  # (U,), (n,)
        summed = rows.new_zeros(len(unique), rows.shape[1]).index_add_(0, inverse, rows)  # (U, P)
        return unique, summed

    def clear(self) -> None:
        self.pending = []


class _GatherRows(torch.autograd.Function):
    """``weight.index_select(0, ids)``; the backward pass gives the rows' gradient to the collector, none to weight."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor, ids: torch.Tensor, sink: RowGradients) -> torch.Tensor:
        ctx.sink = sink
        ctx.save_for_backward(ids)
        return weight.index_select(0, ids)  # (n, P)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (ids,) = ctx.saved_tensors
        ctx.sink.pending.append((ids, grad))
        return None, None, None


def clip_with_rows(parameters: list[torch.Tensor], rows: torch.Tensor | None, max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` over the parameters' gradients and the gathered ``rows`` (U, P) together:
    the global 2-norm of all of them, every gradient scaled by min(1, max_norm / (norm + 1e-6)). Returns the norm
    (not finite when some gradient is not)."""
    grads = [p.grad for p in parameters if p.grad is not None] + ([rows] if rows is not None else [])
    if not grads:
        return torch.tensor(0.0)
    # one operation over all tensors (``_foreach_``, as clip_grad_norm_ itself does), not two per parameter
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))  # ()
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    torch._foreach_mul_(grads, scale)
    return norm


def adagrad_rows(weight: torch.Tensor, state: dict, ids: torch.Tensor, rows: torch.Tensor, lr: float,
                 eps: float) -> None:
    """torch's Adagrad step (no weight decay, no learning-rate decay) on ``weight``'s rows ``ids`` (distinct) with
    gradient ``rows`` (U, P); ``state`` is the optimizer's state of ``weight`` (its "sum" accumulator, its "step").
    The rows are taken out, updated with the dense step's own operations and written back (row copies are faster
    than ``index_add_``)."""
    with torch.no_grad():
        state["step"] += 1
        sums = state["sum"]  # (V, P)
        accumulated = sums.index_select(0, ids).addcmul_(rows, rows)  # (U, P) sum += g^2
        sums.index_copy_(0, ids, accumulated)
        std = accumulated.sqrt_().add_(eps)  # (U, P)
        weight.index_copy_(0, ids, weight.index_select(0, ids).addcdiv_(rows, std, value=-lr))
