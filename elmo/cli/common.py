"""The pieces the commands share: the model arguments, argparse types, the checks argparse cannot express, and the
global ``--debug`` flag."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Iterator

import torch

from elmo.data.vocab import SPECIALS
from elmo.errors import UsageError
from elmo.io.load import load_bilm
from elmo.limits import MAX_BATCH_SIZE, MAX_COUNT, MAX_HEAD_LEARNING_RATE, MAX_MINUTES, is_digits
from elmo.text.tokenize import TOKENIZER_NAMES

STDIO = "-"  # the name that means standard input (an input) or standard output (an output)
# what --tokenize takes ("none": whitespace, as "whitespace"): a name outside it is a usage error (exit 2), caught by
# argparse before any work, as `elmo embed --tokenize` is
TOKENIZE_CHOICES = (*TOKENIZER_NAMES, "none")


class CommandLineError(UsageError):
    """Options that do not go together, or a value the command cannot take: exit code 2, as argparse's errors."""


# ---- arguments ---------------------------------------------------------------------------------------------------

def add_model_args(parser: argparse.ArgumentParser) -> None:
    """``--model``, or the official ``--options`` + ``--weights`` pair."""
    group = parser.add_argument_group("model (a model directory, or the official options + weights pair)")
    group.add_argument("--model", help="a name (en, ko: shipped; small, medium, original, original-5.5b: "
                                       "official, downloaded once), our model directory (config.json + "
                                       "model.safetensors), or a folder holding options.json and one .hdf5; "
                                       "default: en")
    group.add_argument("--options", "--options-file", help="official options.json")
    group.add_argument("--weights", "--weight-file", help="official weights .hdf5")


def load_model(args: argparse.Namespace, stateful: bool = False):
    """The biLM that the model arguments name."""
    return load_bilm(args.model, args.options, args.weights, stateful=stateful)


def sentences(source) -> Iterator[list[str]]:
    """Every sentence of a :class:`elmo.data.corpus.SentenceSource`, chunk by chunk."""
    while (chunk := source.next_chunk()) is not None:
        yield from chunk


# ---- argparse types ----------------------------------------------------------------------------------------------

def count(text: str, low: int = 1, high: int = MAX_COUNT) -> int:
    """An argparse type: a whole number in [1, 10^12] (a number of steps, of neighbours ...)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
    if value > high:
        raise argparse.ArgumentTypeError(f"must be at most {high:,}, got {value:,}")
    return value


def batch_size(text: str) -> int:
    """An argparse type: a batch size, 1 to ``elmo.limits.MAX_BATCH_SIZE``."""
    return count(text, 1, MAX_BATCH_SIZE)


def whole(text: str) -> int:
    """An argparse type: a whole number >= 0 (a seed, a number of steps that may be none)."""
    return count(text, 0, MAX_COUNT)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_number(text: str) -> float:
    """An argparse type: a finite number > 0 (a learning rate)."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def learning_rate(text: str) -> float:
    """An argparse type: a task head's learning rate, > 0 and at most ``MAX_HEAD_LEARNING_RATE`` (near float32's
    limit Adam's arithmetic overflows: a traceback after the features were computed)."""
    value = positive_number(text)
    if value > MAX_HEAD_LEARNING_RATE:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_HEAD_LEARNING_RATE:g}, got {text}")
    return value


def minutes(text: str) -> float:
    """An argparse type: a finite number of minutes, > 0 and at most ``elmo.limits.MAX_MINUTES``."""
    value = positive_number(text)
    if value > MAX_MINUTES:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_MINUTES:,}, got {text}")
    return value


def share(text: str) -> float:
    """An argparse type: a share, a finite number from 0 to 1."""
    value = _number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, got {text}")
    return value


def vocabulary_size(text: str) -> int:
    """An argparse type: a vocabulary size with room for a word beside the specials (<S>, </S>, <UNK>)."""
    value = count(text)
    if value <= len(SPECIALS):
        raise argparse.ArgumentTypeError(f"{value} leaves no room for words beside the {len(SPECIALS)} special "
                                         f"tokens: give at least {len(SPECIALS) + 1}")
    return value


def layer(text: str) -> str:
    """An argparse type: ``top`` or a layer number (0 = the token layer); whether the model has it is checked later."""
    if text == "top" or is_digits(text):
        return text
    raise argparse.ArgumentTypeError(f"give 'top' or a layer number from 0 to the model's top layer (0: the "
                                     f"token layer), got {text!r}")


# ---- the global flag ---------------------------------------------------------------------------------------------

def leaf_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """The parsers that run a command (``elmo embed``, ``elmo vocab build`` ...), depth first."""
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subparsers:
        yield parser
    for action in subparsers:
        for child in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
            yield from leaf_parsers(child)


def add_global_flags(parser: argparse.ArgumentParser) -> None:
    """``--debug`` before or after the command; each command's parser knows itself (for its name in messages)."""
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback for every error, and debug messages")
    for leaf in leaf_parsers(parser):
        leaf.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        leaf.set_defaults(leaf_parser=leaf)


# ---- checks argparse cannot express ------------------------------------------------------------------------------

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
    for dest, name, values in _given(args, parser):
        if dest not in skip and STDIO in values:
            raise CommandLineError(f"{name}: - (standard input or output) is not accepted here; give a file name")
        if values.count(STDIO) > 1:  # `perplexity RUN - -` would read the one stream as two files
            raise CommandLineError(f"{name}: - (standard input) is listed {values.count(STDIO)} times; it is one "
                                   f"stream: list it once")


# arguments that are the user's words, embedded or looked for (a file name may hold any bytes: these may not)
_WORDS_ARGS = {"sentence", "word", "query", "title"}
_WORDS_ARGS_BY_COMMAND = {"elmo score": ("sentences",)}
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")  # how Python keeps a command line's bytes that are not UTF-8


def _check_text_bytes(args: argparse.Namespace, command: str, parser: argparse.ArgumentParser) -> None:
    """Refuse text arguments holding bytes that are not UTF-8 (Latin-1 from a script, another terminal encoding):
    Python keeps them as lone surrogates, which character ids drop, so ``elmo show $'caf\\xe9'`` would embed
    "caf" and an empty token; a text file with such bytes is an error too (``--errors``)."""
    words = {*_WORDS_ARGS, *_WORDS_ARGS_BY_COMMAND.get(command, ())}
    for dest, name, values in _given(args, parser):
        for value in values if dest in words else ():
            if isinstance(value, str) and (bad := _ESCAPED_BYTE.search(value)):
                raise CommandLineError(f"{name}: not UTF-8 text (the byte 0x{ord(bad.group()) - 0xDC00:02X} at "
                                       f"character {bad.start() + 1}); give it in UTF-8, e.g. converted with "
                                       f"iconv -t UTF-8")


def _check_empty_paths(args: argparse.Namespace, command: str, parser: argparse.ArgumentParser) -> None:
    """Refuse an empty file or folder argument (an unset shell variable): it would mean the current folder."""
    text = {*_TEXT_ARGS, *_TEXT_ARGS_BY_COMMAND.get(command, ()), "column", "cache"}  # --cache "": the default
    for dest, name, values in _given(args, parser):
        if dest not in text and "" in values:
            raise CommandLineError(f"{name}: an empty path (an unset shell variable?); give a file or folder name")


def _given(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, list]]:
    """(dest, the name the user wrote it by, its values as a list) of every argument of the command."""
    for action in parser._actions:
        value = getattr(args, action.dest, None)
        yield action.dest, "/".join(action.option_strings) or action.dest.upper(), \
            value if isinstance(value, list) else [value]


def check_usage(args: argparse.Namespace, command: str, parser: argparse.ArgumentParser) -> None:
    """Option combinations argparse cannot express; a mistake here is a usage error (exit code 2)."""
    _check_stdio_names(args, command, parser)
    _check_empty_paths(args, command, parser)
    _check_text_bytes(args, command, parser)
    if (device := getattr(args, "device", None)) is not None:
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
