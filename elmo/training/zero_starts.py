"""Some sentence starts from the zero state: the carried states of a training batch, with a random share of the rows
whose window begins a sentence set to zeros. Inference starts every sentence from zeros, a state that training with
carried states otherwise visits only at its first step (``zero_state_share``, docs/training.md)."""

from __future__ import annotations

import torch

from elmo.data.corpus import LMBatch

_ZERO_STATE_STREAM = 7_777_777_777  # keeps the zero-state draws' seeds apart from torch's and the sampler's


def zero_some_sentence_starts(states: list, batches: list[LMBatch], share: float, seed: int, step: int,
                              rows: tuple[int, int], global_rows: int, device: torch.device) -> list:
    """``states`` [direction][layer] (h (B, P), c (B, C)), with the rows of ``batches`` (one per direction) whose
    window begins a sentence set to zeros where a draw falls under ``share``; ``states`` itself when ``share`` is 0.

    The draw depends only on the seed, the step and the row's place in the global batch (this process's ``rows`` of
    ``global_rows``): every process draws the same numbers (so the run equals one process with the whole batch),
    and a resumed run draws them again."""
    if share == 0:
        return states
    generator = torch.Generator().manual_seed(_ZERO_STATE_STREAM + seed * 1_000_003 + step)
    draws = torch.rand(2, global_rows, generator=generator)[:, rows[0] : rows[1]]  # (2, B)
    zeroed = []
    for batch, direction, draw in zip(batches, states, draws):
        fresh = (batch.starts & (draw < share)).to(device).unsqueeze(1)  # (B, 1)
        zeroed.append([(h.masked_fill(fresh, 0.0), c.masked_fill(fresh, 0.0)) for h, c in direction])
    return zeroed
