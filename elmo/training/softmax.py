"""The language-model softmax shared by both directions: sampled for training, full for evaluation.

Sampled softmax as TensorFlow's ``sampled_softmax_loss`` with ``log_uniform_candidate_sampler(unique=True)``:
one set of unique negatives per batch, drawn from P(k) = (log(k+2) - log(k+1)) / log(V+1) (Zipf over ids, so the
vocabulary must be sorted by frequency); every logit has the log of its candidate's expected count subtracted
(log-Q correction); a negative that equals a position's own target is removed for that position.
"""

from __future__ import annotations

import math

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

    def gather(self, targets: torch.Tensor, candidates: torch.Tensor,
               ) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        """The rows of W and b for targets (D, N) and candidates (D, S): ((D, N, P), (D, N)) and ((D, S, P), (D, S)),
        views of one ``index_select``, so the backward pass adds one scatter into the (V, P) gradient instead of one
        per lookup (4 lookups a step: 80 -> 35 ms at V = 50,003, P = 128). Negative ids (positions without a target)
        take row 0; their loss is masked out."""
        ids = torch.cat([targets.reshape(-1).clamp(min=0), candidates.reshape(-1)])
        if self.row_gradients is not None and torch.is_grad_enabled():
            weights = self.row_gradients.gather(self.weight, ids)  # (D N + D S, P), its gradient as rows
        else:
            weights = self.weight.index_select(0, ids)  # (D N + D S, P)
        biases = self.bias.index_select(0, ids)  # (D N + D S,)
        n = targets.numel()
        return ((weights[:n].view(*targets.shape, -1), biases[:n].view(targets.shape)),
                (weights[n:].view(*candidates.shape, -1), biases[n:].view(candidates.shape)))

    def sampled_loss(self, hidden: torch.Tensor, targets: torch.Tensor, candidates: torch.Tensor,
                     log_expected_targets: torch.Tensor, log_expected_candidates: torch.Tensor,
                     reduction: str = "mean") -> torch.Tensor:
        """Sampled-softmax loss: hidden (N, P), targets (N,), candidates (S,) with their log expected counts; or D
        streams side by side, each with its own candidates: hidden (D, N, P), targets (D, N), candidates (D, S).
        ``reduction="none"`` gives the loss of every position, (N,) or (D, N)."""
        single = hidden.dim() == 2
        if single:
            hidden, targets, candidates, log_expected_targets, log_expected_candidates = (t.unsqueeze(0) for t in (
                hidden, targets, candidates, log_expected_targets, log_expected_candidates))
        (target_weight, target_bias), (candidate_weight, candidate_bias) = self.gather(targets, candidates)
        true_logit = (hidden * target_weight).sum(-1) + target_bias - log_expected_targets  # (D, N)
        per_position = SampledCrossEntropy.apply(hidden, candidate_weight, candidate_bias - log_expected_candidates,
                                                 true_logit, accidental_hits(targets, candidates, self.vocab_size))
        if single:
            per_position = per_position.squeeze(0)  # (N,)
        if reduction == "none":
            return per_position
        return per_position.mean() if reduction == "mean" else per_position.sum()


def accidental_hits(targets: torch.Tensor, candidates: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Where a stream's candidate is a position's own target: (3, K) indices (stream, position, candidate column)
    into the (D, N, S) sampled logits. O(D (N + V)) through a table of each id's column, not an (N, S) compare;
    negative targets (masked positions) look up id 0."""
    streams, sampled = candidates.shape
    column = torch.full((streams, vocab_size), -1, dtype=torch.long, device=candidates.device)  # (D, V)
    column.scatter_(1, candidates, torch.arange(sampled, device=candidates.device).expand(streams, sampled))
    hit = column.gather(1, targets.clamp(min=0))  # (D, N) the target's column among the candidates, or -1
    where = torch.nonzero(hit >= 0).t()  # (2, K)
    return torch.cat([where, hit[where[0], where[1]].unsqueeze(0)])  # (3, K)


class SampledCrossEntropy(torch.autograd.Function):
    """Per position ``logsumexp([true, h W_c^T + b_c]) - true``, the hits (stream, row, col) of the sampled logits
    at -inf, for D streams side by side: hidden (D, N, P), W_c (D, S, P), b_c (D, S), true (D, N) -> (D, N).

    The same value as cross-entropy over ``cat([true, sampled])`` with the true class first, in one (D, N, S)
    buffer, the largest tensor of a training step: the forward pass turns the logits into exp(logit - max) in place
    and keeps it; the backward pass never writes a (D, N, S) tensor again. The logits' gradient is
    ``exps * (grad / total)`` per row, and that row scale is applied to the (N, P) side of each product instead
    (same values, to rounding)::

        d hidden = (exps W_c) * s        d W_c = ((hidden * s)^T exps)^T        d b_c = s^T exps        s = grad / total

    The products are batched over the streams and in the layouts fastest on a Xeon with AMX at the tiny preset's
    sizes (D = 2, N = 640, S = 2048, P = 64): the bias enters the logits as one more column of the product (no
    broadcast copy), and the weight gradient comes out transposed. Forward and backward took 5.3 ms there, against
    6.7 ms with one product per stream.
    """

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, true_logit: torch.Tensor,
                hits: torch.Tensor) -> torch.Tensor:
        ones = hidden.new_ones(()).expand(*hidden.shape[:2], 1)
        with_bias = torch.cat([weight, bias.unsqueeze(2)], 2)  # (D, S, P + 1)
        exps = torch.bmm(torch.cat([hidden, ones], 2), with_bias.transpose(1, 2))  # (D, N, S) sampled logits
        exps[hits[0], hits[1], hits[2]] = float("-inf")
        top = torch.maximum(exps.amax(dim=2), true_logit)  # (D, N) amax: 20x max(dim) here, which finds indices
        true_exp = torch.exp(true_logit - top)  # (D, N)
        total = exps.sub_(top.unsqueeze(2)).exp_().sum(dim=2) + true_exp  # (D, N) exps: exp(logit - top)
        ctx.save_for_backward(hidden, weight, exps, total, true_exp / total)
        return torch.log(total) + top - true_logit

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        hidden, weight, exps, total, true_prob = ctx.saved_tensors
        scale = (grad / total).unsqueeze(2)  # (D, N, 1) each row's factor from exps to the logits' gradient
        needs = ctx.needs_input_grad
        grad_hidden = torch.bmm(exps, weight).mul_(scale) if needs[0] else None  # (D, N, P)
        grad_weight = torch.bmm((hidden * scale).transpose(1, 2), exps).transpose(1, 2) if needs[1] else None
        grad_bias = torch.bmm(scale.transpose(1, 2), exps).squeeze(1) if needs[2] else None  # (D, S)
        return grad_hidden, grad_weight, grad_bias, grad * (true_prob - 1.0), None


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
