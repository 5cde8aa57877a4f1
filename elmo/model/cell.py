"""One step of the LSTM with a projected, clipped state (docs/format.md §4.3): the only place its arithmetic is written.

Inference (in place, pre-packed products) and the step-by-step autograd path (mixed precision) run ``lstm_step``;
training's ``LayerSequence`` runs ``recorded_step``, the same arithmetic over its own gate order, recording the
intermediates for its hand-written backward pass (tests check both against each other, and that backward against
autograd through ``lstm_step``). Gates in PyTorch order i, f, g, o; the +1 forget bias is already folded into the
bias that made ``z``::

    i, f, o = sigmoid(z_i), sigmoid(z_f), sigmoid(z_o);  g = tanh(z_g)     (n, C) each
    c = clip(f * c_prev + i * g, cell_clip)                                 (n, C)
    m = o * tanh(c)                                                         (n, C)
    r = clip(m W_proj^T, proj_clip)                                         (n, P)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch


class StepRecord(NamedTuple):
    """Views of one step's rows in training's buffers (``LayerSequence``), which ``recorded_step`` fills with the
    step's results and the intermediates a hand-written backward pass needs.

    The gates are in the order o, i, f, g (the rows of PyTorch's i, f, g, o rolled by C): the three sigmoid gates
    are one block and activate in one operation, and the backward pass writes dz_i, dz_f, dz_g as one block. The
    values before each clip are kept instead of masks: the backward pass finds where a clip passed the gradient
    (the value was inside [-clip, clip], bounds included) from them in one operation over all steps.
    """

    gates: torch.Tensor  # (n, 4C) z on entry, activated in place: o, i, f after sigmoid, g after tanh
    sigmoid_gates: torch.Tensor  # (n, 3C) o, i, f: a view of gates
    o: torch.Tensor  # (n, C) views of gates
    i: torch.Tensor
    f: torch.Tensor
    g: torch.Tensor
    memory_raw: torch.Tensor | None  # (n, C) c before its clip (None: no cell clip)
    memory: torch.Tensor  # (n, C) c after its clip
    tanh_memory: torch.Tensor  # (n, C) tanh(c)
    hidden: torch.Tensor  # (n, C) m = o * tanh(c)
    output_raw: torch.Tensor | None  # (n, P) m W_proj^T before its clip (None: no projection clip)
    output: torch.Tensor  # (n, P) r after its clip


def lstm_step(z: torch.Tensor, c_prev: torch.Tensor, project: Callable[[torch.Tensor], torch.Tensor],
              cell_clip: float | None, proj_clip: float | None,
              in_place: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Gate pre-activations z (n, 4C), previous memory c_prev (n, C) -> (r (n, P), c (n, C)); any leading axes.

    ``project`` maps m (n, C) to m W_proj^T (n, P). ``in_place`` overwrites z with its activated gates and
    reuses buffers (inference: fewer passes over memory); not for autograd. Same values either way, to rounding.
    """
    cells = c_prev.shape[-1]
    # gates: i, f, o = sigmoid(.), g = tanh(.)                                  each (n, C)
    if in_place:
        z[..., : 2 * cells].sigmoid_()  # i, f
        z[..., 3 * cells :].sigmoid_()  # o
        i, f, g, o = z.chunk(4, dim=-1)
        g.tanh_()
    else:
        z_i, z_f, z_g, z_o = z.chunk(4, dim=-1)
        i, f, g, o = torch.sigmoid(z_i), torch.sigmoid(z_f), torch.tanh(z_g), torch.sigmoid(z_o)
    # c = clip(f * c_prev + i * g)                                              (n, C)
    c = torch.mul(f, c_prev).addcmul_(i, g) if in_place else f * c_prev + i * g
    if cell_clip:
        c = c.clamp_(-cell_clip, cell_clip) if in_place else c.clamp(-cell_clip, cell_clip)
    # m = o * tanh(c)                                                           (n, C)
    m = torch.tanh(c).mul_(o) if in_place else o * torch.tanh(c)
    # r = clip(m W_proj^T)                                                      (n, P)
    r = project(m)
    if proj_clip:
        r = r.clamp_(-proj_clip, proj_clip) if in_place else r.clamp(-proj_clip, proj_clip)
    return r, c


def recorded_step(record: StepRecord, c_prev: torch.Tensor, project: Callable[[torch.Tensor, torch.Tensor], None],
                  cell_clip: float | None, proj_clip: float | None) -> None:
    """``lstm_step`` for training's ``LayerSequence``: the same arithmetic on the record's gates (order o, i, f, g,
    z already in ``record.gates``), every result and intermediate written into the record's views (no new tensor).
    ``project(m, out)`` writes m W_proj^T into out. Tests check it against ``lstm_step``."""
    record.sigmoid_gates.sigmoid_()  # o, i, f
    record.g.tanh_()
    # c = clip(f * c_prev + i * g)
    c = torch.mul(record.f, c_prev, out=record.memory_raw if cell_clip else record.memory).addcmul_(record.i, record.g)
    if cell_clip:
        torch.clamp(c, -cell_clip, cell_clip, out=record.memory)
    # m = o * tanh(c)
    torch.mul(torch.tanh(record.memory, out=record.tanh_memory), record.o, out=record.hidden)
    # r = clip(m W_proj^T)
    project(record.hidden, record.output_raw if proj_clip else record.output)
    if proj_clip:
        torch.clamp(record.output_raw, -proj_clip, proj_clip, out=record.output)
