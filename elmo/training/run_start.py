"""How a training run starts: new, resumed from a checkpoint (``--resume``), or new from weights (``--init-from``).

:func:`settle_run` applies the policy: the run directory must be free (or hold the run being resumed, at its newest
checkpoint), a resumed run keeps its checkpoint's settings and vocabulary (those given now are checked against them),
and a run from weights takes the source's model sizes, tokenizer and vocabulary.
"""

from __future__ import annotations

import itertools
import os
import warnings
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.distributed as dist

from elmo import pretrained
from elmo.data.vocab import UNKNOWN_SHARE_WARNING, Vocabulary
from elmo.devices import check_device
from elmo.errors import InputTypeError, UsageError
from elmo.io.atomic import path_argument
from elmo.io.checkpoint import foreign_checkpoint_names, list_checkpoints, resolve_checkpoint
from elmo.io.native import is_model_dir
from elmo.io.resolve import resolve
from elmo.io.work_folder import file_sha256
from elmo.limits import is_digits
from elmo.training.checkpoint import Checkpoint, load_checkpoint
from elmo.training.config import RUN_SETTINGS, TrainConfig
from elmo.training.init_from import DEFAULT_FREEZE_STEPS, StartingWeights, has_softmax, starting_weights


@dataclass
class Distributed:
    """This process's place among the training processes (torchrun's environment; one process without it)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> "Distributed":
        """torchrun's RANK, WORLD_SIZE and LOCAL_RANK (absent: one process), each checked: a value left in the
        environment by hand (``WORLD_SIZE=two``, a rank beyond the count) is a UsageError naming it, not a traceback
        from ``int`` or a process waiting forever for the others."""
        rank, world, local = (_whole_from_env(name, default) for name, default in
                              (("RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_RANK", 0)))
        if world < 1 or rank >= world:
            raise UsageError(f"the environment says RANK={rank} of WORLD_SIZE={world} processes: torchrun sets these; "
                             f"unset them to train in one process")
        return cls(rank, world, local)

    @property
    def main(self) -> bool:
        return self.rank == 0


_GROUPS_MADE = itertools.count()  # default process groups this process has made (every rank makes them in turn)


def make_process_group(env: Distributed, device: torch.device) -> None:
    """Join the other processes torchrun started in a new default process group (gloo, or NCCL on a GPU).

    Each group this process makes keeps its keys in torchrun's store under a prefix of its own: a second group
    (a second Trainer in the same script, after the first closed its group) would otherwise be named as the first
    and meet its keys, still in the store, and one rank could connect to the other's closed address and the two
    wait for each other forever."""
    store, _, _ = next(dist.rendezvous("env://", env.rank, env.world))
    store = dist.PrefixStore(f"elmo-group-{next(_GROUPS_MADE)}", store)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", store=store, rank=env.rank,
                            world_size=env.world)


def _whole_from_env(name: str, default: int) -> int:
    """The environment variable ``name`` as a whole number (``default`` when unset)."""
    text = os.environ.get(name)
    if text is None:
        return default
    if not is_digits(text.strip()):
        raise UsageError(f"the environment variable {name}={text!r} is not a whole number: torchrun sets it for each "
                         f"process; unset it to train in one process")
    return int(text)


@dataclass(frozen=True)
class TrainingText:
    """The training files' sizes and SHA-256, taken together as a run starts (by the first process, which writes the
    checkpoints; about a second a GB): every checkpoint records them, so a resume finds text that changed, also an
    edit that kept a file's size (a corrected word)."""

    names: list[str]  # as given
    folder: str  # the working folder they were given in: relative names are relative to it
    sizes: list[int]
    hashes: list[str]

    def record(self) -> dict:
        """The keys of trainer.json that describe the text."""
        return {"files": self.names, "files_from": self.folder, "file_sizes": self.sizes, "file_hashes": self.hashes}


def training_text(files: Sequence[str], checkpoint: Checkpoint | None = None) -> TrainingText:
    """The files' ``TrainingText``; with the checkpoint being resumed, checked against its record: a resume reads the
    files its data position refers to, as they were (other files, or changed ones, would put the position into other
    text). The names and sizes are compared before any file is read whole. A UsageError names the file."""
    if checkpoint is not None:
        _check_names_and_sizes(checkpoint, files)
    try:
        text = TrainingText([str(name) for name in files], os.getcwd(), [os.path.getsize(name) for name in files],
                            [file_sha256(name) for name in files])
    except OSError as err:
        raise UsageError(f"{err.filename}: cannot read the training text ({err.strerror})") from None
    recorded = checkpoint.trainer.get("file_hashes", []) if checkpoint is not None else []  # absent: older runs
    for name, saved, now in zip(files, recorded, text.hashes):
        if saved != now:
            raise UsageError(f"{name}: its text changed since {checkpoint.path.name} was saved (the same size, other "
                             f"bytes): its data position would point into other text; resume with the same text, or "
                             f"start a run from these weights with --init-from")
    return text


def recorded_files(trainer: dict) -> list[str]:
    """The training files a checkpoint's trainer.json names: relative names from the folder they were given in
    (``files_from``), so a run resumes from any folder; where those are gone (the run and its text moved together),
    the names as they are, from the current folder."""
    found = _from_their_folder(trainer)
    return found if all(os.path.exists(f) for f in found) else list(trainer.get("files", []))


def _from_their_folder(trainer: dict) -> list[str]:
    """trainer.json's file names, relative ones joined to the folder they were given in (absent in older
    checkpoints: the current folder)."""
    folder = trainer.get("files_from") or os.getcwd()
    return [os.path.join(folder, name) for name in trainer.get("files", [])]


def _check_names_and_sizes(checkpoint: Checkpoint, files: Sequence[str]) -> None:
    trainer = checkpoint.trainer
    names = trainer.get("files", list(files))
    # read from here, and from the folder the run was given them in
    readings = [[os.path.realpath(f) for f in found] for found in (names, _from_their_folder(trainer))]
    if [os.path.realpath(f) for f in files] not in readings:  # ./a.txt = /x/a.txt; the sizes and hashes follow
        where = f" (given in {trainer['files_from']})" if trainer.get("files_from") else ""
        raise UsageError(f"{checkpoint.path}: its data position refers to {', '.join(names)}{where}; resume with the "
                         f"same training files (use --init-from to continue on new text)")
    for name, size in zip(files, trainer.get("file_sizes", [])):  # absent in older checkpoints
        if (now := os.path.getsize(name)) != size:
            raise UsageError(f"{name}: {now:,} bytes, {size:,} when {checkpoint.path.name} was saved: its data "
                             f"position would point into other text; resume with the same text, or start a run "
                             f"from these weights with --init-from")


def run_device(device: str | torch.device | None, env: Distributed) -> torch.device:
    """The device this process trains on: the one given, checked before any work (``meta``, or ``cuda`` on a machine
    without it, would fail inside torch at the first step), else this process's GPU, else the CPU."""
    check_device(device, "Trainer device")
    return torch.device(device or (f"cuda:{env.local_rank}" if torch.cuda.is_available() else "cpu"))


def settle_run(config: TrainConfig, vocab: Vocabulary | None, out_dir: Path, resume: str | Path | None,
               init_from: str | Path | None, given: dict | None, env: Distributed
               ) -> tuple[Checkpoint | None, StartingWeights | None, TrainConfig, Vocabulary | None]:
    """The checkpoint to resume (or None), the weights to start from (or None), and the run's config and
    vocabulary (None when neither the caller nor a source gives one)."""
    check_arguments(config, vocab)
    if given is not None and not isinstance(given, dict):
        raise InputTypeError(f"Trainer's given must be a dict of settings (name -> value), got {type(given).__name__}")
    if unknown := sorted(set(given or ()) - {f.name for f in fields(TrainConfig)}, key=str):
        raise UsageError(f"Trainer's given names no setting {unknown[0]!r}: the settings are TrainConfig's fields")
    # "" (an unset variable) is a mistake, not "none given": a new random run would start without a word
    resume = None if resume is None else path_argument(resume, "Trainer resume")
    init_from = None if init_from is None else path_argument(init_from, "Trainer init_from")
    if resume and init_from:
        raise UsageError("give --resume (continue a run exactly) or --init-from (start a new run from its "
                         "weights), not both")
    check_out_dir_is_free(out_dir, resume)
    checkpoint = load_resumable(resume) if resume else None
    start = None
    if checkpoint is not None:
        config, vocab = resumed_settings(checkpoint, config, vocab, given)
    elif init_from:
        chosen_model = (given or {}).get("model")  # a --config's model sizes: the source's are used instead
        start, config, vocab = start_from(init_from, config, vocab, env)
        if chosen_model is not None and chosen_model != config.model and env.main:
            warnings.warn(f"the model sizes of --config are not used: a run from --init-from {init_from} keeps that "
                          f"model's (its weights set them); only the training settings of --config apply")
    elif config.freeze_bilm_steps and env.main:
        warnings.warn(f"freeze_bilm_steps {config.freeze_bilm_steps} without --init-from: the first batches train "
                      f"only the softmax over a randomly initialised biLM")
    config = config.replace(freeze_bilm_steps=config.freeze_bilm_steps or 0)  # None: 0 unless adapted, above
    return checkpoint, start, config, vocab


def check_arguments(config: TrainConfig, vocab: Vocabulary | None) -> None:
    """The Trainer's config and vocabulary of the right types, and every setting in range: a config made in Python
    (``TrainConfig(batch_size=-1)``, ``dataclasses.replace``) is not checked as a file is, and would fail deep in
    torch or train otherwise; a list of words where the Vocabulary belongs would fail on its first use."""
    if not isinstance(config, TrainConfig):
        raise InputTypeError(f"Trainer takes a TrainConfig (TrainConfig.load('tiny'), or a .toml file), got "
                             f"{type(config).__name__}")
    config.check("Trainer config")
    if vocab is not None and not isinstance(vocab, Vocabulary):
        raise InputTypeError(f"Trainer's vocab must be a Vocabulary (Vocabulary.load(path) or Vocabulary.build("
                             f"sentences)), got {type(vocab).__name__}")


def check_out_dir_is_free(out_dir: Path, resume: str | Path | None) -> None:
    """A new run must not write into another run's directory: pruning would delete the new checkpoints as the
    oldest, and a later --resume would pick up the old run. Nor may it hold a file or folder named like a
    checkpoint that is not one (no trainer.json): saving that step would replace it; nor a model (config.json and
    model.safetensors), which the folder's name would go on meaning; nor an earlier run's metrics.jsonl."""
    foreign = foreign_checkpoint_names(out_dir)
    if foreign:
        raise UsageError(f"{foreign[0]}: named like a checkpoint of elmo's but not one (no trainer.json); a checkpoint "
                         f"of that step would replace it: move it away, or choose another --out")
    existing = list_checkpoints(out_dir)
    if not existing:
        if is_model_dir(out_dir):
            raise UsageError(f"{out_dir} holds a model (config.json and model.safetensors): named as a model, the "
                             f"folder would still mean that one, not the run's checkpoints: choose another --out")
        # with no checkpoint here, the log is not the resumed run's (that one lives beside its checkpoints)
        if (out_dir / "metrics.jsonl").exists():
            raise UsageError(f"{out_dir / 'metrics.jsonl'}: the log of an earlier run; this run would rewrite "
                             f"it: move it away, or choose another --out")
        return
    chosen = resolve_checkpoint(resume).resolve() if resume is not None else None
    if chosen is not None and chosen.parent == out_dir.resolve():
        if chosen != existing[-1].resolve():  # going back: "newest" would soon mean the abandoned branch
            raise UsageError(f"{out_dir} has checkpoints newer than {chosen.name} (up to {existing[-1].name}): "
                             f"resume into a new folder (--out NEW --resume {chosen}), or move the newer ones away")
        return
    raise UsageError(f"{out_dir} already holds a run (checkpoints up to {existing[-1].name}): pass --resume {out_dir} "
                     "to continue that run, or choose a new --out")


def check_same_vocabulary(given: Vocabulary | None, own: Vocabulary, source: str | Path) -> None:
    """A run from a model with a softmax keeps that softmax's vocabulary: a different --vocab is a mistake."""
    if given is not None and given.words != own.words:
        raise UsageError(f"the vocabulary given differs from {source}'s: a continued or adapted run keeps its own "
                         f"(the softmax rows belong to its words); leave out --vocab")


def load_resumable(resume: str | Path) -> Checkpoint:
    """The checkpoint to resume; it must hold the optimizer state, or the run could not go on exactly."""
    checkpoint = load_checkpoint(resume)
    if checkpoint.optimizer is None:
        raise UsageError(f"{checkpoint.path} has no optimizer state (optimizer.safetensors): it cannot be resumed "
                         f"exactly; start a new run from its weights with --init-from {checkpoint.path}")
    return checkpoint


def resumed_settings(checkpoint: Checkpoint, config: TrainConfig, vocab: Vocabulary | None,
                     given: dict | None) -> tuple[TrainConfig, Vocabulary]:
    """A resumed run's config and vocabulary: the checkpoint's, with the settings given now applied over them by
    ``TrainConfig.resumed``. Without ``given`` (the Python API), what ``config`` sets apart from the defaults is
    given, and its stopping limits: a setting the checkpoint fixes is then refused, not silently dropped."""
    saved = TrainConfig.from_checkpoint(checkpoint.train_config, source=str(checkpoint.path))
    if given is None:
        given = _set_apart_from_defaults(config, saved, checkpoint)
    config = saved.resumed(given)
    check_same_vocabulary(vocab, checkpoint.vocab, checkpoint.path)
    return config.replace(model=checkpoint.bilm.config), checkpoint.vocab


def _set_apart_from_defaults(config: TrainConfig, saved: TrainConfig, checkpoint: Checkpoint) -> dict:
    """What a ``TrainConfig`` given to resume from Python asks for: the settings it sets apart from the defaults,
    and its stopping limits (a setting the checkpoint fixes is then refused by ``TrainConfig.resumed``). A config
    cannot say which of its default values were meant: where one differs from the run's fixed settings (a default
    ``TrainConfig()`` resuming a ``tiny`` run), the run's is kept with a warning naming them; model sizes other than
    the default and the run's are refused, as a changed setting is."""
    defaults = TrainConfig()
    given = {f.name: getattr(config, f.name) for f in fields(config)
             if f.name != "model" and getattr(config, f.name) != getattr(defaults, f.name)}
    given |= {"max_steps": config.max_steps, "max_minutes": config.max_minutes}
    if config.model != checkpoint.bilm.config and config.model != defaults.model:
        raise UsageError(f"{checkpoint.path}: the config's model sizes differ from the run's, and a resumed run "
                         f"continues the model it trained: give the run's sizes (or the default ElmoConfig()), or "
                         f"start a new run from its weights with init_from=")
    kept = [f"{f.name} {getattr(saved, f.name)!r} (the config has {getattr(config, f.name)!r}, the default)"
            for f in fields(config) if f.name not in ("model", "freeze_bilm_steps", *RUN_SETTINGS)  # None: the run's
            and f.name not in given and getattr(config, f.name) != getattr(saved, f.name)]
    if config.model != checkpoint.bilm.config:
        kept.append("model sizes (the config has the default ElmoConfig())")
    if kept:
        warnings.warn(f"{checkpoint.path}: resuming keeps the run's own {'; '.join(kept)}: a resumed run continues "
                      f"exactly as it trained", stacklevel=4)
    return given


def check_tokenizer_function(checkpoint: Checkpoint | None, tokenizer: Callable[[str], list[str]] | None,
                             config: TrainConfig, env: Distributed, start: StartingWeights | None = None) -> None:
    """A function given as the tokenizer (``Trainer(tokenizer=...)``) cannot be recorded: the checkpoint records
    that one split the text, so a resume without it, which would split the rest another way, is refused, and a new
    run from such a checkpoint (``start``) without one is warned; a new run is told that its checkpoints and exports
    name ``config.tokenize``, not the function."""
    if checkpoint is not None and checkpoint.trainer.get("tokenizer_function") and tokenizer is None:
        raise UsageError(f"{checkpoint.path}: its text was split by a function given as Trainer(tokenizer=...); "
                         f"give it again to resume (otherwise the text would be split by "
                         f"{config.tokenize or 'whitespace'})")
    if start is not None and start.split_by_function and tokenizer is None and env.main:
        warnings.warn(f"{start.source}: its text was split by a function given as Trainer(tokenizer=...), which no "
                      f"file records; this run splits its text by {config.tokenize or 'whitespace'}: give the same "
                      f"function (Trainer(tokenizer=...)) unless the new text is meant to be split another way")
    if tokenizer is not None and checkpoint is None and env.main:
        warnings.warn(f"the tokenizer function is not recorded: checkpoints and exported models name tokenize = "
                      f"{config.tokenize or 'whitespace'}, not it; give the same function to resume")


def start_from(source: str | Path, config: TrainConfig, vocab: Vocabulary | None,
               env: Distributed) -> tuple[StartingWeights, TrainConfig, Vocabulary]:
    """The weights a new run starts from, and its config and vocabulary: the source's model sizes, the tokenizer its
    text was split with (unless one is given), its vocabulary if it has a softmax (else the one given), and, for a
    biLM without a softmax, a frozen start while the new softmax learns."""
    if vocab is None and not has_softmax(source):  # before loading (or downloading) anything
        freeze = config.freeze_bilm_steps if config.freeze_bilm_steps is not None else DEFAULT_FREEZE_STEPS
        raise UsageError(f"{source} is a biLM without a softmax: give the words of the new softmax with --vocab "
                         f"(build them from your text with `elmo vocab build`, with the --tokenize the model was "
                         f"trained with); the biLM then stays frozen for the first {freeze} batches "
                         f"(--freeze-bilm-steps) while the softmax learns")
    if env.world > 1 and pretrained.is_model_name(str(source)):  # one download, then every rank reads the cache
        if env.main:
            resolve(source)
        dist.barrier()
    start = starting_weights(source)
    if start.vocab is not None:
        check_same_vocabulary(vocab, start.vocab, source)
    freeze = config.freeze_bilm_steps
    if freeze is None:
        freeze = 0 if start.softmax is not None else DEFAULT_FREEZE_STEPS
    tokenize = config.tokenize if config.tokenize is not None else start.tokenize
    config = replace(config, model=start.bilm.config, freeze_bilm_steps=freeze,
                     tokenize=None if tokenize == "whitespace" else tokenize)  # given: over the source's
    return start, config, start.vocab if start.vocab is not None else vocab


def training_files(files: Sequence[str | Path], checkpoint: Checkpoint | None) -> Sequence[str | Path]:
    """The files given, or, when none are, those of the run being resumed (its trainer.json names them): `elmo train
    --resume RUN` alone goes on with the run's own text, as its help says, instead of failing on "no training files"."""
    for file in files if isinstance(files, (list, tuple)) else ():  # one name alone: expand_files says what to pass
        path_argument(file, "a training file of Trainer")  # pathlib's own TypeError names neither
    if files or checkpoint is None:
        return files
    return recorded_files(checkpoint.trainer)


def warn_if_mostly_unknown(targets: torch.Tensor, vocab: Vocabulary) -> None:
    """A warning when the first batch's targets (B, T) are mostly <UNK>: a text the vocabulary barely covers (another
    language, another tokenizer) trains a model that predicts <UNK> well, and its low loss looks like success."""
    real = targets >= 0
    share = float((targets[real] == vocab.unk).float().mean()) if bool(real.any()) else 0.0
    if share > UNKNOWN_SHARE_WARNING:
        warnings.warn(f"{100 * share:.0f}% of the first batch's tokens are not in the vocabulary (they train as "
                      f"<UNK>): expected with a large-vocabulary language (Korean eojeol: about 20 %); otherwise "
                      f"check that the vocabulary was built from this text with the same --tokenize")
