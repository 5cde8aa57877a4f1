"""Engines kept outside the package as references for tests and benchmarks; none of them calls the package's LSTM
step (``elmo.model.cell.lstm_step``), so they check it independently.

- ``reference_layer_forward``: one layer, the plain per-step, per-row-masked computation of docs/format.md §4.3, its
  step's arithmetic written out here.
- ``reference_char_encoder``: the character CNN with one ``conv1d`` per filter over all W slots of every token.
- ``reference_forward``: the slow, obvious forward pass, the way AllenNLP computes it: ``reference_char_encoder``
  over every slot (padding included, masked afterwards), and each LSTM layer one time step at a time over the
  whole batch with masked state updates, rows in the caller's order. Every fast path is measured against it.
- ``use_fused_lstm``: ``torch.nn.LSTM(proj_size=...)`` in place of the layers. PyTorch's LSTM cannot clip the cell or
  the projection, so it computes ELMo exactly only when ``cell_clip`` and ``proj_clip`` are null (or never reached);
  it refuses a model with clips unless ``allow_clips=True`` (then results differ wherever a clip would have fired).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from elmo.data.chars import add_sentence_boundaries
from elmo.errors import UsageError
from elmo.model.bilm import BiLM, BiLMOutput, _gather_time, reverse_index
from elmo.model.char_cnn import CharEncoder
from elmo.model.lstm import LSTMStack, ProjectedLSTMLayer, State
from elmo.model.state import zero_state


def reference_layer_forward(layer: ProjectedLSTMLayer, x: torch.Tensor, lengths: torch.Tensor,
                            state: State) -> tuple[torch.Tensor, State]:
    """The plain per-step, per-row-masked computation of docs/format.md §4.3, in any row order.

    x: (B, T, In), lengths (B,), state (h (B, P), c (B, C)).
    """
    h, c = state
    w = torch.cat([layer.weight_ih, layer.weight_hh], dim=1)  # (4C, In + P): TF's single kernel, transposed
    outputs = []
    for t in range(x.shape[1]):
        z = torch.cat([x[:, t], h], dim=-1) @ w.t() + layer.bias  # (B, 4C)
        i, f, g, o = z.chunk(4, dim=-1)  # each (B, C)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        if layer.cell_clip:
            c_new = c_new.clamp(-layer.cell_clip, layer.cell_clip)
        r = (torch.sigmoid(o) * torch.tanh(c_new)) @ layer.weight_proj.t()  # (B, P)
        if layer.proj_clip:
            r = r.clamp(-layer.proj_clip, layer.proj_clip)
        running = (t < lengths).unsqueeze(-1)  # (B, 1)
        h, c = torch.where(running, r, h), torch.where(running, c_new, c)
        outputs.append(torch.where(running, r, torch.zeros_like(r)))
    return torch.stack(outputs, dim=1), (h, c)


def _reference_stack(stack: LSTMStack, x: torch.Tensor, lengths: torch.Tensor, h0: torch.Tensor,
                     c0: torch.Tensor) -> tuple[list[torch.Tensor], list[tuple[torch.Tensor, torch.Tensor]]]:
    outputs, finals = [], []
    for index, layer in enumerate(stack.layers):
        out, final = reference_layer_forward(layer, x, lengths, (h0[index], c0[index]))
        if stack.use_skip_connections and index > 0:
            out = out + x
        outputs.append(out)
        finals.append(final)
        x = out
    return outputs, finals


def reference_char_encoder(encoder: CharEncoder, char_ids: torch.Tensor) -> torch.Tensor:
    """(N, W) ids -> (N, P) as docs/format.md §4.2 says: one convolution per filter over all W slots, max-pooled,
    activated, then the highway layers and the projection of ``encoder`` (differentiable: gradients reach it)."""
    x = encoder.char_embedding(char_ids).transpose(1, 2)  # (N, E, W)
    features = torch.cat([F.conv1d(x, conv.weight, conv.bias).amax(dim=-1) for conv in encoder.convolutions], -1)
    x = torch.tanh(features) if encoder.config.activation == "tanh" else torch.relu(features)  # (N, F)
    for highway in encoder.highways:
        g = torch.sigmoid(highway.gate(x))
        x = g * torch.relu(highway.transform(x)) + (1 - g) * x
    return encoder.projection(x)


@torch.no_grad()
def reference_forward(bilm: BiLM, char_ids: torch.Tensor) -> BiLMOutput:
    """Same contract as ``BiLM.forward`` (stateful mode included), computed the slow, obvious way."""
    ids, lengths = add_sentence_boundaries(char_ids)  # (B, T+2, W), (B,)
    batch, steps, width = ids.shape
    mask = torch.arange(steps, device=ids.device) < lengths.unsqueeze(1)  # (B, T+2)
    tokens = reference_char_encoder(bilm.char_encoder, ids.view(-1, width)).view(batch, steps, -1)  # (B, T+2, P), all slots
    tokens = tokens * mask.unsqueeze(-1)
    l = bilm.config.lstm
    h0, c0 = (bilm._carrier.initial(batch, l.projection_dim, l.dim, l.n_layers, tokens) if bilm.stateful
              else zero_state(l.n_layers, batch, l.projection_dim, l.dim, tokens))  # (2, L, B, P), (2, L, B, C)
    fwd, fwd_final = _reference_stack(bilm.forward_stack, tokens, lengths, h0[0], c0[0])
    flip = reverse_index(lengths, steps)
    bwd, bwd_final = _reference_stack(bilm.backward_stack, _gather_time(tokens, flip), lengths, h0[1], c0[1])
    bwd = [_gather_time(out, flip) for out in bwd]
    if bilm.stateful:
        bilm._carrier.update((torch.stack([torch.stack([h for h, _ in fwd_final]), torch.stack([h for h, _ in bwd_final])]),
                              torch.stack([torch.stack([c for _, c in fwd_final]), torch.stack([c for _, c in bwd_final])])))
    layers = [torch.cat([tokens, tokens], -1)] + [torch.cat(pair, -1) for pair in zip(fwd, bwd)]
    return BiLMOutput(layers, mask, tokens, fwd, bwd)


class FusedLayer(nn.Module):
    """A ProjectedLSTMLayer's weights inside ``nn.LSTM``; same call signature as the layer."""

    def __init__(self, layer: ProjectedLSTMLayer) -> None:
        super().__init__()
        self.proj_size = layer.proj_size
        self.lstm = nn.LSTM(layer.input_size, layer.cell_size, proj_size=layer.proj_size, batch_first=True)
        with torch.no_grad():
            self.lstm.weight_ih_l0.copy_(layer.weight_ih)
            self.lstm.weight_hh_l0.copy_(layer.weight_hh)
            self.lstm.bias_ih_l0.copy_(layer.bias)  # forget bias already folded in
            self.lstm.bias_hh_l0.zero_()
            self.lstm.weight_hr_l0.copy_(layer.weight_proj)
        self.lstm.to(layer.weight_ih.dtype)

    def forward(self, x: torch.Tensor, batch_sizes: list[int], state: State) -> tuple[torch.Tensor, State]:
        h, c = state
        running = torch.tensor(batch_sizes, dtype=torch.long)  # (T,) rows still running at each step
        lengths = (running.unsqueeze(0) > torch.arange(x.shape[0]).unsqueeze(1)).sum(1)  # (B,)
        steps = len(batch_sizes)
        packed = pack_padded_sequence(x[:, :steps], lengths, batch_first=True, enforce_sorted=True)
        out, (h_n, c_n) = self.lstm(packed, (h.unsqueeze(0).contiguous(), c.unsqueeze(0).contiguous()))
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])  # (B, T, P), zeros past ends
        return out, (h_n[0], c_n[0])


def use_fused_lstm(bilm: BiLM, allow_clips: bool = False) -> None:
    """Replace every layer of ``bilm``'s stacks by a FusedLayer (inference only; weights are copied)."""
    lstm = bilm.config.lstm
    if (lstm.cell_clip or lstm.proj_clip) and not allow_clips:
        raise UsageError("this model clips its LSTM (cell_clip/proj_clip), which nn.LSTM cannot do: results would "
                         "differ; pass allow_clips=True to accept that")
    if lstm.cell_clip or lstm.proj_clip:
        warnings.warn("fused nn.LSTM ignores the cell and projection clips: outputs differ where they would fire")
    for stack in (bilm.forward_stack, bilm.backward_stack):
        stack.layers = nn.ModuleList(FusedLayer(layer) if isinstance(layer, ProjectedLSTMLayer) else layer
                                     for layer in stack.layers)
