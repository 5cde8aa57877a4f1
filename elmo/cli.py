"""``elmo``: the command line, a thin layer over the library.

Exit codes: 0 success; 1 a runtime error (a bad input file, a missing model ...); 2 a usage error (argparse's own,
or options that do not go together); 130 interrupted. The library's own errors (:class:`elmo.errors.ElmoError`) and
file-system errors (a missing file, no permission, a full disk) end in one line on stderr,
``elmo <command>: error: <message>``; anything else is a bug in elmo and keeps its traceback (``--debug`` shows the
traceback for every error). ``-`` names standard input, or standard output, where the format allows it.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from elmo.errors import ElmoError, UsageError
from elmo.pretrained import DEFAULT_MODEL

logger = logging.getLogger(__name__)
STDIO = "-"  # the name that means standard input (an input) or standard output (an output)


class CommandLineError(UsageError):
    """Options that do not go together, or a value the command cannot take: exit code 2, as argparse's errors."""


class _Stdio:
    """``-`` on the command line: standard input copied once to a temporary file (some readers read their input
    twice, or need a name), and outputs written to a temporary file that is then copied to standard output.

    Messages that name the temporary copy are shown with ``<stdin>`` in its place (:meth:`display`).
    """

    def __init__(self) -> None:
        self._root: Path | None = None
        self._stdin: Path | None = None

    def _folder(self) -> Path:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="elmo-stdio-"))
        return self._root

    def input(self, name: str) -> str:
        """``name``, or for ``-`` the path of a copy of standard input (made on first use: stdin is read once)."""
        if name != STDIO:
            return name
        if self._stdin is None:
            if sys.stdin is None:
                raise CommandLineError("-: there is no standard input to read; give a file name")
            if sys.stdin.isatty():
                logger.info("reading standard input (end it with Ctrl-D)")
            path = self._folder() / "stdin"
            with open(path, "wb") as f:
                shutil.copyfileobj(getattr(sys.stdin, "buffer", None) or _EncodedText(sys.stdin), f)
            self._stdin = path
        return str(self._stdin)

    def inputs(self, names: list[str]) -> list[str]:
        return [self.input(name) for name in names]

    @contextlib.contextmanager
    def output(self, name: str) -> Iterator[str]:
        """A path to write ``name`` to: ``name`` itself, or for ``-`` a temporary file copied to standard output
        once written (the writers write atomically, by name)."""
        if name != STDIO:
            yield name
            return
        path = self._folder() / "stdout"
        yield str(path)
        sys.stdout.flush()
        with open(path, "rb") as f:
            if buffer := getattr(sys.stdout, "buffer", None):
                shutil.copyfileobj(f, buffer)
                buffer.flush()
            else:
                sys.stdout.write(f.read().decode("utf-8"))

    def display(self, message: str) -> str:
        """``message`` with the temporary copy of standard input named ``<stdin>``."""
        if self._stdin is not None:
            for form in {str(self._stdin.resolve()), str(self._stdin)}:
                message = message.replace(form, "<stdin>")
        return message

    def close(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = self._stdin = None


class _EncodedText:
    """A text stream read as UTF-8 bytes (``shutil.copyfileobj`` source), for a ``sys.stdin`` without ``.buffer``."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def read(self, size: int = -1) -> bytes:
        return self.stream.read(size).encode("utf-8")


def _written_to(name: str) -> str:
    """How a result line names an output: the file name, or standard output for ``-``."""
    return "standard output" if name == STDIO else name


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model (a model directory, or the official options + weights pair)")
    group.add_argument("--model", help="a name (en, ko: shipped; small, medium, original, original-5.5b: "
                                       "official, downloaded once), our model directory (config.json + "
                                       "model.safetensors), or a folder holding options.json and one .hdf5; "
                                       "default: en")
    group.add_argument("--options", "--options-file", help="official options.json")
    group.add_argument("--weights", "--weight-file", help="official weights .hdf5")


def _load(args: argparse.Namespace, stateful: bool = False):
    from elmo.io.load import load_bilm

    return load_bilm(args.model, args.options, args.weights, stateful=stateful)


def cmd_embed(args: argparse.Namespace) -> None:
    from elmo.embed_file import embed_file

    if args.output == STDIO:
        raise CommandLineError("cannot write HDF5 to standard output; give a file name")
    if args.input == STDIO and args.resume:
        raise CommandLineError("--resume needs the input as a file (standard input cannot be read again); "
                               "save it to a file and embed that")
    layers = "top" if args.top else "average" if args.average else "all"
    model = _load(args, stateful=args.stateful)
    model.set_matmul_precision("bf16" if args.bf16 else "int8" if args.int8 else "fp32")
    if args.cache_vocab:
        from elmo.data.vocab import read_words

        model.cache_tokens(read_words(args.cache_vocab))
    n = embed_file(model, args.stdio.input(args.input), args.output, layers=layers,
                   batch_size=args.batch_size, forget_sentences=args.forget_sentences,
                   use_sentence_keys=args.use_sentence_keys, errors=args.errors, progress=not args.quiet,
                   device=args.device, resume=args.resume, tokenize=args.tokenize,
                   model_name=args.model or args.weights or (None if args.options else DEFAULT_MODEL))
    print(f"wrote {n} sentences to {args.output}", file=sys.stderr)


EMBED_TOKENIZERS = ("whitespace", "en", "ko", "ko-morph", "model")


def cmd_show(args: argparse.Namespace) -> None:
    from elmo.embed import Embedder

    embedder = Embedder.from_pretrained(args.model, args.options, args.weights)
    tokens = embedder.tokenize([args.sentence])[0]
    vectors = embedder.embed([tokens])[0]  # (L+1, n, 2P)
    print(f"{len(tokens)} tokens, {vectors.shape[0]} layers of {vectors.shape[2]} dimensions")
    header = "".join(f"  |layer {k}|" for k in range(vectors.shape[0]))
    print(f"{'token':<16}{header}  top layer, first {args.dims} dims")
    for i, token in enumerate(tokens):
        norms = "".join(f"{np.linalg.norm(vectors[k, i]):>11.3f}" for k in range(vectors.shape[0]))
        head = " ".join(f"{v:+.3f}" for v in vectors[-1, i, : args.dims])
        print(f"{_fit_columns(token, 15)} {norms}  {head}")


def _fit_columns(text: str, width: int) -> str:
    """``text`` cut and padded to ``width`` terminal columns (Hangul, CJK and other wide characters take two)."""
    import unicodedata

    out, used = "", 0
    for char in text:
        w = 2 if unicodedata.east_asian_width(char) in "WF" else 0 if unicodedata.combining(char) else 1
        if used + w > width:
            break
        out, used = out + char, used + w
    return out + " " * (width - used)


def cmd_convert(args: argparse.Namespace) -> None:
    from elmo.io.native import save_model
    from elmo.io.official import export_official

    model = _load(args)
    if args.to == "official":
        options, weights = export_official(model, args.output)
        print(f"wrote {options} and {weights}", file=sys.stderr)
    else:
        print(f"wrote {save_model(model, args.output)}", file=sys.stderr)


def cmd_info(args: argparse.Namespace) -> None:
    model = _load(args)
    groups = {"char_encoder": 0, "forward_stack": 0, "backward_stack": 0}
    for name, p in model.named_parameters():
        groups[name.split(".")[0]] += p.numel()
    print(json.dumps(model.config.to_options(), indent=2))
    for name, count in groups.items():
        print(f"{name:<16}{count:>14,} parameters")
    print(f"{'total':<16}{sum(groups.values()):>14,} parameters")
    print(f"output: {model.config.n_output_layers} layers x {model.config.output_dim} dimensions per token")


def cmd_vocab_build(args: argparse.Namespace) -> None:
    from elmo.data.corpus import SentenceSource, expand_files
    from elmo.data.vocab import SPECIALS, Vocabulary
    from elmo.text.tokenize import get_tokenizer

    files = expand_files(args.stdio.inputs(args.files))
    source = SentenceSource(files, get_tokenizer(args.tokenize), shuffle=False, loop=False)
    vocab = Vocabulary.build(_sentences(source), min_count=args.min_count, max_size=args.max_size)
    if len(vocab) <= len(SPECIALS):
        raise UsageError(f"no words found in {', '.join(args.files)} (with --min-count {args.min_count}): "
                         f"nothing to write")
    with args.stdio.output(args.output) as output:
        vocab.save(output)
    print(f"wrote {len(vocab)} words to {_written_to(args.output)}", file=sys.stderr)


def _sentences(source):
    while (chunk := source.next_chunk()) is not None:
        yield from chunk


def cmd_train(args: argparse.Namespace) -> None:
    from dataclasses import fields

    from elmo.data.vocab import Vocabulary
    from elmo.training.config import TrainConfig
    from elmo.training.trainer import Trainer

    if STDIO in args.files:
        raise CommandLineError("training reads its text on every pass and again on --resume: give file names, "
                               "not - (standard input)")
    if args.resume and args.init_from:
        raise CommandLineError("give either --resume (go on with a run) or --init-from (start a new run from "
                               "weights), not both")
    flags = {"max_steps": args.max_steps, "max_minutes": args.max_minutes, "batch_size": args.batch_size,
             "seed": args.seed, "checkpoint_every": args.checkpoint_every, "zero_state_share": args.zero_state_share,
             "freeze_bilm_steps": args.freeze_bilm_steps}
    # whitespace-split text is the default (None), but a new run from a model's weights takes that model's tokenizer
    # unless one is given, so there "whitespace" stays said
    tokenize = "whitespace" if args.tokenize == "none" else args.tokenize
    flags["tokenize"] = None if tokenize == "whitespace" and not args.init_from else tokenize
    loaded = TrainConfig.load(args.config or "tiny")
    config = loaded.replace(**flags)
    config.check("command line")
    # a resumed run keeps its checkpoint's settings; those given now (a --config file counts as given) are
    # checked against it: run length and checkpointing may change, the rest must match
    given = ({f.name: getattr(loaded, f.name) for f in fields(loaded)} if args.config else {}) | flags
    vocab = Vocabulary.load(args.vocab) if args.vocab else None
    if args.nproc and args.nproc > 1 and "WORLD_SIZE" not in os.environ:  # settings checked above, once
        _relaunch_with_torchrun(args.nproc)
        return
    trainer = Trainer(config, args.files, args.out, vocab=vocab,
                      resume=args.resume, init_from=args.init_from, device=args.device, progress=not args.quiet,
                      given=given)
    history = trainer.train()
    if history and trainer.env.main:
        print(f"step {trainer.step}: loss {history[-1]['loss']:.4f}, checkpoints in {args.out}", file=sys.stderr)
    elif trainer.env.main and trainer.config.max_steps is not None and trainer.step >= trainer.config.max_steps:
        print(f"nothing to train: the run is at step {trainer.step} and --max-steps is {trainer.config.max_steps}; "
              f"give a larger --max-steps (or --max-minutes alone) to go on", file=sys.stderr)


def _relaunch_with_torchrun(nproc: int) -> None:
    import subprocess

    argv, skip = [], False  # drop --nproc: torchrun would read it as its own (abbreviated) option
    for arg in sys.argv[1:]:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            argv.append(arg)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "elmo", *argv]
    raise SystemExit(subprocess.call(command))


def cmd_perplexity(args: argparse.Namespace) -> None:
    from elmo.data.vocab import UNKNOWN_SHARE_WARNING
    from elmo.io.checkpoint import recorded_tokenizer
    from elmo.text.tokenize import get_tokenizer
    from elmo.training.checkpoint import load_language_model
    from elmo.training.evaluate import perplexity, zero_state_perplexity
    from elmo.training.lm import LanguageModel

    bilm, softmax, vocab = load_language_model(args.model)
    model = LanguageModel(bilm, softmax).to(args.device)
    tokenizer = get_tokenizer(args.tokenize or recorded_tokenizer(args.model))  # as the model's text was split
    files = args.stdio.inputs(args.files)
    if args.zero_state:
        result = zero_state_perplexity(model, vocab, files, tokenizer, max_sentences=args.max_sentences,
                                       progress=not args.quiet)
    else:
        result = perplexity(model, vocab, files, tokenizer, batch_size=args.batch_size,
                            max_sentences=args.max_sentences, progress=not args.quiet)
    share = result.unknown / result.tokens
    print(f"tokens {result.tokens}  forward {result.forward:.2f}  backward {result.backward:.2f}  "
          f"mean {result.mean:.2f}  unknown {100 * share:.1f}%")
    if share > UNKNOWN_SHARE_WARNING:
        warnings.warn(f"{100 * share:.0f}% of the tokens are not in the model's vocabulary (they count as <UNK>, "
                      f"which flatters the perplexity): is the text split as the training text was (--tokenize)?")


def cmd_score(args: argparse.Namespace) -> None:
    from elmo.training.checkpoint import load_language_model
    from elmo.training.evaluate import score

    bilm, softmax, vocab = load_language_model(args.model)
    sentences = [s.split() for s in args.sentences]
    for text, (forward, backward) in zip(args.sentences, score(bilm, softmax, vocab, sentences)):
        print(f"{forward:10.3f} {backward:10.3f}  {text}")


def cmd_substitutes(args: argparse.Namespace) -> None:
    from elmo.training.checkpoint import load_language_model
    from elmo.training.evaluate import substitutes

    tokens = args.sentence.split()
    if not 0 <= args.position < len(tokens):  # a mistake in the command line: say so before loading the model
        raise CommandLineError(f"position {args.position} is outside the sentence (0..{len(tokens) - 1}: "
                               f"{len(tokens)} whitespace-separated tokens)")
    bilm, softmax, vocab = load_language_model(args.model)
    result = substitutes(bilm, softmax, vocab, tokens, args.position, args.k)
    print(f"position {args.position}: {tokens[args.position]!r}")
    for name, words in result.items():
        print(f"{name:<9} " + "  ".join(f"{w} {p:.3f}" for w, p in words))


def cmd_export(args: argparse.Namespace) -> None:
    from elmo.training.export import export_checkpoint

    print(f"wrote {export_checkpoint(args.checkpoint, args.output)}", file=sys.stderr)


def cmd_dump_token_embeddings(args: argparse.Namespace) -> None:
    from elmo.training.export import dump_token_embeddings

    n = dump_token_embeddings(_load(args), args.vocab, args.output)
    print(f"wrote {n} token vectors to {args.output}", file=sys.stderr)


def cmd_baselines(args: argparse.Namespace) -> None:
    from elmo.data.corpus import SentenceSource, expand_files
    from elmo.data.vocab import Vocabulary
    from elmo.text.tokenize import get_tokenizer
    from elmo.training.baselines import baseline_perplexities_of_sets

    tokenizer = get_tokenizer(args.tokenize)
    read = lambda files: list(_sentences(SentenceSource(expand_files(args.stdio.inputs(files)), tokenizer,
                                                        shuffle=False, loop=False)))
    vocab = Vocabulary.load(args.vocab)
    sets = [read([name]) for name in args.eval]  # read first: a bad held-out file fails before the long counting
    for name, evaluate in zip(args.eval, sets):
        if not any(evaluate):
            raise UsageError(f"{name}: no words to evaluate (empty or blank text)")
    train = read(args.train)
    if not any(train):
        raise UsageError(f"{', '.join(args.train)}: no words to train the baselines on (empty or blank text)")
    for name, results in zip(args.eval, baseline_perplexities_of_sets(vocab, train, sets)):
        for result in results:
            print(f"{name}  {result.name:<11} forward {result.forward:9.2f}  backward {result.backward:9.2f}  "
                  f"mean {result.mean:9.2f}")


def _word_occurrences(args: argparse.Namespace):
    from elmo.context import occurrences, read_labelled_sentences
    from elmo.embed import Embedder

    sentences, labels = read_labelled_sentences(args.stdio.input(args.sentences))
    embedder = Embedder.from_pretrained(args.model, args.options, args.weights)
    found = occurrences(embedder, args.word, sentences, labels)
    if not found:
        raise UsageError(f"{args.sentences}: {args.word!r} does not occur in any of its {len(sentences)} sentences")
    return sentences, found, embedder


def cmd_similar(args: argparse.Namespace) -> None:
    from elmo.context import nearest, occurrences, separation_report

    layer = -1 if args.layer == "top" else int(args.layer) if args.layer.isdigit() else None
    sentences, found, embedder = _word_occurrences(args)
    n_layers = found[0].vectors.shape[0]
    if layer is None or layer >= n_layers:
        raise CommandLineError(f"--layer {args.layer}: give 'top' or a layer number from 0 to {n_layers - 1} "
                               f"(this model's layers)")
    if args.query:
        queries = occurrences(embedder, args.word, [args.query], ["query"])
        if not queries:
            raise CommandLineError(f"--query: {args.word!r} does not occur in {args.query!r}")
    else:
        queries = found
    for query in queries:
        text = args.query if args.query else sentences[query.sentence]
        print(f"[{query.label}] {text}")
        for score, other in nearest(query, found, layer, args.k):
            print(f"    {score:+.3f}  [{other.label}] {sentences[other.sentence]}")
    if report := separation_report(found):
        print("\nhow each layer groups the occurrences by label (mean cosine within and across labels; triplets: "
              "share of (anchor, same label, other label) triples where the same-label one is closer; 1-NN: "
              "nearest-neighbour accuracy):")
        print("\n".join(report))


def cmd_plot(args: argparse.Namespace) -> None:
    from elmo.context import plot_word

    if args.out == STDIO:
        raise CommandLineError("--out: cannot tell the image format from '-' (standard output); give a file name "
                               "ending in .png, .svg or .pdf")
    _, found, _ = _word_occurrences(args)
    out = plot_word(found, args.word, args.out, title=args.title)
    print(f"wrote {out} ({len(found)} occurrences)", file=sys.stderr)


def _count(text: str) -> int:
    """An argparse type: a whole number >= 1 (a batch size, a number of steps, of neighbours ...)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _vocabulary_size(text: str) -> int:
    """An argparse type: a vocabulary size with room for a word beside the specials (<S>, </S>, <UNK>)."""
    from elmo.data.vocab import SPECIALS

    value = _count(text)
    if value <= len(SPECIALS):
        raise argparse.ArgumentTypeError(f"{value} leaves no room for words beside the {len(SPECIALS)} special "
                                         f"tokens: give at least {len(SPECIALS) + 1}")
    return value


def _layer(text: str) -> str:
    """An argparse type: ``top`` or a layer number (0 = the token layer); whether the model has it is checked later."""
    if text == "top" or text.isdigit():
        return text
    raise argparse.ArgumentTypeError(f"give 'top' or a layer number from 0 to the model's top layer (0: the "
                                     f"token layer), got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    """The ``elmo`` argument parser: every command, its arguments and their help."""
    from elmo import __version__

    parser = argparse.ArgumentParser(prog="elmo", description="ELMo contextual word vectors in PyTorch.",
                                     epilog="exit codes: 0 done, 1 error (one line; --debug for the traceback), "
                                            "2 usage error, 130 interrupted")
    parser.add_argument("--version", action="version", version=f"elmo {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("embed", help="embed a text file (one sentence per line) into HDF5, AllenNLP's layout")
    p.add_argument("input", help="UTF-8 text (plain or gzip), one sentence per line, split on whitespace unless "
                                 "--tokenize says otherwise; - reads standard input")
    p.add_argument("output", help="HDF5 file to write (AllenNLP's layout); a name ending in .npz writes a NumPy "
                                  "archive with the same keys instead (a file: not standard output)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every layer: (L+1, n_tokens, 2P) per sentence")
    which.add_argument("--top", action="store_true", help="the top layer: (n_tokens, 2P)")
    which.add_argument("--average", action="store_true", help="the mean of the layers: (n_tokens, 2P)")
    _add_model_args(p)
    p.add_argument("--batch-size", type=_count, default=64, help="sentences per batch (default 64)")
    p.add_argument("--stateful", action="store_true",
                   help="AllenNLP's legacy mode: LSTM state carried from batch to batch, lines in file order")
    p.add_argument("--forget-sentences", action="store_true", help="do not write sentence_to_index")
    p.add_argument("--use-sentence-keys", action="store_true", help="name datasets by the sentence text")
    p.add_argument("--errors", choices=("strict", "replace"), default="strict",
                   help="invalid UTF-8: stop at the line (strict) or substitute U+FFFD (replace)")
    p.add_argument("--resume", action="store_true",
                   help="continue a killed run from OUTPUT.parts/ instead of starting over")
    fast = p.add_mutually_exclusive_group()
    fast.add_argument("--bf16", action="store_true",
                      help="matrix products in bfloat16: faster on CPUs with bf16 units (AMX); vectors about 0.4%% off")
    fast.add_argument("--int8", action="store_true",
                      help="LSTM products in int8 (dynamic quantisation, CPU only): fastest; vectors 3-5%% off")
    p.add_argument("--cache-vocab", help="word list (one per line, plain or .gz; a bilm-tf vocabulary works) whose "
                                        "token vectors are computed once (faster)")
    p.add_argument("--tokenize", choices=EMBED_TOKENIZERS, default="whitespace",
                   help="how to split each line into tokens, one vector per token: whitespace (default: the "
                        "input is already tokenised), en, ko, ko-morph, or model (the model's own tokenizer, "
                        "for raw text)")
    device = p.add_mutually_exclusive_group()
    device.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N")
    device.add_argument("--cuda-device", type=int, metavar="N",
                        help="allennlp elmo's spelling: N >= 0 is --device cuda:N, -1 the CPU")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_embed)

    p = sub.add_parser("show", help="embed one sentence and print a per-token summary")
    p.add_argument("sentence", help="a sentence, in quotes: tokenised as the model expects (the shipped en/ko models split off punctuation and clitics; other models split on whitespace)")
    _add_model_args(p)
    p.add_argument("--dims", type=_count, default=4, help="top-layer dimensions to print per token")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("convert", help="convert between the official files and our format")
    _add_model_args(p)
    p.add_argument("output", help="output directory")
    p.add_argument("--to", choices=("ours", "official"), required=True,
                   help="ours: config.json + model.safetensors; official: options.json + weights.hdf5")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("info", help="print a model's configuration and parameter counts")
    _add_model_args(p)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("vocab", help="vocabulary files")
    vsub = p.add_subparsers(dest="vocab_command", required=True)
    p = vsub.add_parser("build", help="build a bilm-tf vocabulary (<S>, </S>, <UNK>, then by frequency)")
    p.add_argument("files", nargs="+", help="text files or globs (plain or .gz), one sentence per line; - reads "
                                            "standard input")
    p.add_argument("-o", "--output", required=True, help="vocabulary file to write; - writes standard output")
    p.add_argument("--min-count", type=_count, default=1)
    p.add_argument("--max-size", type=_vocabulary_size, default=None,
                   help="at most this many words, the 3 specials (<S>, </S>, <UNK>) included")
    p.add_argument("--tokenize", default=None, help="raw text: en, ko (eojeol) or ko-morph (kiwipiepy)")
    p.set_defaults(func=cmd_vocab_build)

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
    p.add_argument("--freeze-bilm-steps", type=int,
                   help="first batches that train only the softmax (default 1000 for a new softmax over --init-from "
                        "weights, else 0)")
    p.add_argument("--max-steps", type=_count)
    p.add_argument("--max-minutes", type=float)
    p.add_argument("--batch-size", type=_count, help="rows per process")
    p.add_argument("--checkpoint-every", type=_count)
    p.add_argument("--seed", type=int)
    p.add_argument("--zero-state-share", type=float,
                   help="of the rows whose window begins a sentence, the share started from zeros, as inference "
                        "starts every sentence (default 1; 0: bilm-tf's way); may change on --resume")
    p.add_argument("--tokenize", default=None, help="raw text: en, ko (eojeol) or ko-morph (kiwipiepy); recorded with "
                                                    "the model, kept on resume and --init-from, used by embed, show "
                                                    "and perplexity")
    p.add_argument("--nproc", type=int, default=0, help="processes on this machine (runs torchrun)")
    p.add_argument("--device", default=None)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("perplexity", help="full-softmax perplexity of a trained LM on text")
    p.add_argument("model", help="checkpoint, run directory or exported LM directory")
    p.add_argument("files", nargs="+", help="text files or globs (plain or .gz), one sentence per line; - reads "
                                            "standard input")
    p.add_argument("--batch-size", type=_count, default=64,
                   help="rows; each reads its sentences as one stream, state carried from sentence to sentence (as "
                        "bilm-tf evaluates), so the figure moves a little with it (compare runs at the same value)")
    p.add_argument("--zero-state", action="store_true",
                   help="read every sentence on its own from the zero state, as embedding does (--batch-size unused)")
    p.add_argument("--max-sentences", type=_count)
    p.add_argument("--tokenize", default=None, help="default: the tokenizer the model was trained with")
    p.add_argument("--device", default="cpu")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_perplexity)

    p = sub.add_parser("baselines", help="unigram and Kneser-Ney trigram perplexities with a biLM's vocabulary")
    p.add_argument("vocab", help="the biLM's vocabulary file (from `elmo vocab build`)")
    p.add_argument("--train", nargs="+", required=True, help="the training text")
    p.add_argument("--eval", nargs="+", required=True, help="held-out files, each scored separately")
    p.add_argument("--tokenize", default=None)
    p.set_defaults(func=cmd_baselines)

    p = sub.add_parser("score", help="log-probability of sentences under the forward and backward LMs")
    p.add_argument("model", help="checkpoint, run directory or exported LM directory")
    p.add_argument("sentences", nargs="+", help="whitespace-tokenised sentences, each in quotes")
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("substitutes", help="the words the LMs expect at a position")
    p.add_argument("model", help="checkpoint, run directory or exported LM directory")
    p.add_argument("sentence", help="a whitespace-tokenised sentence, in quotes")
    p.add_argument("position", type=int, help="0-based token position")
    p.add_argument("-k", type=_count, default=10)
    p.set_defaults(func=cmd_substitutes)

    p = sub.add_parser("export", help="a checkpoint -> official options.json + weights.hdf5 and our format")
    p.add_argument("checkpoint", help="a checkpoint or a run directory (its newest checkpoint)")
    p.add_argument("output", help="directory to write")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("dump-token-embeddings", help="bilm-tf's token-embedding cache for a vocabulary")
    p.add_argument("vocab", help="vocabulary file, one word per line")
    p.add_argument("output", help="HDF5 file to write")
    _add_model_args(p)
    p.set_defaults(func=cmd_dump_token_embeddings)
    _add_context_commands(sub)
    _add_task_commands(sub)
    _add_probe_commands(sub)
    _add_global_flags(parser)
    return parser


def _leaf_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """The parsers that run a command (``elmo embed``, ``elmo vocab build`` ...), depth first."""
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subparsers:
        yield parser
    for action in subparsers:
        for child in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
            yield from _leaf_parsers(child)


def _add_global_flags(parser: argparse.ArgumentParser) -> None:
    """``--debug`` before or after the command; each command's parser knows itself (for its name in messages)."""
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback for every error, and debug messages")
    for leaf in _leaf_parsers(parser):
        leaf.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        leaf.set_defaults(leaf_parser=leaf)


def cmd_task_train(args: argparse.Namespace) -> None:
    from elmo.tasks.commands import train_task

    model = args.model or ("ko" if args.format == "kmou" else "en")  # KMOU is Korean: the shipped ko model
    config = train_task(args.task, args.train, args.dev, args.out, model=model, fmt=args.format,
                        input_mode=args.input, epochs=args.epochs, hidden_dim=args.hidden, tokenize=args.tokenize,
                        cache=args.cache, max_items=args.max_items, max_dev=args.max_dev, seed=args.seed,
                        learning_rate=args.lr,
                        batch_size=args.batch_size, progress=not args.quiet)
    print(f"dev {config.metric} per epoch: {' '.join(f'{m:.4f}' for m in config.history)}; best "
          f"{max(config.history):.4f}; saved {args.out}")


def cmd_task_eval(args: argparse.Namespace) -> None:
    from elmo.tasks.commands import evaluate_task

    config, metric = evaluate_task(args.task_model, args.data, args.format, args.cache, args.max_items,
                                   progress=not args.quiet)
    print(f"{args.data}: {config.task} {config.metric} {metric:.4f} (input {config.input}, model {config.model})")


def cmd_task_predict(args: argparse.Namespace) -> None:
    from elmo.io.text_lines import numbered_lines
    from elmo.tasks.commands import predict_task

    lines = [line for _, line in numbered_lines(args.stdio.input(args.input))]
    texts = [line for line in lines if line.strip()]
    results = iter(predict_task(args.task_model, texts, args.cache) if texts else [])
    for line in lines:  # one output line per input line: a blank line stays blank
        result = next(results) if line.strip() else ""
        print(result if isinstance(result, str) else " ".join(f"{t}/{tag}" for t, tag in result))


def _add_task_commands(sub) -> None:
    task = sub.add_parser("task", help="downstream tasks on the frozen biLM: train, eval, predict")
    tsub = task.add_subparsers(dest="task_command", required=True)
    p = tsub.add_parser("train", help="train a tagger (ner, pos) or a classifier on cached biLM features")
    p.add_argument("task", choices=("ner", "pos", "classify"), help="ner or pos (tagging), classify (sentences)")
    p.add_argument("--train", required=True)
    p.add_argument("--dev", required=True, help="labelled dev file: the best epoch on it is kept")
    p.add_argument("--model", help="the biLM: a name (en, ko, ...) or directory (default en; ko for --format kmou)")
    p.add_argument("--out", required=True, help="directory for the task model (task.json + head.safetensors)")
    p.add_argument("--input", default="mix", help="mix (learned scalar mix, default), token (the "
                                                  "context-independent baseline) or a layer number")
    p.add_argument("--epochs", type=_count, default=10)
    p.add_argument("--hidden", type=_count, default=128, help="BiLSTM size of the head")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default 0.001)")
    p.add_argument("--batch-size", type=_count, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-dev", type=_count, help="use only the first N dev examples")
    p.set_defaults(func=cmd_task_train)
    _task_data_args(p)
    p.add_argument("--tokenize", help="how to split classification text (default: the model's own)")
    p = tsub.add_parser("eval", help="a task model's F1 (ner) or accuracy on a labelled file")
    p.add_argument("task_model", help="a task model directory (from `elmo task train`)")
    p.add_argument("--data", required=True, help="labelled file to score")
    p.set_defaults(func=cmd_task_eval)
    _task_data_args(p)
    p = tsub.add_parser("predict", help="tags or labels for raw text, one sentence per line")
    p.add_argument("task_model", help="a task model directory (from `elmo task train`)")
    p.add_argument("--input", required=True, help="raw text, one sentence per line; - reads standard input")
    p.add_argument("--cache", help="feature cache directory")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_task_predict)


def _task_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", help="conll2003, wnut17, conllu, conllu-xpos, kmou (tagging); sst, stsa, tsv "
                                    "(classification); default: train conll2003 / conllu / tsv by task, eval the training format")
    p.add_argument("--cache", help="feature cache directory (default ~/.cache/elmo/features)")
    p.add_argument("--max-items", type=_count, help="use only the first N examples (training file for train)")
    p.add_argument("--quiet", action="store_true")


def _print_layer_table(title: str, metric: str, results: dict[str, float]) -> None:
    print(title)
    print(f"{'reading':<22}{metric:>10}")
    for name, value in results.items():
        print(f"{name:<22}{100 * value:>10.2f}")


def cmd_probe(args: argparse.Namespace) -> None:
    from elmo.embed import Embedder
    from elmo.io.download import cache_dir
    from elmo.tasks import probes

    if args.probe == "word2vec":
        from elmo.data.corpus import SentenceSource, expand_files
        from elmo.text.tokenize import get_tokenizer

        files = expand_files(args.stdio.inputs(args.files))
        source = SentenceSource(files, get_tokenizer(args.tokenize), shuffle=False, loop=False)
        sentences = list(_sentences(source))[: args.max_sentences]
        with args.stdio.output(args.out) as out:
            probes.train_word2vec(sentences, out, dim=args.dim, epochs=args.epochs)
        print(f"wrote word2vec vectors to {_written_to(args.out)} ({len(sentences):,} sentences)", file=sys.stderr)
        return
    embedder = Embedder.from_pretrained(args.model, args.options, args.weights)
    static = probes.load_word_vectors(args.static) if args.static else None
    cache = args.cache or cache_dir() / "features"
    if args.probe == "pos":
        results = probes.probe_pos(embedder, args.train, args.dev, cache, static, args.max_sentences,
                                   args.epochs, args.column, progress=not args.quiet)
        _print_layer_table(f"POS probe ({args.column}, linear classifier), dev: {args.dev}", "accuracy", results)
    else:
        results = probes.probe_wsd(embedder, args.semcor_xml, args.semcor_keys, args.eval_xml, args.eval_keys,
                                   args.wordnet, cache, static, args.max_sentences, progress=not args.quiet)
        _print_layer_table(f"WSD probe (1-NN sense vectors from SemCor), eval: {args.eval_xml}", "F1", results)


def _add_probe_commands(sub) -> None:
    probe = sub.add_parser("probe", help="the paper's layer analyses: POS and WSD per layer, word2vec baseline")
    psub = probe.add_subparsers(dest="probe", required=True)
    p = psub.add_parser("pos", help="a linear POS classifier on each layer (CoNLL-U train/dev)")
    p.add_argument("--train", required=True)
    p.add_argument("--dev", required=True)
    p.add_argument("--column", choices=("upos", "xpos"), default="upos")
    p.add_argument("--epochs", type=_count, default=5)
    _probe_common(p)
    p = psub.add_parser("wsd", help="1-NN sense vectors per layer (SemCor -> a Raganato-format set)")
    p.add_argument("--semcor-xml", required=True)
    p.add_argument("--semcor-keys", required=True)
    p.add_argument("--eval-xml", required=True)
    p.add_argument("--eval-keys", required=True)
    p.add_argument("--wordnet", required=True, help="WordNet 3.0 index.sense (plain or .gz)")
    _probe_common(p)
    p = psub.add_parser("word2vec", help="train the static baseline (gensim word2vec) on pretraining text")
    p.add_argument("files", nargs="+", help="text files or globs (plain or .gz), one sentence per line; - reads "
                                            "standard input")
    p.add_argument("--out", required=True, help="word2vec text file to write; - writes standard output")
    p.add_argument("--dim", type=_count, default=256)
    p.add_argument("--epochs", type=_count, default=5)
    p.add_argument("--tokenize", default=None)
    p.add_argument("--max-sentences", type=_count)
    p.set_defaults(func=cmd_probe)


def _probe_common(p: argparse.ArgumentParser) -> None:
    _add_model_args(p)
    p.add_argument("--static", help="word2vec text file for the static baseline (from `elmo probe word2vec`)")
    p.add_argument("--cache", help="feature cache directory (default ~/.cache/elmo/features)")
    p.add_argument("--max-sentences", type=_count, help="use only the first N training sentences")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_probe)


def _add_context_commands(sub) -> None:
    for name, help_text in (("similar", "the nearest contexts of a word across a set of sentences (cosine)"),
                            ("plot", "2-D PCA of a word's vectors at each layer, one panel per layer")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("word", help="the word whose occurrences to compare, as written in the sentences")
        p.add_argument("--sentences", required=True,
                       help="UTF-8 text, one sentence per line, or label<TAB>sentence to label the points; - reads "
                            "standard input")
        _add_model_args(p)
        p.set_defaults(func=cmd_similar if name == "similar" else cmd_plot)
        if name == "similar":
            p.add_argument("--query", help="a sentence holding the word: rank the file's occurrences against it")
            p.add_argument("--layer", default="top", type=_layer,
                           help="top (default) or a layer number (0 = token layer)")
            p.add_argument("-k", type=_count, default=3, help="neighbours to show (default 3)")
        else:
            p.add_argument("--out", required=True, help="image to write (png, svg, pdf)")
            p.add_argument("--title", help="the word as shown in the panel titles (e.g. romanised, when no font "
                                           "for its script is installed)")


class _StderrHandler(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stderr`` is when a message is logged (tests and progress bars swap
    it), not the stream it was made with."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):  # noqa: D102
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


class _MessageFormatter(logging.Formatter):
    """``elmo: message`` for information, ``elmo: warning: message`` for warnings (and so on up)."""

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        text = f"elmo: {level}{record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def configure_logging(quiet: bool = False, debug: bool = False) -> None:
    """Show the library's messages (the ``elmo`` loggers) on stderr: information and up, warnings and up with
    ``quiet``, everything with ``debug``. Called by :func:`main`; the library itself never configures logging."""
    root = logging.getLogger("elmo")
    for handler in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(handler)  # main() may run more than once in a process (tests)
    handler = _StderrHandler()
    handler.setFormatter(_MessageFormatter())
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` for the command line: the message alone, through logging (no source line)."""
    logging.getLogger("elmo").warning("%s", message)


_DISK_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
_ENVIRONMENT_ERRORS = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError)


def _users_to_fix(err: BaseException) -> bool:
    """True for an error the user can fix (ours, or the file system's: a missing file, no permission, a full
    disk): one line. False for anything else, a bug in elmo, which keeps its traceback."""
    if isinstance(err, ElmoError):
        return True
    return isinstance(err, OSError) and (isinstance(err, _ENVIRONMENT_ERRORS) or err.filename is not None
                                         or err.errno in _DISK_FULL)


def _one_line(err: BaseException) -> str:
    """The error as one line: ours as written; an OSError from the system as ``file: what happened``."""
    if isinstance(err, OSError) and not isinstance(err, ElmoError) and err.strerror:
        names = " -> ".join(str(n) for n in (err.filename, err.filename2) if n is not None)
        return f"{names}: {err.strerror}" if names else err.strerror
    return " ".join(str(err).split("\n")) or type(err).__name__


# where "-" is standard input or output, by command: (dest, ...); other file arguments refuse it
_STDIO_ARGS = {"elmo embed": ("input", "output"), "elmo vocab build": ("files", "output"),
               "elmo perplexity": ("files",), "elmo baselines": ("train", "eval"), "elmo train": ("files",),
               "elmo task predict": ("input",), "elmo probe word2vec": ("files", "out"),
               "elmo similar": ("sentences",), "elmo plot": ("sentences", "out")}
# arguments that are text or a choice, never a file: "-" is theirs to judge
_TEXT_ARGS = {"sentence", "word", "query", "title", "layer", "device", "tokenize", "format", "to", "task", "errors",
              "config"}
_TEXT_ARGS_BY_COMMAND = {"elmo score": ("sentences",), "elmo task train": ("input",)}


def _check_stdio_names(args: argparse.Namespace, command: str, parser: argparse.ArgumentParser) -> None:
    """Refuse ``-`` for a file argument whose command cannot read it from standard input or write it to
    standard output (it would otherwise be taken as a file named ``-``)."""
    skip = {*_STDIO_ARGS.get(command, ()), *_TEXT_ARGS, *_TEXT_ARGS_BY_COMMAND.get(command, ())}
    for action in parser._actions:
        value = getattr(args, action.dest, None)
        values = value if isinstance(value, list) else [value]
        if action.dest not in skip and STDIO in values:
            name = "/".join(action.option_strings) or action.dest.upper()
            raise CommandLineError(f"{name}: - (standard input or output) is not accepted here; give a file name")


def _check_usage(args: argparse.Namespace, command: str, parser: argparse.ArgumentParser) -> None:
    """Option combinations argparse cannot express; a mistake here is a usage error (exit code 2)."""
    _check_stdio_names(args, command, parser)
    if (device := getattr(args, "device", None)) is not None:
        import torch

        try:
            torch.device(device)
        except (RuntimeError, TypeError):
            raise CommandLineError(f"--device {device}: not a device name (cpu, cuda, cuda:1, mps)") from None
    if hasattr(args, "options") and hasattr(args, "weights"):
        if getattr(args, "model", None) is not None and (args.options or args.weights):
            raise CommandLineError("give either --model or --options and --weights, not both")
        if bool(args.options) != bool(args.weights):
            given, missing = ("--options", "--weights") if args.options else ("--weights", "--options")
            raise CommandLineError(f"{given} needs {missing} too (the official pair), or give --model instead")


def main(argv: list[str] | None = None) -> int:
    """Run the ``elmo`` command line; returns the exit code (0 done, 1 error, 2 usage error, 130 interrupted).

    A bug (any error that is not ours or the file system's) is raised, so Python prints its traceback and exits 1.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version (0) or a usage error (2, already printed): a code, as for others
        return done.code if isinstance(done.code, int) else 0 if done.code is None else 2
    configure_logging(quiet=getattr(args, "quiet", False), debug=args.debug)
    command = args.leaf_parser.prog
    args.stdio = _Stdio()
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            _check_usage(args, command, args.leaf_parser)
            from elmo.devices import check_device

            if getattr(args, "cuda_device", None) is not None:  # allennlp elmo's --cuda-device N
                args.device = "cpu" if args.cuda_device < 0 else f"cuda:{args.cuda_device}"
            check_device(getattr(args, "device", None), "--device")
            args.func(args)
    except BrokenPipeError:  # `elmo show ... | head`: the reader left; nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the flush at exit has somewhere to go
        return 0
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return 130
    except CommandLineError as err:
        if args.debug:
            raise
        print(f"{command}: error: {args.stdio.display(_one_line(err))}", file=sys.stderr)
        return 2
    except Exception as err:
        if args.debug or not _users_to_fix(err):
            raise  # a bug in elmo (or --debug): the whole traceback
        print(f"{command}: error: {args.stdio.display(_one_line(err))}", file=sys.stderr)
        return 1
    finally:
        args.stdio.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
