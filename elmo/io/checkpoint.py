"""Training checkpoints as the loaders see them: where a run folder keeps its checkpoints, and which is newest.

``run_dir/step-00001250/`` is a model directory (``config.json`` + ``model.safetensors``, our format) plus the
training state beside it, so ``elmo.io.resolve`` reads a checkpoint, or a run folder's newest one, as a model.
Writing and reading the whole checkpoint (softmax, vocabulary, optimizer, carried states) is
``elmo.training.checkpoint``'s: this module knows only the layout, so loading a model needs no training code.
"""

from __future__ import annotations

from pathlib import Path

from elmo.io.native import ModelFileError

PREFIX = "step-"  # a checkpoint's folder: PREFIX + the step in 8 digits; complete once trainer.json is in it


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    run = Path(run_dir)
    if not run.is_dir():
        return []
    return sorted(p for p in run.iterdir() if p.is_dir() and p.name.startswith(PREFIX)
                  and (p / "trainer.json").is_file())


def foreign_checkpoint_names(run_dir: str | Path) -> list[Path]:
    """Entries of a run folder named like a checkpoint (``step-*``) that are not one (no trainer.json): not ours."""
    run = Path(run_dir)
    if not run.is_dir():
        return []
    return sorted(p for p in run.iterdir() if is_checkpoint_name(p.name) and not (p / "trainer.json").is_file())


def is_checkpoint_name(name: str) -> bool:
    """``step-`` and the step's 8 digits: the one name a checkpoint of step N gets."""
    return name.startswith(PREFIX) and len(name) == len(PREFIX) + 8 and name[len(PREFIX):].isdigit() \
        and name[len(PREFIX):].isascii()


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory itself, or the newest one inside a run directory."""
    path = Path(path)
    if (path / "trainer.json").is_file():
        return path
    found = list_checkpoints(path)
    if not found:
        raise ModelFileError(f"{path}: no checkpoint here (expected a step-* directory with trainer.json)")
    return found[-1]
