"""The language-model softmax shared by both directions: sampled for training, full for evaluation.

Sampled softmax as TensorFlow's ``sampled_softmax_loss`` with ``log_uniform_candidate_sampler(unique=True)``:
one set of unique negatives per batch, drawn from P(k) = (log(k+2) - log(k+1)) / log(V+1) (Zipf over ids, so the
vocabulary must be sorted by frequency); every logit has the log of its candidate's expected count subtracted
(log-Q correction); a negative that equals a position's own target is removed for that position.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from elmo.errors import UsageError
from elmo.limits import MAX_SOFTMAX_PARAMETERS
from elmo.training.row_gradients import RowGradients


def check_softmax_size(vocab_size: int, dim: int, source: str) -> None:
    """A UsageError naming ``source`` (the vocabulary) when a softmax over its words would be over
    ``MAX_SOFTMAX_PARAMETERS``: checked before the (V, P) weights are drawn, which would otherwise take the
    machine's memory (and as much again for Adagrad) and fail deep inside torch, or be killed."""
    if (n := vocab_size * (dim + 1)) > MAX_SOFTMAX_PARAMETERS:
        most = MAX_SOFTMAX_PARAMETERS // (dim + 1)
        raise UsageError(f"{source}: {vocab_size:,} words x {dim + 1} (the projection and a bias) make a softmax of "
                         f"{n:,} parameters, over the limit of {MAX_SOFTMAX_PARAMETERS:,}: build a vocabulary of at "
                         f"most {most:,} words (`elmo vocab build --max-size {most}`)")


class LMSoftmax(nn.Module):
    """``logits = h W^T + b`` over the vocabulary; W (V, P) initialised N(0, 1/sqrt(P)), b zeros (bilm-tf).

    ``row_gradients``: where the sampled softmax's lookups of W send their gradient instead of ``weight.grad`` (set
    by the trainer for single-process Adagrad: ``elmo.training.row_gradients``); None: the usual dense gradient.
    """

    def __init__(self, vocab_size: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab_size, dim) / math.sqrt(dim))
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        self.row_gradients: RowGradients | None = None

    @property
    def vocab_size(self) -> int:
        return self.weight.shape[0]

    def log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """(N, P) -> (N, V) log-probabilities."""
        return torch.log_softmax(F.linear(hidden, self.weight, self.bias), dim=-1)

    def full_loss(self, hidden: torch.Tensor, targets: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        """Negative log-likelihood of positions whose target is >= 0: (N, P), (N,) -> () or (N,) (0 where < 0)."""
        logits = F.linear(hidden, self.weight, self.bias)  # (N, V)
        return F.cross_entropy(logits, targets, ignore_index=-1, reduction=reduction)

    def gather(self, id_sets: Sequence[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Rows of W (n, P) and b (n,) for each id tensor, taken by one ``index_select``: the backward pass then adds
        one scatter into the (V, P) gradient instead of one per lookup (4 lookups a step: 80 -> 35 ms at V = 50,003,
        P = 128). Negative ids (positions without a target) take row 0; their loss is masked out."""
        ids = torch.cat([i.clamp(min=0) for i in id_sets])
        sizes = [len(i) for i in id_sets]
        if self.row_gradients is not None and torch.is_grad_enabled():
            weights = self.row_gradients.gather(self.weight, ids)  # (n, P), its gradient as rows
        else:
            weights = self.weight.index_select(0, ids)  # (n, P)
        return list(zip(weights.split(sizes), self.bias.index_select(0, ids).split(sizes)))

    def sampled_loss(self, hidden: torch.Tensor, targets: torch.Tensor, candidates: torch.Tensor,
                     log_expected_targets: torch.Tensor, log_expected_candidates: torch.Tensor,
                     reduction: str = "mean", rows: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
                     ) -> torch.Tensor:
        """Sampled-softmax loss: hidden (N, P), targets (N,), candidates (S,) with their log expected counts.

        ``rows``: ``gather([targets, candidates])``, when the caller gathers for several calls at once."""
        (target_weight, target_bias), (candidate_weight, candidate_bias) = rows or self.gather([targets, candidates])
        true_logit = (hidden * target_weight).sum(-1) + target_bias - log_expected_targets  # (N,)
        # accidental hits: where a candidate is the position's own target, drop it (O(N), not an (N, S) compare)
        column = torch.full((self.vocab_size,), -1, dtype=torch.long, device=candidates.device)
        column[candidates] = torch.arange(len(candidates), device=candidates.device)
        hit = column[targets]  # (N,) the target's column among the candidates, or -1
        rows_hit = torch.nonzero(hit >= 0).squeeze(1)
        per_position = SampledCrossEntropy.apply(hidden, candidate_weight, candidate_bias - log_expected_candidates,
                                                 true_logit, rows_hit, hit[rows_hit])  # (N,)
        if reduction == "none":
            return per_position
        return per_position.mean() if reduction == "mean" else per_position.sum()


class SampledCrossEntropy(torch.autograd.Function):
    """Per position ``logsumexp([true, h W_c^T + b_c]) - true``, the hits (rows, cols) of the sampled logits at -inf.

    The same value as cross-entropy over ``cat([true, sampled])`` with the true class first, in one (N, S) buffer,
    the largest tensor of a training step: the forward pass turns the logits into exp(logit - max) in place and keeps
    it; the backward pass never writes an (N, S) tensor again. The logits' gradient is ``exps * (grad / total)`` per
    row, and that row scale is applied to the (N, P) side of each product instead (same values, to rounding)::

        d hidden = (exps W_c) * s        d W_c = exps^T (hidden * s)        d b_c = exps^T s        s = grad / total
    """

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, true_logit: torch.Tensor,
                rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        exps = torch.addmm(bias, hidden, weight.t())  # (N, S) sampled logits
        exps[rows, cols] = float("-inf")
        top = torch.maximum(exps.amax(dim=1), true_logit)  # (N,) amax: 20x max(dim) here, which also finds indices
        true_exp = torch.exp(true_logit - top)  # (N,)
        total = exps.sub_(top.unsqueeze(1)).exp_().sum(dim=1) + true_exp  # (N,) exps: exp(logit - top), (N, S)
        ctx.save_for_backward(hidden, weight, exps, total, true_exp / total)
        return torch.log(total) + top - true_logit

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        hidden, weight, exps, total, true_prob = ctx.saved_tensors
        scale = (grad / total).unsqueeze(1)  # (N, 1) each row's factor from exps to the logits' gradient
        grad_hidden = (exps @ weight).mul_(scale) if ctx.needs_input_grad[0] else None  # (N, P)
        grad_weight = exps.t() @ (hidden * scale) if ctx.needs_input_grad[1] else None  # (S, P)
        grad_bias = exps.t() @ scale.squeeze(1) if ctx.needs_input_grad[2] else None  # (S,)
        return grad_hidden, grad_weight, grad_bias, grad * (true_prob - 1.0), None, None


class LogUniformSampler:
    """Unique negatives from the log-uniform distribution, with TensorFlow's expected counts.

    It draws with replacement until ``n`` distinct ids have appeared; with ``tries`` draws an id of probability p
    is expected ``1 - (1 - p) ** tries`` times in the set. Its own generator keeps the draws reproducible and the
    same on every rank of a distributed run.
    """

    def __init__(self, vocab_size: int, seed: int = 0) -> None:
        self.vocab_size = vocab_size
        self.generator = torch.Generator().manual_seed(seed)
        self._log_range = math.log(vocab_size + 1)

    def probability(self, ids: torch.Tensor) -> torch.Tensor:
        ids = ids.double()
        return (torch.log(ids + 2) - torch.log(ids + 1)) / self._log_range

    def log_expected_count(self, ids: torch.Tensor, tries: int, sampled: int | None = None) -> torch.Tensor:
        """log of each id's expected count in a sample that took ``tries`` draws. As TensorFlow's
        ExpectedCountHelper: when no draw repeated (``tries == sampled``) the count is p x tries."""
        p = self.probability(ids)
        if sampled is not None and tries == sampled:
            return torch.log(p * tries).float()
        return torch.log(-torch.expm1(tries * torch.log1p(-p))).float()

    def sample(self, n: int) -> tuple[torch.Tensor, int]:
        """``n`` distinct ids (n < V) and the number of draws it took."""
        if not 0 < n < self.vocab_size:
            raise UsageError(f"need 0 < n_negative_samples < vocabulary size {self.vocab_size}, got {n}")
        draws = torch.empty(0, dtype=torch.long)
        size = 3 * n  # from 2,048 of 50,003 words it takes about 4,150 draws: one round, rarely two
        while True:
            u = torch.rand(size, generator=self.generator, dtype=torch.float64)
            more = (torch.exp(u * self._log_range).long() - 1).clamp_(0, self.vocab_size - 1)  # inverse CDF
            draws = torch.cat([draws, more])
            first = _first_draws(draws.numpy(), self.vocab_size)  # each distinct id's first draw, in draw order
            if len(first) >= n:
                break
            size *= 2
        order = torch.from_numpy(first[:n])  # the draws at which the first n distinct ids appeared
        return draws[order], int(order[-1]) + 1

    def state(self) -> torch.Tensor:
        return self.generator.get_state()

    def set_state(self, state: torch.Tensor) -> None:
        self.generator.set_state(state)


def _first_draws(draws: np.ndarray, vocab_size: int) -> np.ndarray:
    """The position of each distinct id's first occurrence in ``draws`` (ids < ``vocab_size``), ascending.

    One pass over a vocabulary-sized table (``np.minimum.at``) rather than ``np.unique(return_index=True)``, whose
    stable sort took 4x as long on the ~12,000 draws of a 2,048-id sample."""
    count = len(draws)
    first = np.full(vocab_size, count, dtype=np.int64)  # (V,) count = never drawn
    np.minimum.at(first, draws, np.arange(count))
    return np.sort(first[first < count])
