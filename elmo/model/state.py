"""LSTM state carried from one batch to the next: AllenNLP's legacy ("stateful") behaviour, docs/format.md §4.7.

Row ``b`` of a batch starts where row ``b`` of earlier batches ended; rows a smaller batch does not use keep their
state; rows beyond every earlier batch start from zero. A row whose new layer-0 state sums to exactly zero is
treated as unused and keeps its old state (AllenNLP's test for "was this row in the batch"; it adds the old
state to the new one, which we copy).
"""

from __future__ import annotations

import torch

# states of the whole biLM: h (2 directions, L, B, P) and c (2, L, B, C)
BiState = tuple[torch.Tensor, torch.Tensor]


def zero_state(n_layers: int, batch: int, proj: int, cell: int, like: torch.Tensor) -> BiState:
    return (like.new_zeros(2, n_layers, batch, proj), like.new_zeros(2, n_layers, batch, cell))


class StateCarrier:
    """Holds the per-row states between calls; ``reset()`` forgets them."""

    def __init__(self) -> None:
        self.state: BiState | None = None

    def reset(self) -> None:
        self.state = None

    def initial(self, batch: int, proj: int, cell: int, n_layers: int, like: torch.Tensor) -> BiState:
        """The starting state of a batch of ``batch`` rows."""
        h, c = zero_state(n_layers, batch, proj, cell, like)
        if self.state is not None:
            rows = min(batch, self.state[0].shape[2])
            h[:, :, :rows] = self.state[0][:, :, :rows]
            c[:, :, :rows] = self.state[1][:, :, :rows]
        return h, c

    def update(self, final: BiState) -> None:
        """Store a batch's final states (detached), keeping the rows it did not use."""
        new = tuple(s.detach() for s in final)
        if self.state is None:
            self.state = new
            return
        merged = []
        for old, fresh in zip(self.state, new):
            old = old.to(fresh)  # the model may have moved (.to("cuda"), .half()) since the last call
            batch = fresh.shape[2]
            # AllenNLP concatenates both directions per layer: (L, B, 2X); its used-mask reads layer 0 of that
            used = torch.cat([fresh[0, 0], fresh[1, 0]], dim=-1).sum(-1) != 0  # (B,)
            keep_old = old[:, :, :batch]
            if old.shape[2] < batch:  # new rows beyond every earlier batch: the "old" state is zero
                keep_old = torch.cat([keep_old, fresh.new_zeros(*fresh.shape[:2], batch - old.shape[2],
                                                                 fresh.shape[3])], dim=2)
            rows = fresh + keep_old * (~used).view(1, 1, -1, 1)  # (2, L, B, X), AllenNLP's arithmetic
            merged.append(torch.cat([rows, old[:, :, batch:]], dim=2) if old.shape[2] > batch else rows)
        self.state = (merged[0], merged[1])
