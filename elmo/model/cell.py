"""One step of the LSTM with a projected, clipped state (docs/format.md §4.3): the only place its arithmetic is written.

Every path of the package runs its steps through ``lstm_step``: inference (in place, pre-packed products), the
step-by-step autograd path (mixed precision), and training's ``LayerSequence`` (which records the intermediates
for its hand-written backward pass; tests check that backward against autograd through this very function).
Gates in PyTorch order i, f, g, o; the +1 forget bias is already folded into the bias that made ``z``::

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
    """Views of one step's rows that ``lstm_step`` writes its results and intermediates into, for a hand-written
    backward pass.

    With a record the step must run ``in_place``: ``z`` is then the record's gates view (i, f, g, o activated), and
    ``project`` must write m W_proj^T into ``output_raw`` (or into ``output`` without a projection clip). The values
    before each clip are kept instead of masks: the backward pass finds where a clip passed the gradient (the value
    was inside [-clip, clip], bounds included) from them in one operation over all steps.
    """

    memory_raw: torch.Tensor | None  # (n, C) c before its clip (None: no cell clip)
    memory: torch.Tensor  # (n, C) c after its clip
    tanh_memory: torch.Tensor  # (n, C) tanh(c)
    hidden: torch.Tensor  # (n, C) m = o * tanh(c)
    output_raw: torch.Tensor | None  # (n, P) m W_proj^T before its clip (None: no projection clip)
    output: torch.Tensor  # (n, P) r after its clip


def lstm_step(z: torch.Tensor, c_prev: torch.Tensor, project: Callable[[torch.Tensor], torch.Tensor],
              cell_clip: float | None, proj_clip: float | None, in_place: bool = False,
              record: StepRecord | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Gate pre-activations z (n, 4C), previous memory c_prev (n, C) -> (r (n, P), c (n, C)); any leading axes
    (training's ``LayerSequence`` runs both directions at once as (2, n, 4C)).

    ``project`` maps m (n, C) to m W_proj^T (n, P). ``in_place`` overwrites z with its activated gates and
    reuses buffers (inference and ``LayerSequence``: fewer passes over memory); not for autograd. Same values
    either way, to rounding.
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
    if record is not None:
        c = torch.mul(f, c_prev, out=record.memory_raw if cell_clip else record.memory).addcmul_(i, g)
    elif in_place:
        c = torch.mul(f, c_prev).addcmul_(i, g)
    else:
        c = f * c_prev + i * g
    if cell_clip:
        if record is not None:
            c = torch.clamp(c, -cell_clip, cell_clip, out=record.memory)
        else:
            c = c.clamp_(-cell_clip, cell_clip) if in_place else c.clamp(-cell_clip, cell_clip)
    # m = o * tanh(c)                                                           (n, C)
    if record is not None:
        m = torch.mul(torch.tanh(c, out=record.tanh_memory), o, out=record.hidden)
    elif in_place:
        m = torch.tanh(c).mul_(o)
    else:
        m = o * torch.tanh(c)
    # r = clip(m W_proj^T)                                                      (n, P)
    r = project(m)
    if proj_clip:
        if record is not None:
            r = torch.clamp(r, -proj_clip, proj_clip, out=record.output)
        else:
            r = r.clamp_(-proj_clip, proj_clip) if in_place else r.clamp(-proj_clip, proj_clip)
    return r, c
