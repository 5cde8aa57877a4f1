"""Checking a device name before any work is done on it."""

from __future__ import annotations

import torch

from elmo.errors import UsageError


def check_device(name: str | torch.device | None, what: str = "device") -> None:
    """A device this machine can run on, or a one-line ValueError saying what to use instead (torch itself
    fails later, deep inside the first tensor move, with an AssertionError)."""
    if name is None:
        return
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise UsageError(f"{what} {name}: not a device name (cpu, cuda, cuda:1, mps)") from None
    if device.type not in ("cpu", "cuda", "mps"):  # meta, xla ...: tensors without values, or not set up here
        raise UsageError(f"{what} {name}: not a device elmo runs on; use cpu, cuda, cuda:N or mps")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"{what} {name}: CUDA is not available on this machine; use cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UsageError(f"{what} {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"{what} {name}: MPS is not available on this machine; use cpu")
