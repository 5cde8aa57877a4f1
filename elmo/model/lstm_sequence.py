"""A layer's whole computation (input products and time loop) as one autograd operation, with a hand-written
backward pass (training); training runs the forward and the backward direction's layer as one such operation (D = 2).

Autograd through the per-step loop records ~20 small operations per step and, in the backward pass, multiplies
out each step's weight gradients separately (e.g. (P, n) x (n, 4C) for W_hh at every step). Here the forward pass
keeps what the backward pass needs in a few preallocated (D, N, ·) buffers (N = the real positions, time-major, as
in a PackedSequence), the backward loop carries only the state gradients, and the gradients of the input and the
weights are batched products over all N positions at the end. The forward steps are ``elmo.model.cell.lstm_step``
(docs/format.md §4.3), recording their intermediates; the backward pass differentiates that step by hand::

    z = x_t W_ih^T + b + h_{t-1} W_hh^T       i, f, o = sigmoid(.), g = tanh(.)
    c_t = clip(f * c_{t-1} + i * g)           r_t = clip((o * tanh(c_t)) W_proj^T)

with ``clamp``'s gradient (passed where the value was inside [-clip, clip], bounds included). Tests check it
against autograd through ``lstm_step`` (``torch.autograd.gradcheck`` in float64).
"""

from __future__ import annotations

import torch

from elmo.model.cell import StepRecord, lstm_step


class LayerSequence(torch.autograd.Function):
    """D layers' time loops (one per direction) advanced together, step by step::

        x (D, N, In), W_ih (D, 4C, In), bias (D, 4C), h0 (D, B, P), c0 (D, B, C), W_hh (D, 4C, P), W_proj (D, P, C)
            -> outputs (D, N, P), h (D, B, P), c (D, B, C)

    ``x[d]`` holds layer d's inputs of the running rows of every step, step after step (time-major, as in a
    PackedSequence). Their input products x W_ih^T + bias, for all steps at once, are written straight into the
    buffer where the steps add their recurrent products and activate the gates (one batched product, no copy);
    ``batch_sizes[t]`` rows (a prefix, rows sorted longest first) run at step t in every layer. Rows past the end keep
    their last state. Each step runs the D layers' matrix products as batched products (``bmm``: 1.4-2x D separate
    ``mm`` calls at the tiny preset's sizes on an Intel Xeon with AMX) and their element-wise arithmetic
    (``lstm_step``) once over all D: at training sizes a step's cost is mostly per operation, not per number.

    Each step reads its previous state straight from the previous step's rows of the buffers (a prefix of them), so
    the forward loop copies nothing; the backward loop multiplies by factors computed for all steps at once, so a
    step is two batched matrix products and five element-wise operations.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight_ih: torch.Tensor, bias: torch.Tensor, h0: torch.Tensor,
                c0: torch.Tensor, weight_hh: torch.Tensor, weight_proj: torch.Tensor, batch_sizes: list[int],
                cell_clip: float | None, proj_clip: float | None):
        layers, total = x.shape[:2]
        cells, proj = weight_proj.shape[2], weight_proj.shape[1]
        hh_t = weight_hh.transpose(1, 2).contiguous()  # (D, P, 4C)
        proj_t = weight_proj.transpose(1, 2).contiguous()  # (D, C, P)
        # (D, N, 4C) x W_ih^T + bias of every step; each step adds its recurrent product in place, then i, f, o after
        # sigmoid, g after tanh
        gates = torch.baddbmm(bias.unsqueeze(1), x, weight_ih.transpose(1, 2))
        memory = x.new_empty(layers, total, cells)  # c_t after its clip
        memory_raw = torch.empty_like(memory) if cell_clip else None  # c_t before it
        tanh_memory = torch.empty_like(memory)
        hidden = torch.empty_like(memory)  # m_t = o * tanh(c_t)
        outputs = x.new_empty(layers, total, proj)  # r_t after its clip
        outputs_raw = torch.empty_like(outputs) if proj_clip else None  # r_t before it
        # every buffer's per-step views, (D, n_t, .) each, made at once: the gates, then StepRecord's fields
        per_step = [buffer.split(batch_sizes, dim=1) if buffer is not None else [None] * len(batch_sizes)
                    for buffer in (gates, memory_raw, memory, tanh_memory, hidden, outputs_raw, outputs)]
        starts = _starts(batch_sizes)  # step t's rows are starts[t] : starts[t] + batch_sizes[t]
        h_prev, c_prev = h0, c0  # (D, B, .) the previous step's state of the rows still running
        for t, n in enumerate(batch_sizes):
            if h_prev.shape[1] != n:
                h_prev, c_prev = h_prev[:, :n], c_prev[:, :n]
            z, *recorded = (views[t] for views in per_step)  # z (D, n, 4C): input products, activated in place below
            record = StepRecord(*recorded)
            z.baddbmm_(h_prev, hh_t)  # + h_{t-1} W_hh^T
            raw = record.output_raw if proj_clip else record.output  # (D, n, P) where m W_proj^T goes
            lstm_step(z, c_prev, lambda m, out=raw: torch.bmm(m, proj_t, out=out), cell_clip, proj_clip,
                      in_place=True, record=record)
            h_prev, c_prev = record.output, record.memory
        h, c = _final_states(h0, c0, outputs, memory, batch_sizes, starts)
        ctx.batch_sizes, ctx.starts, ctx.clips = batch_sizes, starts, (cell_clip, proj_clip)
        ctx.save_for_backward(x, weight_ih, h0, c0, weight_hh, weight_proj, gates, memory, memory_raw, tanh_memory,
                              hidden, outputs, outputs_raw)
        return outputs, h, c

    @staticmethod
    def backward(ctx, grad_outputs, grad_h, grad_c):
        (x, weight_ih, h0, c0, weight_hh, weight_proj, gates, memory, memory_raw, tanh_memory, hidden, outputs,
         outputs_raw) = ctx.saved_tensors
        batch_sizes, starts = ctx.batch_sizes, ctx.starts
        cell_clip, proj_clip = ctx.clips
        layers, batch, cells = h0.shape[0], h0.shape[1], memory.shape[2]
        dh = torch.zeros_like(h0) if grad_h is None else grad_h.clone()  # (D, B, P) gradient of each row's state
        dc = torch.zeros_like(c0) if grad_c is None else grad_c.clone()  # (D, B, C)
        if grad_outputs is None:
            grad_outputs = torch.zeros_like(outputs)
        # factors of every step at once (d/dz of the activations, the clips' masks), so each step only multiplies
        i, f, g, o = gates.chunk(4, dim=-1)  # (D, N, C) each
        # s' = s - s^2 for a sigmoid s, tanh' = 1 - tanh^2: one addcmul each
        into_o = torch.addcmul(o, o, o, value=-1).mul_(tanh_memory)  # dm -> dz_o
        one = gates.new_ones(())
        into_cell = torch.addcmul(one, tanh_memory, tanh_memory, value=-1).mul_(o)  # dm -> dc_t, before the clip's mask
        into_ifg = gates.new_empty(layers, gates.shape[1], 3, cells)  # (D, N, 3, C) dc_t -> dz_i, dz_f, dz_g
        torch.addcmul(i, i, i, value=-1, out=into_ifg[:, :, 0]).mul_(g)
        torch.addcmul(f, f, f, value=-1, out=into_ifg[:, :, 1]).mul_(_previous(c0, memory, batch_sizes, starts))
        torch.addcmul(one, g, g, value=-1, out=into_ifg[:, :, 2]).mul_(i)
        cell_pass = memory_raw.abs().le(cell_clip).to(memory.dtype) if cell_clip else None  # (D, N, C) 1 inside
        proj_pass = outputs_raw.abs().le(proj_clip).to(outputs.dtype) if proj_clip else None  # (D, N, P)
        if proj_pass is not None:
            grad_outputs = grad_outputs * proj_pass
        dz_all = torch.empty_like(gates)  # (D, N, 4C)
        dr_all = torch.empty_like(outputs)  # (D, N, P) after the projection clip's mask
        # every step's views of the per-position buffers, made at once (one split each, not a slice per step)
        step_views = zip(*(buffer.split(batch_sizes, dim=1) if buffer is not None else [None] * len(batch_sizes)
                           for buffer in (grad_outputs, proj_pass, dr_all, into_o, into_cell, cell_pass, into_ifg, f,
                                          dz_all)))
        dm = memory.new_empty(layers, batch, cells)  # (D, B, C) one step's gradient of m
        for n, (grad_out, passed, dr, o_factor, cell_factor, cell_passed, ifg_factor, forget, dz) in zip(
                reversed(batch_sizes), reversed(list(step_views))):
            dh_n, dc_n = (dh, dc) if n == batch else (dh[:, :n], dc[:, :n])
            if passed is None:
                torch.add(grad_out, dh_n, out=dr)  # (D, n, P)
            else:
                torch.addcmul(grad_out, dh_n, passed, out=dr)
            dm_n = torch.bmm(dr, weight_proj, out=dm if n == batch else dm[:, :n])  # (D, n, C)
            torch.mul(dm_n, o_factor, out=dz[..., 3 * cells :])  # (D, n, 4C): dz_o
            dcell = torch.addcmul(dc_n, dm_n, cell_factor)  # (D, n, C)
            if cell_passed is not None:
                dcell.mul_(cell_passed)
            torch.mul(dcell.unsqueeze(2), ifg_factor, out=dz[..., : 3 * cells].view(layers, n, 3, cells))
            dh_new = torch.bmm(dz, weight_hh)  # (D, n, P)
            if n == batch:
                dc, dh = dcell.mul_(forget), dh_new
            else:
                dc[:, :n], dh[:, :n] = dcell.mul_(forget), dh_new
        needs = ctx.needs_input_grad
        grad_x = torch.bmm(dz_all, weight_ih) if needs[0] else None  # (D, N, In)
        grad_bias = dz_all.sum(1) if needs[2] else None  # (D, 4C)
        grad_ih = grad_hh = None
        if needs[1] or needs[5]:  # dz^T [x, h_{t-1}] in one product: dz_all is read once for both
            grad_ih, grad_hh = torch.bmm(dz_all.transpose(1, 2),  # (D, 4C, In + P)
                                         torch.cat([x, _previous(h0, outputs, batch_sizes, starts)], 2)
                                         ).split([x.shape[2], h0.shape[2]], 2)
        grad_proj = torch.bmm(dr_all.transpose(1, 2), hidden) if needs[6] else None  # (D, P, C)
        return grad_x, grad_ih, grad_bias, dh, dc, grad_hh, grad_proj, None, None, None


def _starts(batch_sizes: list[int]) -> list[int]:
    """Row offsets of every step in the packed layout (one more than steps: the last is N)."""
    starts = [0]
    for n in batch_sizes:
        starts.append(starts[-1] + n)
    return starts


def _previous(initial: torch.Tensor, packed: torch.Tensor, batch_sizes: list[int], starts: list[int]) -> torch.Tensor:
    """Every step's previous state in the packed layout: the initial state's rows for step 0, then a prefix of the
    previous step's rows: initial (D, B, X), packed (D, N, X) -> (D, N, X)."""
    if batch_sizes and all(n == batch_sizes[0] for n in batch_sizes):
        return torch.cat([initial[:, : batch_sizes[0]], packed[:, : starts[-2]]], dim=1)
    return torch.cat([initial[:, : batch_sizes[0]]] + [packed[:, starts[t - 1] : starts[t - 1] + batch_sizes[t]]
                                                       for t in range(1, len(batch_sizes))], dim=1)


def _final_states(h0: torch.Tensor, c0: torch.Tensor, outputs: torch.Tensor, memory: torch.Tensor,
                  batch_sizes: list[int], starts: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's state after its last step (rows that never ran keep the initial state): new (D, B, P), (D, B, C)."""
    h, c = h0.clone(), c0.clone()
    for t, n in enumerate(batch_sizes):
        ending = batch_sizes[t + 1] if t + 1 < len(batch_sizes) else 0  # rows ending..n-1 take their last step now
        if ending < n:
            h[:, ending:n] = outputs[:, starts[t] + ending : starts[t] + n]
            c[:, ending:n] = memory[:, starts[t] + ending : starts[t] + n]
    return h, c
