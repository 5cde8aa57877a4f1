"""``elmo``: the command line, a thin layer over the library. Bad input ends in one line on stderr, exit code 2."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np

from elmo.config import ConfigError


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model (a model directory, or the official options + weights pair)")
    group.add_argument("--model", help="our model directory (config.json + model.safetensors), "
                                       "or a folder holding options.json and one .hdf5")
    group.add_argument("--options", help="official options.json")
    group.add_argument("--weights", help="official weights .hdf5")


def _load(args: argparse.Namespace, stateful: bool = False):
    from elmo.io.load import load_bilm

    return load_bilm(args.model, args.options, args.weights, stateful=stateful)


def cmd_embed(args: argparse.Namespace) -> None:
    from elmo.embed_file import embed_file

    layers = "top" if args.top else "average" if args.average else "all"
    n = embed_file(_load(args, stateful=args.stateful), args.input, args.output, layers=layers,
                   batch_size=args.batch_size, forget_sentences=args.forget_sentences,
                   use_sentence_keys=args.use_sentence_keys, errors=args.errors, progress=not args.quiet,
                   device=args.device)
    print(f"wrote {n} sentences to {args.output}", file=sys.stderr)


def cmd_show(args: argparse.Namespace) -> None:
    from elmo.embed import Embedder

    embedder = Embedder(_load(args))
    tokens = args.sentence.split()
    vectors = embedder.embed(args.sentence)  # (L+1, n, 2P)
    print(f"{len(tokens)} tokens, {vectors.shape[0]} layers of {vectors.shape[2]} dimensions")
    header = "".join(f"  |layer {k}|" for k in range(vectors.shape[0]))
    print(f"{'token':<16}{header}  top layer, first {args.dims} dims")
    for i, token in enumerate(tokens):
        norms = "".join(f"{np.linalg.norm(vectors[k, i]):>11.3f}" for k in range(vectors.shape[0]))
        head = " ".join(f"{v:+.3f}" for v in vectors[-1, i, : args.dims])
        print(f"{token[:15]:<16}{norms}  {head}")


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="elmo", description="ELMo contextual word vectors in PyTorch.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("embed", help="embed a text file (one sentence per line) into HDF5, AllenNLP's layout")
    p.add_argument("input", help="UTF-8 text, one whitespace-tokenised sentence per line")
    p.add_argument("output", help="HDF5 file to write")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every layer: (L+1, n_tokens, 2P) per sentence")
    which.add_argument("--top", action="store_true", help="the top layer: (n_tokens, 2P)")
    which.add_argument("--average", action="store_true", help="the mean of the layers: (n_tokens, 2P)")
    _add_model_args(p)
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    p.add_argument("--stateful", action="store_true",
                   help="AllenNLP's legacy mode: LSTM state carried from batch to batch, lines in file order")
    p.add_argument("--forget-sentences", action="store_true", help="do not write sentence_to_index")
    p.add_argument("--use-sentence-keys", action="store_true", help="name datasets by the sentence text")
    p.add_argument("--errors", choices=("strict", "replace"), default="strict",
                   help="invalid UTF-8: stop at the line (strict) or substitute U+FFFD (replace)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_embed)

    p = sub.add_parser("show", help="embed one sentence and print a per-token summary")
    p.add_argument("sentence", help="a whitespace-tokenised sentence, in quotes")
    _add_model_args(p)
    p.add_argument("--dims", type=int, default=4, help="top-layer dimensions to print per token")
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = lambda msg, *a, **k: print(f"warning: {msg}", file=sys.stderr)
            args.func(args)
    except (ConfigError, ValueError, FileNotFoundError, OSError) as err:
        print(f"elmo {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"elmo {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
