"""Frozen inference: an ``InferenceEngine`` is a snapshot of a biLM's weights laid out for fast forward passes.

The trainable ``BiLM`` holds parameters and nothing derived from them. What inference derives from the weights
lives here, built once by ``InferenceEngine.build`` and dropped with the engine:

* the LSTM matrices pre-packed for BLAS (``elmo.model.packed``; the first layer's input projections computed once
  per distinct token vector), in the chosen precision: "fp32" (exact), "bf16"
  (matrix products and convolutions in bfloat16: vectors about 0.5 % off, single values by 1e-2 to 3e-2) or "int8"
  (the LSTM products with int8 weights and dynamically quantised inputs, CPU only: vectors 3-7 % off, single values
  by up to 0.7 on the shipped en); LSTM states and gates stay float32 in every mode;
* a copy of the character encoder; in fp32 on the CPU its highway and projection matrices are packed instead
  (``FrozenLinear``), and only the character embedding and the convolutions are copied;
* a token cache (precomputed token vectors of a word list) and a memo of recently seen words' token vectors;
* a reusable buffer for the input projections, per thread, freed by ``close()``;
* in stateful mode, the states carried from batch to batch.

The engine never changes the module it was built from (no ``.to``, ``.eval``, no attributes written). It does not
watch the weights (fused optimisers and edits through ``.data`` leave no trace to watch): it keeps the weights it was
built from, every layer of them, until ``rebuild()``. A deterministic engine may be called from several threads at
once (the memo takes a lock; the buffers are per thread); a stateful one carries one stream of states, so its calls
belong to one thread, in order; ``rebuild()`` and ``close()`` wait for no running call, so none may run then.
"""

from __future__ import annotations

import copy
import hashlib
import threading
from typing import Sequence

import torch

from elmo.config import ElmoConfig
from elmo.devices import check_device
from elmo.errors import InputTypeError, UsageError
from elmo.model.bilm import BiLM, BiLMOutput, Runner, run_bilm
from elmo.model.char_cnn import CharEncoder, TokenLinears, unique_rows
from elmo.model.lstm import PROJECTION_BLOCK_BYTES, ProjectedLSTMLayer, State, run_layer, run_stack
from elmo.model.packed import DistinctRows, FrozenLinear, right_multiplier
from elmo.model.state import StateCarrier
from elmo.model.token_cache import TokenCache, TokenMemo, build_token_cache

PRECISIONS = {"fp32": (None, None), "bf16": (torch.bfloat16, torch.bfloat16), "int8": (None, torch.qint8)}
MEMO_WORDS = 32_768  # words whose token vectors an engine remembers (P floats each: 64 MB at P = 512)


class ProjectionScratch(threading.local):
    """One reusable output buffer per thread for the input projections; layers run one after another, and no view
    of a block outlives its layer's time loop."""

    buffer: torch.Tensor | None = None

    def take(self, rows: int, cols: int, like: torch.Tensor) -> torch.Tensor:
        """A (rows, cols) buffer with ``like``'s dtype and device, contents undefined."""
        old = self.buffer
        same_kind = old is not None and (old.shape[1], old.dtype, old.device) == (cols, like.dtype, like.device)
        if not same_kind or old.shape[0] < rows:
            # grows by doubling up to one block (a rare longer step gets exactly what it needs)
            block = PROJECTION_BLOCK_BYTES // (cols * like.element_size())
            capacity = max(rows, min(2 * old.shape[0] if same_kind else 0, block))
            self.buffer = None  # free the old buffer before making the new one
            with torch.inference_mode(False):  # a normal tensor: writable in and outside inference mode
                self.buffer = torch.empty(capacity, cols, dtype=like.dtype, device=like.device)
        return self.buffer[:rows]


class FrozenLayer:
    """One LSTM layer's weights as multipliers (W_hh^T and W_proj^T packed, and also in column blocks for one-row
    products; W_ih^T, which multiplies a whole layer's positions at once, packed only by oneDNN: ``elmo.model.packed``)
    and a copy of its bias."""

    def __init__(self, layer: ProjectedLSTMLayer, lstm_dtype: torch.dtype | None, device: torch.device,
                 scratch: ProjectionScratch | None, first: bool = False) -> None:
        """``first``: the stack's first layer, whose inputs (token vectors) repeat: each distinct one is multiplied
        once (``DistinctRows``)."""
        with torch.no_grad():
            weights = [w.detach().to(device) for w in (layer.weight_ih, layer.weight_hh, layer.weight_proj)]
            weight_ih, weight_hh, weight_proj = weights
            input_product = right_multiplier(weight_ih, lstm_dtype, many_rows=True)  # a whole layer's positions
            self.products = (DistinctRows(input_product) if first else input_product,
                             right_multiplier(weight_hh, lstm_dtype, one_row_blocks=True),  # batch 1 streams it
                             right_multiplier(weight_proj, lstm_dtype, one_row_blocks=True))
            self.bias = layer.bias.detach().to(device).clone()  # (4C,)
        self.cell_clip, self.proj_clip = layer.cell_clip, layer.proj_clip
        self.scratch = scratch

    def __call__(self, x: torch.Tensor, batch_sizes: list[int], state: State) -> tuple[torch.Tensor, State]:
        buffer = self.scratch.take if self.scratch is not None else None
        return run_layer(x, batch_sizes, state, self.products, self.bias, self.cell_clip, self.proj_clip, buffer)


def word_list(words: object) -> list[str]:
    """``cache_words`` (or ``Elmo``'s ``vocab_to_cache``) as a list, refused in one line when it is no list of
    words (a string would cache letters)."""
    listed = None if isinstance(words, (str, bytes)) or not hasattr(words, "__iter__") else list(words)
    if listed is None or not all(isinstance(w, str) for w in listed):
        raise InputTypeError(f"cache_words must be a list of words (strings), e.g. ['the', 'bank']; got "
                             f"{'one string' if listed is None else 'a list holding other things'}")
    return listed


def _encoder_copy(source: CharEncoder, device: torch.device, packed: bool) -> CharEncoder:
    """The engine's own copy of the character encoder on ``device``, so that a later change to the biLM's weights
    cannot reach the token layer while the LSTM layers keep the old ones (the memo would then hold both). With
    ``packed`` (fp32 on the CPU) the engine runs packed copies of the highway and projection layers (``FrozenLinear``):
    where the source already lives on ``device``, those layers' parameters are shared, not copied (never read by the
    engine's forward pass: 71 MB saved for the original-size model); elsewhere everything is copied and moved."""
    if not packed or source.projection.weight.device != device:
        return copy.deepcopy(source).to(device)
    unused = [p for module in (*source.highways, source.projection) for p in module.parameters()]
    return copy.deepcopy(source, {id(p): p for p in unused})  # (memo: these objects stay themselves)


class InferenceEngine:
    """Character ids (B, T, W) -> ``BiLMOutput``, without autograd, from frozen copies of a biLM's weights."""

    def __init__(self, bilm: BiLM, precision: str = "fp32", cache_words: Sequence[str] | None = None,
                 device: str | torch.device | None = None, stateful: bool | None = None,
                 memo_words: int = MEMO_WORDS) -> None:
        """Prefer ``InferenceEngine.build``; the arguments are the same."""
        check_device(device)
        if not isinstance(precision, str) or precision not in PRECISIONS:
            raise UsageError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        self.bilm = bilm
        self.precision = precision
        self.device = torch.device(device) if device is not None else bilm.char_encoder.projection.weight.device
        self.stateful = bilm.stateful if stateful is None else stateful
        # the model's own list is checked too: it is set by assignment (elmo.bilm.cache_words = words), where a
        # string would cache its letters and a None in the list fail deep inside the first forward pass
        words = bilm.cache_words if cache_words is None else cache_words
        self.cache_words = None if words is None else word_list(words)
        self.memo_words = memo_words
        self.carrier = StateCarrier()
        self.rebuild()

    @classmethod
    def build(cls, bilm: BiLM, precision: str = "fp32", cache_words: Sequence[str] | None = None,
              device: str | torch.device | None = None, stateful: bool | None = None) -> "InferenceEngine":
        """An engine over ``bilm``'s current weights on ``device`` (default: where the weights are) in ``precision``
        ("fp32", "bf16", "int8"). ``cache_words``: precompute these words' token vectors (default: the model's own
        ``bilm.cache_words``, usually none; ``[]``: no cache); other words still work. ``stateful``: default the model's mode."""
        return cls(bilm, precision, cache_words, device, stateful)

    @property
    def config(self) -> ElmoConfig:
        return self.bilm.config

    @property
    def tokenizer_name(self) -> str | None:
        return self.bilm.tokenizer_name

    def arithmetic(self) -> dict[str, str]:
        """What this engine's vectors depend on besides the weights, down to their last bits: the precision, the
        words whose token layer was precomputed (by batch, a little off the computed one: their sha256) and the kind
        of device. The last two only where they are not the default (no cache, the CPU). An embedding run resumes
        only parts written with the same."""
        found = {"precision": self.precision}
        if self.cache_words:
            found["cache_words_sha256"] = hashlib.sha256("\n".join(self.cache_words).encode("utf-8")).hexdigest()
        if self.device.type != "cpu":
            found["device"] = self.device.type
        return found

    def rebuild(self) -> None:
        """Copy the weights again (after they changed); forgets remembered tokens and carried states."""
        self.close()
        encoder_dtype, lstm_dtype = PRECISIONS[self.precision]
        if lstm_dtype == torch.qint8 and self.device.type != "cpu":
            raise UsageError("the int8 mode runs on the CPU only; use fp32 or bf16 on other devices")
        packed = encoder_dtype is None and self.device.type == "cpu"  # highway and projection by FrozenLinear
        self.encoder: CharEncoder | None = _encoder_copy(self.bilm.char_encoder, self.device, packed)
        self.token_dtype = self.encoder.projection.weight.dtype
        self.encoder_dtype = encoder_dtype
        self.token_linears = self._frozen_linears() if packed else None
        self.scratch = ProjectionScratch() if lstm_dtype is None else None
        self.layers = [[FrozenLayer(layer, lstm_dtype, self.device, self.scratch, first=index == 0)
                        for index, layer in enumerate(stack.layers)]
                       for stack in (self.bilm.forward_stack, self.bilm.backward_stack)]
        self.skip = [stack.use_skip_connections for stack in (self.bilm.forward_stack, self.bilm.backward_stack)]
        self.memo = TokenMemo(self.memo_words)
        self.token_cache: TokenCache | None = None
        if self.cache_words:
            width = self.config.char_cnn.max_characters_per_token
            self.token_cache = build_token_cache(self._encode_computed, self.cache_words, width, self.device)
        self.closed = False

    def close(self) -> None:
        """Free what the engine holds (packed matrices, encoder copy, memo, buffers); ``rebuild()`` makes them
        again. A closed engine refuses to run (with no LSTM layers it would give the token layer alone)."""
        self.closed = True
        self.layers, self.memo, self.token_cache, self.scratch = [[], []], None, None, None
        self.encoder, self.token_linears = None, None
        self.carrier.reset()

    def forget_tokens(self) -> None:
        """Empty the memo of recently seen words (so later numbers never depend on earlier inputs' order). A closed
        engine stays closed: this makes no memo that would let it run."""
        if not self.closed:
            self.memo = TokenMemo(self.memo_words)

    def reset_states(self) -> None:
        """Forget the carried LSTM states (stateful mode); the next batch starts from zero."""
        self.carrier.reset()

    @torch.inference_mode()
    def __call__(self, char_ids: torch.Tensor) -> BiLMOutput:
        """char ids (B, T, W) without sentence boundaries -> every layer (``BiLM.forward``'s contract)."""
        self._check_open()
        runner = Runner(self._encode, self._stacks, self.token_dtype)
        return run_bilm(self.config, runner, char_ids.to(self.device), self.carrier if self.stateful else None)

    @torch.inference_mode()
    def run_stack(self, direction: int, x: torch.Tensor, batch_sizes: list[int],
                  states: list[State]) -> tuple[list[torch.Tensor], list[State]]:
        """One direction's LSTM layers alone (0 forward, 1 backward): x (B, T, P) sorted longest first, the rows
        running at each step, each layer's (h, c) -> every layer's output (B, T, P) and final state."""
        self._check_open()
        return run_stack(self.layers[direction], x, batch_sizes, states, self.skip[direction])

    def _check_open(self) -> None:
        if self.closed:
            raise UsageError("this inference engine was closed; call rebuild() first")

    def _stacks(self, x_forward: torch.Tensor, x_backward: torch.Tensor, batch_sizes: list[int],
                forward_states: list[State], backward_states: list[State]):
        """Both directions' stacks, one after the other."""
        return (self.run_stack(0, x_forward, batch_sizes, forward_states),
                self.run_stack(1, x_backward, batch_sizes, backward_states))

    def _encode(self, char_ids: torch.Tensor) -> torch.Tensor:
        """(N, W) -> (N, P): each distinct token once, cached or remembered words looked up, the others computed."""
        if char_ids.shape[0] == 0:
            return self._encode_computed(char_ids)  # (0, P)
        unique, inverse = unique_rows(char_ids)  # (U, W), (N,)
        if self.token_cache is None:
            return self.memo.encode(unique, self._encode_computed)[inverse]
        found, index = self.token_cache.lookup(unique)  # (U,), (U,)
        vectors = self.token_cache.vectors.to(unique.device)  # (V, P)
        if bool(found.all()):
            return vectors[index][inverse]
        out = vectors.new_empty(unique.shape[0], vectors.shape[1])  # (U, P)
        out[found] = vectors[index[found]]
        out[~found] = self.memo.encode(unique[~found], self._encode_computed)
        return out[inverse]

    def _encode_computed(self, char_ids: torch.Tensor) -> torch.Tensor:
        """The character CNN itself, in the engine's precision: (N, W) -> (N, P) float32."""
        if self.encoder_dtype is not None and char_ids.device.type == "cpu":
            with torch.autocast("cpu", dtype=self.encoder_dtype):
                return self.encoder(char_ids).float()
        return self.encoder(char_ids, self.token_linears)

    def _frozen_linears(self) -> TokenLinears:
        """The encoder's highway and projection layers packed for products of many rows (float32 on the CPU)."""
        with torch.no_grad():
            return TokenLinears([(FrozenLinear(h.gate), FrozenLinear(h.transform)) for h in self.encoder.highways],
                                FrozenLinear(self.encoder.projection))
