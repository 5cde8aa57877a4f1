"""``Elmo``: the module a downstream model holds, a (frozen) biLM plus one learned readout per representation.

It sits above the model files (not in ``elmo.model``) because ``Elmo.from_pretrained`` loads a biLM by name or path
through ``elmo.io.load`` (docs/architecture.md)."""

from __future__ import annotations

import inspect
from numbers import Real
from pathlib import Path
from typing import Literal, Sequence

import torch
from torch import nn

from elmo.data.chars import check_id_dtype
from elmo.errors import InputTypeError, UsageError
from elmo.io.load import load_bilm
from elmo.limits import MAX_READOUTS, is_whole
from elmo.model.bilm import BiLM, BiLMOutput, remove_sentence_boundaries
from elmo.model.engine import InferenceEngine, word_list
from elmo.model.mix import ComponentProjection, ScalarMix, check_flag


DEFAULT_PROJECTION_DIM = 512  # the width of output="projection" when projection_dim is not given


def _check_arguments(output: str, num_output_representations: int, dropout: float, do_layer_norm: bool,
                     scalar_mix_parameters: Sequence[float] | None, projection_dim: int | None) -> None:
    """Refuse, in one line, an argument ``Elmo`` cannot honour: a value out of range, or an option of the other
    readout (a projection has no layer weights to norm or fix; a mix's width is the biLM's), which would otherwise
    be silently ignored."""
    if output not in ("mix", "projection"):
        raise UsageError(f"Elmo: output must be 'mix' or 'projection', got {output!r}")
    if not is_whole(num_output_representations, 1, MAX_READOUTS):
        raise UsageError(f"Elmo: num_output_representations must be a whole number from 1 to {MAX_READOUTS:,}, "
                         f"got {num_output_representations!r}")
    if isinstance(dropout, bool) or not isinstance(dropout, Real) or not 0.0 <= dropout < 1.0:  # numpy's too
        raise UsageError(f"Elmo: dropout must be a number in [0, 1), got {dropout!r}")
    do_layer_norm = check_flag(do_layer_norm, "do_layer_norm", "Elmo")
    if output == "projection" and (do_layer_norm or scalar_mix_parameters is not None):
        name = "do_layer_norm" if do_layer_norm else "scalar_mix_parameters"
        raise UsageError(f"Elmo: {name} applies to output='mix' only (a projection weighs no layers); drop it, or "
                         "use output='mix'")
    if output == "mix" and projection_dim is not None:
        raise UsageError(f"Elmo: projection_dim={projection_dim!r} applies to output='projection' only (a mix is "
                         "as wide as the biLM's layers); drop it, or pass output='projection'")


class Elmo(nn.Module):
    """Character ids (B, T, W) -> ``num_output_representations`` tensors (B, T, D) and the mask (B, T).

    ``output="mix"`` (the paper): each representation is a ScalarMix of the L + 1 layers (D = 2P).
    ``output="projection"``: each is the 1 + 2L components times a trainable matrix (D = ``projection_dim``).
    The biLM is frozen (and run without autograd) unless ``requires_grad=True``. Returns a dict with keys
    ``elmo_representations`` and ``mask``, the same as AllenNLP's ``Elmo``.

    A frozen biLM runs through an ``InferenceEngine`` (packed matrices, remembered token vectors) built on the first
    call from the weights as they are then, and built again whenever they have changed since: an in-place change,
    ``load_state_dict`` (of the biLM or of a module holding it), ``.to()``/``.half()``, new parameter tensors or
    storage (``p.data = ...``). A change that PyTorch does not count (``p.data.copy_(...)``) or a state dict loaded
    into a part of the biLM (``elmo.bilm.forward_stack.load_state_dict``) needs ``drop_engine()``. Once any biLM
    parameter requires a gradient, the biLM itself runs, with autograd where gradients are enabled and without under
    ``torch.no_grad()``: an optimizer may change weights it trains without a trace (a fused step), so no snapshot of
    them is used (evaluation while fine-tuning is then about half as fast as through the engine).
    """

    def __init__(self, bilm: BiLM, num_output_representations: int = 1, requires_grad: bool = False,
                 do_layer_norm: bool = False, dropout: float = 0.5, keep_sentence_boundaries: bool = False,
                 scalar_mix_parameters: Sequence[float] | None = None,
                 output: Literal["mix", "projection"] = "mix", projection_dim: int | None = None,
                 vocab_to_cache: Sequence[str] | None = None) -> None:
        """``projection_dim``: the width of ``output="projection"`` (default 512); the options of the other readout
        (``do_layer_norm``, ``scalar_mix_parameters`` for a projection, ``projection_dim`` for a mix) are refused,
        not ignored. ``vocab_to_cache`` (AllenNLP's name): words whose token vectors the frozen biLM computes once,
        when its engine is built (the same values, sooner); the inputs stay character ids (``batch_to_ids``)."""
        super().__init__()
        if not isinstance(bilm, BiLM):
            raise InputTypeError(f"Elmo takes a BiLM, got {type(bilm).__name__}; for AllenNLP's Elmo(options_file, "
                            "weight_file, n) write Elmo.from_pretrained(options=options_file, weights=weight_file, "
                            "num_output_representations=n)")
        _check_arguments(output, num_output_representations, dropout, do_layer_norm, scalar_mix_parameters,
                         projection_dim)
        requires_grad = check_flag(requires_grad, "requires_grad", "Elmo")
        keep_sentence_boundaries = check_flag(keep_sentence_boundaries, "keep_sentence_boundaries", "Elmo")
        self.bilm = bilm
        self.cache_words = None if vocab_to_cache is None else word_list(vocab_to_cache)  # None: the biLM's own
        self._engine: InferenceEngine | None = None
        self._engine_weights: tuple = ()
        # the storage the engine's weights were read from, held so that no new tensor can take one's address while
        # _engine_weights names it (data_ptr would then match new weights)
        self._engine_storages: list[torch.UntypedStorage] = []
        for p in self.bilm.parameters():  # the initial state: forward follows the parameters' flags
            p.requires_grad_(requires_grad)
        self.output = output
        self.keep_sentence_boundaries = keep_sentence_boundaries
        self.dropout = nn.Dropout(p=float(dropout))
        n_layers = bilm.config.n_output_layers
        if output == "mix":
            # fixed, non-trainable weights when scalar_mix_parameters is given (AllenNLP's meaning)
            self.readouts = nn.ModuleList(
                ScalarMix(n_layers, do_layer_norm=do_layer_norm, initial_weights=scalar_mix_parameters,
                          trainable=scalar_mix_parameters is None)
                for _ in range(num_output_representations))
        else:
            self.readouts = nn.ModuleList(
                ComponentProjection(bilm.config.lstm.projection_dim, bilm.config.lstm.n_layers,
                                    DEFAULT_PROJECTION_DIM if projection_dim is None else projection_dim)
                for _ in range(num_output_representations))

    @classmethod
    def from_pretrained(cls, model: str | Path | None = None, options: str | Path | None = None,
                        weights: str | Path | None = None, stateful: bool = False, **kwargs) -> "Elmo":
        """``Elmo`` over a biLM loaded from our directory or from the official options + weights pair.
        ``stateful=True``: AllenNLP's mode (LSTM state carried from batch to batch), for its exact numbers.
        AllenNLP's positional habit, ``from_pretrained(options_file, weight_file)``, is refused with the keywords to
        write (the resolver's own message names the command line's flags)."""
        if model is not None and (options is not None or weights is not None):
            raise UsageError("Elmo.from_pretrained: give a model (a name or a folder) or options= and weights=, not "
                             "both; AllenNLP's Elmo(options_file, weight_file, n) is Elmo.from_pretrained("
                             "options=options_file, weights=weight_file, num_output_representations=n)")
        accepted = inspect.signature(cls.__init__).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in accepted.values()):  # a subclass's **kwargs: its own to judge
            unknown = sorted(set(kwargs) - set(accepted) - {"self", "bilm"})
            if unknown:  # before the model is read, and in one line
                raise UsageError(f"{cls.__name__}.from_pretrained: no argument {unknown[0]!r}; the others are "
                                 f"{cls.__name__}'s own ({', '.join(a for a in accepted if a not in ('self', 'bilm'))})")
        return cls(load_bilm(model, options, weights, stateful=stateful), **kwargs)

    def __getstate__(self) -> dict:
        """Copies and pickles leave the engine out (its packed matrices and buffers cannot be copied): a copy builds its
        own on first use."""
        return {**self.__dict__, "_engine": None, "_engine_weights": (), "_engine_storages": []}

    def _weights_version(self) -> tuple[int | tuple[int, int, torch.dtype, torch.device, int], ...]:
        """How many state dicts the biLM loaded, then for each parameter: which tensor it is, where its storage
        lies, its type and device, and how often it was changed in place (a ``copy_``, an optimizer step; tensors
        made under ``torch.inference_mode()`` count none). The engine is a snapshot, rebuilt when this differs."""
        return (self.bilm.state_loads,) + tuple(
            (id(p), p.data_ptr(), p.dtype, p.device, 0 if p.is_inference() else p._version)
            for p in self.bilm.parameters())

    def drop_engine(self) -> None:
        """Forget the inference engine (the next frozen call builds a new one from the weights as they are)."""
        self._engine, self._engine_storages = None, []

    def reset_states(self) -> None:
        """Stateful mode: forget the carried LSTM states, the next batch starts from zero."""
        self.bilm.reset_states()
        if self._engine is not None:
            self._engine.reset_states()

    def load_state_dict(self, *args, **kwargs):
        self.drop_engine()  # new weights
        return super().load_state_dict(*args, **kwargs)

    def _apply(self, fn, *args, **kwargs):
        self.drop_engine()  # moved or cast weights
        return super()._apply(fn, *args, **kwargs)

    @property
    def output_dim(self) -> int:
        first = self.readouts[0]
        return first.projection.out_features if isinstance(first, ComponentProjection) else self.bilm.config.output_dim

    def get_output_dim(self) -> int:
        """AllenNLP's name for ``output_dim``."""
        return self.output_dim

    def mix_penalty(self, coef: float = 0.001) -> torch.Tensor:
        """bilm-tf's regulariser of the learned mixes: ``coef`` x the sum of squared pre-softmax weights (add it to
        the task loss; the paper uses 0.001). Zero for projection readouts and fixed mixes. ``coef`` is checked: a
        NaN or negative one would poison or invert the loss without a word."""
        if isinstance(coef, bool) or not isinstance(coef, Real) or not 0.0 <= coef < float("inf"):
            raise UsageError(f"Elmo.mix_penalty: coef must be a finite number of 0 or more (the paper's is 0.001), "
                             f"got {coef!r}")
        terms = [r.weights.pow(2).sum() for r in self.readouts if isinstance(r, ScalarMix) and r.weights.requires_grad]
        return coef * torch.stack(terms).sum() if terms else torch.zeros(())

    def forward(self, char_ids: torch.Tensor | None = None, word_inputs: torch.Tensor | None = None, *,
                inputs: torch.Tensor | None = None) -> dict[str, list[torch.Tensor] | torch.Tensor]:
        """char_ids (B, T, W) from ``batch_to_ids``, or (..., T, W) with more leading axes (several passages or
        choices per example): the outputs then have the same leading axes, (..., T, D), and the mask (..., T).
        ``inputs=`` is AllenNLP's name for them; AllenNLP's ``word_inputs`` (word ids into ``vocab_to_cache``) are
        refused: here the cache speeds up character ids, which are always the input."""
        if word_inputs is not None:
            raise UsageError("Elmo takes character ids only (batch_to_ids(sentences)), not AllenNLP's word_inputs: "
                             "vocab_to_cache here precomputes the words' vectors for character-id input")
        if inputs is not None:
            if char_ids is not None:
                raise UsageError("Elmo: give the character ids once (positionally, or as inputs=), not both")
            char_ids = inputs
        if not isinstance(char_ids, torch.Tensor) or char_ids.dim() < 3:
            raise InputTypeError("Elmo takes character ids (batch, tokens, characters): pass batch_to_ids(sentences), "
                            f"not {type(char_ids).__name__}"
                            + (f" of shape {tuple(char_ids.shape)}" if isinstance(char_ids, torch.Tensor) else ""))
        if char_ids.dtype.is_floating_point or char_ids.dtype.is_complex or char_ids.dtype == torch.bool:
            raise InputTypeError(f"Elmo takes integer character ids, got {char_ids.dtype}")
        check_id_dtype(char_ids.dtype, self.bilm.config.char_cnn.n_characters)
        char_ids = char_ids.long()  # int32 ids (from numpy, other tools) index the embedding like int64 ones
        if char_ids.dim() > 3:
            lead = char_ids.shape[:-2]
            out = self._forward(char_ids.reshape(-1, *char_ids.shape[-2:]))  # (N, T, W)
            return {"elmo_representations": [r.reshape(*lead, *r.shape[1:]) for r in out["elmo_representations"]],
                    "mask": out["mask"].reshape(*lead, out["mask"].shape[-1])}
        return self._forward(char_ids)

    def _forward(self, char_ids: torch.Tensor) -> dict[str, list[torch.Tensor] | torch.Tensor]:
        # the parameters' own flags decide, so unfreezing them after construction (as with AllenNLP) fine-tunes
        if any(p.requires_grad for p in self.bilm.parameters()):
            self.drop_engine()  # an optimizer may change these weights uncounted: no snapshot outlives tuning
            out = self.bilm(char_ids)
        else:
            weights = self._weights_version()
            if self._engine is None or self._engine.device != char_ids.device or self._engine_weights != weights:
                self._engine = InferenceEngine.build(self.bilm, cache_words=self.cache_words,
                                                    device=char_ids.device)
                # stateful mode: one stream of carried states whichever path runs, kept when the engine is rebuilt
                # (after fine-tuning, new weights), as AllenNLP's one encoder keeps them
                self._engine.carrier = self.bilm.state_carrier
                self._engine_weights = weights
                self._engine_storages = [p.untyped_storage() for p in self.bilm.parameters()]
            out = self._engine(char_ids)
            # inference-mode tensors cannot enter autograd (a trainable readout): normal copies of what is read
            mixes = any(isinstance(r, ScalarMix) for r in self.readouts)
            parts = not all(isinstance(r, ScalarMix) for r in self.readouts)
            copy = lambda tensors, wanted: [t.clone() for t in tensors] if wanted else tensors
            out = BiLMOutput(copy(out.layers, mixes), out.mask.clone(), out.token_vectors.clone(),
                             copy(out.forward_layers, parts), copy(out.backward_layers, parts))
        representations = []
        for readout in self.readouts:
            if isinstance(readout, ScalarMix):
                # the layers are zero at padding; a layer-normed mix is not, and AllenNLP returns it as it is
                rep = readout(out.layers, out.mask)  # (B, T+2, 2P)
            else:
                rep = readout(out.token_vectors, out.forward_layers, out.backward_layers)  # (B, T+2, D)
                rep = rep * out.mask.unsqueeze(-1).to(rep.dtype)  # the projection's bias stays off the padding
            if self.keep_sentence_boundaries:
                mask = out.mask
            else:
                rep, mask = remove_sentence_boundaries(rep, out.mask)  # (B, T, D)
            representations.append(self.dropout(rep))
        if not representations:
            mask = out.mask if self.keep_sentence_boundaries else out.mask[:, 2:]
        return {"elmo_representations": representations, "mask": mask}
