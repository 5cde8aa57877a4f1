"""The language-model softmax shared by both directions: sampled for training, full for evaluation.

Sampled softmax as TensorFlow's ``sampled_softmax_loss`` with ``log_uniform_candidate_sampler(unique=True)``:
one set of unique negatives per batch, drawn from P(k) = (log(k+2) - log(k+1)) / log(V+1) (Zipf over ids, so the
vocabulary must be sorted by frequency); every logit has the log of its candidate's expected count subtracted
(log-Q correction); a negative that equals a position's own target is removed for that position.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class LMSoftmax(nn.Module):
    """``logits = h W^T + b`` over the vocabulary; W (V, P) initialised N(0, 1/sqrt(P)), b zeros (bilm-tf)."""

    def __init__(self, vocab_size: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab_size, dim) / math.sqrt(dim))
        self.bias = nn.Parameter(torch.zeros(vocab_size))

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

    def sampled_loss(self, hidden: torch.Tensor, targets: torch.Tensor, candidates: torch.Tensor,
                     log_expected_targets: torch.Tensor, log_expected_candidates: torch.Tensor,
                     reduction: str = "mean") -> torch.Tensor:
        """Sampled-softmax loss: hidden (N, P), targets (N,), candidates (S,) with their log expected counts."""
        true_logit = (hidden * self.weight[targets]).sum(-1) + self.bias[targets] - log_expected_targets  # (N,)
        sampled = torch.addmm(self.bias[candidates] - log_expected_candidates, hidden,
                              self.weight[candidates].t())  # (N, S)
        # accidental hits: where a candidate is the position's own target, drop it (O(N), not an (N, S) compare)
        column = torch.full((self.vocab_size,), -1, dtype=torch.long, device=candidates.device)
        column[candidates] = torch.arange(len(candidates), device=candidates.device)
        hit = column[targets]  # (N,) the target's column among the candidates, or -1
        rows = torch.nonzero(hit >= 0).squeeze(1)
        sampled = sampled.index_put((rows, hit[rows]), torch.tensor(float("-inf"), dtype=sampled.dtype, device=sampled.device))
        logits = torch.cat([true_logit.unsqueeze(1), sampled], dim=1)  # (N, 1 + S): the true class is column 0
        # cross-entropy against column 0 = logsumexp - true logit, with a fused (much cheaper) backward
        return F.cross_entropy(logits, targets.new_zeros(len(targets)), reduction=reduction)


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

    def log_expected_count(self, ids: torch.Tensor, tries: int) -> torch.Tensor:
        p = self.probability(ids)
        return torch.log(-torch.expm1(tries * torch.log1p(-p))).float()

    def sample(self, n: int) -> tuple[torch.Tensor, int]:
        """``n`` distinct ids (n < V) and the number of draws it took."""
        if not 0 < n < self.vocab_size:
            raise ValueError(f"need 0 < n_negative_samples < vocabulary size {self.vocab_size}, got {n}")
        draws = torch.empty(0, dtype=torch.long)
        size = 2 * n
        while True:
            u = torch.rand(size, generator=self.generator, dtype=torch.float64)
            more = (torch.exp(u * self._log_range).long() - 1).clamp_(0, self.vocab_size - 1)  # inverse CDF
            draws = torch.cat([draws, more])
            values, inverse = torch.unique(draws, return_inverse=True)
            if len(values) >= n:
                break
            size *= 2
        first = torch.full((len(values),), len(draws), dtype=torch.long)
        first.scatter_reduce_(0, inverse, torch.arange(len(draws)), reduce="amin")  # first draw of each id
        order = torch.sort(first).values[:n]  # the draws at which the first n distinct ids appeared
        return draws[order], int(order[-1]) + 1

    def state(self) -> torch.Tensor:
        return self.generator.get_state()

    def set_state(self, state: torch.Tensor) -> None:
        self.generator.set_state(state)
