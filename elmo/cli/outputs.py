"""Inputs are never outputs: every command that writes refuses, before any work, an output that is one of its
inputs (the same path, through a link, or a hard link), or a folder in which it would overwrite one."""

from __future__ import annotations

import argparse
import glob
from pathlib import Path

from elmo.cli.common import STDIO, CommandLineError
from elmo.errors import ElmoError
from elmo.io.atomic import NotAFileError, blocking_file, file_in_the_way, same_file, writable_file
from elmo.io.checkpoint import CHECKPOINT_FILES, checkpoint_step, is_checkpoint, list_checkpoints
from elmo.io.native import LEGACY_TOKENIZER_NAME
from elmo.io.resolve import resolve_path
from elmo.training.export import EXPORT_FILES

_MODEL = ("model", "options", "weights")
_TASK_FILES = ("task.json", "head.safetensors")
# command -> (its outputs, its inputs, the names a folder output receives: None for a file output)
WRITERS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...] | None]] = {
    "elmo embed": (("output",), ("input", *_MODEL, "cache_vocab"), None),
    "elmo vocab build": (("output",), ("files",), None),
    "elmo probe word2vec": (("out",), ("files",), None),
    "elmo plot": (("out",), ("sentences", *_MODEL), None),
    "elmo dump-token-embeddings": (("output",), ("vocab", *_MODEL), None),
    "elmo convert": (("output",), _MODEL, ("config.json", "model.safetensors", "options.json", "weights.hdf5")),
    "elmo export": (("output",), ("checkpoint",), EXPORT_FILES),
    "elmo task train": (("out",), ("train", "dev", "model"), _TASK_FILES),
    "elmo train": (("out",), ("files", "vocab", "init_from", "config"), ("metrics.jsonl",)),
}
# files elmo writes into a model or run folder, beside its checkpoints: every folder output above, and the
# tokenizer file of folders written before config.json named the tokenizer
_OWNED_NAMES = frozenset(name for *_, names in WRITERS.values() for name in names or ()) | {LEGACY_TOKENIZER_NAME}



def _named_inputs(args: argparse.Namespace, dests: tuple[str, ...]) -> list[tuple[str, str]]:
    """The existing files and folders the input arguments name (globs expanded; ``-`` and model names left out),
    and the files of the model folders among them, each as (file, the name given on the command line)."""
    found: list[str] = []
    for dest in dests:
        value = getattr(args, dest, None)
        for name in value if isinstance(value, list) else [value]:
            if not isinstance(name, str) or name == STDIO:
                continue
            matches = glob.glob(name, recursive=True) if glob.has_magic(name) else [name]  # `**` as the readers
            found.extend(match for match in matches if Path(match).exists())
    return [(name, name) for name in found] + [(str(file), name) for name in found if Path(name).is_dir()
                                                for file in _model_files(Path(name))]


def _model_files(folder: Path) -> list[Path]:
    """The files of a model folder, checkpoint or run folder (none if it is not one): those it is loaded from, the
    files of its checkpoints (the optimizer's state, trainer.json: a resume reads them) and the files elmo writes
    there (metrics.jsonl, the official pair of an export). An output must not be one of them, though the command
    names only their folder; a file of the user's own beside them may be written over (an earlier output)."""
    try:
        files = resolve_path(folder)
    except (ElmoError, OSError):  # not a model (or unreadable): the command itself says so
        return []
    loaded = list(files.paths())
    checkpoints = [folder] if is_checkpoint(folder) else list_checkpoints(folder)
    owned = [folder / name for name in _OWNED_NAMES]
    owned += [checkpoint / name for checkpoint in checkpoints for name in CHECKPOINT_FILES]
    return loaded + [f for f in owned if f.is_file()]


def check_outputs(args: argparse.Namespace, command: str) -> None:
    """Refuse an output that is (or links to) an input, a folder output that would overwrite an input in it, and
    an output (or a feature cache folder) that cannot be made because a file stands where a folder must be."""
    if isinstance(cache := getattr(args, "cache", None), str) and (blocked := file_in_the_way(cache)):
        raise CommandLineError(blocked)  # the feature cache of `task` and `probe`: a folder
    if command not in WRITERS:
        return
    outputs, inputs, folder_names = WRITERS[command]
    named = _named_inputs(args, inputs)
    for dest in outputs:
        output = getattr(args, dest, None)
        if not isinstance(output, str) or output == STDIO:
            continue
        if folder_names is None and output.endswith("/"):  # Path() drops the slash: a file would be written
            raise CommandLineError(f"{output}: ends with a slash, a folder's name; give the output file's name")
        if folder_names is None and Path(output).is_dir():  # the same mistake without the slash: the same exit 2
            raise CommandLineError(f"{output}: is a folder; give the output file's name (a file in it, or elsewhere)")
        if folder_names is None and (blocking := blocking_file(Path(output).parent)) is not None:
            raise CommandLineError(f"{output}: cannot be written, as {blocking} is a file, not a folder: give another "
                                   f"path for the output")
        if folder_names is None and not Path(output).is_dir():  # a file output: no device or pipe (a folder: below)
            try:
                writable_file(output)
            except NotAFileError as err:
                raise CommandLineError(str(err)) from None
        for name, given in named:
            if command == "elmo convert" and (same_file(output, name) or same_file(Path(name).parent, output)):
                raise CommandLineError(f"{output}: holds the model being converted ({given}); converted into its own "
                                       f"folder, the copy would overwrite it or sit beside it as a second model: "
                                       f"give another folder")
            if same_file(output, name):
                what = f"the input {name}" if name == given else f"{name}, part of the input {given}"
                raise CommandLineError(f"{output}: is {what}; the command would overwrite its own input: give "
                                       f"another output")
            if folder_names and Path(name).name in folder_names and same_file(Path(name).parent, output):
                raise CommandLineError(f"{output}: writing {Path(name).name} there would overwrite the input "
                                       f"{name}: give another folder")
        if folder_names is not None and (blocked := file_in_the_way(output)):  # before anything is loaded
            raise CommandLineError(blocked)
        if (checkpoint_step(Path(output)) is not None and not is_checkpoint(Path(output))
                and list_checkpoints(Path(output).parent)):  # the run would refuse to resume beside it (file or folder)
            raise CommandLineError(f"{output}: named as a checkpoint of the run in {Path(output).parent}, which would "
                                   f"refuse to resume or prune beside a folder of that name that is not one: give "
                                   f"another name")
