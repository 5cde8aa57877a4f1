"""Random ELMo weights in the official layout (options.json + hdf5), at the released sizes, for benchmarks.

    python benchmarks/random_weights.py original runs/random-original

The weights follow bilm-tf's initialisation, with random biases and the LSTM kernels scaled by ``--gain`` so that
the cell clip really fires on real text (the script prints how often), while the states stay bounded.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from elmo.config import PRESETS  # noqa: E402
from elmo.data.chars import batch_to_ids  # noqa: E402
from elmo.io.official import export_official, load_official  # noqa: E402
from elmo.model import lstm  # noqa: E402
from elmo.model.bilm import BiLM  # noqa: E402
from elmo.model.cell import lstm_step  # noqa: E402


def random_bilm(size: str, seed: int = 0, gain: float = 2.0) -> BiLM:
    torch.manual_seed(seed)
    model = BiLM.from_config(PRESETS[size])  # initialised as bilm-tf initialises
    with torch.no_grad():
        for stack in (model.forward_stack, model.backward_stack):
            for layer in stack.layers:
                layer.weight_ih.mul_(gain)
                layer.weight_hh.mul_(gain)
                layer.bias.add_(torch.randn_like(layer.bias) * 0.5)
        for conv in model.char_encoder.convolutions:
            conv.bias.uniform_(-0.05, 0.05)
    return model.eval()


def clip_rates(model: BiLM, sentences: list[list[str]]) -> tuple[float, float]:
    """Share of cell values and of projected outputs at the clip bound, over the given sentences (every layer)."""
    hits = {"cell": [0, 0], "proj": [0, 0]}
    config = model.config.lstm

    def counting_step(z, c_prev, project, cell_clip, proj_clip, **kwargs):
        r, c = lstm_step(z, c_prev, project, cell_clip, proj_clip, **kwargs)
        hits["cell"][0] += int((c.abs() >= config.cell_clip - 1e-6).sum()); hits["cell"][1] += c.numel()
        hits["proj"][0] += int((r.abs() >= config.proj_clip - 1e-6).sum()); hits["proj"][1] += r.numel()
        return r, c

    lstm.lstm_step = counting_step
    try:
        with torch.no_grad():
            model(batch_to_ids(sentences))
    finally:
        lstm.lstm_step = lstm_step
    return hits["cell"][0] / hits["cell"][1], hits["proj"][0] / hits["proj"][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("size", choices=sorted(PRESETS))
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gain", type=float, default=2.0)
    args = parser.parse_args()
    model = random_bilm(args.size, args.seed, args.gain)
    options, weights = export_official(model, args.out)
    reloaded = load_official(options, weights)
    sentences = [line.split() for line in
                 (Path(__file__).resolve().parents[2] / "shared/data/en/1b-heldout/dev.tokens").read_text().split("\n")[:16]]
    cell, proj = clip_rates(reloaded, sentences)
    with torch.no_grad():
        top = reloaded(batch_to_ids(sentences)).layers[-1]
    print(f"wrote {options} and {weights} ({weights.stat().st_size:,} bytes)")
    print(f"forward layer 0 at the clip: cell {cell:.2%}, projection {proj:.2%}; top layer max |x| {top.abs().max():.2f}")


if __name__ == "__main__":
    main()
