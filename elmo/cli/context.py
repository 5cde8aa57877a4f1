"""``elmo similar`` and ``plot``: a word's vectors across the sentences it occurs in."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from elmo.cli.common import STDIO, CommandLineError, add_model_args, count, layer
from elmo.context import (Occurrence, nearest, occurrences, plot_word, read_labelled_sentences, separation_report,
                          word_as_token)
from elmo.embed import Embedder
from elmo.errors import UsageError
from elmo.limits import is_digits


def _word_occurrences(args: argparse.Namespace, least: int):
    """The sentences, the word as the model's tokenizer writes it, its occurrences in them (with their vectors) and
    the embedder; fewer than ``least`` occurrences leave nothing to compare, and are one error line."""
    sentences, labels = read_labelled_sentences(args.stdio.input(args.sentences))
    embedder = Embedder.from_pretrained(args.model, args.options, args.weights)
    try:
        word = word_as_token(embedder, args.word)
    except UsageError as err:
        raise CommandLineError(f"WORD: {err}") from None
    found = occurrences(embedder, word, sentences, labels)
    if not found:
        raise UsageError(f"{args.sentences}: {word!r} does not occur in any of its {len(sentences)} sentences")
    if len(found) < least:
        raise UsageError(f"{args.sentences}: {word!r} occurs once ([{found[0].label}]): nothing to compare it with; "
                         f"give sentences holding it two or more times"
                         + (" or a --query" if hasattr(args, "query") else ""))
    return sentences, word, found, embedder


def _marks(found: list[Occurrence]) -> dict[tuple[int, int], str]:
    """(sentence, token) -> "(occurrence i of n)" where a sentence holds the word more than once, so that each line
    of the output names one occurrence; "" elsewhere."""
    per_sentence = Counter(o.sentence for o in found)
    seen: Counter = Counter()
    marks = {}
    for o in found:
        seen[o.sentence] += 1
        n = per_sentence[o.sentence]
        marks[o.sentence, o.token] = f"  (occurrence {seen[o.sentence]} of {n})" if n > 1 else ""
    return marks


def cmd_similar(args: argparse.Namespace) -> None:
    index = -1 if args.layer == "top" else int(args.layer) if is_digits(args.layer) else None
    sentences, word, found, embedder = _word_occurrences(args, 1 if args.query is not None else 2)
    n_layers = found[0].vectors.shape[0]
    if index is None or index >= n_layers:
        raise CommandLineError(f"--layer {args.layer}: give 'top' or a layer number from 0 to {n_layers - 1} "
                               f"(this model's layers)")
    if args.query is not None:  # "" too: an empty --query "$UNSET" is no sentence holding the word
        queries = occurrences(embedder, word, [args.query], ["query"])
        if not queries:
            raise CommandLineError(f"--query: {word!r} does not occur in {args.query!r}")
    else:
        queries = found
    marks, query_marks = _marks(found), _marks(queries)
    for query in queries:
        text = args.query if args.query is not None else sentences[query.sentence]
        print(f"[{query.label}] {text}{query_marks[query.sentence, query.token]}")
        for similarity, other in nearest(query, found, index, args.k):
            print(f"    {similarity:+.3f}  [{other.label}] {sentences[other.sentence]}"
                  f"{marks[other.sentence, other.token]}")
    if report := separation_report(found):
        print("\nhow each layer groups the occurrences by label (mean cosine within and across labels; triplets: "
              "share of (anchor, same label, other label) triples where the same-label one is closer; 1-NN: "
              "nearest-neighbour accuracy):")
        print("\n".join(report))


IMAGE_FORMATS = ("png", "svg", "pdf", "jpg", "jpeg", "gif", "eps", "ps", "svgz", "tif", "tiff", "webp", "avif", "raw",
                 "rgba")  # what matplotlib writes without other programs (its .pgf needs LaTeX)


def cmd_plot(args: argparse.Namespace) -> None:
    if args.out == STDIO:
        raise CommandLineError("--out: cannot tell the image format from '-' (standard output); give a file name "
                               "ending in .png, .svg or .pdf")
    suffix = Path(args.out).suffix.lstrip(".").lower()
    if suffix and suffix not in IMAGE_FORMATS:
        raise CommandLineError(f"--out {args.out}: .{suffix} is not an image format elmo plot writes; end the name "
                               f"in .png, .svg or .pdf (or {', '.join('.' + f for f in IMAGE_FORMATS[3:])})")
    _, word, found, _ = _word_occurrences(args, 2)
    out = plot_word(found, word, args.out, title=args.title)
    print(f"wrote {out} ({len(found)} occurrences)", file=sys.stderr)


def add_commands(sub) -> None:
    """``similar`` and ``plot`` under ``sub``."""
    for name, help_text in (("similar", "the nearest contexts of a word across a set of sentences (cosine)"),
                            ("plot", "2-D PCA of a word's vectors at each layer, one panel per layer")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("word", help="the word whose occurrences to compare, as written in the sentences "
                                    "(one token of the model's tokenizer)")
        p.add_argument("--sentences", required=True,
                       help="UTF-8 text, one sentence per line, or label<TAB>sentence to label the points; - reads "
                            "standard input")
        add_model_args(p)
        p.set_defaults(func=cmd_similar if name == "similar" else cmd_plot)
        if name == "similar":
            p.add_argument("--query", help="a sentence holding the word: rank the file's occurrences against it")
            p.add_argument("--layer", default="top", type=layer,
                           help="top (default) or a layer number (0 = token layer)")
            p.add_argument("-k", type=count, default=3, help="neighbours to show (default 3)")
        else:
            p.add_argument("--out", required=True, help="image to write (png, svg, pdf)")
            p.add_argument("--title", help="the word as shown in the panel titles (e.g. romanised, when no font "
                                           "for its script is installed)")
