"""``elmo probe pos``, ``wsd`` and ``word2vec``: the paper's layer analyses and their static baseline."""

from __future__ import annotations

import argparse
import sys

from elmo.cli.common import TOKENIZE_CHOICES, add_model_args, count, sentences
from elmo.cli.stdio import written_to
from elmo.data.corpus import SentenceSource, expand_files
from elmo.embed import Embedder
from elmo.limits import MAX_WORD_VECTOR_DIM
from elmo.tasks import features, probes
from elmo.text.tokenize import get_tokenizer


def cmd_probe(args: argparse.Namespace) -> None:
    if args.probe == "word2vec":
        _train_word2vec(args)
        return
    embedder = Embedder.from_pretrained(args.model, args.options, args.weights)
    static = probes.load_word_vectors(args.static) if args.static else None
    cache = args.cache or features.default_feature_folder()
    if args.probe == "pos":
        results = probes.probe_pos(embedder, args.train, args.dev, cache, static, args.max_sentences,
                                   args.epochs, args.column, progress=not args.quiet)
        _print_layer_table(f"POS probe ({args.column}, linear classifier), dev: {args.dev}", "accuracy", results)
    else:
        results = probes.probe_wsd(embedder, args.semcor_xml, args.semcor_keys, args.eval_xml, args.eval_keys,
                                   args.wordnet, cache, static, args.max_sentences, progress=not args.quiet)
        _print_layer_table(f"WSD probe (1-NN sense vectors from SemCor), eval: {args.eval_xml}", "F1", results)


def _train_word2vec(args: argparse.Namespace) -> None:
    """``elmo probe word2vec``: the static baseline's vectors, trained on the pretraining text."""
    files = expand_files(args.stdio.inputs(args.files))
    source = SentenceSource(files, get_tokenizer(args.tokenize), shuffle=False, loop=False)
    text = list(sentences(source))[: args.max_sentences]
    with args.stdio.output(args.out) as out:
        probes.train_word2vec(text, out, dim=args.dim, epochs=args.epochs)
    print(f"wrote word2vec vectors to {written_to(args.out)} ({len(text):,} sentences)", file=sys.stderr)


def _print_layer_table(title: str, metric: str, results: dict[str, float]) -> None:
    print(title)
    print(f"{'reading':<22}{metric:>10}")
    for name, value in results.items():
        print(f"{name:<22}{100 * value:>10.2f}")


def add_commands(sub) -> None:
    """``probe pos``, ``probe wsd`` and ``probe word2vec`` under ``sub``."""
    probe = sub.add_parser("probe", help="the paper's layer analyses: POS and WSD per layer, word2vec baseline")
    psub = probe.add_subparsers(dest="probe", required=True)
    p = psub.add_parser("pos", help="a linear POS classifier on each layer (CoNLL-U train/dev)")
    p.add_argument("--train", required=True)
    p.add_argument("--dev", required=True)
    p.add_argument("--column", choices=("upos", "xpos"), default="upos")
    p.add_argument("--epochs", type=count, default=5)
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
    p.add_argument("--dim", type=lambda text: count(text, 1, MAX_WORD_VECTOR_DIM), default=256)
    p.add_argument("--epochs", type=count, default=5)
    p.add_argument("--tokenize", default=None, choices=TOKENIZE_CHOICES)
    p.add_argument("--max-sentences", type=count)
    p.set_defaults(func=cmd_probe)


def _probe_common(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    p.add_argument("--static", help="word2vec text file for the static baseline (from `elmo probe word2vec`)")
    p.add_argument("--cache", help="feature cache directory (default ~/.cache/elmo/features)")
    p.add_argument("--max-sentences", type=count, help="use only the first N training sentences")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_probe)
