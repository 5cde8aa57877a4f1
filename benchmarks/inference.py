"""Inference speed of the biLM on this machine, against the per-step reference measured in the same run.

    python benchmarks/inference.py --size original --sentences 256

Prints one table row per (batch size, path): tokens/s, GFLOP/s as a share of the measured matmul peak, the speed
ratio to the reference path, and the max abs diff of every layer to the reference.
"""

from __future__ import annotations

import argparse
import copy
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (best_time, flops_per_token, matmul_peak_gflops, peak_rss_mb, sentences,  # noqa: E402
                    step_products_gflops)
from random_weights import random_bilm  # noqa: E402

from elmo.data.chars import batch_to_ids  # noqa: E402
from elmo.embed import Embedder  # noqa: E402
from elmo.model.engine import InferenceEngine  # noqa: E402
from tests.reference_engines import reference_forward, use_fused_lstm  # noqa: E402


def run_batches(model, batches, reference=False):
    """One pass over the sentences through an engine (or a module), starting cold: an engine's token memo is emptied
    and its carried states forgotten first, so each timed pass pays for its own character CNN work (repeats within
    the pass are what the memo saves)."""
    if isinstance(model, InferenceEngine):
        model.forget_tokens()
        model.reset_states()
    outputs = []
    with torch.inference_mode():
        for ids in batches:
            out = reference_forward(model, ids) if reference else model(ids)
            outputs.append(out.layers)
    return outputs


def embedder_pass(model, text, size):
    """The whole input through ``Embedder.embed`` (sorted by length, batches of ``size``, input order restored)."""
    device = next(model.parameters()).device
    return Embedder(model, max_batch_size=size, max_tokens=1 << 30, device=device).embed(text)


def embedder_diff(arrays, reference_out, size: int) -> float:
    """Max abs diff between Embedder's per-sentence arrays (L+1, n, D) and the reference's file-order batches."""
    worst = 0.0
    for index, array in enumerate(arrays):
        layers = reference_out[index // size]
        n = array.shape[1]
        expected = torch.stack([layer[index % size, 1 : n + 1] for layer in layers]).cpu()  # (L+1, n, D)
        worst = max(worst, float((torch.from_numpy(array) - expected).abs().max()) if n else 0.0)
    return worst


def fused_copy(model):
    """A copy whose layers are ``nn.LSTM(proj_size=...)`` (cuDNN on a GPU); it cannot clip, so it differs."""
    fused = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the clips fire in these weights: its row prints how much that changes
        use_fused_lstm(fused, allow_clips=True)
    return fused


def row(size: int, name: str, rate: float, flops: float, peak: float, ratio: str, diff: str) -> None:
    print(f"| {size} | {name} | {rate:,.0f} | {100 * rate * flops / 1e9 / peak:.0f}% | {ratio} | {diff} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="original")
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--batch-sizes", default="1,8,32,128")
    parser.add_argument("--reference-batch-sizes", default="32", help="batch sizes that also run the slow reference")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--order", choices=("sorted", "file"), default="sorted",
                        help="sorted: sentences grouped by length, as Embedder and `elmo embed` do; file: as read")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda on a machine with a GPU")
    parser.add_argument("--text", type=Path, default=None,
                        help="one tokenised sentence per line (default: $ELMO_DATA/en/1b-heldout/dev.tokens)")
    args = parser.parse_args()

    device = torch.device(args.device)
    on_cpu = device.type == "cpu"
    torch.set_num_threads(torch.get_num_threads())
    peak = matmul_peak_gflops(device=device)
    model = random_bilm(args.size).to(device)
    flops = flops_per_token(model.config)
    text = sentences(args.sentences, args.text)
    if args.order == "sorted":
        text = sorted(text, key=len, reverse=True)
    n_tokens = sum(len(s) for s in text)
    source = args.text.name if args.text else "1B Word held-out dev"
    print(f"model {args.size}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters, "
          f"{flops / 1e6:.0f} MFLOP/token; {len(text)} sentences, {n_tokens} tokens ({source}, "
          f"batches in {args.order} order); "
          f"{'threads ' + str(torch.get_num_threads()) if on_cpu else torch.cuda.get_device_name(device)}; "
          f"matmul peak {peak:.0f} GFLOP/s "
          f"(= {peak * 1e9 / flops:.0f} tokens/s at 100%)")
    if on_cpu:
        from elmo.model.packed import packing_library
        library = packing_library(model.forward_stack.layers[0].weight_hh)
        print(f"LSTM matrices packed by: {library or 'nothing (plain transposed copies)'}")
    for rows in sorted({int(b) for b in args.batch_sizes.split(",")}):
        ceiling = step_products_gflops(model.config, rows, device=device)
        print(f"ceiling at batch {rows}: one LSTM step's products alone run at {ceiling:.0f} GFLOP/s "
              f"= {100 * ceiling / peak:.0f}% of peak")
    print()
    print("| batch | path | tokens/s | % of peak | x reference | max abs diff |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    reference_sizes = {int(b) for b in args.reference_batch_sizes.split(",") if b}
    vocabulary = {w for s in text for w in s} | {"<S>", "</S>"}
    # each path: (name, what runs it); every path runs the same batches; each engine lives only for its row
    paths = [
        ("fast, deterministic", lambda: InferenceEngine.build(model)),
        ("fast, token cache (every word cached)", lambda: InferenceEngine.build(model, cache_words=sorted(vocabulary))),
        ("optional: bf16 matmuls", lambda: InferenceEngine.build(model, "bf16")),
        ("optional: int8 LSTM products", lambda: InferenceEngine.build(model, "int8")),
        ("fast, stateful", lambda: InferenceEngine.build(model, stateful=True)),
        ("optional: nn.LSTM (cuDNN on a GPU; clips ignored)", lambda: fused_copy(model)),
    ]
    if not on_cpu:
        paths = [path for path in paths if "int8" not in path[0]]  # CPU-only mode
    for size in [int(b) for b in args.batch_sizes.split(",")]:
        batches = [batch_to_ids(text[i : i + size]).to(device) for i in range(0, len(text), size)]
        reference_out, reference_time = None, None
        if size in reference_sizes:
            reference_time = best_time(lambda: run_batches(model, batches, reference=True), 1, device)
            reference_out = run_batches(model, batches, reference=True)
            row(size, "reference (per step, all slots)", n_tokens / reference_time, flops, peak, "1.00", "0")
        for name, make in paths:
            runner = make()
            seconds = best_time(lambda: run_batches(runner, batches), args.repeats, device)
            out = run_batches(runner, batches)
            runner = None  # frees this path's weights before the next path is built
            ratio = f"{reference_time / seconds:.2f}" if reference_time else "-"
            diff = "-"
            if reference_out is not None and not name.endswith("stateful"):
                diff = f"{max(float((a - b).abs().max()) for x, y in zip(out, reference_out) for a, b in zip(x, y)):.1e}"
            row(size, name, n_tokens / seconds, flops, peak, ratio, diff)
        if args.order == "file":  # what a user of Embedder gets from the same file: sorted, then batched
            seconds = best_time(lambda: embedder_pass(model, text, size), args.repeats, device)
            ratio = f"{reference_time / seconds:.2f}" if reference_time else "-"
            diff = (f"{embedder_diff(embedder_pass(model, text, size), reference_out, size):.1e}"
                    if reference_out is not None else "-")
            row(size, "fast, Embedder.embed (input sorted by length, then batches)", n_tokens / seconds, flops,
                peak, ratio, diff)
        sys.stdout.flush()
    end_peak = matmul_peak_gflops(device=device)
    print(f"\nmatmul peak measured again at the end: {end_peak:.0f} GFLOP/s (the % column uses the first, "
          f"{peak:.0f}; this machine's peak drifts, so read % of peak to within that difference)")
    print(f"peak RSS {peak_rss_mb():,.0f} MB")
    if not on_cpu:
        print(f"peak GPU memory {torch.cuda.max_memory_allocated(device) / 2**20:,.0f} MB")


if __name__ == "__main__":
    main()
