"""Every field of a checkpoint's ``trainer.json`` and ``optimizer.json`` checked before it is used: a damaged or
edited checkpoint is one line naming the file and the field, never a traceback from deep inside a resume."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from elmo.io.native import ModelFileError
from elmo.limits import is_digits

_BATCHER_KEYS = ("source", "pending", "current", "left", "exhausted")
_QUEUED_BATCHER_KEYS = ("source", "queues", "current", "counter", "exhausted")  # rows dealt sentences in turn
_SOURCE_KEYS = ("epoch", "file_index", "line", "chunks", "served")
# optimizer settings that are numbers (Adagrad's and Adam's); betas: two numbers
_OPTIMIZER_NUMBERS = ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")


def data_positions_to_save(states: list[dict], rank: int) -> list[dict]:
    """A rank's data positions (one per direction) as its checkpoint record holds them: ranks above 0 leave out the
    sentences waiting (``pending``), one sequence shared by every rank, which rank 0's record holds."""
    return states if rank == 0 else [{k: v for k, v in state.items() if k != "pending"} for state in states]


def data_position(data: list[list[dict]], rank: int, direction: int) -> dict:
    """One rank's data position in one direction from a checkpoint's ``data``, with rank 0's ``pending`` where its
    own record leaves it out (``data_positions_to_save``)."""
    state = data[rank][direction]
    if "pending" in state or "queues" in state:
        return state
    return {**state, "pending": data[0][direction]["pending"]}


def _fail(path: Path, field: str, problem: str) -> ModelFileError:
    return ModelFileError(f"{path}: {field} {problem}; the checkpoint is damaged or was edited: resume from "
                          f"another checkpoint, or start a new run from its weights with --init-from")


def _whole(value: Any, path: Path, field: str, low: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise _fail(path, field, f"must be a whole number >= {low}, got {value!r}")
    return value


def _number(value: Any, path: Path, field: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise _fail(path, field, f"must be a finite number >= 0, got {value!r}")
    return value


def check_trainer_record(record: Any, path: Path) -> None:
    """trainer.json: step, tokens_seen, elapsed, world, files, the checkpoint's own files' hashes, and each rank's two
    data positions."""
    if not isinstance(record, dict):
        raise _fail(path, "the file", f"must hold a JSON object, got {type(record).__name__}")
    for key in ("step", "tokens_seen"):
        _whole(record.get(key), path, key)
    _number(record.get("elapsed"), path, "elapsed")
    world = _whole(record.get("world", 1), path, "world", 1)
    if not isinstance(record.get("tokenizer_function", False), bool):
        raise _fail(path, "tokenizer_function", "must be true or false")
    files = record.get("files", [])
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise _fail(path, "files", "must be a list of file names")
    if not isinstance(record.get("files_from", ""), str):  # absent in older checkpoints
        raise _fail(path, "files_from", "must be a folder's path")
    sizes = record.get("file_sizes", [0] * len(files))
    if not isinstance(sizes, list) or len(sizes) != len(files):
        raise _fail(path, "file_sizes", f"must be a list of {len(files)} sizes, one per file")
    for index, size in enumerate(sizes):
        _whole(size, path, f"file_sizes[{index}]")
    hashes = record.get("file_hashes", [])  # absent in checkpoints written before they were recorded
    if not isinstance(hashes, list) or (hashes and len(hashes) != len(files)) or not all(
            isinstance(h, str) and len(h) == 64 for h in hashes):
        raise _fail(path, "file_hashes", f"must be a list of {len(files)} SHA-256 hashes, one per file")
    checksums = record.get("sha256", {})  # absent in checkpoints written before they were recorded
    if not isinstance(checksums, dict) or not all(
            isinstance(name, str) and "/" not in name and isinstance(h, str) and len(h) == 64
            for name, h in checksums.items()):
        raise _fail(path, "sha256", "must map file names of the checkpoint to their SHA-256 hashes")
    data = record.get("data")
    if not isinstance(data, list) or len(data) != world:
        raise _fail(path, "data", f"must be a list of {world} rank(s), got {type(data).__name__}"
                    + (f" of {len(data)}" if isinstance(data, list) else ""))
    for rank, directions in enumerate(data):
        if not isinstance(directions, list) or len(directions) != 2:
            raise _fail(path, f"data[{rank}]", "must hold the forward and the backward position")
        for d, batcher in enumerate(directions):
            _check_batcher(batcher, path, f"data[{rank}][{d}]", shared_pending=rank > 0)
            if world > 1 and "queues" in batcher:
                raise ModelFileError(f"{path}: its data positions are per-row queues, which the processes of a "
                                     f"resumed run cannot share out; start a new run from its weights with "
                                     f"--init-from")


def _check_batcher(state: Any, path: Path, field: str, shared_pending: bool = False) -> None:
    """One direction's data position. ``shared_pending``: a rank above 0, which may leave the sentences waiting
    (``pending``, one sequence shared by all ranks) to rank 0's record."""
    keys = _QUEUED_BATCHER_KEYS if isinstance(state, dict) and "queues" in state else _BATCHER_KEYS
    if shared_pending and isinstance(state, dict) and "pending" not in state:
        keys = tuple(k for k in keys if k != "pending")
    if not isinstance(state, dict) or any(k not in state for k in keys):
        raise _fail(path, field, f"must be an object with {', '.join(keys)}")
    source = state["source"]
    if not isinstance(source, dict) or any(k not in source for k in _SOURCE_KEYS):
        raise _fail(path, f"{field}.source", f"must be an object with {', '.join(_SOURCE_KEYS)}")
    for key in ("epoch", "file_index", "line", "chunks", "served"):
        _whole(source[key], path, f"{field}.source.{key}")
    if "queues" in state:
        _whole(state["counter"], path, f"{field}.counter")
    else:
        if not isinstance(state["left"], list):
            raise _fail(path, f"{field}.left", "must be a list of counts, one per row")
        for row, count in enumerate(state["left"]):
            _whole(count, path, f"{field}.left[{row}]")
    for key in [k for k in ("queues" if "queues" in state else "pending", "current") if k in state]:
        if not isinstance(state[key], list) or not all(isinstance(row, list) for row in state[key]):
            raise _fail(path, f"{field}.{key}", "must be a list of rows")
    if not isinstance(state["exhausted"], bool):
        raise _fail(path, f"{field}.exhausted", f"must be true or false, got {state['exhausted']!r}")


def check_optimizer_record(plain: Any, path: Path) -> None:
    """optimizer.json: the parameter groups (their numbers finite, their parameters indices) and the per-parameter
    plain values."""
    if not isinstance(plain, dict) or not isinstance(plain.get("param_groups"), list) \
            or not isinstance(plain.get("state"), dict):
        raise _fail(path, "the file", "must be an object with param_groups (a list) and state (an object)")
    for g, group in enumerate(plain["param_groups"]):
        if not isinstance(group, dict):
            raise _fail(path, f"param_groups[{g}]", "must be an object")
        for key in _OPTIMIZER_NUMBERS:
            if key in group:
                _number(group[key], path, f"param_groups[{g}].{key}")
        if "betas" in group and (not isinstance(group["betas"], list) or len(group["betas"]) != 2):
            raise _fail(path, f"param_groups[{g}].betas", f"must be two numbers, got {group['betas']!r}")
        for b, beta in enumerate(group.get("betas", [])):
            _number(beta, path, f"param_groups[{g}].betas[{b}]")
        params = group.get("params")
        if not isinstance(params, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in params):
            raise _fail(path, f"param_groups[{g}].params", "must be a list of parameter indices")
    for index, values in plain["state"].items():
        if not is_digits(index) or not isinstance(values, dict):
            raise _fail(path, f"state[{index!r}]", "must be an object under a parameter index")
        for key, value in values.items():
            _number(value, path, f"state[{index!r}].{key}")


OPTIMIZER_TENSORS = {"adagrad": ("sum",), "adam": ("exp_avg", "exp_avg_sq")}  # each stepped parameter's state


OPTIMIZER_SETTINGS = ("lr", "eps", "weight_decay", "lr_decay", "initial_accumulator_value", "maximize", "betas",
                      "amsgrad")  # what the run's config sets and a step's arithmetic reads


def check_optimizer(saved: dict[str, Any], optimizer: torch.optim.Optimizer, kind: str, folder: Path) -> None:
    """A checkpoint's optimizer (``saved``: its state and param groups) against the one the run's config built:
    the groups' settings the same (loading the state takes the saved ones: an edited ``lr`` or ``maximize`` in
    optimizer.json trained otherwise than train_config.json says, and the next checkpoint recorded the config's),
    and ``check_optimizer_tensors``."""
    groups = saved.get("param_groups")
    if not isinstance(groups, list) or len(groups) != len(optimizer.param_groups):
        raise _fail(folder / "optimizer.json", "param_groups", f"are not {len(optimizer.param_groups)} groups")
    for index, (group, built) in enumerate(zip(groups, optimizer.param_groups)):
        for key in (k for k in OPTIMIZER_SETTINGS if k in built):
            value = group.get(key)
            if (tuple(value) if isinstance(value, list) else value) != built[key]:  # JSON gives betas as a list
                raise _fail(folder / "optimizer.json", f"group {index}'s {key}",
                            f"is {group.get(key)!r} where train_config.json gives {built[key]!r}")
    check_optimizer_tensors(saved["state"], [p for g in optimizer.param_groups for p in g["params"]], kind,
                            folder / "optimizer.safetensors")


def check_optimizer_tensors(state: dict[int, dict[str, Any]], params: list, kind: str, path: Path) -> None:
    """The optimizer's saved state against the parameters it will step: each parameter's tensors present, of the
    parameter's shape and type, and finite. An edited or mixed-up file would otherwise run the fused kernels on a
    state that does not fit (wrong arithmetic with exit 0) or fail deep inside torch at the first step."""
    for index, values in state.items():
        if not isinstance(index, int) or not 0 <= index < len(params):
            raise _fail(path, f"the state of parameter {index}", f"names no parameter (this run has {len(params)})")
        param = params[index]
        for key in OPTIMIZER_TENSORS[kind]:
            tensor = values.get(key)
            if not isinstance(tensor, torch.Tensor):
                raise _fail(path, f"{index}.{key}", "is missing")
            if tensor.shape != param.shape or tensor.dtype != param.dtype:
                raise _fail(path, f"{index}.{key}", f"is {tuple(tensor.shape)} {tensor.dtype} where the parameter is "
                                                    f"{tuple(param.shape)} {param.dtype}")
            if not bool(torch.isfinite(tensor).all()):
                raise _fail(path, f"{index}.{key}", "holds NaN or infinite values")


CARRIED_TYPES = (torch.float32, torch.bfloat16)  # h comes out of a GPU run's bf16 autocast in bfloat16


def check_carried_state(tensor: Any, name: str, shape: tuple[int, ...], path: Path) -> torch.Tensor:
    """One carried LSTM state (h or c of a layer, direction and rank): of ``shape``, float32 (or bfloat16, as
    mixed-precision runs carry h), finite."""
    if not isinstance(tensor, torch.Tensor):
        raise _fail(path, name, "is missing")
    if tuple(tensor.shape) != shape or tensor.dtype not in CARRIED_TYPES:
        raise _fail(path, name, f"is {tuple(tensor.shape)} {tensor.dtype} where this run carries {shape} float32 "
                                f"or bfloat16")
    if not bool(torch.isfinite(tensor).all()):
        raise _fail(path, name, "holds NaN or infinite values")
    return tensor
