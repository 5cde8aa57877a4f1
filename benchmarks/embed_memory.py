"""Peak memory of `elmo embed` on 10,000 and on 100,000 sentences: it should not grow with the file.

    python benchmarks/embed_memory.py --size small

Each run is a fresh process (embedding with random weights of the given size, --top layer), reporting its own peak
RSS. The input cycles through the 1B Word Benchmark held-out dev sentences.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import sentences  # noqa: E402

WORKER = r"""
import sys, time
sys.path.insert(0, {root!r}); sys.path.insert(0, {bench!r})
from common import peak_rss_mb
from random_weights import random_bilm
from elmo.embed_file import embed_file
from elmo.memory import keep_freed_memory
keep_freed_memory()  # as `elmo embed` does
model = random_bilm({size!r})
start = time.perf_counter()
n = embed_file(model, {src!r}, {dst!r}, layers="top", batch_size=64, forget_sentences={forget}, progress=False)
print(n, time.perf_counter() - start, peak_rss_mb())
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--counts", default="10000,100000")
    parser.add_argument("--both-index-modes", action="store_true",
                        help="also run with --forget-sentences (no sentence_to_index map)")
    args = parser.parse_args()
    root, bench = str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)
    pool = [" ".join(s) for s in sentences(12_000)]
    print("| sentences | model | sentence_to_index | seconds | sentences/s | peak RSS (MB) |")
    print("| ---: | --- | --- | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for count in [int(c) for c in args.counts.split(",")]:
            src = Path(tmp) / f"in{count}.txt"
            src.write_text("\n".join(pool[i % len(pool)] for i in range(count)) + "\n", encoding="utf-8")
            for forget in ((True, False) if args.both_index_modes else (False,)):
                dst = Path(tmp) / "out.hdf5"
                code = WORKER.format(root=root, bench=bench, size=args.size, src=str(src), dst=str(dst), forget=forget)
                n, seconds, rss = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                 check=True).stdout.split()
                print(f"| {int(n):,} | {args.size} | {'no' if forget else 'yes'} | {float(seconds):.0f} | "
                      f"{int(n) / float(seconds):,.0f} | {float(rss):,.0f} |")
                dst.unlink()
                sys.stdout.flush()


if __name__ == "__main__":
    main()
