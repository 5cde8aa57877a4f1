"""A layer's whole time loop as one autograd operation, with a hand-written backward pass (training).

Autograd through the per-step loop records ~20 small operations per step and, in the backward pass, multiplies
out each step's weight gradients separately (e.g. (P, n) x (n, 4C) for W_hh at every step). Here the forward pass
keeps what the backward pass needs in a few preallocated (N, ·) buffers (N = the real positions, time-major, as
in a PackedSequence), the backward loop carries only the state gradients, and the weight gradients are two
matmuls over all N positions at the end. The forward steps are ``elmo.model.cell.lstm_step`` (docs/format.md §4.3),
recording their intermediates; the backward pass differentiates that step by hand::

    z = projected_t + h_{t-1} W_hh^T          i, f, o = sigmoid(.), g = tanh(.)
    c_t = clip(f * c_{t-1} + i * g)           r_t = clip((o * tanh(c_t)) W_proj^T)

with ``clamp``'s gradient (passed where the value was inside [-clip, clip], bounds included). Tests check it
against autograd through ``lstm_step`` (``torch.autograd.gradcheck`` in float64).
"""

from __future__ import annotations

import torch

from elmo.model.cell import StepRecord, lstm_step


class LayerSequence(torch.autograd.Function):
    """(projected (N, 4C), h0 (B, P), c0 (B, C), W_hh (4C, P), W_proj (P, C)) -> (outputs (N, P), h (B, P), c (B, C)).

    ``projected`` holds x_t W_ih^T + bias of the running rows of every step, step after step; ``batch_sizes[t]``
    rows (a prefix, rows sorted longest first) run at step t. Rows past the end keep their last state.

    Each step reads its previous state straight from the previous step's rows of the buffers (a prefix of them), so
    the forward loop copies nothing; the backward loop multiplies by factors computed for all steps at once, so a
    step is two matrix products and five element-wise operations.
    """

    @staticmethod
    def forward(ctx, projected: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor, weight_hh: torch.Tensor,
                weight_proj: torch.Tensor, batch_sizes: list[int], cell_clip: float | None,
                proj_clip: float | None):
        total, cells = projected.shape[0], weight_proj.shape[1]
        hh_t, proj_t = weight_hh.t().contiguous(), weight_proj.t().contiguous()  # (P, 4C), (C, P)
        gates = torch.empty_like(projected)  # (N, 4C) i, f, o after sigmoid, g after tanh
        memory = projected.new_empty(total, cells)  # c_t after its clip
        memory_raw = projected.new_empty(total, cells) if cell_clip else None  # c_t before it
        tanh_memory = projected.new_empty(total, cells)
        hidden = projected.new_empty(total, cells)  # m_t = o * tanh(c_t)
        outputs = projected.new_empty(total, weight_proj.shape[0])  # r_t after its clip
        outputs_raw = torch.empty_like(outputs) if proj_clip else None  # r_t before it
        starts = _starts(batch_sizes)  # step t's rows are starts[t] : starts[t] + batch_sizes[t]
        for t, n in enumerate(batch_sizes):
            rows = slice(starts[t], starts[t] + n)
            before = slice(starts[t - 1], starts[t - 1] + n) if t else None  # this step's rows one step earlier
            h_prev, c_prev = (outputs[before], memory[before]) if t else (h0[:n], c0[:n])  # (n, P), (n, C)
            z = torch.addmm(projected[rows], h_prev, hh_t, out=gates[rows])  # (n, 4C), activated in place below
            raw = outputs_raw[rows] if proj_clip else outputs[rows]
            record = StepRecord(memory_raw[rows] if cell_clip else None, memory[rows], tanh_memory[rows],
                                hidden[rows], outputs_raw[rows] if proj_clip else None, outputs[rows])
            lstm_step(z, c_prev, lambda m, out=raw: torch.mm(m, proj_t, out=out),  # (n, P)
                      cell_clip, proj_clip, in_place=True, record=record)
        h, c = _final_states(h0, c0, outputs, memory, batch_sizes, starts)
        ctx.batch_sizes, ctx.starts, ctx.clips = batch_sizes, starts, (cell_clip, proj_clip)
        ctx.save_for_backward(h0, c0, weight_hh, weight_proj, gates, memory, memory_raw, tanh_memory, hidden,
                              outputs, outputs_raw)
        return outputs, h, c

    @staticmethod
    def backward(ctx, grad_outputs, grad_h, grad_c):
        (h0, c0, weight_hh, weight_proj, gates, memory, memory_raw, tanh_memory, hidden, outputs,
         outputs_raw) = ctx.saved_tensors
        batch_sizes, starts = ctx.batch_sizes, ctx.starts
        cell_clip, proj_clip = ctx.clips
        batch, cells = h0.shape[0], memory.shape[1]
        dh = torch.zeros_like(h0) if grad_h is None else grad_h.clone()  # (B, P) gradient of each row's state
        dc = torch.zeros_like(c0) if grad_c is None else grad_c.clone()  # (B, C)
        if grad_outputs is None:
            grad_outputs = torch.zeros_like(outputs)
        # factors of every step at once (d/dz of the activations, the clips' masks), so each step only multiplies
        i, f, g, o = gates.chunk(4, dim=1)  # (N, C) each
        previous_c = _previous(c0, memory, batch_sizes, starts)  # (N, C) every step's c_{t-1}
        into_o = tanh_memory * o * (1 - o)  # dm -> dz_o
        into_cell = o * (1 - tanh_memory * tanh_memory)  # dm -> dc_t (before the cell clip's mask)
        into_ifg = torch.stack([g * i * (1 - i), previous_c * f * (1 - f), i * (1 - g * g)], dim=1)  # (N, 3, C)
        del previous_c
        cell_pass = memory_raw.abs().le(cell_clip).to(memory.dtype) if cell_clip else None  # (N, C) 1 inside
        proj_pass = outputs_raw.abs().le(proj_clip).to(outputs.dtype) if proj_clip else None  # (N, P)
        if proj_pass is not None:
            grad_outputs = grad_outputs * proj_pass
        dz_all = torch.empty_like(gates)  # (N, 4C)
        dr_all = torch.empty_like(outputs)  # (N, P) after the projection clip's mask
        for t in range(len(batch_sizes) - 1, -1, -1):
            n = batch_sizes[t]
            rows = slice(starts[t], starts[t] + n)
            dh_n, dc_n = (dh, dc) if n == batch else (dh[:n], dc[:n])
            if proj_pass is None:
                dr = torch.add(grad_outputs[rows], dh_n, out=dr_all[rows])  # (n, P)
            else:
                dr = torch.addcmul(grad_outputs[rows], dh_n, proj_pass[rows], out=dr_all[rows])
            dm = dr @ weight_proj  # (n, C)
            dz = dz_all[rows]  # (n, 4C)
            torch.mul(dm, into_o[rows], out=dz[:, 3 * cells :])
            dcell = torch.addcmul(dc_n, dm, into_cell[rows])  # (n, C)
            if cell_pass is not None:
                dcell.mul_(cell_pass[rows])
            torch.mul(dcell.unsqueeze(1), into_ifg[rows], out=dz[:, : 3 * cells].view(n, 3, cells))
            if n == batch:
                dc, dh = dcell.mul_(f[rows]), dz @ weight_hh  # (B, C), (B, P)
            else:
                dc[:n], dh[:n] = dcell.mul_(f[rows]), dz @ weight_hh
        grad_hh = dz_all.t() @ _previous(h0, outputs, batch_sizes, starts) if ctx.needs_input_grad[3] else None
        grad_proj = dr_all.t() @ hidden if ctx.needs_input_grad[4] else None  # (P, C)
        return dz_all, dh, dc, grad_hh, grad_proj, None, None, None


def _starts(batch_sizes: list[int]) -> list[int]:
    """Row offsets of every step in the packed layout (one more than steps: the last is N)."""
    starts = [0]
    for n in batch_sizes:
        starts.append(starts[-1] + n)
    return starts


def _previous(initial: torch.Tensor, packed: torch.Tensor, batch_sizes: list[int], starts: list[int]) -> torch.Tensor:
    """Every step's previous state in the packed layout: the initial state's rows for step 0, then a prefix of the
    previous step's rows: (N, D)."""
    if batch_sizes and all(n == batch_sizes[0] for n in batch_sizes):
        return torch.cat([initial[: batch_sizes[0]], packed[: starts[-2]]])
    return torch.cat([initial[: batch_sizes[0]]] + [packed[starts[t - 1] : starts[t - 1] + batch_sizes[t]]
                                                    for t in range(1, len(batch_sizes))])


def _final_states(h0: torch.Tensor, c0: torch.Tensor, outputs: torch.Tensor, memory: torch.Tensor,
                  batch_sizes: list[int], starts: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's state after its last step (rows that never ran keep the initial state): new (B, P), (B, C)."""
    h, c = h0.clone(), c0.clone()
    for t, n in enumerate(batch_sizes):
        ending = batch_sizes[t + 1] if t + 1 < len(batch_sizes) else 0  # rows ending..n-1 take their last step now
        if ending < n:
            h[ending:n] = outputs[starts[t] + ending : starts[t] + n]
            c[ending:n] = memory[starts[t] + ending : starts[t] + n]
    return h, c
