"""What ``elmo task train|eval|predict`` do, as library functions: read a data set in a named format, get its
cached biLM features, and train, score or apply a task head."""

from __future__ import annotations

import unicodedata
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Callable

from elmo.embed import Embedder
from elmo.errors import UsageError
from elmo.io.atomic import new_folders
from elmo.io.lock import lock_beside
from elmo.io.load import load_files
from elmo.io.resolve import reference, resolve_reference
from elmo.limits import is_whole
from elmo.tasks import readers
from elmo.tasks.features import FeatureCache, cached_features, default_feature_folder, model_id
from elmo.tasks.heads import LayerInput
from elmo.tasks.train import (
    TaskConfig,
    check_head_settings,
    check_output_folder,
    load_task,
    predict,
    save_task,
    score,
    train_head,
)
from elmo.text.tokenize import get_tokenizer

# format name -> reader; tagged formats give TaggedSentence, the others LabelledText
FORMATS: dict[str, Callable] = {
    "conll2003": readers.read_conll2003,
    "wnut17": readers.read_wnut17,
    "conllu": readers.read_conllu,
    "conllu-xpos": lambda path: readers.read_conllu(path, column="xpos"),
    "kmou": readers.read_kmou_ner,
    "sst": readers.read_sst_trees,
    "stsa": readers.read_stsa,
    "tsv": readers.read_label_text_tsv,
}
DEFAULT_FORMAT = {"ner": "conll2003", "pos": "conllu", "classify": "tsv"}
TAGGED = {"conll2003", "wnut17", "conllu", "conllu-xpos", "kmou"}
# how `task predict` splits raw text for a head trained on a format, when --tokenize is not given (default: the
# biLM's own tokenizer): KMOU's tokens are the eojeols of its raw sentences, split on spaces with the punctuation
# kept on them, where the ko tokenizer would split it off and give the head tokens it never saw in training
DEFAULT_TOKENIZE = {"kmou": "whitespace"}


def check_format(task: str, fmt: str | None) -> str:
    """The format to read ``task``'s data in (``fmt``, or the task's default); one that is unknown or does not fit
    the task (a tagged format for classify, a classification one for a tagger) is a UsageError."""
    if task not in DEFAULT_FORMAT:
        raise UsageError(f"unknown task {task!r}: choose one of {', '.join(DEFAULT_FORMAT)}")
    fmt = fmt or DEFAULT_FORMAT[task]
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if (task == "classify") == (fmt in TAGGED):
        raise UsageError(f"format {fmt!r} does not fit task {task!r} (tagged formats: {', '.join(sorted(TAGGED))})")
    return fmt


def read_examples(task: str, path: str | Path, fmt: str | None = None, max_items: int | None = None,
                  ) -> tuple[list, list[str] | list[list[str]], list[int]]:
    """(inputs, gold labels, lines): token lists and tag lists for taggers, raw texts and labels for
    classification; ``lines[i]``: the line of the file example i was read from (0 where the format does not say)."""
    if max_items is not None and not is_whole(max_items, 1):  # -1 would slice off the last example
        raise UsageError(f"the number of examples to use must be a whole number of at least 1 (None: all), got "
                         f"{max_items!r}")
    fmt = check_format(task, fmt)
    items = FORMATS[fmt](path)[:max_items]
    if not items:
        raise UsageError(f"{path}: no examples read (format {fmt})")
    lines = [getattr(item, "line", 0) for item in items]
    if fmt in TAGGED:
        return [s.tokens for s in items], [s.tags for s in items], lines
    return [s.text for s in items], [s.label for s in items], lines


def features_for(embedder: Embedder, inputs: list, cache: str | Path | None, progress: bool,
                 source: str | Path = "input", lines: list[int] | None = None,
                 ) -> tuple[FeatureCache, list[list[str]]]:
    """The features of every example (all layers, cached by content) and its tokens; an example the tokenizer
    leaves no token of is refused, named by its line where ``lines`` knows it."""
    token_lists = embedder.tokenize(inputs)
    empty = [i for i, t in enumerate(token_lists) if not t]
    if empty:
        text = inputs[empty[0]] if isinstance(inputs[empty[0]], str) else " ".join(inputs[empty[0]])
        shown = repr(text if len(text) <= 60 else text[:57] + "...")
        line = lines[empty[0]] if lines else 0
        place = f"line {line}" if line else f"example {empty[0] + 1} (counting examples from 1, not lines)"
        raise UsageError(f"{source}: {place}, {shown}, has no tokens after tokenisation; remove it")
    return cached_features(embedder, token_lists, cache or default_feature_folder(), progress), token_lists


def _label_set(gold: list) -> set[str]:
    """Every label in gold: one per text (classify) or one per token (tagging)."""
    return {t for g in gold for t in (g if isinstance(g, list) else [g])}


def _check_gold(task: str, path: str | Path, gold: list) -> None:
    """Gold data the task's metric can score: NER gold needs an entity (span F1 of no span is 0 or undefined)."""
    if task == "ner" and _label_set(gold) <= {"O"}:
        raise UsageError(f"{path}: every tag is O (no entity): span F1 has nothing to score; give data with "
                         f"entities")


def _check_bio(path: str | Path, gold: list[list[str]], lines: list[int], labels: set[str] | None = None) -> None:
    """NER tags against BIO, which the head's decoder follows (an ``I-X`` only after ``B-X`` or ``I-X``). A type with
    ``I-X`` among ``labels`` but no ``B-X`` could never be predicted (IOB1 tags read as BIO): refused. An ``I-X``
    that opens an entity in ``gold`` (an annotation slip, or IOB1) is never predicted there: a warning."""
    inside = {tag[2:] for tag in labels or () if tag.startswith("I-")}
    missing = sorted(inside - {tag[2:] for tag in labels or () if tag.startswith("B-")})
    if missing:
        raise UsageError(f"{path}: tags I-{missing[0]}, and no file B-{missing[0]}: the head reads BIO tags, and "
                         f"these look like IOB1 (I- opening an entity); convert them to BIO, or read the file with "
                         f"--format conll2003, which converts IOB1")
    breaks = [(index, position, before, tag) for index, tags in enumerate(gold)
              for position, (before, tag) in enumerate(zip(["O", *tags], tags))
              if tag.startswith("I-") and before not in ("B-" + tag[2:], tag)]
    if breaks:
        index, position, before, tag = breaks[0]
        where = f"line {lines[index]}" if lines[index] else f"sentence {index + 1} (counting from 1)"
        warnings.warn(f"{path}: {len(breaks)} I- tag(s) open an entity instead of continuing one (first: {where}, "
                      f"tag {position + 1} is {tag} after {before}); the head never predicts such a tag, so those "
                      f"entities count as missed")


def _check_two_labels(labels: list[str], train_path: str | Path, dev_path: str | Path) -> None:
    """A head of one label can only predict it: its accuracy is 100 % whatever it learns, so it is refused."""
    if len(labels) < 2:
        raise UsageError(f"{train_path}, {dev_path}: one label only ({labels[0]!r}): a head can only predict it, and "
                         f"its score would be 100 % whatever it learned; give data with two labels or more (is "
                         f"--format or --max-items right?)")


def _warn_if_look_alike(labels: list[str]) -> None:
    """Labels that differ only in spaces, case or Unicode normalisation ("pos" / "pos ", NFC / NFD "café") are kept
    apart, as given, but said: they are usually one label written two ways."""
    groups: dict[str, list[str]] = {}
    for label in labels:
        groups.setdefault(unicodedata.normalize("NFC", label).strip().casefold(), []).append(label)
    alike = [group for group in groups.values() if len(group) > 1]
    if alike:
        warnings.warn(f"{len(alike)} group(s) of labels differ only in spaces, case or Unicode form, e.g. "
                      f"{', '.join(map(ascii, alike[0]))}: each is a class of its own; fix the data if they are one")


def _encode(labels: list[str], gold: list) -> list:
    index = {label: i for i, label in enumerate(labels)}
    if gold and isinstance(gold[0], list):
        return [[index[t] for t in tags] for tags in gold]
    return [index[g] for g in gold]


def train_task(task: str, train_path: str | Path, dev_path: str | Path, out: str | Path, model: str | None = None,
               fmt: str | None = None, input_mode: str = "mix", epochs: int = 10, hidden_dim: int = 128,
               tokenize: str | None = None, cache: str | Path | None = None, max_items: int | None = None,
               max_dev: int | None = None, seed: int = 0, learning_rate: float = 1e-3, batch_size: int = 32,
               progress: bool = True) -> TaskConfig:
    """Train a head on ``train_path`` (best epoch chosen on ``dev_path``) and save it in ``out``; ``max_items`` /
    ``max_dev`` keep only the first examples of each file (quick runs). ``model``: a name or a folder (a local
    folder wins over a name); None: the shipped model for the data (ko for KMOU, else en), by its name.
    ``tokenize``: how classification text, and later ``task predict``'s raw text, is split; None: the biLM's own
    tokenizer, or for KMOU whitespace (its tokens are the raw sentence's eojeols, punctuation kept on them)."""
    check_head_settings(epochs, batch_size, hidden_dim, learning_rate)
    if model is None:  # the default by its name, not a local folder that happens to share it
        model = "ko" if fmt == "kmou" else reference(None)
    else:
        model = reference(model)
    if tokenize is None:
        tokenize = DEFAULT_TOKENIZE.get(fmt or "")
    # made up front (a bad path fails now), removed again on failure; one run at a time writes it (a second one
    # would put its head under the first one's task.json)
    with new_folders(check_output_folder(out)), lock_beside(Path(out)):
        train_inputs, train_gold, train_lines = read_examples(task, train_path, fmt, max_items)
        dev_inputs, dev_gold, dev_lines = read_examples(task, dev_path, fmt, max_dev)
        _check_gold(task, dev_path, dev_gold)
        labels = sorted(_label_set(train_gold) | _label_set(dev_gold))
        if task == "ner":
            for path, gold, lines in ((train_path, train_gold, train_lines), (dev_path, dev_gold, dev_lines)):
                _check_bio(path, gold, lines, set(labels))  # a type B- opens in either file is not IOB1
        _check_two_labels(labels, train_path, dev_path)
        dev_only = sorted(_label_set(dev_gold) - _label_set(train_gold))
        if dev_only:  # a class with no training example: the head can hardly predict it
            warnings.warn(f"{dev_path}: {len(dev_only)} label(s) appear in the dev data but not in the training data: "
                          f"{', '.join(dev_only[:5])}{' ...' if len(dev_only) > 5 else ''}")
        embedder = _embedder(model, tokenize)
        LayerInput(embedder.bilm.config.n_output_layers, input_mode)  # a bad --input fails before any embedding
        train_cache, _ = features_for(embedder, train_inputs, cache, progress, train_path, train_lines)
        dev_cache, _ = features_for(embedder, dev_inputs, cache, progress, dev_path, dev_lines)
        _warn_if_look_alike(labels)
        config = TaskConfig(task=task, labels=labels, n_layers=train_cache.n_layers, dim=train_cache.dim,
                            input=input_mode, model=model, tokenize=tokenize,
                            data_format=fmt or DEFAULT_FORMAT[task], hidden_dim=hidden_dim,
                            epochs=epochs, model_id=model_id(embedder),
                            seed=seed, learning_rate=learning_rate, batch_size=batch_size)
        head = train_head(config, train_cache, _encode(labels, train_gold), dev_cache, _encode(labels, dev_gold),
                          progress)
        save_task(out, head, config)
    return config


def evaluate_task(task_dir: str | Path, data: str | Path, fmt: str | None = None, cache: str | Path | None = None,
                  max_items: int | None = None, progress: bool = True) -> tuple[TaskConfig, float]:
    """The saved head's metric (F1 or accuracy) on a labelled file (read in the training data's format unless
    ``fmt`` is given)."""
    head, config = load_task(task_dir)
    inputs, gold, lines = read_examples(config.task, data, fmt or config.data_format, max_items)
    _check_gold(config.task, data, gold)
    if config.task == "ner":
        _check_bio(data, gold, lines)  # the head's labels are its own: the warning alone
    unknown = sorted(_label_set(gold) - set(config.labels))
    if unknown:  # the head can never predict them: they count as errors (and, for NER, as missed spans)
        warnings.warn(f"{data}: {len(unknown)} label(s) the model never saw in training count as errors: "
                      f"{', '.join(unknown[:5])}{' ...' if len(unknown) > 5 else ''}")
    features, _ = features_for(_checked_embedder(config), inputs, cache, progress, data, lines)
    scoring = replace(config, labels=config.labels + unknown)  # gold may use the extra labels; predictions cannot
    return config, score(scoring, predict(head, features), _encode(scoring.labels, gold))


def predict_task(task_dir: str | Path, sentences: list[str], cache: str | Path | None = None,
                 progress: bool = False, tokenize: str | None = None) -> list:
    """Predicted labels for raw sentences: a (token, tag) list per sentence, or one label per text; None for a
    sentence the tokenizer leaves no token of (nothing to predict from). ``tokenize``: how to split them instead
    of the task model's way ("whitespace": already tokenised, one tag per space-separated token)."""
    head, config = load_task(task_dir)
    # the task model's own way of splitting, or for a KMOU head recorded without one, its eojeols (DEFAULT_TOKENIZE)
    split = tokenize or config.tokenize or DEFAULT_TOKENIZE.get(config.data_format or "")
    embedder = _checked_embedder(config, split)
    token_lists = embedder.tokenize(sentences)
    kept = [i for i, tokens in enumerate(token_lists) if tokens]
    out: list = [None] * len(sentences)
    if not kept:
        return out
    features, _ = features_for(embedder, [token_lists[i] for i in kept], cache, progress)
    for i, predicted in zip(kept, predict(head, features)):
        out[i] = (config.labels[predicted] if config.task == "classify"
                  else [(t, config.labels[p]) for t, p in zip(token_lists[i], predicted)])
    return out


def _checked_embedder(config: TaskConfig, tokenize: str | None = None) -> Embedder:
    """The biLM the head was trained on, splitting raw text by ``tokenize`` (default: as the task model records); a
    different biLM (an updated model, another directory) is refused."""
    embedder = _embedder(config.model, tokenize or config.tokenize)
    sizes = (embedder.bilm.config.n_output_layers, embedder.dim)
    if sizes != (config.n_layers, config.dim):  # also where no model_id was recorded
        raise UsageError(f"the biLM {config.model!r} gives {sizes[0]} layers of {sizes[1]} values, this task model "
                         f"reads {config.n_layers} of {config.dim}: not the biLM it was trained on; retrain it")
    if config.model_id and model_id(embedder) != config.model_id:
        raise UsageError(f"the biLM {config.model!r} is not the one this task model was trained on "
                         f"(its weights differ, or an older elmo trained the task model); retrain the task model")
    return embedder


def _embedder(model: str, tokenize: str | None) -> Embedder:
    """The biLM a task reads: ``model`` as a record names it (a name is the registered model, also from a folder
    holding a folder of that name)."""
    embedder = Embedder(load_files(resolve_reference(model)))
    embedder.model_name = model
    if tokenize is not None:
        embedder.tokenizer = get_tokenizer(tokenize)
    return embedder
