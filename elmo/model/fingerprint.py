"""The one fingerprint of a model's weights: what identifies a biLM wherever a model is recorded (an embedding
file's ``weights_sha256``, a task model's biLM, the task feature cache's key)."""

from __future__ import annotations

import hashlib

import torch


def weights_sha256(model: torch.nn.Module) -> str:
    """sha256 over the module's state_dict, tensor by tensor in name order (name, dtype, shape, then the bytes):
    identifies the weights whatever file or format they came from (not a file's sha256: the same weights read from
    the official HDF5 or from our safetensors give the same value)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode("utf-8"))
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())  # raw bytes, any dtype (bf16 too), not copied
    return digest.hexdigest()
