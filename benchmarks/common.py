"""Shared pieces of the benchmark scripts: the machine's matmul peak, FLOPs per token, real sentences, RSS."""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import torch

from elmo.config import ElmoConfig

# the real-data folder: $ELMO_DATA, by default ../shared/data beside the repository (as the tests read it)
DATA = Path(os.environ.get("ELMO_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def synchronize(device: str | torch.device = "cpu") -> None:
    """Wait for queued GPU work, so a timer measures it (nothing to wait for on the CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak_gflops(n: int | None = None, repeats: int = 10, device: str | torch.device = "cpu") -> float:
    """Best fp32 GFLOP/s of an n x n matmul with the current thread setting (n: 2,048 on the CPU, 8,192 on a GPU).

    On the CPU the best of PyTorch's matmul (MKL) and oneDNN's packed product, whichever this machine runs faster
    (on an AMD EPYC, MKL reached 188 GFLOP/s and oneDNN 222): the peak is the machine's, not one library's."""
    from elmo.model.packed import onednn_packing_available

    n = n or (2048 if torch.device(device).type == "cpu" else 8192)
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    products = [lambda: a @ b]
    if torch.device(device).type == "cpu" and onednn_packing_available():
        packed = torch.ops.mkldnn._reorder_linear_weight(b, n)
        products.append(lambda: torch.ops.mkldnn._linear_pointwise(a, packed, None, "none", [], ""))
    best = min(best_time(product, repeats, device) for product in products)
    return 2 * n**3 / best / 1e9


def memory_bandwidth_gbs(gib: float = 1.0, repeats: int = 5) -> float:
    """Best GB/s of two streaming reads of a float32 buffer of ``gib`` GiB, far larger than the last-level cache,
    with the current thread setting: a sum, and a matrix-vector product over it (what batch 1 does with every
    weight matrix; the higher of the two, so the batch-1 limit is never understated)."""
    buffer = torch.ones(int(gib * (1 << 30)) // 4)
    side = 1 << 14
    matrix = buffer[: buffer.numel() // side * side].view(-1, side)  # (rows, 16,384)
    vector = torch.ones(side)
    seconds = [best_time(lambda: buffer.sum(), repeats), best_time(lambda: torch.mv(matrix, vector), repeats)]
    return max(buffer.numel() * 4 / seconds[0], matrix.numel() * 4 / seconds[1]) / 1e9


def step_products_gflops(config: ElmoConfig, rows: int = 32, repeats: int = 20,
                         device: str | torch.device = "cpu") -> float:
    """GFLOP/s of one LSTM step's two products alone (rows x P by P x 4C, rows x C by C x P), through the fast
    path's own multipliers: the ceiling of the time loop at this batch size, since those products are most of it."""
    from elmo.model.packed import RightMultiplier

    lstm = config.lstm
    recurrent = RightMultiplier(torch.randn(4 * lstm.dim, lstm.projection_dim, device=device) / 30)
    projection = RightMultiplier(torch.randn(lstm.projection_dim, lstm.dim, device=device) / 60)
    h, m = torch.randn(rows, lstm.projection_dim, device=device), torch.randn(rows, lstm.dim, device=device)
    seconds = best_time(lambda: [(recurrent(h), projection(m)) for _ in range(repeats)], 3, device) / repeats
    return 2 * rows * (lstm.projection_dim * 4 * lstm.dim + lstm.dim * lstm.projection_dim) / seconds / 1e9


def flops_per_token(config: ElmoConfig) -> float:
    """Multiply-adds x 2 of one token through the whole biLM, char CNN over all W slots (the issue's accounting)."""
    cnn, lstm = config.char_cnn, config.lstm
    width = cnn.max_characters_per_token
    macs = sum((width - w + 1) * w * cnn.embedding_dim * num for w, num in cnn.filters)
    macs += cnn.n_highway * 2 * cnn.n_filters**2 + cnn.n_filters * lstm.projection_dim
    per_layer = (2 * lstm.projection_dim) * 4 * lstm.dim + lstm.dim * lstm.projection_dim
    macs += 2 * lstm.n_layers * per_layer
    return 2.0 * macs


def sentences(count: int, path: Path | None = None) -> list[list[str]]:
    """The first ``count`` non-empty sentences of the 1B Word Benchmark held-out dev set (realistic lengths)."""
    path = path or DATA / "en" / "1b-heldout" / "dev.tokens"
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.split():
                out.append(line.split())
                if len(out) == count:
                    break
    return out


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB. Linux's VmHWM where there is one: ``ru_maxrss`` keeps the figure
    of the process before ``exec``, so a worker started by a large process would report its parent's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def best_time(fn, repeats: int, device: str | torch.device = "cpu") -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best
