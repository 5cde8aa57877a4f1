"""Training speed (tokens/s) of the presets on this machine: forward + backward streams, sampled softmax, Adagrad.

    python benchmarks/training.py --presets tiny,small-cpu --steps 20

Text: the 1B Word Benchmark held-out dev set, vocabulary its 50,000 most frequent words + the 3 specials (bilm-tf's
CPU benchmark used 50,000 IMDB words). tokens/s = rows x unroll_steps x batches / seconds, after warm-up batches.
Beside bilm-tf's own trainer in the same run: ``python benchmarks/report.py --sections training``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import DATA, peak_rss_mb  # noqa: E402

from elmo.data.vocab import Vocabulary  # noqa: E402
from elmo.memory import keep_freed_memory  # noqa: E402
from elmo.training.config import TrainConfig  # noqa: E402
from elmo.training.trainer import Trainer  # noqa: E402



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", default="tiny,small-cpu")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    keep_freed_memory()  # as `elmo train` does
    text = DATA / "en" / "1b-heldout" / "dev.tokens"
    vocab = Vocabulary.build((line.split() for line in text.open(encoding="utf-8")), max_size=50_003)
    print(f"threads {torch.get_num_threads()}, vocabulary {len(vocab):,}\n")
    print("| preset | rows x steps | tokens/s | sampled loss (first -> last) |")
    print("| --- | --- | ---: | --- |")
    for name in args.presets.split(","):
        config = TrainConfig.load(name).replace(max_steps=10**9, checkpoint_every=10**9)
        with tempfile.TemporaryDirectory() as out:
            trainer = Trainer(config, [text], out, vocab=vocab, progress=False)
            losses = [trainer.train_step()["loss"] for _ in range(args.warmup)]
            start = time.perf_counter()
            losses += [trainer.train_step()["loss"] for _ in range(args.steps)]
            seconds = time.perf_counter() - start
        rate = config.batch_size * config.unroll_steps * args.steps / seconds
        print(f"| {name} | {config.batch_size} x {config.unroll_steps} | {rate:,.0f} | "
              f"{losses[0]:.2f} -> {losses[-1]:.2f} |")
    print(f"\npeak RSS {peak_rss_mb():,.0f} MB")


if __name__ == "__main__":
    main()
