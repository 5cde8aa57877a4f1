"""Task models and their feature caches against damage and mistakes: a head of NaN or with its labels reordered, a
cache of other sentences, vectors float16 cannot hold, a user's files where a task model goes."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from elmo import Embedder
from elmo.errors import ElmoError
from elmo.io.work_folder import file_sha256
from elmo.io.native import save_model
from elmo.tasks.commands import train_task
from elmo.tasks.features import build_features, cached_features
from elmo.tasks.train import TaskConfig, load_task
from tests.conftest import random_bilm, small_config
from tests.reliability.tiny import cli, tiny_model

WORDS = ["good film", "bad film", "a good one", "a bad one", "fine good", "awful bad"]


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """A classify task trained for one epoch on a tiny model: (task folder, data file, model folder)."""
    root = tmp_path_factory.mktemp("task")
    model = tiny_model(root / "model")
    data = root / "data.tsv"
    data.write_text("id\ttext\tlabel\n" + "".join(f"{i}\t{WORDS[i % 6]}\t{'pos' if i % 2 == 0 else 'neg'}\n"
                                                  for i in range(24)))
    out = root / "task"
    train_task("classify", data, data, out, model=str(model), epochs=1, hidden_dim=8, cache=root / "cache",
               progress=False)
    return out, data, model


def _copy(task_folder, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("task.json", "head.safetensors"):
        (copy / name).write_bytes((task_folder / name).read_bytes())
    return copy


def test_a_head_with_nan_weights_is_refused_even_with_a_matching_hash(task, tmp_path):
    copy = _copy(task[0], tmp_path)
    state = load_file(str(copy / "head.safetensors"))
    name = next(iter(state))
    state[name] = torch.full_like(state[name], float("nan"))
    save_file(state, str(copy / "head.safetensors"), metadata={"labels": json.dumps(["neg", "pos"])})
    record = json.loads((copy / "task.json").read_text())
    (copy / "task.json").write_text(json.dumps(record | {"head_sha256": file_sha256(copy / "head.safetensors")}))
    with pytest.raises(ElmoError, match="NaN"):
        load_task(copy)


def test_labels_reordered_in_task_json_are_refused(task, tmp_path):
    copy = _copy(task[0], tmp_path)
    record = json.loads((copy / "task.json").read_text())
    (copy / "task.json").write_text(json.dumps(record | {"labels": record["labels"][::-1]}))
    with pytest.raises(ElmoError, match="labels"):
        load_task(copy)


def test_task_train_does_not_replace_a_users_task_json(task, tmp_path, capsys):
    _, data, model = task
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "task.json").write_text('{"my": "notes"}')
    rc, err = cli(capsys, "task", "train", "classify", "--train", data, "--dev", data, "--model", model,
                  "--out", tmp_path / "notes", "--epochs", "1", "--hidden", "8", "--quiet")
    assert rc != 0 and "did not write" in err
    assert (tmp_path / "notes" / "task.json").read_text() == '{"my": "notes"}'


def test_a_feature_cache_of_other_sentences_is_refused(task, tmp_path):
    _, _, model = task
    embedder = Embedder.from_pretrained(model)
    sentences = [["good", "film"], ["bad", "one"]]
    path = cached_features(embedder, sentences, tmp_path, progress=False).path
    build_features(embedder, [["a", "b", "c"]], path, progress=False)  # another data set's cache under its name
    with pytest.raises(ElmoError, match="other sentences"):
        cached_features(embedder, sentences, tmp_path, progress=False)


def test_vectors_beyond_float16_are_refused_not_cached_as_infinite(tmp_path):
    bilm = random_bilm(small_config(cell_clip=None, proj_clip=None), scale=100.0)
    embedder = Embedder(bilm)
    assert max(abs(float(a.max())) for a in embedder.embed([["good", "film"]])) > 65_504  # the case is real
    with pytest.raises(ElmoError, match="float16"):
        build_features(embedder, [["good", "film"]], tmp_path / "f.h5", progress=False)
    assert not (tmp_path / "f.h5").exists()


@pytest.mark.parametrize("change, problem", [({"labels": ["neg", "neg"]}, "distinct"),
                                             ({"dim": 300_000}, "dim must be"), ({"n_layers": 0}, "n_layers")])
def test_task_json_sizes_and_labels_are_checked_before_a_head_is_built(change, problem):
    with pytest.raises(ElmoError, match=problem):
        TaskConfig(**{"task": "classify", "labels": ["neg", "pos"], "n_layers": 3, "dim": 8} | change)


def test_save_model_round_trip_still_loads(tmp_path):
    """The strict reading of config.json takes what save_model writes."""
    path = save_model(random_bilm(small_config()), tmp_path / "m")
    assert Embedder.from_pretrained(path).embed("a b").shape[-1] == 16


def test_ner_tags_that_are_not_bio_and_gold_without_entities_are_refused():
    from elmo.tasks.train import score

    with pytest.raises(ElmoError, match="BIO"):
        TaskConfig(task="ner", labels=["O", "DET", "NOUN"], n_layers=3, dim=8)
    config = TaskConfig(task="ner", labels=["O", "B-PER", "I-PER"], n_layers=3, dim=8)
    with pytest.raises(ElmoError, match="no entity"):
        score(config, [[0, 1]], [[0, 0]])
    assert score(config, [[1, 2]], [[1, 2]]) == 1.0


def test_a_conllu_file_without_its_word_forms_is_refused(tmp_path):
    from elmo.tasks.readers.tagging import read_conllu

    rows = ["1\t_\t_\tDET\tDT\t_\t2\tdet\t_\t_", "2\t_\t_\tNOUN\tNN\t_\t0\troot\t_\t_"]
    (tmp_path / "hidden.conllu").write_text("\n".join(rows) + "\n\n")
    with pytest.raises(ElmoError, match="every word form is '_'"):
        read_conllu(tmp_path / "hidden.conllu")
    rows[0] = rows[0].replace("1\t_\t_", "1\tThe\tthe")  # one "_" may be the underscore itself
    (tmp_path / "one.conllu").write_text("\n".join(rows) + "\n\n")
    assert read_conllu(tmp_path / "one.conllu")[0].tokens == ["The", "_"]


def test_labels_that_look_alike_are_kept_apart_with_a_warning():
    from elmo.tasks.commands import _warn_if_look_alike

    with pytest.warns(UserWarning, match="differ only in spaces, case or Unicode form"):
        _warn_if_look_alike(["caf\u00e9", "cafe\u0301", "neg", "pos", "pos "])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_if_look_alike(["neg", "pos"])


def test_static_vectors_that_know_few_of_the_probes_words_are_reported():
    import numpy as np

    from elmo.tasks.probes import warn_static_coverage

    vectors = {"the": np.zeros(3, np.float32), "bank": np.ones(3, np.float32)}
    with pytest.warns(UserWarning, match="know 25% of the probe's 4 tokens"):
        assert warn_static_coverage(vectors, ["The", "river", "flows", "fast"]) == 0.25
    assert warn_static_coverage(vectors, ["The", "bank"]) == 1.0


def test_a_recorded_model_name_is_that_model_even_beside_a_local_folder_of_its_name(tmp_path, monkeypatch):
    """A task model records the default biLM as "en"; run from a folder holding a folder named "en", the name must
    still mean the shipped model (a record names a folder by its absolute path, never by a bare name)."""
    from elmo import pretrained
    from elmo.io.resolve import reference, resolve, resolve_reference

    monkeypatch.chdir(tmp_path)
    (tmp_path / "en").mkdir()
    assert resolve_reference("en").folder == pretrained.SHIPPED_DIR / "en"
    with pytest.raises(ElmoError, match="shadows"):  # typed by a user, a local folder still wins
        resolve("en")
    assert reference("en") == str(tmp_path / "en") and reference(None) == "en"


def test_an_example_the_tokenizer_empties_is_named_with_its_text(task, tmp_path):
    from elmo.tasks.commands import features_for

    embedder = Embedder.from_pretrained(task[2], tokenizer=lambda text: [w for w in text.split() if w.isalpha()])
    with pytest.raises(ElmoError, match=r"data.tsv: example 2 \(counting examples from 1, not lines\), '\.\.\. !'"):
        features_for(embedder, ["good film", "... !"], tmp_path, False, "data.tsv")


def test_an_example_the_tokenizer_empties_is_named_by_its_line(task, tmp_path):
    """A file's example was named by its number among the examples ("example 2"), which a user has to count out in
    a file with a header and blank lines; the readers give each example's line now."""
    from elmo.tasks.commands import features_for, read_examples

    data = tmp_path / "data.tsv"
    data.write_text("id\ttext\tlabel\n1\tgood film\t1\n\n2\t... !\t0\n", encoding="utf-8")
    inputs, _, lines = read_examples("classify", data, "tsv")
    assert lines == [2, 4]
    embedder = Embedder.from_pretrained(task[2], tokenizer=lambda text: [w for w in text.split() if w.isalpha()])
    with pytest.raises(ElmoError, match=r"data.tsv: line 4, '\.\.\. !', has no tokens"):
        features_for(embedder, inputs, tmp_path, False, data, lines)


def test_a_head_arriving_from_another_writer_is_not_taken_for_this_ones(task, tmp_path, monkeypatch):
    """save_task hashed head.safetensors read back from the folder: a second run's head renamed in meanwhile got
    this run's task.json (its seed, epochs, learning rate), both exit 0, and the pair loaded."""
    import elmo.tasks.train as train_module

    out, data, model = task
    copy = _copy(out, tmp_path)
    head, config = load_task(copy)
    original = train_module.file_sha256

    def meanwhile(path):
        (copy / "head.safetensors").write_bytes((out / "head.safetensors").read_bytes()[:-8] + b"\x00" * 8)
        return original(path)

    monkeypatch.setattr(train_module, "file_sha256", meanwhile)
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.add_(1.0)  # another head than the folder's
    train_module.save_task(copy, head, config)
    monkeypatch.undo()
    saved, _ = load_task(copy)  # this run's head under this run's record
    assert all(torch.equal(a, b) for a, b in zip(saved.state_dict().values(), head.state_dict().values()))


def test_two_task_runs_into_one_folder_are_refused(task, tmp_path):
    """Nothing locked --out: two runs at once could leave one run's head under the other's task.json."""
    import subprocess
    import sys

    from tests.reliability.tiny import ROOT

    out, data, model = task
    target = tmp_path / "busy"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from elmo.io.lock import lock_beside\n"
                               f"with lock_beside({str(target)!r}):\n print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)  # another run writing it
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ElmoError, match="in use by pid"):
            train_task("classify", data, data, target, model=str(model), epochs=1, hidden_dim=8,
                       cache=tmp_path / "cache", progress=False)
    finally:
        holder.kill()
        holder.wait()
    assert not target.exists()


def test_task_eval_with_a_format_its_task_cannot_read_is_a_usage_error(task, capsys):
    """`task eval POS_MODEL --format tsv` exited 1 where `task train classify --format conllu` exits 2."""
    out, data, model = task
    rc, err = cli(capsys, "task", "eval", out, "--data", data, "--format", "conllu", "--quiet")
    assert rc == 2 and "does not fit" in err and "Traceback" not in err


@pytest.mark.parametrize("change, fragment", [
    ({"max_items": -1}, "whole number of at least 1"), ({"max_dev": 0}, "whole number of at least 1"),
    ({"learning_rate": float("inf")}, "learning rate"), ({"learning_rate": float("nan")}, "learning rate"),
    ({"learning_rate": 1e38}, "at most"), ({"epochs": 2.5}, "epochs must be a whole number"),
    ({"epochs": True}, "epochs must be a whole number"), ({"input_mode": 1}, "input must be"),
    ({"task": "NER"}, "unknown task 'NER'"),
])
def test_python_task_arguments_that_would_change_the_result_are_one_line(task, tmp_path, change, fragment):
    """From Python, ``max_items=-1`` dropped the last example (an F1 of another set), ``learning_rate=inf`` saved a
    head of NaN that no command could load, and a fractional epoch count, an int input mode or "NER" ended in
    TypeError, AttributeError or KeyError. Each is one ElmoError before any work, and nothing is written."""
    from elmo.tasks.commands import evaluate_task

    folder, data, model = task
    arguments = {"task": "classify", "model": str(model), "epochs": 1, "hidden_dim": 8, "cache": tmp_path / "cache",
                 "progress": False} | change
    with pytest.raises(ElmoError, match=fragment):
        train_task(arguments.pop("task"), data, data, tmp_path / "out", **arguments)
    assert not (tmp_path / "out").exists()
    if "max_items" in change:
        with pytest.raises(ElmoError, match=fragment):
            evaluate_task(folder, data, cache=tmp_path / "cache", max_items=-1, progress=False)


def test_cache_list_and_clear_cover_the_default_feature_caches_and_nothing_else(task, tmp_path, monkeypatch, capsys):
    """Every distinct input to `task eval` / `task predict` left a feature file in $ELMO_CACHE/features that
    `elmo cache` neither listed nor cleared. They are listed and cleared now, with an interrupted write's leftover
    an hour old; a user's file there, a fresh leftover (a run under way) and a --cache folder of the user's stay."""
    import os
    import time

    from elmo.cli import main
    from elmo.tasks.commands import evaluate_task

    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    folder, data, _ = task
    evaluate_task(folder, data, progress=False)  # no --cache: the default folder
    evaluate_task(folder, data, cache=tmp_path / "mine", progress=False)
    default = tmp_path / "cache" / "features"
    made = [p.name for p in default.iterdir()]
    assert len(made) == 1 and made[0].startswith("features-")
    (default / "notes.txt").write_text("mine")
    old, fresh = default / f".{made[0]}.abcd1234.tmp", default / f".{made[0]}.wxyz5678.tmp"
    old.write_bytes(b"half"), fresh.write_bytes(b"half")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert made[0] in out and "1 feature cache(s)" in out
    assert main(["cache", "clear"]) == 0
    assert "removed 1 feature cache(s)" in capsys.readouterr().out
    assert sorted(p.name for p in default.iterdir()) == sorted(["notes.txt", fresh.name])
    assert len(list((tmp_path / "mine").iterdir())) == 1  # the user's own --cache folder: not ours to clear


def test_a_file_where_the_feature_caches_belong_is_named_by_cache_list_and_clear(tmp_path, monkeypatch, capsys):
    from elmo.cli import main

    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "features").write_text("the user's")
    for action in ("list", "clear"):
        assert main(["cache", action]) == 1
        err = capsys.readouterr().err
        assert "features: a file, where elmo keeps the features" in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "cache" / "features").read_text() == "the user's"
