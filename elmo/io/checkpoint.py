"""Training checkpoints as the loaders see them: where a run folder keeps its checkpoints, and which is newest.

``run_dir/step-00001250/`` is a model directory (``config.json`` + ``model.safetensors``, our format) plus the
training state beside it, so ``elmo.io.resolve`` reads a checkpoint, or a run folder's newest one, as a model.
Writing and reading the whole checkpoint (softmax, vocabulary, optimizer, carried states) is
``elmo.training.checkpoint``'s: this module knows only the layout, so loading a model needs no training code.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from elmo.io.native import ModelFileError

PREFIX = "step-"  # a checkpoint's folder: PREFIX + the step in 8 digits or more; complete once trainer.json is in it
# what elmo.training.checkpoint writes into a checkpoint's folder (a test checks that it writes nothing else)
CHECKPOINT_FILES = frozenset({"config.json", "model.safetensors", "softmax.safetensors", "vocab.txt", "train_config.json",
                              "optimizer.safetensors", "optimizer.json", "state.safetensors", "trainer.json"})
_CHECKPOINT_NAME = re.compile(re.escape(PREFIX) + r"[0-9]{8,}")


def is_checkpoint(path: Path) -> bool:
    """A complete checkpoint of elmo's: a folder holding trainer.json (written last)."""
    return (path / "trainer.json").is_file()


def checkpoint_step(path: Path) -> int | None:
    """The step a checkpoint's folder name gives (``step-00001250`` -> 1250), or None for any other name (a user's
    ``step-00001250-backup`` is not a checkpoint: never listed, never pruned)."""
    return int(path.name[len(PREFIX) :]) if _CHECKPOINT_NAME.fullmatch(path.name) else None


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first (by step: from step 100,000,000 on the names grow a digit)."""
    run = Path(run_dir)
    if not run.is_dir():
        return []
    found = [p for p in run.iterdir() if checkpoint_step(p) is not None and p.is_dir() and is_checkpoint(p)]
    return sorted(found, key=checkpoint_step)


def foreign_checkpoint_names(run_dir: str | Path) -> list[Path]:
    """Entries of a run folder with the name a checkpoint gets (``step-`` and 8 or more digits) that are not one:
    not ours, and saving that step would replace them."""
    run = Path(run_dir)
    if not run.is_dir():
        return []
    return sorted(p for p in run.iterdir() if checkpoint_step(p) is not None and not is_checkpoint(p))


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory itself, or the newest one inside a run directory."""
    path = Path(path)
    if is_checkpoint(path):
        return named_as_its_step(path)
    found = list_checkpoints(path)
    if not found:
        raise ModelFileError(f"{path}: no checkpoint here (expected a step-* directory with trainer.json)")
    return named_as_its_step(found[-1])


def named_as_its_step(checkpoint: Path) -> Path:
    """``checkpoint``, when its trainer.json's step is the one its name gives (a folder not named for a step, an
    exported one, says nothing). A renamed or mixed-up folder is one line: its name decides which checkpoint is
    newest, so ``step-00000099`` holding step 3 would be read, resumed and kept as the newest for ever."""
    named = checkpoint_step(checkpoint)
    try:
        record = json.loads((checkpoint / "trainer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # unreadable: the loaders say so
        return checkpoint
    step = record.get("step") if isinstance(record, dict) else None
    if named is not None and isinstance(step, int) and not isinstance(step, bool) and step != named:
        raise ModelFileError(f"{checkpoint / 'trainer.json'}: step {step:,} in a folder named for step {named:,}; a "
                             f"renamed or mixed-up checkpoint: give it back its name, or move it away")
    return checkpoint
