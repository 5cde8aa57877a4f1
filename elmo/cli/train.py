"""``elmo vocab``, ``train``, ``perplexity``, ``baselines``, ``score``, ``substitutes``, ``export`` and
``dump-token-embeddings``: pretraining a biLM and reading its language models."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from dataclasses import fields, replace
from pathlib import Path
from typing import Callable


from elmo.cli.common import (STDIO, TOKENIZE_CHOICES, CommandLineError, add_model_args, batch_size, count, load_model,
                             minutes, sentences, share, vocabulary_size, whole)
from elmo.cli.graceful_stop import EXIT_CODES, stop_after_step_on_signals, wait_passing_signals
from elmo.cli.stdio import written_to
from elmo.data.corpus import SentenceSource, expand_files
from elmo.data.vocab import SPECIALS, UNKNOWN_SHARE_WARNING, Vocabulary
from elmo.errors import UsageError
from elmo.io.model_files import ModelFiles
from elmo.io.resolve import read_resolved, resolve
from elmo.memory import keep_freed_memory
from elmo.training.checkpoint import load_language_model
from elmo.text.tokenize import get_tokenizer
from elmo.training.baselines import baseline_perplexities_of_sets, check_trigram_vocabulary
from elmo.training.config import TrainConfig
from elmo.training.evaluate import perplexity, score, substitutes, zero_state_perplexity
from elmo.training.export import dump_token_embeddings, export_checkpoint
from elmo.training.lm import LanguageModel
from elmo.training.run_start import Distributed
from elmo.training.trainer import STOP_NAME, Trainer


def cmd_vocab_build(args: argparse.Namespace) -> None:
    files = expand_files(args.stdio.inputs(args.files))
    source = SentenceSource(files, get_tokenizer(args.tokenize), shuffle=False, loop=False)
    vocab = Vocabulary.build(sentences(source), min_count=args.min_count, max_size=args.max_size)
    if len(vocab) <= len(SPECIALS):
        raise UsageError(f"no words found in {', '.join(args.files)} (with --min-count {args.min_count}): "
                         f"nothing to write")
    with args.stdio.output(args.output) as output:
        vocab.save(output)
    print(f"wrote {len(vocab)} words to {written_to(args.output)}", file=sys.stderr)


def cmd_train(args: argparse.Namespace) -> None:
    if STDIO in args.files:
        raise CommandLineError("training reads its text on every pass and again on --resume: give file names, "
                               "not - (standard input)")
    if args.resume and args.init_from:
        raise CommandLineError("give either --resume (go on with a run) or --init-from (start a new run from "
                               "weights), not both")
    if not args.resume and not args.files:  # a resumed run reads the files its checkpoint names
        raise CommandLineError("give the training text: one or more files or globs (or --resume RUN to go on with "
                               "a run's own files)")
    config, given = _train_settings(args)  # a config file's own errors first
    if not args.resume and not args.init_from and not args.vocab:  # those two bring their vocabulary
        raise CommandLineError("a vocabulary is needed: pass --vocab (build one with `elmo vocab build`)")
    vocab = Vocabulary.load(args.vocab) if args.vocab else None
    world = Distributed.from_env().world if "WORLD_SIZE" in os.environ else None  # under torchrun, already
    if args.nproc is not None and world is not None and args.nproc != world:  # not a silently different run
        raise CommandLineError(f"--nproc {args.nproc} given, but torchrun started {world} processes: leave out "
                               f"--nproc under torchrun (its --nproc_per_node sets the number)")
    if args.nproc is not None and args.nproc > 1 and world is None:  # settings checked above, once
        _relaunch_with_torchrun(args.nproc, Path(args.out) / STOP_NAME)
        return
    keep_freed_memory()  # this process only: each step reuses the last one's memory (elmo/memory.py)
    trainer = Trainer(config, args.files, args.out, vocab=vocab,
                      resume=args.resume, init_from=args.init_from, device=args.device, progress=not args.quiet,
                      given=given)
    with stop_after_step_on_signals(trainer, announce=trainer.env.main):
        history = trainer.train()
    if trainer.stop_requested is not None:  # not what was asked for: exit non-zero, saying where the run stands
        if trainer.env.main:
            print(f"stopped ({trainer.stop_requested}) at step {trainer.step}"
                  + (f": checkpoint in {args.out}; go on with --resume {args.out}" if history else
                     ", before its first step: nothing trained"), file=sys.stderr)
        # under torchrun a stop is no failure of the workers': the launching `elmo train --nproc` gives the code
        raise SystemExit(0 if trainer.env.world > 1 else EXIT_CODES.get(trainer.stop_requested, EXIT_CODES["SIGTERM"]))
    if history and trainer.env.main:
        print(f"step {trainer.step}: loss {history[-1]['loss']:.4f}, checkpoints in {args.out}", file=sys.stderr)
    elif trainer.env.main and trainer.config.max_steps is not None and trainer.step >= trainer.config.max_steps:
        print(f"nothing to train: the run is at step {trainer.step} and --max-steps is {trainer.config.max_steps}; "
              f"give a larger --max-steps (or --max-minutes alone) to go on", file=sys.stderr)
    elif trainer.env.main:  # not what was asked for: a script's `train && export` must stop here
        raise UsageError(f"nothing trained: the time limit (--max-minutes {trainer.config.max_minutes:g}) ran out "
                         f"before the first step; no checkpoint was written: give a longer --max-minutes")


def _train_settings(args: argparse.Namespace) -> tuple[TrainConfig, dict]:
    """The run's settings (the preset or --config, then the flags), checked, and those given on the command line."""
    flags = {"max_steps": args.max_steps, "max_minutes": args.max_minutes, "batch_size": args.batch_size,
             "seed": args.seed, "checkpoint_every": args.checkpoint_every, "zero_state_share": args.zero_state_share,
             "freeze_bilm_steps": args.freeze_bilm_steps}
    # whitespace-split text is the default (None), but a new run from a model's weights takes that model's tokenizer
    # unless one is given, so there "whitespace" stays said
    tokenize = "whitespace" if args.tokenize == "none" else args.tokenize
    said_whitespace = tokenize == "whitespace" and not args.init_from
    flags["tokenize"] = None if said_whitespace else tokenize
    loaded = TrainConfig.load(args.config or "tiny")
    config = loaded.replace(**flags)  # a None flag keeps the file's value, so whitespace said is set apart:
    if said_whitespace:  # the flag outranks a --config file's tokenize = "en", as every flag does
        config = replace(config, tokenize=None)
    config.check("command line")
    # a resumed run keeps its checkpoint's settings; those given now (a --config file counts as given) are
    # checked against it: run length and checkpointing may change, the rest must match
    # (a flag not given, None, leaves the file's value: it must not hide a batch size or seed the file changes)
    given = (({f.name: getattr(loaded, f.name) for f in fields(loaded)} if args.config else {})
             | {name: value for name, value in flags.items() if value is not None}
             | ({"tokenize": "whitespace"} if said_whitespace else {}))
    return config, given


def _relaunch_with_torchrun(nproc: int, stop_file: Path) -> None:
    """Run this command line again under torchrun, ``nproc`` processes on this machine (``stop_file``: where a Ctrl-C
    or SIGTERM is passed on to them, ``wait_passing_signals``)."""
    argv, skip = [], False  # drop --nproc: torchrun would read it as its own (abbreviated) option
    for arg in sys.argv[1:]:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            argv.append(arg)
    launch = "import sys; from elmo.cli.torchrun import torchrun_quietly; sys.exit(torchrun_quietly(sys.argv[1:]))"
    command = [sys.executable, "-c", launch, "--standalone", f"--nproc_per_node={nproc}", "-m", "elmo", *argv]
    raise SystemExit(wait_passing_signals(command, stop_file))


def cmd_perplexity(args: argparse.Namespace) -> None:
    files, tokenizer = _model_and_tokenizer(args)
    bilm, softmax, vocab = read_resolved(args.model, load_language_model, files=files)  # pruned meanwhile: the next
    model = LanguageModel(bilm, softmax).to(args.device)
    texts = args.stdio.inputs(args.files)
    if args.zero_state:
        result = zero_state_perplexity(model, vocab, texts, tokenizer, max_sentences=args.max_sentences,
                                       progress=not args.quiet)
    else:
        result = perplexity(model, vocab, texts, tokenizer, batch_size=args.batch_size,
                            max_sentences=args.max_sentences, progress=not args.quiet)
    share = result.unknown_share
    print(f"tokens {result.tokens}  forward {result.forward:.2f}  backward {result.backward:.2f}  "
          f"mean {result.mean:.2f}  unknown {100 * share:.1f}%")
    _warn_if_mostly_unknown(share, "", "the model's vocabulary")


def _warn_if_mostly_unknown(share: float, where: str, vocabulary: str) -> None:
    """A perplexity over text whose words are mostly <UNK> looks good and means little: say so."""
    if share > UNKNOWN_SHARE_WARNING:
        warnings.warn(f"{where}{100 * share:.0f}% of the words are not in {vocabulary} (they count as <UNK>, which "
                      f"flatters the perplexity): is the text split as the vocabulary's was (--tokenize)?")


def cmd_score(args: argparse.Namespace) -> None:
    files, tokenizer = _model_and_tokenizer(args)
    split = [tokenizer(s) for s in args.sentences]  # an empty sentence is scored too: P(</S> | <S>)
    bilm, softmax, vocab = read_resolved(args.model, load_language_model, files=files)  # pruned meanwhile: the next
    _warn_of_unknown_tokens([w for tokens in split for w in tokens], vocab)
    for tokens, (forward, backward) in zip(split, score(bilm, softmax, vocab, split)):
        print(f"{forward:10.3f} {backward:10.3f}  {' '.join(tokens)}")  # the tokens scored: one line each


def _model_and_tokenizer(args: argparse.Namespace) -> tuple[ModelFiles, Callable[[str], list[str]]]:
    """The files of ``--model`` and how raw text is split for it: ``--tokenize``, else the tokenizer the model's text
    was split with (recorded with the model), as perplexity, score and substitutes read text."""
    files = resolve(args.model)
    return files, get_tokenizer(args.tokenize or files.tokenizer)


def _warn_of_unknown_tokens(tokens: list[str], vocab: Vocabulary) -> None:
    """Tokens outside the vocabulary are scored (and predicted) as <UNK>: a figure for other words than those shown,
    so say which."""
    unknown = [w for w in tokens if vocab.id(w) == vocab.unk and w != vocab.words[vocab.unk]]
    if unknown:
        distinct = list(dict.fromkeys(unknown))
        shown = ", ".join(repr(w) for w in distinct[:5]) + (" ..." if len(distinct) > 5 else "")
        warnings.warn(f"{len(unknown)} of {len(tokens)} tokens are not in the model's vocabulary and count as <UNK>: "
                      f"{shown} (is the text split as the model's was? --tokenize)")


def cmd_substitutes(args: argparse.Namespace) -> None:
    files, tokenizer = _model_and_tokenizer(args)
    tokens = tokenizer(args.sentence)
    if not tokens:
        raise CommandLineError("the sentence is empty: give the sentence, in quotes")
    if not 0 <= args.position < len(tokens):  # a mistake in the command line: say so before loading the model
        raise CommandLineError(f"position {args.position} is outside the sentence (0..{len(tokens) - 1}: "
                               f"{len(tokens)} tokens: {' '.join(tokens)[:200]})")
    bilm, softmax, vocab = read_resolved(args.model, load_language_model, files=files)  # pruned meanwhile: the next
    _warn_of_unknown_tokens(tokens, vocab)
    result = substitutes(bilm, softmax, vocab, tokens, args.position, args.k)
    print(f"position {args.position}: {tokens[args.position]!r} in {' '.join(tokens)!r}")  # the tokens read
    for name, words in result.items():
        print(f"{name:<9} " + "  ".join(f"{w} {p:.3f}" for w, p in words))


def cmd_export(args: argparse.Namespace) -> None:
    print(f"wrote {export_checkpoint(args.checkpoint, args.output)}", file=sys.stderr)


def cmd_dump_token_embeddings(args: argparse.Namespace) -> None:
    n = dump_token_embeddings(load_model(args), args.vocab, args.output)
    print(f"wrote {n} token vectors to {args.output}", file=sys.stderr)


def cmd_baselines(args: argparse.Namespace) -> None:
    if STDIO in args.train and STDIO in args.eval:
        raise CommandLineError("- (standard input) given as training and as held-out text: standard input is one "
                               "stream; save one of them to a file")
    tokenizer = get_tokenizer(args.tokenize)
    read = lambda files: list(sentences(SentenceSource(expand_files(args.stdio.inputs(files)), tokenizer,
                                                       shuffle=False, loop=False)))
    vocab = Vocabulary.load(args.vocab)
    check_trigram_vocabulary(vocab)  # before the text is read
    sets = [read([name]) for name in args.eval]  # read first: a bad held-out file fails before the long counting
    for name, evaluate in zip(args.eval, sets):
        if not any(evaluate):
            raise UsageError(f"{name}: no words to evaluate (empty or blank text)")
    train = read(args.train)
    if not any(train):
        raise UsageError(f"{', '.join(args.train)}: no words to train the baselines on (empty or blank text)")
    for name, evaluate in zip(args.eval, sets):
        share = sum(vocab.id(w) == vocab.unk for s in evaluate for w in s) / sum(len(s) for s in evaluate)
        _warn_if_mostly_unknown(share, f"{name}: ", "the vocabulary")
    for name, results in zip(args.eval, baseline_perplexities_of_sets(vocab, train, sets)):
        for result in results:
            print(f"{name}  {result.name:<11} forward {result.forward:9.2f}  backward {result.backward:9.2f}  "
                  f"mean {result.mean:9.2f}")


# ---- the parsers ---------------------------------------------------------------------------------------------------

def add_commands(sub) -> None:
    """``vocab build``, ``train``, ``perplexity``, ``baselines``, ``score``, ``substitutes``, ``export`` and
    ``dump-token-embeddings`` under ``sub``."""
    p = sub.add_parser("vocab", help="vocabulary files")
    vsub = p.add_subparsers(dest="vocab_command", required=True)
    p = vsub.add_parser("build", help="build a bilm-tf vocabulary (<S>, </S>, <UNK>, then by frequency)")
    p.add_argument("files", nargs="+", help="text files or globs (plain or .gz), one sentence per line; - reads "
                                            "standard input")
    p.add_argument("-o", "--output", required=True, help="vocabulary file to write; - writes standard output")
    p.add_argument("--min-count", type=count, default=1)
    p.add_argument("--max-size", type=vocabulary_size, default=None,
                   help="at most this many words, the 3 specials (<S>, </S>, <UNK>) included")
    p.add_argument("--tokenize", default=None, choices=TOKENIZE_CHOICES,
                   help="raw text: en, ko (eojeol) or ko-morph (kiwipiepy)")
    p.set_defaults(func=cmd_vocab_build)
    _add_train(sub)
    _add_language_model_commands(sub)
    _add_export_commands(sub)


def _add_train(sub) -> None:
    p = sub.add_parser("train", help="pretrain a biLM on your text (bilm-tf's recipe)")
    p.add_argument("files", nargs="*", help="training text files or globs (plain or .gz), one sentence per line")
    p.add_argument("--config", default=None, help="preset (tiny, small-cpu, ship-cpu, small, medium, original) or TOML/JSON "
                                                  "(default: tiny; a resumed run keeps its checkpoint's)")
    p.add_argument("--vocab", help="vocabulary file (from `elmo vocab build`)")
    p.add_argument("--out", required=True, help="run directory: checkpoints and metrics.jsonl")
    p.add_argument("--resume", help="continue exactly from a checkpoint (or the newest in a run directory)")
    p.add_argument("--init-from", help="start a new run from these weights: a checkpoint, run or exported folder "
                                       "(its softmax and vocabulary too), or any biLM without a softmax (en, ko, "
                                       "original, a model folder, options.json + .hdf5): then give --vocab")
    p.add_argument("--freeze-bilm-steps", type=whole,
                   help="first batches that train only the softmax (default 1000 for a new softmax over --init-from "
                        "weights, else 0)")
    p.add_argument("--max-steps", type=count)
    p.add_argument("--max-minutes", type=minutes)
    p.add_argument("--batch-size", type=batch_size, help="rows per process")
    p.add_argument("--checkpoint-every", type=count)
    p.add_argument("--seed", type=whole)
    p.add_argument("--zero-state-share", type=share,
                   help="of the rows whose window begins a sentence, the share started from zeros, as inference "
                        "starts every sentence (default 1; 0: bilm-tf's way); may change on --resume")
    p.add_argument("--tokenize", default=None, choices=TOKENIZE_CHOICES,
                   help="raw text: en, ko (eojeol) or ko-morph (kiwipiepy); recorded with the model, kept on resume "
                        "and --init-from, used by show, perplexity, score and substitutes (and by embed with "
                        "--tokenize model)")
    p.add_argument("--nproc", type=lambda text: count(text, 1, 1024), default=None,
                   help="processes on this machine (more than 1 runs torchrun)")
    p.add_argument("--device", default=None)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_train)


def _add_language_model_commands(sub) -> None:
    p = sub.add_parser("perplexity", help="full-softmax perplexity of a trained LM on text")
    p.add_argument("model", help="checkpoint, run directory or exported LM directory")
    p.add_argument("files", nargs="+", help="text files or globs (plain or .gz), one sentence per line; - reads "
                                            "standard input")
    p.add_argument("--batch-size", type=batch_size, default=64,
                   help="rows; each reads its sentences as one stream, state carried from sentence to sentence (as "
                        "bilm-tf evaluates), so the figure moves a little with it (compare runs at the same value)")
    p.add_argument("--zero-state", action="store_true",
                   help="read every sentence on its own from the zero state, as embedding does (--batch-size unused)")
    p.add_argument("--max-sentences", type=count)
    p.add_argument("--tokenize", default=None, choices=TOKENIZE_CHOICES,
                   help="default: the tokenizer the model was trained with")
    p.add_argument("--device", default="cpu")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_perplexity)

    p = sub.add_parser("baselines", help="unigram and Kneser-Ney trigram perplexities with a biLM's vocabulary",
                       usage="elmo baselines [-h] vocab --train TRAIN [TRAIN ...] --eval EVAL [EVAL ...] [--tokenize "
                             "{%s}]" % ",".join(TOKENIZE_CHOICES))  # the vocabulary first: after --eval's files it
    # would be taken for one more of them
    p.add_argument("vocab", help="the biLM's vocabulary file (from `elmo vocab build`)")
    p.add_argument("--train", nargs="+", required=True, help="the training text")
    p.add_argument("--eval", nargs="+", required=True, help="held-out files, each scored separately")
    p.add_argument("--tokenize", default=None, choices=TOKENIZE_CHOICES)
    p.set_defaults(func=cmd_baselines)

    p = sub.add_parser("score", help="log-probability of sentences under the forward and backward LMs")
    p.add_argument("model", help="checkpoint, run directory or exported LM directory")
    p.add_argument("sentences", nargs="+", help="sentences, each in quotes (split as --tokenize says; the tokens "
                                                "scored are printed)")
    p.add_argument("--tokenize", default=None, choices=TOKENIZE_CHOICES,
                   help="default: the tokenizer the model was trained with")
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("substitutes", help="the words the LMs expect at a position")
    p.add_argument("model", help="checkpoint, run directory or exported LM directory")
    p.add_argument("sentence", help="a sentence, in quotes (split as --tokenize says)")
    p.add_argument("position", type=int, help="0-based token position")
    p.add_argument("-k", type=count, default=10)
    p.add_argument("--tokenize", default=None, choices=TOKENIZE_CHOICES,
                   help="default: the tokenizer the model was trained with")
    p.set_defaults(func=cmd_substitutes)


def _add_export_commands(sub) -> None:
    p = sub.add_parser("export", help="a checkpoint -> official options.json + weights.hdf5 and our format")
    p.add_argument("checkpoint", help="a checkpoint or a run directory (its newest checkpoint)")
    p.add_argument("output", help="directory to write")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("dump-token-embeddings", help="bilm-tf's token-embedding cache for a word list")
    p.add_argument("vocab", help="word list, one word per line (a vocabulary, or any words: a row each, in order)")
    p.add_argument("output", help="HDF5 file to write")
    add_model_args(p)
    p.set_defaults(func=cmd_dump_token_embeddings)
