"""A layer's whole computation (input products and time loop) as one autograd operation, with a hand-written
backward pass (training); training runs the forward and the backward direction's layer as one such operation (D = 2).

Autograd through the per-step loop records ~20 small operations per step and, in the backward pass, multiplies
out each step's weight gradients separately (e.g. (P, n) x (n, 4C) for W_hh at every step). Here the forward pass
keeps what the backward pass needs in a few preallocated (D, N, ·) buffers (N = the real positions, time-major, as
in a PackedSequence), the backward loop carries only the state gradients, and the gradients of the input and the
weights are batched products over all N positions at the end. The forward steps are
``elmo.model.cell.recorded_step`` (docs/format.md §4.3), recording their intermediates; the backward pass
differentiates that step by hand::

    z = x_t W_ih^T + b + h_{t-1} W_hh^T       i, f, o = sigmoid(.), g = tanh(.)
    c_t = clip(f * c_{t-1} + i * g)           r_t = clip((o * tanh(c_t)) W_proj^T)

with ``clamp``'s gradient (passed where the value was inside [-clip, clip], bounds included). Tests check it
against autograd through ``lstm_step`` (``torch.autograd.gradcheck`` in float64).
"""

from __future__ import annotations

import torch

from elmo.model.cell import StepRecord, recorded_step


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
    (``recorded_step``) once over all D: at training sizes a step's cost is mostly per operation, not per number.
    Inside, the gate rows are in ``recorded_step``'s order o, i, f, g (``_own_order``); the gradients leave in
    PyTorch's order.

    Every per-step view of the buffers is made before the loops (one ``split`` per buffer), and each step reads its
    previous state straight from the previous step's rows (a prefix of them), so the forward loop copies nothing;
    the backward loop multiplies by factors computed for all steps at once (the cell clip's mask folded into them),
    so a step is two batched matrix products and five element-wise operations.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight_ih: torch.Tensor, bias: torch.Tensor, h0: torch.Tensor,
                c0: torch.Tensor, weight_hh: torch.Tensor, weight_proj: torch.Tensor, batch_sizes: list[int],
                cell_clip: float | None, proj_clip: float | None):
        layers, total = x.shape[:2]
        cells, proj = weight_proj.shape[2], weight_proj.shape[1]
        ih, hh, b = (_own_order(w, cells) for w in (weight_ih, weight_hh, bias))  # gate rows o, i, f, g
        hh_t = hh.transpose(1, 2).contiguous()  # (D, P, 4C)
        proj_t = weight_proj.transpose(1, 2).contiguous()  # (D, C, P)
        # (D, N, 4C) x W_ih^T + bias of every step; each step adds its recurrent product in place, then activates.
        # The bias is added after the product: baddbmm first copies the broadcast bias into the whole output
        gates = torch.bmm(x, ih.transpose(1, 2)).add_(b.unsqueeze(1))
        memory = x.new_empty(layers, total, cells)  # c_t after its clip
        memory_raw = torch.empty_like(memory) if cell_clip else None  # c_t before it
        tanh_memory = torch.empty_like(memory)
        hidden = torch.empty_like(memory)  # m_t = o * tanh(c_t)
        outputs = x.new_empty(layers, total, proj)  # r_t after its clip
        outputs_raw = torch.empty_like(outputs) if proj_clip else None  # r_t before it
        o, i, f, g = gates.chunk(4, dim=-1)
        records = [StepRecord(*views) for views in zip(*(_per_step(buffer, batch_sizes) for buffer in (
            gates, gates[..., : 3 * cells], o, i, f, g, memory_raw, memory, tanh_memory, hidden, outputs_raw,
            outputs)))]

        def project(m: torch.Tensor, out: torch.Tensor) -> None:
            torch.bmm(m, proj_t, out=out)  # (D, n, P)

        h_prev, c_prev = h0, c0  # (D, B, .) the previous step's state of the rows still running
        for record in records:
            n = record.gates.shape[1]
            if h_prev.shape[1] != n:
                h_prev, c_prev = h_prev[:, :n], c_prev[:, :n]
            record.gates.baddbmm_(h_prev, hh_t)  # + h_{t-1} W_hh^T
            recorded_step(record, c_prev, project, cell_clip, proj_clip)
            h_prev, c_prev = record.output, record.memory
        starts = _starts(batch_sizes)  # step t's rows are starts[t] : starts[t] + batch_sizes[t]
        h, c = (_last_rows(h0, outputs, batch_sizes, starts), _last_rows(c0, memory, batch_sizes, starts))
        ctx.batch_sizes, ctx.starts, ctx.clips = batch_sizes, starts, (cell_clip, proj_clip)
        ctx.save_for_backward(x, ih, h0, c0, hh, weight_proj, gates, memory, memory_raw, tanh_memory, hidden,
                              outputs, outputs_raw)
        return outputs, h, c

    @staticmethod
    def backward(ctx, grad_outputs, grad_h, grad_c):
        (x, ih, h0, c0, hh, weight_proj, gates, memory, memory_raw, tanh_memory, hidden, outputs,
         outputs_raw) = ctx.saved_tensors
        batch_sizes, starts = ctx.batch_sizes, ctx.starts
        cell_clip, proj_clip = ctx.clips
        layers, batch, cells = h0.shape[0], h0.shape[1], memory.shape[2]
        dh = torch.zeros_like(h0) if grad_h is None else grad_h.clone()  # (D, B, P) gradient of each row's state
        dc = torch.zeros_like(c0) if grad_c is None else grad_c.clone()  # (D, B, C)
        if grad_outputs is None:
            grad_outputs = torch.zeros_like(outputs)
        into_o, into_cell, into_ifg, forget, last_pass = _step_factors(gates, c0, memory, memory_raw, tanh_memory,
                                                                       batch_sizes, starts, cell_clip)
        if last_pass is not None:
            dc.mul_(last_pass)  # the cell clip's mask at each row's last step
        proj_pass = outputs_raw.abs().le(proj_clip).to(outputs.dtype) if proj_clip else None  # (D, N, P)
        if proj_pass is not None:
            grad_outputs = grad_outputs * proj_pass
        dz_all = torch.empty_like(gates)  # (D, N, 4C), gates o, i, f, g
        dr_all = torch.empty_like(outputs)  # (D, N, P) after the projection clip's mask
        dz_ifg = [view.view(layers, view.shape[1], 3, cells) for view in _per_step(dz_all[..., cells:], batch_sizes)]
        step_views = list(zip(*(_per_step(buffer, batch_sizes) for buffer in (
            grad_outputs, proj_pass, dr_all, into_o, into_cell, into_ifg, forget, dz_all, dz_all[..., :cells])),
            dz_ifg))
        dm = memory.new_empty(layers, batch, cells)  # (D, B, C) one step's gradient of m
        for n, (grad_out, passed, dr, o_factor, cell_factor, ifg_factor, forget_t, dz, dz_o, dz_i_f_g) in zip(
                reversed(batch_sizes), reversed(step_views)):
            dh_n, dc_n = (dh, dc) if n == batch else (dh[:, :n], dc[:, :n])
            if passed is None:
                torch.add(grad_out, dh_n, out=dr)  # (D, n, P)
            else:
                torch.addcmul(grad_out, dh_n, passed, out=dr)
            dm_n = torch.bmm(dr, weight_proj, out=dm if n == batch else dm[:, :n])  # (D, n, C)
            torch.mul(dm_n, o_factor, out=dz_o)  # (D, n, C): dz_o
            dcell = torch.addcmul(dc_n, dm_n, cell_factor)  # (D, n, C) dc_t inside the clip
            torch.mul(dcell.unsqueeze(2), ifg_factor, out=dz_i_f_g)  # (D, n, 3, C): dz_i, dz_f, dz_g
            dh_new = torch.bmm(dz, hh)  # (D, n, P)
            if n == batch:
                dc, dh = dcell.mul_(forget_t), dh_new
            else:
                dc[:, :n], dh[:, :n] = dcell.mul_(forget_t), dh_new
        needs = ctx.needs_input_grad
        grad_x = torch.bmm(dz_all, ih) if needs[0] else None  # (D, N, In)
        grad_bias = _pytorch_order(dz_all.sum(1), cells) if needs[2] else None  # (D, 4C)
        grad_ih = grad_hh = None
        if needs[1] or needs[5]:  # dz^T [x, h_{t-1}] in one product: dz_all is read once for both
            grad_ih, grad_hh = _pytorch_order(torch.bmm(dz_all.transpose(1, 2),  # (D, 4C, In + P)
                                                        torch.cat([x, _previous(h0, outputs, batch_sizes, starts)],
                                                                  2)), cells).split([x.shape[2], h0.shape[2]], 2)
        grad_proj = torch.bmm(dr_all.transpose(1, 2), hidden) if needs[6] else None  # (D, P, C)
        return grad_x, grad_ih, grad_bias, dh, dc, grad_hh, grad_proj, None, None, None


def _step_factors(gates: torch.Tensor, c0: torch.Tensor, memory: torch.Tensor, memory_raw: torch.Tensor | None,
                  tanh_memory: torch.Tensor, batch_sizes: list[int], starts: list[int], cell_clip: float | None):
    """What the backward loop multiplies by, for every step at once (d/dz of the activations, the cell clip's mask):
    into_o (D, N, C) dm -> dz_o; into_cell (D, N, C) dm -> dc_t; into_ifg (D, N, 3, C) dc_t -> dz_i, dz_f, dz_g;
    forget (D, N, C) dc_t -> dc_{t-1}; and the clip's mask at each row's last step (D, B, C), or None.

    The cell clip's mask of step t (1 where c_t was inside the clip) is folded into what reaches dc_t: dm's factor
    and the carry from step t + 1 into t (the initial c0 has no clip), and for the gradient given for each row's
    final c, the mask at its last step."""
    layers, total, cells = memory.shape
    o, i, f, g = gates.chunk(4, dim=-1)  # (D, N, C) each
    # s' = s - s^2 for a sigmoid s, tanh' = 1 - tanh^2: one addcmul each
    into_o = torch.addcmul(o, o, o, value=-1).mul_(tanh_memory)
    one = gates.new_ones(())
    into_cell = torch.addcmul(one, tanh_memory, tanh_memory, value=-1).mul_(o)
    into_ifg = gates.new_empty(layers, total, 3, cells)
    torch.addcmul(i, i, i, value=-1, out=into_ifg[:, :, 0]).mul_(g)
    torch.addcmul(f, f, f, value=-1, out=into_ifg[:, :, 1]).mul_(_previous(c0, memory, batch_sizes, starts))
    torch.addcmul(one, g, g, value=-1, out=into_ifg[:, :, 2]).mul_(i)
    if not cell_clip:
        return into_o, into_cell, into_ifg, f, None
    cell_pass = memory_raw.abs().le(cell_clip).to(memory.dtype)  # (D, N, C) 1 inside
    into_cell.mul_(cell_pass)
    unclipped = torch.ones_like(c0)  # (D, B, C) the mask of c0, and of rows that never ran
    forget = f * _previous(unclipped, cell_pass, batch_sizes, starts)
    return into_o, into_cell, into_ifg, forget, _last_rows(unclipped, cell_pass, batch_sizes, starts)


def _own_order(rows: torch.Tensor, cells: int) -> torch.Tensor:
    """Gate rows (axis 1) from PyTorch's order i, f, g, o to ``recorded_step``'s o, i, f, g: a copy."""
    return torch.roll(rows, cells, dims=1)


def _pytorch_order(rows: torch.Tensor, cells: int) -> torch.Tensor:
    """Gate rows (axis 1) from o, i, f, g back to PyTorch's i, f, g, o: a copy."""
    return torch.roll(rows, -cells, dims=1)


def _per_step(buffer: torch.Tensor | None, batch_sizes: list[int]) -> list[torch.Tensor | None]:
    """A (D, N, .) buffer's view of every step's rows, (D, n_t, .) each (Nones for a buffer that is None)."""
    return list(buffer.split(batch_sizes, dim=1)) if buffer is not None else [None] * len(batch_sizes)


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


def _last_rows(initial: torch.Tensor, packed: torch.Tensor, batch_sizes: list[int],
               starts: list[int]) -> torch.Tensor:
    """Each row's value at its last step, or its ``initial`` value if it never ran: initial (D, B, X),
    packed (D, N, X) -> new (D, B, X)."""
    out = initial.clone()
    for t, n in enumerate(batch_sizes):
        ending = batch_sizes[t + 1] if t + 1 < len(batch_sizes) else 0  # rows ending..n-1 take their last step now
        if ending < n:
            out[:, ending:n] = packed[:, starts[t] + ending : starts[t] + n]
    return out
