"""Training, evaluating and saving task heads on cached features (the biLM stays frozen and is not run here).

Each epoch goes over the training sentences in a shuffled order, in batches of similar lengths; after each epoch
the dev metric (span F1 from seqeval for NER, accuracy otherwise) is measured and the best epoch's weights kept.
A task model is saved in our format: ``task.json`` (the config below) + ``head.safetensors``.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from numbers import Real
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from elmo.errors import UsageError
from elmo.io.atomic import atomic_path
from elmo.io.work_folder import file_sha256
from elmo.io.native import load_state_strict
from elmo.limits import (MAX_COUNT, MAX_HEAD_HIDDEN, MAX_HEAD_LEARNING_RATE, MAX_LABELS, MAX_MIX_LAYERS,
                         MAX_READOUT_DIM, is_whole)
from elmo.tasks.features import FeatureCache
from elmo.tasks.heads import SequenceTagger, TextClassifier
from elmo.tasks.readers.tagging import is_bio_tag

TASKS = ("ner", "pos", "classify")
LABELS_KEY = "labels"  # head.safetensors' metadata: the labels of its output rows, in order


def check_head_settings(epochs: int, batch_size: int, hidden_dim: int, learning_rate: float) -> None:
    """One-line errors for settings no head can train with (checked before any embedding work starts), also from
    Python: a fractional epoch count or an infinite learning rate failed deep in torch, or saved a head of NaN."""
    for name, value in (("epochs", epochs), ("batch size", batch_size), ("hidden size", hidden_dim)):
        if not is_whole(value, 1, MAX_COUNT):
            raise UsageError(f"{name} must be a whole number of at least 1, got {value!r}")
    if hidden_dim > MAX_HEAD_HIDDEN:  # before the head's matrices are allocated
        raise UsageError(f"hidden size {hidden_dim:,} is above the limit of {MAX_HEAD_HIDDEN:,}")
    if (isinstance(learning_rate, bool) or not isinstance(learning_rate, Real)
            or not 0 < learning_rate <= MAX_HEAD_LEARNING_RATE):  # NaN fails both comparisons
        raise UsageError(f"learning rate must be a number above 0 and at most {MAX_HEAD_LEARNING_RATE:g}, got "
                         f"{learning_rate!r}")


@dataclass
class TaskConfig:
    """Everything needed to rebuild a task head and to feed it: sizes, labels, and the biLM it reads."""

    task: str
    labels: list[str]
    n_layers: int
    dim: int
    input: str = "mix"  # mix | token | a layer number
    model: str = "en"  # the biLM (name or directory) whose features the head reads
    tokenize: str | None = None
    data_format: str | None = None  # the training file's format: eval reads labelled files in it unless told
    hidden_dim: int = 128
    dropout: float = 0.5
    use_crf: bool = True
    epochs: int = 10
    batch_size: int = 32
    learning_rate: float = 1e-3
    mix_l2: float = 0.001
    seed: int = 0
    model_id: str = ""  # hash of the biLM's weights: eval/predict refuse a different biLM
    history: list[float] = field(default_factory=list)  # dev metric after each epoch

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise UsageError(f"unknown task {self.task!r}: choose one of {', '.join(TASKS)}")
        check_head_settings(self.epochs, self.batch_size, self.hidden_dim, self.learning_rate)
        if not (isinstance(self.labels, list) and self.labels and all(isinstance(x, str) and x for x in self.labels)):
            raise UsageError(f"labels must be a list of label names, got {str(self.labels)[:60]}")
        if self.task == "ner" and (tag := next((t for t in self.labels if not is_bio_tag(t)), None)) is not None:
            raise UsageError(f"ner tags are O, B-TYPE or I-TYPE (BIO), got {tag!r}: is the data another task's "
                             f"(POS tags), or in another --format?")
        if len(set(self.labels)) != len(self.labels) or len(self.labels) > MAX_LABELS:
            raise UsageError(f"labels must be distinct names, at most {MAX_LABELS:,}, got {len(self.labels):,} "
                             f"({len(set(self.labels)):,} distinct)")
        for name, value, most in (("n_layers", self.n_layers, MAX_MIX_LAYERS), ("dim", self.dim, MAX_READOUT_DIM)):
            if not is_whole(value, 1, most):
                raise UsageError(f"{name} must be a whole number from 1 to {most:,}, got {value!r}")
        if not 0 <= self.dropout < 1:  # also NaN
            raise UsageError(f"dropout must be from 0 to below 1, got {self.dropout}")

    @property
    def metric(self) -> str:
        return "f1" if self.task == "ner" else "accuracy"


def build_head(config: TaskConfig) -> torch.nn.Module:
    if config.task == "classify":
        return TextClassifier(config.n_layers, config.dim, len(config.labels), config.input, config.hidden_dim,
                              config.dropout)
    return SequenceTagger(config.n_layers, config.dim, len(config.labels), config.input, config.hidden_dim,
                          config.dropout, use_crf=config.use_crf and config.task == "ner", labels=config.labels)


def collate(cache: FeatureCache, indices: Sequence[int],
            targets: Sequence | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Padded features (B, T, L+1, D), lengths (B,), and targets: (B, T) tags or (B,) labels (or None)."""
    arrays = [cache[i] for i in indices]
    lengths = torch.tensor([len(a) for a in arrays])
    features = torch.zeros(len(arrays), int(lengths.max()), cache.n_layers, cache.dim)  # (B, T, L+1, D)
    for row, array in enumerate(arrays):
        features[row, : len(array)] = torch.from_numpy(array)
    if targets is None:
        return features, lengths, None
    if isinstance(targets[indices[0]], (list, tuple)):
        padded = torch.zeros(len(arrays), features.shape[1], dtype=torch.long)  # (B, T)
        for row, i in enumerate(indices):
            padded[row, : len(targets[i])] = torch.tensor(targets[i])
        return features, lengths, padded
    return features, lengths, torch.tensor([targets[i] for i in indices])


def length_buckets(lengths: np.ndarray, batch_size: int, rng: random.Random) -> list[list[int]]:
    """Shuffled batches of sentences of similar length (sorted within chunks of 50 batches)."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    chunk = batch_size * 50
    batches = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: lengths[i])
        batches += [part[k : k + batch_size] for k in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


def predict(head: torch.nn.Module, cache: FeatureCache, batch_size: int = 64) -> list:
    """Predicted label ids: a list per sentence (taggers) or one per text (classifier), in cache order."""
    head.eval()
    lengths = cache.lengths()
    order = sorted(range(len(cache)), key=lengths.__getitem__)
    out: list = [None] * len(cache)
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        features, lengths, _ = collate(cache, indices)
        for i, p in zip(indices, head.predict(features, lengths)):
            out[i] = p
    return out


def score(config: TaskConfig, predicted: Sequence, gold: Sequence) -> float:
    """seqeval span F1 (CoNLL's measure) for NER; token or text accuracy otherwise."""
    if config.task == "ner":
        from seqeval.metrics import f1_score

        name = lambda seq: [config.labels[t] for t in seq]  # noqa: E731
        if all(config.labels[t] == "O" for g in gold for t in g):
            raise UsageError("the gold tags hold no entity (every tag is O): span F1 has nothing to score; give data "
                             "with entities")
        return float(f1_score([name(g) for g in gold], [name(p) for p in predicted]))
    if config.task == "classify":
        return float(np.mean([p == g for p, g in zip(predicted, gold)]))
    pairs = [(p, g) for ps, gs in zip(predicted, gold) for p, g in zip(ps, gs)]
    return float(np.mean([p == g for p, g in pairs]))


def train_head(config: TaskConfig, train: FeatureCache, train_targets: Sequence, dev: FeatureCache,
               dev_targets: Sequence, progress: bool = True) -> torch.nn.Module:
    """Train for ``config.epochs``; returns the head at its best dev epoch (history in ``config.history``)."""
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    head = build_head(config)
    optimizer = torch.optim.Adam(head.parameters(), lr=config.learning_rate)
    best, best_state = -1.0, None
    config.history = []
    for epoch in range(config.epochs):
        head.train()
        batches = length_buckets(train.lengths(), config.batch_size, rng)
        for indices in tqdm(batches, desc=f"epoch {epoch + 1}", disable=not progress, leave=False):
            features, lengths, targets = collate(train, indices, train_targets)
            loss = head.loss(features, lengths, targets) + config.mix_l2 * head.input.penalty()
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 5.0)
            optimizer.step()
        metric = score(config, predict(head, dev), dev_targets)
        metric = metric if np.isfinite(metric) else -1.0
        config.history.append(metric)
        if progress:
            tqdm.write(f"epoch {epoch + 1}: dev {config.metric} {metric:.4f}")
        if metric > best:
            best, best_state = metric, {k: v.detach().clone() for k, v in head.state_dict().items()}
    head.load_state_dict(best_state)
    return head.eval()


def check_output_folder(out_dir: str | Path) -> Path:
    """The task model's directory, refused up front (before any training) when a file is in its place."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: exists and is not a directory; give a folder for the task model")
    if ((out / "task.json").exists() or (out / "head.safetensors").exists()) and not _earlier_task_model(out):
        raise UsageError(f"{out}: holds a task.json or head.safetensors that `elmo task train` did not write; "
                         f"give a new or empty folder (they would be replaced)")
    return out


def _earlier_task_model(folder: Path) -> bool:
    """True for a folder holding a task model saved by ``save_task`` (which it may replace)."""
    try:
        record = json.loads((folder / "task.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (isinstance(record, dict) and {"task", "labels", "head_sha256"} <= record.keys()
            and (folder / "head.safetensors").is_file())


def prepare_output(out_dir: str | Path) -> Path:
    """The task model's directory, made if missing."""
    out = check_output_folder(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return out


def save_task(out_dir: str | Path, head: torch.nn.Module, config: TaskConfig) -> Path:
    """head.safetensors and task.json, which carries the hash of the very head written with it (taken from the
    temporary file, not read back from the folder, where another writer's head may have arrived). Both are
    written in full first and renamed in place one after the other, head first: an earlier model is replaced only
    once the new pair is complete, and a pair mixed by a crash between the two renames is refused by ``load_task``."""
    out = prepare_output(out_dir)
    with atomic_path(out / "task.json") as record_tmp, atomic_path(out / "head.safetensors") as head_tmp:
        save_file({k: v.contiguous() for k, v in head.state_dict().items()}, str(head_tmp),
                  metadata={LABELS_KEY: json.dumps(config.labels, ensure_ascii=False)})  # labels ride along, in order
        record = asdict(config) | {"head_sha256": file_sha256(head_tmp)}
        record_tmp.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out


def load_task(path: str | Path) -> tuple[torch.nn.Module, TaskConfig]:
    """A saved task head and its config; any damage or mismatch is one ValueError naming the directory."""
    root = Path(path)
    if not (root / "task.json").is_file() or not (root / "head.safetensors").is_file():
        raise FileNotFoundError(f"{root}: not a task model (task.json + head.safetensors from `elmo task train`)")
    try:
        record = json.loads((root / "task.json").read_text(encoding="utf-8"))
        expected = record.pop("head_sha256", None)
        if expected is not None and expected != file_sha256(root / "head.safetensors"):
            raise UsageError("head.safetensors does not belong to this task.json (an interrupted save?)")
        config = TaskConfig(**record)
        with safe_open(str(root / "head.safetensors"), framework="pt") as f:
            labels = (f.metadata() or {}).get(LABELS_KEY)  # None: saved before heads carried their labels
        if labels is not None and json.loads(labels) != config.labels:
            raise UsageError(f"task.json's labels {config.labels[:4]} are not the head's {json.loads(labels)[:4]} "
                             f"(in order): predictions would get other labels' names")
        head = build_head(config)
        load_state_strict(head, load_file(str(root / "head.safetensors")), str(root / "head.safetensors"))
    except (ValueError, TypeError, RuntimeError, SafetensorError, AttributeError) as err:
        raise UsageError(f"{root}: not a valid task model ({err})") from None
    return head.eval(), config
