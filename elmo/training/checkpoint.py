"""Training checkpoints: self-describing directories, written whole or not at all, never pickled.

``run_dir/step-00001250/`` holds

* ``config.json`` + ``model.safetensors``: the biLM in our model format (so ``load_model`` and ``elmo embed``
  read a checkpoint directly), the tokenizer of the training text included;
* ``softmax.safetensors`` and ``vocab.txt``: the LM head, needed to continue training or measure perplexity;
* ``train_config.json``: the full training configuration;
* ``optimizer.safetensors`` + ``optimizer.json``: the optimiser's tensors and its plain settings;
* ``state.safetensors``: carried LSTM states and RNG states of every rank;
* ``trainer.json``: step, tokens seen, elapsed time, every rank's data position (ranks above 0 leave the shared
  ``pending`` sentences to rank 0's), and the SHA-256 of the tensor files and the vocabulary as written
  (``verify_checkpoint``: safetensors has no checksum of its own, so a flipped byte would otherwise load and train
  on silently; the JSON files are checked field by field instead).

Finding them (``list_checkpoints``, ``resolve_checkpoint``) is ``elmo.io.checkpoint``'s; a model named by a checkpoint,
a run folder or an exported folder is resolved (``elmo.io.resolve``) into files the loaders build from.

A checkpoint is written into a hidden temporary directory and renamed into place, so a crash leaves either the
previous checkpoint set or the new one, never a half-written directory.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from elmo.data.vocab import Vocabulary
from elmo.errors import UsageError
from elmo.io.atomic import atomic_path, check_free_space, new_file_mode, sync_file, sync_folder
from elmo.io.checkpoint import CHECKPOINT_FILES, PREFIX, is_checkpoint, list_checkpoints, resolve_checkpoint
from elmo.io.load import load_files
from elmo.io.model_files import ModelFiles
from elmo.io.native import LEGACY_TOKENIZER_NAME, ModelFileError, load_state_strict, save_model
from elmo.io.resolve import read_resolved
from elmo.io.work_folder import file_sha256
from elmo.model.bilm import BiLM
from elmo.training.checkpoint_fields import check_optimizer_record, check_trainer_record
from elmo.training.softmax import LMSoftmax


logger = logging.getLogger(__name__)
CHECKPOINT_EXTRA = 1 << 20  # bytes beside the tensors: vocabulary, JSON, file headers (an upper guess)
HASHED_FILES = ("model.safetensors", "softmax.safetensors", "vocab.txt", "optimizer.safetensors",
                "state.safetensors")  # their SHA-256 is in trainer.json (about 1 s per GB to write and to check)


def flatten_optimizer(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split ``optimizer.state_dict()`` into tensors (for safetensors) and plain data (for JSON)."""
    tensors, plain = {}, {"param_groups": state["param_groups"], "state": {}}
    for index, values in state["state"].items():
        plain["state"][str(index)] = {}
        for key, value in values.items():
            if torch.is_tensor(value):
                tensors[f"{index}.{key}"] = value.detach().cpu().contiguous()
            else:
                plain["state"][str(index)][key] = value
    return tensors, plain


def unflatten_optimizer(tensors: dict[str, torch.Tensor], plain: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {int(i): dict(v) for i, v in plain["state"].items()}
    for name, value in tensors.items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = value
    return {"state": state, "param_groups": plain["param_groups"]}


@dataclass
class Checkpoint:
    path: Path
    bilm: BiLM
    softmax: dict[str, torch.Tensor]
    vocab: Vocabulary
    train_config: dict[str, Any]
    optimizer: dict[str, Any] | None
    tensors: dict[str, torch.Tensor]  # carried states and RNG states, by name
    trainer: dict[str, Any]


# save_checkpoint's own hidden folders: ".step-N.<8 random>.tmp" / ".deleting" (and ".step-N.tmp" of older versions)
_LEFTOVER = re.compile(r"\." + re.escape(PREFIX) + r"[0-9]{8,}(\.[a-z0-9_]{8})?\.(tmp|deleting)")


def save_checkpoint(run_dir: str | Path, step: int, bilm: BiLM, softmax: torch.nn.Module, vocab: Vocabulary,
                    train_config: dict[str, Any], optimizer_state: dict[str, Any] | None,
                    tensors: dict[str, torch.Tensor], trainer: dict[str, Any], keep: int = 3) -> Path:
    """Write ``run_dir/step-XXXXXXXX`` atomically and delete all but the ``keep`` newest checkpoints. The tokenizer
    of the training text is ``bilm.tokenizer_name`` (the trainer sets it), written into config.json."""
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    final = run / f"{PREFIX}{step:08d}"
    tensors_out = [*bilm.state_dict().values(), *softmax.state_dict().values(), *tensors.values(),
                   *(flatten_optimizer(optimizer_state)[0].values() if optimizer_state is not None else ())]
    check_free_space(run, sum(t.numel() * t.element_size() for t in tensors_out) + CHECKPOINT_EXTRA,
                     f"checkpoint {final.name}")
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=run))  # a new name: never a user's
    try:
        save_model(bilm, tmp)
        _save_tensors(softmax.state_dict(), tmp / "softmax.safetensors")
        vocab.save(tmp / "vocab.txt")
        _write_json(tmp / "train_config.json", train_config)
        if optimizer_state is not None:
            opt_tensors, opt_plain = flatten_optimizer(optimizer_state)
            _save_tensors(opt_tensors, tmp / "optimizer.safetensors")
            _write_json(tmp / "optimizer.json", opt_plain)
        _save_tensors(tensors, tmp / "state.safetensors")
        for file in tmp.iterdir():  # every file's bytes on disk before the rename, and before older ones go
            sync_file(file)
        checksums = {name: file_sha256(tmp / name) for name in HASHED_FILES if (tmp / name).is_file()}
        _write_json(tmp / "trainer.json", {"step": step, **trainer, "sha256": checksums})
        sync_file(tmp / "trainer.json")
        sync_folder(tmp)
        if final.exists():  # a rerun reaching the same step: replace it, if it is a checkpoint of ours alone
            if not is_checkpoint(final) or _others_in(final):
                raise ModelFileError(f"{final}: exists and is not a checkpoint of elmo's alone (no trainer.json, or "
                                     f"files elmo did not write); not replaced: move it away and resume from the last "
                                     f"checkpoint")
            shutil.rmtree(final)
        os.replace(tmp, final)
        sync_folder(run)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in list_checkpoints(run)[:-keep] if keep > 0 else []:
        if others := _others_in(old):  # a user's output written into it (embed, export, notes): not ours to delete
            logger.warning("%s: kept although older than the %d checkpoints to keep: it holds %s, which elmo did not "
                           "write; delete it yourself when done", old, keep, ", ".join(others[:3]))
            continue
        # renamed first (onto a new empty folder): a deletion cut short leaves no step-* folder without trainer.json,
        # which a resume would refuse
        doomed = Path(tempfile.mkdtemp(prefix=f".{old.name}.", suffix=".deleting", dir=run))
        os.replace(old, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    for leftover in run.iterdir():  # a save or a pruning killed (SIGKILL) earlier left its hidden folder behind
        if (_LEFTOVER.fullmatch(leftover.name) and leftover.is_dir() and not leftover.is_symlink()
                and not _others_in(leftover)):  # a folder of the user's of that name, holding anything else: kept
            shutil.rmtree(leftover, ignore_errors=True)
    return final


def _others_in(checkpoint: Path) -> list[str]:
    """What a checkpoint's folder holds beyond what ``save_checkpoint`` writes (a link counts as another's)."""
    ours = CHECKPOINT_FILES | {LEGACY_TOKENIZER_NAME}  # older versions wrote the tokenizer beside config.json
    return sorted(p.name for p in checkpoint.iterdir() if p.name not in ours or p.is_symlink() or not p.is_file())


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Everything a checkpoint holds; the optimizer part is absent for exported LM directories."""
    root = resolve_checkpoint(path)
    try:
        settings = {name: _json(root / name) for name in ("train_config.json", "trainer.json")}
        check_trainer_record(settings["trainer.json"], root / "trainer.json")
        verify_checkpoint(root, settings["trainer.json"])
        bilm = load_files(ModelFiles.of_folder(root))
        softmax = load_file(str(root / "softmax.safetensors"))
        tensors = load_file(str(root / "state.safetensors"))
        optimizer = None
        if (root / "optimizer.safetensors").is_file():
            plain = _json(root / "optimizer.json")
            check_optimizer_record(plain, root / "optimizer.json")
            optimizer = unflatten_optimizer(load_file(str(root / "optimizer.safetensors")), plain)
        vocab = Vocabulary.load(root / "vocab.txt")  # the softmax's words: without them it cannot go on
    except ModelFileError:
        raise
    except (SafetensorError, OSError, ValueError) as err:
        raise ModelFileError(f"{root}: damaged checkpoint ({err}); move it away and resume from the run's "
                             f"previous checkpoint") from None
    check_softmax_rows(softmax, vocab, root / "vocab.txt", root / "softmax.safetensors")
    return Checkpoint(root, bilm, softmax, vocab, settings["train_config.json"],
                      optimizer, tensors, settings["trainer.json"])


def verify_checkpoint(root: Path, record: dict[str, Any], names: tuple[str, ...] = HASHED_FILES) -> None:
    """Each of ``names`` in checkpoint ``root`` against the SHA-256 its trainer.json (``record``, already checked)
    recorded as the checkpoint was written; a file that differs is refused in one line. A missing file is left to
    its loader, which says what it means (no optimizer state: ``--init-from``; no vocabulary: put it back).
    Checkpoints written before hashes were recorded have none to check."""
    recorded = record.get("sha256", {})
    for name in names:
        path = root / name
        if name not in recorded or not path.is_file():
            continue
        if file_sha256(path) != recorded[name]:
            raise ModelFileError(f"{path}: its bytes are not the ones written into this checkpoint (their SHA-256 is "
                                 f"in trainer.json): damaged or changed since; move {root.name} away and use the "
                                 f"run's previous checkpoint")


def _save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors' writer creates files readable by their owner only; ours get a plain file's mode."""
    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(path))
    os.chmod(path, new_file_mode())


def _json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UsageError(f"{path.name} is not valid JSON ({err})") from None
    except RecursionError:
        raise UsageError(f"{path}: nested too deeply to be a checkpoint's settings") from None


def save_language_model(out_dir: str | Path, bilm: BiLM, softmax: torch.nn.Module, vocab: Vocabulary) -> Path:
    """Our model format plus the softmax and vocabulary: enough to embed, score, and continue training."""
    out = save_model(bilm, out_dir)
    with atomic_path(out / "softmax.safetensors") as tmp:
        _save_tensors(softmax.state_dict(), tmp)
    vocab.save(out / "vocab.txt")
    return out


def load_language_model(model: str | Path | ModelFiles) -> tuple[BiLM, LMSoftmax, Vocabulary]:
    """(bilm, softmax, vocab) from a checkpoint, a run folder (its newest checkpoint) or an exported LM directory,
    or from their resolved files (a run folder's newest checkpoint pruned while it is read: the new newest,
    ``read_resolved``)."""
    if not isinstance(model, ModelFiles):
        return read_resolved(model, load_language_model)
    files = model
    if files.softmax is None or files.vocab is None:
        what = "official options.json + .hdf5 hold" if files.official else "this model folder holds"
        raise ModelFileError(f"{files.name or files.folder}: {what} no softmax, so it is no language model (scoring "
                             f"and export need one); give a training checkpoint, a run folder or an `elmo export` "
                             f"folder")
    if not files.vocab.exists():  # a softmax's rows mean nothing without their words
        raise ModelFileError(f"{files.vocab}: missing beside {files.softmax.name}, whose rows are its words; put back "
                             f"the vocab.txt this model was trained with (its run's checkpoints hold it)")
    if (record := _checkpoint_record(files.folder)) is not None:  # the files read here, against their hashes
        read = (files.weights, files.softmax, files.vocab)
        verify_checkpoint(files.folder, record, tuple(path.name for path in read))
    bilm = load_files(files)
    vocab = Vocabulary.load(files.vocab)
    with torch.device("meta"):  # no memory until the file's tensors, checked against the vocabulary, are assigned
        softmax = LMSoftmax(len(vocab), bilm.config.lstm.projection_dim)
    try:
        state = load_file(str(files.softmax))
    except (SafetensorError, OSError) as err:
        raise ModelFileError(f"{files.softmax}: not readable ({err}); the file is damaged or cut short: take it "
                             f"from an earlier checkpoint or export of the run, or export the run again") from None
    check_softmax_rows(state, vocab, files.vocab, files.softmax)
    load_state_strict(softmax, state, str(files.softmax), assign=True)
    return bilm, softmax.eval(), vocab


def _checkpoint_record(folder: Path) -> dict[str, Any] | None:
    """A checkpoint's trainer.json, where ``folder`` is a checkpoint whose trainer.json can be read and checked (its
    hashes are then trusted); None otherwise (an exported folder, or a record damaged: the language model's own
    files do not depend on it, and their loaders check them)."""
    if not is_checkpoint(folder):
        return None
    try:
        record = _json(folder / "trainer.json")
        check_trainer_record(record, folder / "trainer.json")
        return record
    except (UsageError, ModelFileError, OSError):
        return None


def check_softmax_rows(state: dict[str, torch.Tensor], vocab: Vocabulary, vocab_file: Path, softmax_file: Path) -> None:
    """One softmax row per word: where the two files disagree, one line naming both (before either file's shape
    is checked against the config, which would name only the softmax)."""
    rows = {value.shape[0] for value in state.values() if value.dim() > 0}
    if rows and rows != {len(vocab)}:
        raise ModelFileError(f"{vocab_file} holds {len(vocab):,} words but {softmax_file} has "
                             f"{', '.join(f'{r:,}' for r in sorted(rows))} rows: one of them is damaged or comes "
                             f"from another model")


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
