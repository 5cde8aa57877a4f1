"""``elmo task train``, ``eval`` and ``predict``: downstream taggers and classifiers on the frozen biLM."""

from __future__ import annotations

import argparse
import warnings

from elmo.cli.common import TOKENIZE_CHOICES, CommandLineError, batch_size, count, learning_rate, whole
from elmo.errors import UsageError
from elmo.io.text_lines import sentence_lines
from elmo.limits import is_digits
from elmo.tasks.commands import FORMATS, check_format, evaluate_task, predict_task, train_task
from elmo.tasks.train import load_task


def cmd_task_train(args: argparse.Namespace) -> None:
    try:  # --format conllu for classify is a command-line mistake (exit 2), found before any file is read
        check_format(args.task, args.format)
    except UsageError as err:
        raise CommandLineError(str(err)) from None
    # not given (None): the shipped model by its name (KMOU is Korean: ko), even beside a local folder of that name
    config = train_task(args.task, args.train, args.dev, args.out, model=args.model, fmt=args.format,
                        input_mode=args.input, epochs=args.epochs, hidden_dim=args.hidden, tokenize=args.tokenize,
                        cache=args.cache, max_items=args.max_items, max_dev=args.max_dev, seed=args.seed,
                        learning_rate=args.lr,
                        batch_size=args.batch_size, progress=not args.quiet)
    print(f"dev {config.metric} per epoch: {' '.join(f'{m:.4f}' for m in config.history)}; best "
          f"{max(config.history):.4f}; saved {args.out}")


def cmd_task_eval(args: argparse.Namespace) -> None:
    if args.format is not None:  # a format the model's task cannot read: a command-line mistake, as for train
        _, trained = load_task(args.task_model)  # a damaged model is its own one line (exit 1)
        try:
            check_format(trained.task, args.format)
        except UsageError as err:
            raise CommandLineError(str(err)) from None
    config, metric = evaluate_task(args.task_model, args.data, args.format, args.cache, args.max_items,
                                   progress=not args.quiet)
    print(f"{args.data}: {config.task} {config.metric} {metric:.4f} (input {config.input}, model {config.model})")


def cmd_task_predict(args: argparse.Namespace) -> None:
    numbered = list(sentence_lines(args.stdio.input(args.input)))
    texts = [(number, line) for number, line in numbered if line.strip()]
    results = dict(zip((number for number, _ in texts),
                       predict_task(args.task_model, [line for _, line in texts], args.cache,
                                    tokenize=args.tokenize) if texts else []))
    untokenised = [number for number, result in results.items() if result is None]
    if untokenised:
        shown = ", ".join(map(str, untokenised[:5])) + (" ..." if len(untokenised) > 5 else "")
        warnings.warn(f"{args.input}: line(s) {shown} have no tokens after tokenisation: their output lines are "
                      f"empty")
    for number, _ in numbered:  # one output line per input line: a blank or untokenisable line stays blank
        result = results.get(number) or ""
        print(result if isinstance(result, str) else " ".join(f"{t}/{tag}" for t, tag in result))


def add_commands(sub) -> None:
    """``task train``, ``task eval`` and ``task predict`` under ``sub``."""
    task = sub.add_parser("task", help="downstream tasks on the frozen biLM: train, eval, predict")
    tsub = task.add_subparsers(dest="task_command", required=True)
    _add_task_train(tsub)
    p = tsub.add_parser("eval", help="a task model's F1 (ner) or accuracy on a labelled file")
    p.add_argument("task_model", help="a task model directory (from `elmo task train`)")
    p.add_argument("--data", required=True, help="labelled file to score")
    p.set_defaults(func=cmd_task_eval)
    _task_data_args(p)
    p = tsub.add_parser("predict", help="tags or labels for raw text, one sentence per line")
    p.add_argument("task_model", help="a task model directory (from `elmo task train`)")
    p.add_argument("--input", required=True, help="raw text, one sentence per line; - reads standard input")
    p.add_argument("--cache", help="feature cache directory")
    p.add_argument("--tokenize", choices=TOKENIZE_CHOICES,
                   help="how to split the lines instead of the task model's way (whitespace: already tokenised, one "
                        "tag per space-separated token, as in CoNLL data)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_task_predict)


def _add_task_train(tsub) -> None:
    p = tsub.add_parser("train", help="train a tagger (ner, pos) or a classifier on cached biLM features")
    p.add_argument("task", choices=("ner", "pos", "classify"), help="ner or pos (tagging), classify (sentences)")
    p.add_argument("--train", required=True)
    p.add_argument("--dev", required=True, help="labelled dev file: the best epoch on it is kept")
    p.add_argument("--model", help="the biLM: a name (en, ko, ...) or directory (default en; ko for --format kmou)")
    p.add_argument("--out", required=True, help="directory for the task model (task.json + head.safetensors)")
    p.add_argument("--input", type=_layer_input, default="mix",
                   help="mix (learned scalar mix, default), token (the context-independent baseline) or a layer number")
    p.add_argument("--epochs", type=count, default=10)
    p.add_argument("--hidden", type=count, default=128, help="BiLSTM size of the head")
    p.add_argument("--lr", type=learning_rate, default=1e-3, help="Adam learning rate (default 0.001)")
    p.add_argument("--batch-size", type=batch_size, default=32)
    p.add_argument("--seed", type=whole, default=0)
    p.add_argument("--max-dev", type=count, help="use only the first N dev examples")
    p.set_defaults(func=cmd_task_train)
    _task_data_args(p)
    p.add_argument("--tokenize", choices=TOKENIZE_CHOICES,
                   help="how to split classification text, and `task predict`'s raw text (default: the model's own; "
                        "for kmou whitespace, as its eojeols are)")


def _layer_input(value: str) -> str:
    """--input's form (mix, token, or a layer number written in ASCII digits); the number's range is the model's."""
    if value in ("mix", "token") or is_digits(value):
        return value
    raise argparse.ArgumentTypeError(f"expected mix, token or a layer number (0, 1, 2, ...), got {value!r}")


def _task_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=tuple(FORMATS),
                   help="conll2003, wnut17, conllu, conllu-xpos, kmou (tagging); sst, stsa, tsv (classification); "
                        "default: train conll2003 / conllu / tsv by task, eval the training format")
    p.add_argument("--cache", help="feature cache directory (default ~/.cache/elmo/features)")
    p.add_argument("--max-items", type=count, help="use only the first N examples (training file for train)")
    p.add_argument("--quiet", action="store_true")
