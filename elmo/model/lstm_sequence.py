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
    """

    @staticmethod
    def forward(ctx, projected: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor, weight_hh: torch.Tensor,
                weight_proj: torch.Tensor, batch_sizes: list[int], cell_clip: float | None,
                proj_clip: float | None):
        cells4, cells = projected.shape[1], weight_proj.shape[1]
        total = projected.shape[0]
        hh_t, proj_t = weight_hh.t().contiguous(), weight_proj.t().contiguous()  # (P, 4C), (C, P)
        gates = projected.new_empty(total, cells4)  # i, f, o after sigmoid, g after tanh
        memory = projected.new_empty(total, cells)  # c_t after its clip
        tanh_memory = projected.new_empty(total, cells)
        hidden = projected.new_empty(total, cells)  # m_t = o * tanh(c_t)
        outputs = projected.new_empty(total, weight_proj.shape[0])  # r_t after its clip
        cell_inside = torch.ones_like(memory, dtype=torch.bool) if cell_clip else None
        proj_inside = torch.ones_like(outputs, dtype=torch.bool) if proj_clip else None
        h, c = h0.clone(), c0.clone()  # (B, P), (B, C): every row's latest state
        starts = [0]  # step t's rows are starts[t] : starts[t] + batch_sizes[t]
        for n in batch_sizes:
            rows = slice(starts[-1], starts[-1] + n)
            z = torch.addmm(projected[rows], h[:n], hh_t, out=gates[rows])  # (n, 4C), activated in place below
            record = StepRecord(memory[rows], tanh_memory[rows], hidden[rows],
                                cell_inside[rows] if cell_clip else None, proj_inside[rows] if proj_clip else None)
            r, c_new = lstm_step(z, c[:n], lambda m, out=outputs[rows]: torch.mm(m, proj_t, out=out),  # (n, P)
                                 cell_clip, proj_clip, in_place=True, record=record)
            h[:n], c[:n] = r, c_new
            starts.append(starts[-1] + n)
        ctx.batch_sizes, ctx.starts = batch_sizes, starts
        ctx.save_for_backward(h0, c0, weight_hh, weight_proj, gates, memory, tanh_memory, hidden, outputs,
                              cell_inside, proj_inside)
        return outputs, h, c

    @staticmethod
    def backward(ctx, grad_outputs, grad_h, grad_c):
        (h0, c0, weight_hh, weight_proj, gates, memory, tanh_memory, hidden, outputs,
         cell_inside, proj_inside) = ctx.saved_tensors
        batch_sizes, starts = ctx.batch_sizes, ctx.starts
        dh = torch.zeros_like(h0) if grad_h is None else grad_h.clone()  # (B, P) gradient of each row's state
        dc = torch.zeros_like(c0) if grad_c is None else grad_c.clone()  # (B, C)
        if grad_outputs is None:
            grad_outputs = torch.zeros_like(outputs)
        dz_all = torch.empty_like(gates)  # (N, 4C)
        dr_all = torch.empty_like(outputs)  # (N, P) after the projection clip's mask
        for t in range(len(batch_sizes) - 1, -1, -1):
            n, start = batch_sizes[t], starts[t]
            rows = slice(start, start + n)
            dr = torch.add(grad_outputs[rows], dh[:n], out=dr_all[rows])  # (n, P)
            if proj_inside is not None:
                dr.mul_(proj_inside[rows])
            dm = dr @ weight_proj  # (n, C)
            i, f, g, o = gates[rows].chunk(4, dim=1)
            tc = tanh_memory[rows]
            di, df, dg, do = dz_all[rows].chunk(4, dim=1)
            torch.mul(dm * tc, o * (1 - o), out=do)
            dcell = dm * o * (1 - tc * tc) + dc[:n]  # (n, C)
            if cell_inside is not None:
                dcell.mul_(cell_inside[rows])
            c_prev = c0[:n] if t == 0 else memory[starts[t - 1] : starts[t - 1] + n]
            torch.mul(dcell * g, i * (1 - i), out=di)
            torch.mul(dcell * c_prev, f * (1 - f), out=df)
            torch.mul(dcell * i, 1 - g * g, out=dg)
            dc[:n] = dcell * f
            dh[:n] = dz_all[rows] @ weight_hh  # (n, P)
        # every step's h_{t-1}: the initial state's rows for step 0, then a prefix of the previous step's outputs
        previous = [h0[: batch_sizes[0]]] + [outputs[starts[t - 1] : starts[t - 1] + batch_sizes[t]]
                                             for t in range(1, len(batch_sizes))]
        grad_hh = dz_all.t() @ torch.cat(previous) if ctx.needs_input_grad[3] else None  # (4C, P)
        grad_proj = dr_all.t() @ hidden if ctx.needs_input_grad[4] else None  # (P, C)
        return dz_all, dh, dc, grad_hh, grad_proj, None, None, None
