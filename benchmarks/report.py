"""The benchmark report: this machine's limits, then inference, start-up, training and memory, each beside its peer
measured in the same run. Writes the whole of BENCHMARKS.md (or prints it), so the tables can be refreshed anywhere.

    python benchmarks/report.py --out BENCHMARKS.md                 # about 10 minutes on 2 cores
    python benchmarks/report.py --sections limits,inference         # a part of it, printed

Peers: the inference reference is the per-step computation of AllenNLP (``tests/reference_engines.py``: every
character slot through the CNN, one masked step at a time over the batch, rows in file order); the training peer is
bilm-tf's own trainer (``--bilmtf-python``: a Python with TensorFlow, set up as its README says; without it the
training table says how). Weights are random (``benchmarks/random_weights.py``), scaled so the clips fire as in a
trained model; text is the 1B Word Benchmark held-out dev set and an IMDB slice, from ``$ELMO_DATA``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import DATA, flops_per_token, matmul_peak_gflops, memory_bandwidth_gbs  # noqa: E402
from report_sections import (inference_section, memory_section, startup_section,  # noqa: E402
                             training_section)

SECTIONS = ("limits", "inference", "startup", "training", "memory")


def _cpuinfo(key: str) -> str | None:
    """The first ``key`` line's value in /proc/cpuinfo (None where there is none)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(key)), None)


def machine() -> dict[str, str]:
    """CPU model (with AVX-512 and AMX where present), cores, threads, torch version and commit: what every table
    is measured on."""
    cpu = _cpuinfo("model name") or platform.processor() or "unknown CPU"
    flags = (_cpuinfo("flags") or "").split()
    features = [name for flag, name in (("avx512f", "AVX-512"), ("amx_tile", "AMX")) if flag in flags]
    cpu += f" ({', '.join(features)})" if features else ""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    return {"cpu": cpu, "cores": str(len(os.sched_getaffinity(0))), "threads": str(torch.get_num_threads()),
            "torch": torch.__version__, "commit": commit + ("+changes" if dirty else ""),
            "date": datetime.date.today().isoformat()}


def limits_section(peak: float, bandwidth: float) -> list[str]:
    from elmo.config import PRESETS

    config = PRESETS["original"]
    lstm = config.lstm
    weight_bytes = 4 * 2 * lstm.n_layers * (4 * lstm.dim * lstm.projection_dim + lstm.dim * lstm.projection_dim)
    flops = flops_per_token(config)
    return [
        "## This machine's limits",
        "",
        "| quantity | value |",
        "| --- | ---: |",
        f"| matmul peak (fp32, 2,048 x 2,048, best of MKL and oneDNN) | {peak:,.0f} GFLOP/s |",
        "| memory bandwidth (streaming read of 1 GiB: the better of a sum and a matrix-vector product) | "
        f"{bandwidth:,.1f} GB/s |",
        f"| original model: work per token (char CNN over all 50 slots + biLSTM) | {flops / 1e6:,.0f} MFLOP |",
        f"| compute limit (peak / work per token) | {peak * 1e9 / flops:,.0f} tokens/s |",
        f"| recurrent + projection matrices read per token at batch 1 (fp32) | {weight_bytes / 1e6:,.0f} MB |",
        f"| batch-1 bandwidth limit, fp32 / bf16 / int8 weights | {bandwidth * 1e9 / weight_bytes:,.0f} / "
        f"{2 * bandwidth * 1e9 / weight_bytes:,.0f} / {4 * bandwidth * 1e9 / weight_bytes:,.0f} tokens/s |",
        "",
        "At batch 1 every step multiplies one row by each recurrent and projection matrix of both directions, so the "
        "weights stream from memory once per token: the bandwidth limit. The input projections run over the whole "
        "sentence in one product and are left out of that count. At batch 32 the products are compute-bound.",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write the report here (default: print it)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"any of {', '.join(SECTIONS)}")
    parser.add_argument("--bilmtf-python", default=os.environ.get("BILMTF_PYTHON", "/tmp/tfenv/bin/python"),
                        help="a Python with TensorFlow for bilm-tf's trainer (see its README)")
    parser.add_argument("--bilmtf", type=Path, default=DATA.parent / "tools" / "bilmtf" / "bilmtf_train_ref.py")
    parser.add_argument("--train-batches", type=int, default=300, help="tiny: batches per trainer (10 windows of 30)")
    parser.add_argument("--small-cpu-batches", type=int, default=30,
                        help="small-cpu: batches per trainer (300, ten windows, takes bilm-tf about 5 minutes)")
    parser.add_argument("--startup-sentences", type=int, default=480)
    parser.add_argument("--memory-counts", default="24000,72000")
    args = parser.parse_args()
    wanted = args.sections.split(",")
    unknown = sorted(set(wanted) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section {unknown[0]!r}; known: {', '.join(SECTIONS)}")
    start = time.perf_counter()
    info = machine()
    peak, bandwidth = matmul_peak_gflops(), memory_bandwidth_gbs()
    lines = ["# Benchmarks", "",
             f"Measured by `python benchmarks/report.py` on {info['cpu']} ({info['cores']} cores, {info['threads']} "
             f"threads), torch {info['torch']}, commit {info['commit']}, {info['date']}. Every comparison in a table "
             "was measured in the same run; timings on a shared machine move by 10-20 % from run to run, so read "
             "ratios, not the last digit.", ""]
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        if "limits" in wanted:
            lines += limits_section(peak, bandwidth)
        if "inference" in wanted:
            lines += inference_section(peak, bandwidth)
        if "startup" in wanted:
            lines += startup_section(work, args.startup_sentences)
        if "training" in wanted:
            lines += training_section(work, args.bilmtf_python, args.bilmtf, args.train_batches,
                                      args.small_cpu_batches)
        if "memory" in wanted:
            lines += memory_section(work, [int(c) for c in args.memory_counts.split(",")])
    lines.append(f"The whole report took {(time.perf_counter() - start) / 60:.1f} minutes.")
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(text)


if __name__ == "__main__":
    main()
