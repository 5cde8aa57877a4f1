"""What a trained language model says about text: perplexity, sentence scores, likely substitutes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral
from pathlib import Path
from typing import Callable, Sequence

import torch
from tqdm.auto import tqdm

from elmo.data.chars import batch_to_ids
from elmo.data.corpus import LMBatcher, SentenceSource, expand_files
from elmo.data.vocab import Vocabulary
from elmo.errors import InputTypeError, UsageError
from elmo.limits import MAX_TOKENS_PER_LINE, is_whole
from elmo.model.bilm import BiLM, BiLMOutput
from elmo.model.engine import InferenceEngine
from elmo.training.lm import LanguageModel
from elmo.training.softmax import LMSoftmax


@dataclass
class Perplexity:
    forward: float
    backward: float
    tokens: int  # predictions per direction (n + 1 per sentence: every word and </S>)
    unknown: int = 0  # forward targets that are <UNK>: a high share means a vocabulary or tokenizer mismatch
    words: int = 0  # words of the text (the forward targets but each sentence's </S>)

    @property
    def unknown_share(self) -> float:
        """The share of the text's words that are not in the vocabulary (</S> is no word of the text)."""
        return self.unknown / self.words if self.words else 0.0

    @property
    def mean(self) -> float:
        """The geometric mean of the two directions: bilm-tf's reported perplexity.

        Each direction's figure is exp of its mean loss over all predictions. bilm-tf's ``test()`` averages per
        batch instead (and stops at the first row that runs out of text); the two agree when every batch is full,
        and differ by a fraction of a percent through the last, partly empty batch of a pass."""
        return math.sqrt(self.forward * self.backward)


@torch.inference_mode()
def perplexity(model: LanguageModel, vocab: Vocabulary, files: Sequence[str | Path],
               tokenizer: Callable[[str], list[str]] = str.split, batch_size: int = 64, unroll_steps: int = 20,
               max_sentences: int | None = None, progress: bool = False) -> Perplexity:
    """Full-softmax perplexity of each direction over the files, one pass, state carried from batch to batch.

    Each row is a stream of whole sentences, as in training (and bilm-tf's evaluation), its state carried from one
    sentence to the next; out-of-vocabulary targets count as ``<UNK>``. ``zero_state_perplexity``: as embedding reads.
    """
    if not isinstance(model, LanguageModel):  # a BiLM has no softmax to predict words with
        raise InputTypeError(f"perplexity takes a LanguageModel (load_language_model gives its parts), got "
                             f"{type(model).__name__}")
    check_counts("perplexity", batch_size=batch_size, unroll_steps=unroll_steps, max_sentences=max_sentences)
    check_vocabulary(model.softmax, vocab)
    model.eval()
    device = model.softmax.weight.device
    engine = InferenceEngine.build(model.bilm, stateful=False)  # the LSTMs' matrices packed once for the pass
    files = expand_files(files)
    batchers = [LMBatcher(SentenceSource(files, tokenizer, shuffle=False, loop=False, limit=max_sentences),
                          vocab, batch_size, unroll_steps, reverse=bool(d),
                          width=model.bilm.config.char_cnn.max_characters_per_token) for d in (0, 1)]
    states = model.zero_states(batch_size, device)
    totals, counts, unknown, words = [0.0, 0.0], [0, 0], 0, 0
    bar = tqdm(unit="tok", disable=not progress, desc="perplexity")
    for direction, batcher in enumerate(batchers):
        while (batch := batcher.next_batch()) is not None:
            # only rows with text left run (one long line leaves the other rows empty for most of the pass) and
            # only real targets reach the softmax; the other rows' states stay as they were
            rows = batch.targets.ge(0).any(1).nonzero().squeeze(1)  # (R,)
            if len(rows) == 0:
                continue
            on_device = rows.to(device)
            active = [(h[on_device], c[on_device]) for h, c in states[direction]]
            tokens = model.encode_tokens(batch.char_ids[rows].to(device))  # (R, T, P)
            outputs, active = engine.run_stack(direction, tokens, [len(rows)] * tokens.shape[1], active)
            hidden = outputs[-1]  # (R, T, P)
            for (h, c), (new_h, new_c) in zip(states[direction], active):
                h[on_device], c[on_device] = new_h, new_c
            targets = batch.targets[rows].to(device).reshape(-1)  # (R*T,)
            real = targets.ge(0)
            # in blocks of SCORE_POSITIONS: the logits of R x T positions over the vocabulary at once were 16 GB
            # at --batch-size 4096 with 50,000 words
            totals[direction] -= float(_target_log_probs(model.softmax, hidden.reshape(-1, hidden.shape[-1])[real],
                                                         targets[real]).sum())
            counts[direction] += batch.tokens
            if direction == 0:
                unknown += int((targets == vocab.unk).sum())
                words += int((real & targets.ne(vocab.eos)).sum())
            bar.update(batch.tokens)
            if counts[direction]:
                bar.set_postfix(ppl=f"{math.exp(totals[direction] / counts[direction]):.1f}",
                                direction="forward" if direction == 0 else "backward")
    bar.close()
    if counts[0] == 0:
        raise UsageError(f"{_names(files)}: no text to evaluate (no non-empty line)")
    return Perplexity(math.exp(totals[0] / counts[0]), math.exp(totals[1] / counts[1]), counts[0], unknown, words)


@torch.inference_mode()
def zero_state_perplexity(model: LanguageModel, vocab: Vocabulary, files: Sequence[str | Path],
                          tokenizer: Callable[[str], list[str]] = str.split, max_sentences: int | None = None,
                          progress: bool = False) -> Perplexity:
    """Full-softmax perplexity of each direction with every sentence read on its own from the zero state: the text
    as embedding reads it (``Embedder``'s default), where ``perplexity`` carries the state from one sentence to the
    next. A model fine on a carried state and poor from zeros gives poor embeddings."""
    if not isinstance(model, LanguageModel):  # a BiLM has no softmax to predict words with
        raise InputTypeError(f"zero_state_perplexity takes a LanguageModel (load_language_model gives its parts), got "
                             f"{type(model).__name__}")
    check_counts("zero_state_perplexity", max_sentences=max_sentences)
    check_vocabulary(model.softmax, vocab)
    model.eval()
    engine = InferenceEngine.build(model.bilm, stateful=False)
    source = SentenceSource(expand_files(files), tokenizer, shuffle=False, loop=False, limit=max_sentences,
                            max_tokens=MAX_TOKENS_PER_LINE)  # each sentence is read whole, as embedding reads it
    totals, count, unknown, words = [0.0, 0.0], 0, 0, 0
    bar = tqdm(unit="tok", disable=not progress, desc="perplexity from the zero state")
    while (chunk := source.next_chunk()) is not None:
        chunk = sorted(chunk, key=len)  # batches of similar lengths: little padding
        for forward, backward in score(engine, model.softmax, vocab, chunk):
            totals[0] -= forward
            totals[1] -= backward
        tokens = sum(len(s) + 1 for s in chunk)  # every word and </S> (forward), every word and <S> (backward)
        count += tokens
        unknown += sum(vocab.id(w) == vocab.unk for s in chunk for w in s)
        words += sum(len(s) for s in chunk)
        bar.update(tokens)
    bar.close()
    if count == 0:
        raise UsageError(f"{_names(files)}: no text to evaluate (no non-empty line)")
    return Perplexity(math.exp(totals[0] / count), math.exp(totals[1] / count), count, unknown, words)


def check_counts(function: str, **counts: int | None) -> None:
    """Each count a whole number of at least 1 (None: no limit): a batch of 0 rows or 0 sentences reads no text and
    would be reported as an empty file, a negative batch fails inside torch."""
    for name, value in counts.items():
        if value is not None and not is_whole(value, 1):
            raise UsageError(f"{function}: {name} must be a whole number of at least 1, got {value!r}")


def check_vocabulary(softmax: LMSoftmax, vocab: Vocabulary) -> None:
    """The vocabulary the softmax was trained with, by its size: with another model's, each id names another word's
    row, so scores come out wrong without an error (or fail inside torch where an id is past the last row)."""
    if not isinstance(vocab, Vocabulary):
        raise InputTypeError(f"vocab must be a Vocabulary (Vocabulary.load(path)), got {type(vocab).__name__}")
    if len(vocab) != softmax.weight.shape[0]:
        raise UsageError(f"the vocabulary has {len(vocab):,} words and the softmax {softmax.weight.shape[0]:,} rows: "
                         f"give the vocabulary the model was trained with (its vocab.txt)")


def check_sentences(sentences: object, what: str) -> list[list[str]]:
    """The sentences as lists of tokens (a generator is read once, here). Token lists, not strings:
    ``score(..., ["the cat"])`` would score the letters t, h, e, ' ', c ... as words. Each of at most
    ``MAX_TOKENS_PER_LINE`` tokens, as ``embed`` takes them: a sentence runs whole, and its activations grow with its
    length."""
    if isinstance(sentences, (str, bytes)):
        raise InputTypeError(f"{what} takes token lists, e.g. [['the', 'cat']], not one string")
    if not hasattr(sentences, "__iter__"):
        raise InputTypeError(f"{what} takes token lists, e.g. [['the', 'cat']], not {type(sentences).__name__}")
    listed = []
    for row, tokens in enumerate(sentences):
        if isinstance(tokens, (str, bytes)):
            raise InputTypeError(f"{what}: sentence {row} is a string; pass its tokens, e.g. {tokens.split()[:3]!r}")
        if not hasattr(tokens, "__iter__"):
            raise InputTypeError(f"{what}: sentence {row} is {type(tokens).__name__}, not a list of tokens")
        listed.append(list(tokens))
        if len(listed[-1]) > MAX_TOKENS_PER_LINE:
            raise UsageError(f"{what}: sentence {row} has {len(listed[-1]):,} tokens, above the limit of "
                             f"{MAX_TOKENS_PER_LINE:,}; split it into sentences")
    return listed


def _engine(model: BiLM | InferenceEngine) -> InferenceEngine:
    """An engine that reads every sentence from the zero state: the one given, or a new one over a biLM."""
    if not isinstance(model, (BiLM, InferenceEngine)):  # e.g. a LanguageModel: its biLM is model.bilm
        raise InputTypeError(f"the biLM argument must be a BiLM or an InferenceEngine, got {type(model).__name__}"
                             f"{' (pass its .bilm)' if isinstance(model, LanguageModel) else ''}")
    if isinstance(model, InferenceEngine) and not model.stateful:
        return model
    return InferenceEngine.build(model.bilm if isinstance(model, InferenceEngine) else model, stateful=False)


@torch.inference_mode()
def direction_log_probs(bilm: BiLM | InferenceEngine, softmax: LMSoftmax,
                        sentences: Sequence[Sequence[str]]) -> tuple[BiLMOutput, torch.Tensor, torch.Tensor]:
    """Per-position log-probabilities over the vocabulary, each sentence from the zero state.

    Returns the BiLM output and two (B, T + 2, V) tensors: the forward LM's distribution for the token at each
    position given everything left of it, and the backward LM's given everything right of it: 8 B x (T + 2) x V
    bytes (``substitutes`` takes one position's instead).
    """
    sentences = check_sentences(sentences, "direction_log_probs")
    engine = _engine(bilm)
    out = engine(batch_to_ids(sentences, engine.config.char_cnn.max_characters_per_token).to(softmax.weight.device))
    fwd = softmax.log_probs(out.forward_layers[-1])  # (B, T+2, V): position t predicts t + 1
    bwd = softmax.log_probs(out.backward_layers[-1])  # position t predicts t - 1
    vocab_size = fwd.shape[-1]
    pad = fwd.new_full((fwd.shape[0], 1, vocab_size), float("nan"))
    return out, torch.cat([pad, fwd[:, :-1]], 1), torch.cat([bwd[:, 1:], pad], 1)  # aligned to the predicted token


SCORE_BATCH = 16  # sentences per biLM call in ``score``
SCORE_POSITIONS = 1024  # positions per softmax call: 1,024 x a 50,000-word vocabulary = 200 MB of logits


@torch.inference_mode()
def score(bilm: BiLM | InferenceEngine, softmax: LMSoftmax, vocab: Vocabulary,
          sentences: Sequence[Sequence[str]]) -> list[tuple[float, float]]:
    """Natural-log probability of each sentence under the forward and the backward LM (``</S>``/``<S>`` included),
    each sentence from the zero state. Memory stays bounded however many or long the sentences: they run
    SCORE_BATCH at a time, and the softmax over the vocabulary SCORE_POSITIONS positions at a time."""
    sentences = check_sentences(sentences, "score")
    check_vocabulary(softmax, vocab)
    engine = _engine(bilm)
    results = []
    for start in range(0, len(sentences), SCORE_BATCH):
        batch = [list(s) for s in sentences[start : start + SCORE_BATCH]]
        out = engine(batch_to_ids(batch, engine.config.char_cnn.max_characters_per_token).to(softmax.weight.device))
        rows, fwd_at, fwd_ids, bwd_at, bwd_ids = [], [], [], [], []
        for row, tokens in enumerate(batch):
            ids = vocab.ids(["<S>", *tokens, "</S>"])
            n = len(tokens)
            rows += [row] * (n + 1)
            fwd_at += range(0, n + 1)  # the forward LM at t predicts t + 1: every word and </S>
            fwd_ids += ids[1 : n + 2]
            bwd_at += range(1, n + 2)  # the backward LM at t predicts t - 1: every word and <S>
            bwd_ids += ids[0 : n + 1]
        rows_t = torch.tensor(rows, dtype=torch.long)
        forward = _target_log_probs(softmax, out.forward_layers[-1][rows_t, torch.tensor(fwd_at)], fwd_ids)
        backward = _target_log_probs(softmax, out.backward_layers[-1][rows_t, torch.tensor(bwd_at)], bwd_ids)
        totals = torch.zeros(len(batch), 2, dtype=torch.float64)
        totals[:, 0].index_add_(0, rows_t, forward)
        totals[:, 1].index_add_(0, rows_t, backward)
        results += [(float(f), float(b)) for f, b in totals.tolist()]
    return results


def _target_log_probs(softmax: LMSoftmax, hidden: torch.Tensor, targets: Sequence[int] | torch.Tensor
                      ) -> torch.Tensor:
    """log p(target) of each position: hidden (N, P), N targets -> (N,) float64; the softmax over the vocabulary
    ``SCORE_POSITIONS`` positions at a time (bounded memory however many positions)."""
    target = torch.as_tensor(targets, dtype=torch.long, device=hidden.device)
    parts = [-softmax.full_loss(hidden[i : i + SCORE_POSITIONS], target[i : i + SCORE_POSITIONS], reduction="none")
             for i in range(0, len(target), SCORE_POSITIONS)]
    return torch.cat(parts).double().cpu() if parts else torch.zeros(0, dtype=torch.float64)


def substitutes(bilm: BiLM, softmax: LMSoftmax, vocab: Vocabulary, tokens: Sequence[str], position: int,
                k: int = 10) -> dict[str, list[tuple[str, float]]]:
    """The top-k words each LM expects at ``position`` (0-based), with probabilities, and their product of experts."""
    (tokens,) = check_sentences([tokens], "substitutes")
    check_vocabulary(softmax, vocab)
    if isinstance(position, bool) or not isinstance(position, Integral) or not is_whole(k, 1):
        # 1.5 would fail inside torch and True be read as 1; k = -1 fails in topk, k = 0 gives empty lists
        raise UsageError(f"substitutes: position must be a whole number and k one of at least 1, got position "
                         f"{position!r} and k {k!r}")
    if not 0 <= position < len(tokens):
        raise UsageError(f"position {position} is outside the sentence (0..{len(tokens) - 1})")
    engine = _engine(bilm)
    with torch.inference_mode():
        ids = batch_to_ids([list(tokens)], engine.config.char_cnn.max_characters_per_token)  # (1, T + 2, W)
        out = engine(ids.to(softmax.weight.device))
        # the token sits at position + 1 (after <S>): the forward LM predicts it from the position before, the
        # backward LM from the one after; only those two rows go through the softmax, (V,) each
        fwd = softmax.log_probs(out.forward_layers[-1][0, position])
        bwd = softmax.log_probs(out.backward_layers[-1][0, position + 2])
    specials = torch.tensor([vocab.bos, vocab.eos, vocab.unk])
    result = {}
    for name, logp in (("forward", fwd), ("backward", bwd), ("both", torch.log_softmax(fwd + bwd, -1))):
        logp = logp.clone()
        logp[specials] = float("-inf")
        top = torch.topk(logp, min(k, len(vocab) - 3))
        result[name] = [(vocab.words[i], math.exp(v)) for v, i in zip(top.values.tolist(), top.indices.tolist())]
    return result


def _names(files: Sequence[str | Path]) -> str:
    """The files as an error names them: all of a few, the first three of many."""
    names = [str(f) for f in files]
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
