"""Task models over frozen biLM features (B, T, L+1, D): a learned layer mix, then a tagger or a classifier.

``LayerInput`` is how a task reads the biLM: "mix" (the paper: gamma * softmax(w)-weighted sum of the layers,
with an L2 penalty on w), "token" (the baseline: the context-independent token layer only), or one layer number
(the probes). The heads are small BiLSTMs as in the paper's task models, kept small for CPUs.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from elmo.errors import UsageError
from elmo.limits import is_digits
from elmo.model.mix import ScalarMix, check_layers, select_layers


class LayerInput(nn.Module):
    """(B, T, L+1, D) -> (B, T, D): the scalar mix, the token layer, or one layer."""

    def __init__(self, n_layers: int, mode: str = "mix") -> None:
        super().__init__()
        if not isinstance(mode, str):
            raise UsageError(f"input must be 'mix', 'token' or a layer number below {n_layers} as a string, got "
                             f"{mode!r}")
        layer = 0 if mode == "token" else int(mode) if is_digits(mode) else mode  # "token": the layer-0 baseline
        try:
            self.layer = check_layers(layer, n_layers, names=("mix",))
        except UsageError:
            raise UsageError(f"input must be 'mix', 'token' or a layer number below {n_layers}, got {mode!r}") from None
        self.mode = mode
        self.mix = ScalarMix(n_layers) if self.layer == "mix" else None

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if self.mix is not None:
            return self.mix(list(features.unbind(2)))  # (B, T, D)
        return select_layers(features.movedim(2, 1), self.layer, features.new_empty(0))  # (B, T, D)

    def penalty(self) -> torch.Tensor:
        """L2 on the mix weights (the paper's lambda = 0.001 keeps the mix close to an average)."""
        return (self.mix.weights ** 2).sum() if self.mix is not None else torch.zeros(())


class BiLSTMEncoder(nn.Module):
    def __init__(self, input_dim: int, hidden_dim: int, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(input_dim, hidden_dim, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, 2H); padded positions are zero."""
        packed = pack_padded_sequence(self.dropout(x), lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return self.dropout(out)


def bio_constraints(labels: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Which transitions (K, K) [from, to] and which first tags (K,) a BIO tag sequence allows.

    ``I-X`` may only follow ``B-X`` or ``I-X`` and may not start a sentence; tags not in BIO form are unconstrained.
    """
    n = len(labels)
    allowed, start = torch.ones(n, n, dtype=torch.bool), torch.ones(n, dtype=torch.bool)
    for j, to in enumerate(labels):
        if to.startswith("I-") and len(to) > 2:
            start[j] = False
            allowed[:, j] = torch.tensor([tag in ("B-" + to[2:], to) for tag in labels])
    return allowed, start


class CRF(nn.Module):
    """A linear-chain CRF: transition scores between tags, start and end scores; NLL and Viterbi decoding.

    ``labels`` (optional) turns on BIO constraints for decoding (as AllenNLP's ``constrain_crf_decoding``): Viterbi
    never returns an ``I-X`` after ``O`` or another type. Training is unconstrained: gold sequences never use a
    forbidden transition, so the likelihood is the same model either way.
    """

    def __init__(self, n_tags: int, labels: list[str] | None = None) -> None:
        super().__init__()
        self.transitions = nn.Parameter(torch.zeros(n_tags, n_tags))  # [from, to]
        self.start = nn.Parameter(torch.zeros(n_tags))
        self.end = nn.Parameter(torch.zeros(n_tags))
        if labels is not None and len(labels) != n_tags:
            raise UsageError(f"{len(labels)} labels for {n_tags} tags")
        allowed, first = bio_constraints(labels) if labels is not None else (None, None)
        self.register_buffer("allowed", allowed, persistent=False)  # (K, K) bool or None; not saved: from labels
        self.register_buffer("allowed_start", first, persistent=False)  # (K,) bool or None

    def nll(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Mean negative log-likelihood of ``tags`` (B, T) under emissions (B, T, K); mask (B, T), left-aligned."""
        return (self._log_partition(emissions, mask) - self._score(emissions, tags, mask)).mean()

    def _score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.float()  # (B, T)
        emitted = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)  # (B, T)
        moved = self.transitions[tags[:, :-1], tags[:, 1:]]  # (B, T-1)
        last = tags.gather(1, (mask.sum(1) - 1).unsqueeze(1)).squeeze(1)  # (B,)
        return self.start[tags[:, 0]] + (emitted * m).sum(1) + (moved * m[:, 1:]).sum(1) + self.end[last]

    def _log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        alpha = self.start + emissions[:, 0]  # (B, K)
        for t in range(1, emissions.shape[1]):
            step = torch.logsumexp(alpha.unsqueeze(2) + self.transitions, dim=1) + emissions[:, t]  # (B, K)
            alpha = torch.where(mask[:, t : t + 1], step, alpha)
        return torch.logsumexp(alpha + self.end, dim=1)  # (B,)

    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """The best tag sequence of each row (Viterbi), trimmed to its length."""
        transitions, start = self.transitions, self.start
        if self.allowed is not None:
            transitions = transitions.masked_fill(~self.allowed, float("-inf"))  # (K, K)
            start = start.masked_fill(~self.allowed_start, float("-inf"))  # (K,)
        score = start + emissions[:, 0]  # (B, K)
        history = []
        for t in range(1, emissions.shape[1]):
            best, arg = (score.unsqueeze(2) + transitions).max(dim=1)  # (B, K) each
            history.append(arg)
            score = torch.where(mask[:, t : t + 1], best + emissions[:, t], score)
        score = score + self.end
        paths = []
        for b, n in enumerate(mask.sum(1).tolist()):
            tag = int(score[b].argmax())
            path = [tag]
            for t in range(n - 1, 0, -1):
                tag = int(history[t - 1][b, tag])
                path.append(tag)
            paths.append(path[::-1])
        return paths


class SequenceTagger(nn.Module):
    """Features -> layer input -> BiLSTM -> per-token tag scores, decoded by a CRF (NER) or argmax (POS)."""

    def __init__(self, n_layers: int, dim: int, n_tags: int, input_mode: str = "mix", hidden_dim: int = 128,
                 dropout: float = 0.5, use_crf: bool = True, labels: list[str] | None = None) -> None:
        super().__init__()
        self.input = LayerInput(n_layers, input_mode)
        self.encoder = BiLSTMEncoder(dim, hidden_dim, dropout)
        self.scores = nn.Linear(2 * hidden_dim, n_tags)
        self.crf = CRF(n_tags, labels) if use_crf else None

    def emissions(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.scores(self.encoder(self.input(features), lengths))  # (B, T, K)

    def loss(self, features: torch.Tensor, lengths: torch.Tensor, tags: torch.Tensor) -> torch.Tensor:
        mask = _mask(lengths, features.shape[1])  # (B, T)
        emissions = self.emissions(features, lengths)
        if self.crf is not None:
            return self.crf.nll(emissions, tags, mask)
        return nn.functional.cross_entropy(emissions[mask], tags[mask])

    @torch.no_grad()
    def predict(self, features: torch.Tensor, lengths: torch.Tensor) -> list[list[int]]:
        mask = _mask(lengths, features.shape[1])
        emissions = self.emissions(features, lengths)
        if self.crf is not None:
            return self.crf.decode(emissions, mask)
        best = emissions.argmax(-1)  # (B, T)
        return [best[b, :n].tolist() for b, n in enumerate(lengths.tolist())]


class TextClassifier(nn.Module):
    """Features -> layer input -> BiLSTM -> max and mean pooling over tokens -> class scores."""

    def __init__(self, n_layers: int, dim: int, n_classes: int, input_mode: str = "mix", hidden_dim: int = 128,
                 dropout: float = 0.5) -> None:
        super().__init__()
        self.input = LayerInput(n_layers, input_mode)
        self.encoder = BiLSTMEncoder(dim, hidden_dim, dropout)
        self.scores = nn.Linear(4 * hidden_dim, n_classes)

    def logits(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        mask = _mask(lengths, features.shape[1]).unsqueeze(2)  # (B, T, 1)
        encoded = self.encoder(self.input(features), lengths)  # (B, T, 2H)
        maxed = encoded.masked_fill(~mask, float("-inf")).max(1).values  # (B, 2H)
        mean = encoded.sum(1) / lengths.unsqueeze(1).to(encoded.dtype)  # (B, 2H)
        return self.scores(torch.cat([maxed, mean], dim=1))  # (B, C)

    def loss(self, features: torch.Tensor, lengths: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(self.logits(features, lengths), labels)

    @torch.no_grad()
    def predict(self, features: torch.Tensor, lengths: torch.Tensor) -> list[int]:
        return self.logits(features, lengths).argmax(-1).tolist()


def _mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    return torch.arange(width, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)  # (B, T)
