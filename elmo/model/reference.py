"""The plain, slow forward pass kept as the exactness reference for tests and benchmarks.

It computes what AllenNLP computes, the way AllenNLP computes it: the character CNN over all W slots of every
slot (padding included, masked afterwards), and each LSTM layer one time step at a time over the whole batch
with masked state updates, rows in the caller's order. Every fast path is measured against it.
"""

from __future__ import annotations

import torch

from elmo.data.chars import add_sentence_boundaries
from elmo.model.bilm import BiLM, BiLMOutput, _gather_time, reverse_index
from elmo.model.lstm import LSTMStack, reference_layer_forward


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


@torch.no_grad()
def reference_forward(bilm: BiLM, char_ids: torch.Tensor) -> BiLMOutput:
    """Same contract as ``BiLM.forward`` (stateful mode included), computed the slow, obvious way."""
    ids, lengths = add_sentence_boundaries(char_ids)  # (B, T+2, W), (B,)
    batch, steps, width = ids.shape
    mask = torch.arange(steps, device=ids.device) < lengths.unsqueeze(1)  # (B, T+2)
    tokens = bilm.char_encoder(ids.view(-1, width), trim=False).view(batch, steps, -1)  # (B, T+2, P), all slots
    tokens = tokens * mask.unsqueeze(-1)
    h0, c0 = bilm._initial_state(batch, tokens)  # (2, L, B, P), (2, L, B, C)
    fwd, fwd_final = _reference_stack(bilm.forward_stack, tokens, lengths, h0[0], c0[0])
    flip = reverse_index(lengths, steps)
    bwd, bwd_final = _reference_stack(bilm.backward_stack, _gather_time(tokens, flip), lengths, h0[1], c0[1])
    bwd = [_gather_time(out, flip) for out in bwd]
    if bilm.stateful:
        bilm._carrier.update((torch.stack([torch.stack([h for h, _ in fwd_final]), torch.stack([h for h, _ in bwd_final])]),
                              torch.stack([torch.stack([c for _, c in fwd_final]), torch.stack([c for _, c in bwd_final])])))
    layers = [torch.cat([tokens, tokens], -1)] + [torch.cat(pair, -1) for pair in zip(fwd, bwd)]
    return BiLMOutput(layers, mask, tokens, fwd, bwd)
