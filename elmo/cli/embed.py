"""``elmo embed``, ``show``, ``convert`` and ``info``: vectors from a model, and the model's files."""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from pathlib import Path

import numpy as np

from elmo.cli.common import STDIO, CommandLineError, add_model_args, batch_size, count, load_model
from elmo.data.vocab import read_words
from elmo.embed import Embedder
from elmo.embed_file import embed_file
from elmo.io.atomic import atomic_folder, check_replaceable_folder
from elmo.io.native import save_model
from elmo.io.official import export_official
from elmo.io.resolve import model_reference
from elmo.memory import keep_freed_memory
from elmo.model.engine import InferenceEngine

EMBED_TOKENIZERS = ("whitespace", "en", "ko", "ko-morph", "model")


def cmd_embed(args: argparse.Namespace) -> None:
    if args.output == STDIO:
        raise CommandLineError("cannot write HDF5 to standard output; give a file name")
    if args.input == STDIO and args.resume:
        raise CommandLineError("--resume needs the input as a file (standard input cannot be read again); "
                               "save it to a file and embed that")
    layers = "top" if args.top else "average" if args.average else "all"
    keep_freed_memory()  # this process only: each LSTM step reuses the last one's memory (elmo/memory.py)
    model = load_model(args, stateful=args.stateful)
    engine = InferenceEngine.build(model, "bf16" if args.bf16 else "int8" if args.int8 else "fp32",
                                   read_words(args.cache_vocab, rows=False) if args.cache_vocab else None, args.device)
    n = embed_file(engine, args.stdio.input(args.input), args.output, layers=layers,
                   batch_size=args.batch_size, forget_sentences=args.forget_sentences,
                   use_sentence_keys=args.use_sentence_keys, errors=args.errors, progress=not args.quiet,
                   device=args.device, resume=args.resume, tokenize=args.tokenize,
                   model_name=model_reference(args.model, args.options, args.weights),
                   non_finite="warn" if args.allow_non_finite else "error", resumable=args.input != STDIO)
    print(f"wrote {n} sentences to {args.output}", file=sys.stderr)


def cmd_show(args: argparse.Namespace) -> None:
    embedder = Embedder.from_pretrained(args.model, args.options, args.weights)
    tokens = embedder.tokenize([args.sentence])[0]
    if not tokens:
        raise CommandLineError("the sentence holds no words; give one in quotes, e.g. elmo show \"The bank closed .\"")
    vectors = embedder.embed([tokens])[0]  # (L+1, n, 2P)
    print(f"{len(tokens)} tokens, {vectors.shape[0]} layers of {vectors.shape[2]} dimensions")
    header = "".join(f"  |layer {k}|" for k in range(vectors.shape[0]))
    dims = min(args.dims, vectors.shape[2])  # the header says what is printed: a vector has no more
    print(f"{'token':<16}{header}  top layer, " + (f"first {dims} dims" if dims < vectors.shape[2] else "all dims"))
    for i, token in enumerate(tokens):
        norms = "".join(f"{np.linalg.norm(vectors[k, i]):>11.3f}" for k in range(vectors.shape[0]))
        head = " ".join(f"{v:+.3f}" for v in vectors[-1, i, :dims])
        print(f"{_fit_columns(token, 15)} {norms}  {head}")


def _fit_columns(text: str, width: int) -> str:
    """``text`` padded to ``width`` terminal columns (Hangul, CJK and other wide characters take two); a longer one
    is cut and ends in "…", so that a cut token (a long Korean eojeol) is not taken for a token the tokenizer made."""
    columns = [2 if unicodedata.east_asian_width(char) in "WF" else 0 if unicodedata.combining(char) else 1
               for char in text]
    if sum(columns) <= width:
        return text + " " * (width - sum(columns))
    out, used = "", 0
    for char, w in zip(text, columns):
        if used + w > width - 1:  # one column for the mark
            break
        out, used = out + char, used + w
    return out + "…" + " " * (width - 1 - used)


def cmd_convert(args: argparse.Namespace) -> None:
    written = ("options.json", "weights.hdf5") if args.to == "official" else ("config.json", "model.safetensors")
    check_replaceable_folder(args.output, written)  # new, empty, or an earlier conversion (replaced); an export or
    # run folder would become two models (a usage error: exit 2)
    model = load_model(args)
    with atomic_folder(args.output, written) as work:  # both files or neither: never one model's weights beside
        export_official(model, work) if args.to == "official" else save_model(model, work)  # another's config
    print(f"wrote {' and '.join(str(Path(args.output) / name) for name in written)}", file=sys.stderr)


def cmd_info(args: argparse.Namespace) -> None:
    model = load_model(args)
    groups = {"char_encoder": 0, "forward_stack": 0, "backward_stack": 0}
    for name, p in model.named_parameters():
        groups[name.split(".")[0]] += p.numel()
    print(json.dumps(model.config.to_options(), indent=2))
    for name, number in groups.items():
        print(f"{name:<16}{number:>14,} parameters")
    print(f"{'total':<16}{sum(groups.values()):>14,} parameters")
    print(f"output: {model.config.n_output_layers} layers x {model.config.output_dim} dimensions per token")


# ---- the parsers ---------------------------------------------------------------------------------------------------

def add_commands(sub) -> None:
    """``embed``, ``show``, ``convert`` and ``info`` under ``sub``."""
    _add_embed(sub)
    p = sub.add_parser("show", help="embed one sentence and print a per-token summary")
    p.add_argument("sentence", help="a sentence, in quotes: tokenised as the model expects (the shipped en/ko models split off punctuation and clitics; other models split on whitespace)")
    add_model_args(p)
    p.add_argument("--dims", type=count, default=4, help="top-layer dimensions to print per token")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("convert", help="convert between the official files and our format")
    add_model_args(p)
    p.add_argument("output", help="output directory")
    p.add_argument("--to", choices=("ours", "official"), required=True,
                   help="ours: config.json + model.safetensors; official: options.json + weights.hdf5")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("info", help="print a model's configuration and parameter counts")
    add_model_args(p)
    p.set_defaults(func=cmd_info)


def _add_embed(sub) -> None:
    p = sub.add_parser("embed", help="embed a text file (one sentence per line) into HDF5, AllenNLP's layout")
    p.add_argument("input", help="UTF-8 text (plain or gzip), one sentence per line, split on whitespace unless "
                                 "--tokenize says otherwise; - reads standard input")
    p.add_argument("output", help="HDF5 file to write (AllenNLP's layout); a name ending in .npz writes a NumPy "
                                  "archive with the same keys instead (a file: not standard output)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every layer: (L+1, n_tokens, 2P) per sentence")
    which.add_argument("--top", action="store_true", help="the top layer: (n_tokens, 2P)")
    which.add_argument("--average", action="store_true", help="the mean of the layers: (n_tokens, 2P)")
    add_model_args(p)
    p.add_argument("--batch-size", type=batch_size, default=64, help="sentences per batch (default 64)")
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
                      help="LSTM products in int8 (dynamic quantisation, CPU only): fastest; vectors 3-7%% off")
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
    p.add_argument("--allow-non-finite", action="store_true",
                   help="keep NaN or infinite vectors with a warning naming the lines (default: an error)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_embed)
