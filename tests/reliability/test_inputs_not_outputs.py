"""Case 3 of "Nothing lost": no command writes over its own input (the same name, a symbolic or a hard link, or a
file of the input's name in an output folder). Each refusal is one usage line (exit 2), the input byte for byte as
it was, and nothing written."""

import os

import pytest

from elmo.cli import main
from elmo.io.checkpoint import CHECKPOINT_FILES
from elmo.io.official import export_official
from elmo.io.native import load_model
from tests.reliability.tiny import cli, micro_run, one_error_line, text_file, tiny_model


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def place(tmp_path):
    model = tiny_model(tmp_path / "model")
    text_file(tmp_path / "corpus.txt", 20)
    (tmp_path / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nw1\n", encoding="utf-8")
    export_official(load_model(model), tmp_path / "official")
    os.symlink(tmp_path / "corpus.txt", tmp_path / "corpus-link.txt")
    os.link(tmp_path / "corpus.txt", tmp_path / "corpus-hard.txt")
    return tmp_path


CASES = {
    "vocab build": lambda t: ["vocab", "build", t / "corpus.txt", "-o", t / "corpus.txt"],
    "vocab build, a glob": lambda t: ["vocab", "build", t / "corpus*.txt", "-o", t / "corpus.txt"],
    "vocab build, a symbolic link": lambda t: ["vocab", "build", t / "corpus.txt", "-o", t / "corpus-link.txt"],
    "probe word2vec": lambda t: ["probe", "word2vec", t / "corpus.txt", "--out", t / "corpus.txt"],
    "embed, a hard link": lambda t: ["embed", t / "corpus.txt", t / "corpus-hard.txt", "--top", "--model", t / "model"],
    "embed over the weights": lambda t: ["embed", t / "corpus.txt", t / "official" / "weights.hdf5", "--top",
                                         "--options", t / "official" / "options.json",
                                         "--weights", t / "official" / "weights.hdf5"],
    "dump-token-embeddings": lambda t: ["dump-token-embeddings", t / "vocab.txt", t / "vocab.txt",
                                        "--model", t / "model"],
    "convert into the model's folder": lambda t: ["convert", "--options", t / "official" / "options.json",
                                                  "--weights", t / "official" / "weights.hdf5", "--to", "official",
                                                  t / "official"],
    "convert onto the model folder": lambda t: ["convert", "--model", t / "model", "--to", "ours", t / "model"],
    "plot": lambda t: ["plot", "w1", "--sentences", t / "corpus.txt", "--out", t / "corpus.txt",
                       "--model", t / "model"],
    "train --out a training file": lambda t: ["train", t / "corpus.txt", "--vocab", t / "vocab.txt",
                                              "--out", t / "corpus.txt"],
    "export onto its checkpoint": lambda t: ["export", t / "model", t / "model"],
    "embed into the model folder's weights": lambda t: ["embed", t / "corpus.txt", t / "model" / "model.safetensors",
                                                        "--top", "--model", t / "model"],
    "embed into the official folder's weights": lambda t: ["embed", t / "corpus.txt", t / "official" / "weights.hdf5",
                                                           "--top", "--model", t / "official"],
    "dump-token-embeddings into the model folder": lambda t: ["dump-token-embeddings", t / "vocab.txt",
                                                              t / "model" / "config.json", "--model", t / "model"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_output_that_is_an_input_is_refused(place, capsys, case):
    before = _snapshot(place)
    rc, err = cli(capsys, *CASES[case](place))
    assert rc == 2
    one_error_line(err, "would overwrite")
    assert _snapshot(place) == before


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_an_output_that_is_not_a_regular_file_is_refused(place, capsys, kind):
    target = place / "not-a-file"
    os.mkfifo(target) if kind == "fifo" else target.mkdir()
    rc, err = cli(capsys, "embed", place / "corpus.txt", target, "--top", "--model", place / "model")
    assert rc in (1, 2)
    one_error_line(err, str(target))
    assert (target.is_fifo() if kind == "fifo" else target.is_dir())  # still what it was


FOLDER_WRITERS = {
    "convert": lambda t, out: ["convert", "--model", t / "model", "--to", "official", out],
    "export": lambda t, out: ["export", t / "run", out],
    "train": lambda t, out: ["train", t / "corpus.txt", "--vocab", t / "vocab.txt", "--config", "tiny", "--out", out],
    "task train": lambda t, out: ["task", "train", "pos", "--train", t / "corpus.txt", "--dev", t / "corpus.txt",
                                  "--model", t / "model", "--out", out],
}


@pytest.mark.parametrize("where", ["the folder itself", "a folder above it"])
@pytest.mark.parametrize("command", sorted(FOLDER_WRITERS))
def test_a_folder_output_where_a_file_stands_is_one_usage_line_naming_both(place, capsys, command, where):
    """A command that writes a folder, given a file's name or a path through a file: exit 2 before anything is
    loaded, one line naming the output and the file in the way; the file as it was."""
    (place / "run").mkdir()
    blocking = place / "a-file"
    blocking.write_text("the user's\n")
    output = blocking if where == "the folder itself" else blocking / "sub" / "out"
    rc, err = cli(capsys, *FOLDER_WRITERS[command](place, output))
    assert rc == 2
    line = one_error_line(err, str(output), "is a file")
    assert line.count(str(blocking)) == (1 if output == blocking else 2)  # named once as the output, once as the file
    assert blocking.read_text() == "the user's\n"


FILE_WRITERS = {
    "embed": lambda t, out: ["embed", t / "corpus.txt", out, "--top", "--model", t / "model"],
    "plot": lambda t, out: ["plot", "w1", "--sentences", t / "corpus.txt", "--out", out, "--model", t / "model"],
    "dump-token-embeddings": lambda t, out: ["dump-token-embeddings", t / "vocab.txt", out, "--model", t / "model"],
    "task eval --cache": lambda t, out: ["task", "eval", t / "no-task", "--data", t / "corpus.txt", "--cache", out],
}


@pytest.mark.parametrize("command", sorted(FILE_WRITERS))
def test_an_output_file_under_a_file_is_one_usage_line_before_any_work(place, capsys, command):
    """``plot --out notes.txt/x.png``: it failed only when writing, after the model was loaded and the text
    embedded, with exit 1 and "File exists"; the same for a feature cache folder under a file."""
    blocking = place / "a-file"
    blocking.write_text("the user's\n")
    suffix = "" if "cache" in command else ".png" if command == "plot" else ".hdf5"
    rc, err = cli(capsys, *FILE_WRITERS[command](place, blocking / f"out{suffix}"))
    assert rc == 2
    one_error_line(err, str(blocking / f"out{suffix}"), f"{blocking} is a file")
    assert blocking.read_text() == "the user's\n"


def test_an_output_through_a_symbolic_link_writes_its_target_and_keeps_the_link(place, capsys):
    target, link = place / "out.hdf5", place / "link.hdf5"
    target.write_bytes(b"old")
    os.symlink(target, link)
    rc, _ = cli(capsys, "vocab", "build", place / "corpus.txt", "-o", link)
    assert rc == 0
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert target.read_text(encoding="utf-8").startswith("<S>")


@pytest.fixture(scope="module")
def run_and_export(tmp_path_factory):
    """A one-step micro run, and its export (our format beside the official pair)."""
    folder = tmp_path_factory.mktemp("run")
    assert main(["export", str(micro_run(folder)), str(folder / "exported")]) == 0
    return folder


@pytest.mark.parametrize("model, output", [
    ("run", "run/step-00000001/optimizer.safetensors"), ("run", "run/step-00000001/trainer.json"),
    ("run", "run/metrics.jsonl"), ("run/step-00000001", "run/step-00000001/state.safetensors"),
    ("exported", "exported/weights.hdf5"), ("exported", "exported/options.json"),
])
def test_a_file_of_the_model_folder_is_no_output(run_and_export, capsys, model, output):
    """Only the files a model is loaded from were refused: the optimizer's state, trainer.json or metrics.jsonl of
    a run named by --model, or the official pair of an export, were written over (exit 0; the run no longer
    resumed, the official files no longer loaded)."""
    place = run_and_export
    before = _snapshot(place)
    rc, err = cli(capsys, "dump-token-embeddings", place / "vocab.txt", place / output, "--model", place / model)
    assert rc == 2
    one_error_line(err, "would overwrite", f"part of the input {place / model}")
    assert _snapshot(place) == before


@pytest.mark.parametrize("model, output", [("run", "run/tokens.hdf5"), ("run", "run/step-00000001/tokens.hdf5"),
                                           ("run/step-00000001", "run/step-00000001/tokens.hdf5")])
def test_a_users_own_file_in_the_model_folder_may_be_written(run_and_export, capsys, model, output):
    """An earlier output kept beside the model (or inside a checkpoint) is no input: writing it again is allowed."""
    output = run_and_export / output
    for _ in range(2):
        rc, err = cli(capsys, "dump-token-embeddings", run_and_export / "vocab.txt",
                      output, "--model", run_and_export / model)
        assert rc == 0, err
    output.unlink()


def test_a_checkpoint_holds_only_the_files_named_as_its_own(run_and_export):
    """The output check knows a checkpoint's files by name (elmo.io.checkpoint.CHECKPOINT_FILES): a file the
    trainer writes beside them but not named there could be written over."""
    checkpoint = run_and_export / "run" / "step-00000001"
    assert {p.name for p in checkpoint.iterdir() if p.name != "tokens.hdf5"} <= CHECKPOINT_FILES


def test_a_recursive_glob_does_not_hide_an_input(tmp_path, capsys):
    """`**` matched no folder in the check (glob without recursive=True) and every depth in the reader: the output
    `data/keep.txt` was read as an input and written over."""
    (tmp_path / "data" / "sub").mkdir(parents=True)
    text_file(tmp_path / "data" / "keep.txt", 5)
    text_file(tmp_path / "data" / "sub" / "more.txt", 5)
    before = (tmp_path / "data" / "keep.txt").read_bytes()
    rc, err = cli(capsys, "vocab", "build", f"{tmp_path}/data/**/*.txt", "-o", tmp_path / "data" / "keep.txt")
    assert rc == 2
    one_error_line(err, "would overwrite")
    assert (tmp_path / "data" / "keep.txt").read_bytes() == before


def test_the_python_api_never_writes_over_the_models_own_files(tmp_path):
    """`Embedder.embed_file(IN, "model/model.safetensors")` (or the official weights, or a converted copy) wrote the
    embeddings over the model in use and returned the count: the model no longer loaded. The command line already
    refused it; the API now does, as does `dump_token_embeddings`."""
    import hashlib
    import shutil

    from elmo import Embedder
    from elmo.errors import UsageError
    from elmo.io.native import save_model
    from elmo.training.export import dump_token_embeddings
    from tests.conftest import OPTIONS, WEIGHTS, random_bilm, small_config

    (tmp_path / "in.txt").write_text("the bank\n", encoding="utf-8")
    save_model(random_bilm(small_config()), tmp_path / "ours")
    shutil.copy(OPTIONS, tmp_path / "options.json")
    shutil.copy(WEIGHTS, tmp_path / "weights.hdf5")
    (tmp_path / "vocab.txt").write_text("bank\n", encoding="utf-8")
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    for embedder, files in [(Embedder.from_pretrained(str(tmp_path / "ours")), ["ours/model.safetensors",
                                                                                 "ours/config.json"]),
                            (Embedder.from_pretrained(options=tmp_path / "options.json",
                                                      weights=tmp_path / "weights.hdf5"), ["weights.hdf5"])]:
        for name in files:
            before = digest(tmp_path / name)
            with pytest.raises(UsageError, match="a file of the model in use"):
                embedder.embed_file(tmp_path / "in.txt", tmp_path / name, progress=False)
            with pytest.raises(UsageError, match="a file of the model in use"):
                dump_token_embeddings(embedder.bilm, tmp_path / "vocab.txt", tmp_path / name)
            assert digest(tmp_path / name) == before
    assert embedder.embed_file(tmp_path / "in.txt", tmp_path / "out.hdf5", progress=False) == 1
    from elmo.embed_file import embed_file
    from elmo.io.native import load_model
    from elmo.io.official import load_official
    for model, name in [(load_model(tmp_path / "ours"), "ours/model.safetensors"),
                        (load_official(tmp_path / "options.json", tmp_path / "weights.hdf5"), "weights.hdf5")]:
        with pytest.raises(UsageError, match="a file of the model in use"):  # the public loaders record them too
            embed_file(model, tmp_path / "in.txt", tmp_path / name, progress=False)


@pytest.mark.parametrize("command", ["export", "convert", "embed", "dump-token-embeddings"])
def test_an_output_named_as_a_checkpoint_of_a_run_is_refused(tmp_path, capsys, command):
    """`elmo export RUN RUN/step-00000009` was written (a folder; `embed` and `dump-token-embeddings` a file of that
    name, exit 0), and the run then refused to resume ("named like a checkpoint of elmo's but not one") until the
    user moved it."""
    run = micro_run(tmp_path)
    target = run / "step-00000009"
    (tmp_path / "one.txt").write_text("w1 w2\n", encoding="utf-8")
    args = {"export": ["export", run, target],
            "convert": ["convert", "--model", run, "--to", "official", target],
            "embed": ["embed", tmp_path / "one.txt", target, "--top", "--model", run],
            "dump-token-embeddings": ["dump-token-embeddings", tmp_path / "one.txt", target, "--model", run]}[command]
    rc, err = cli(capsys, *args)
    assert rc == 2 and not target.exists()
    one_error_line(err, "step-00000009", "named as a checkpoint of the run")
    rc, err = cli(capsys, "train", "--resume", run, "--out", run, "--max-steps", "2", "--quiet")
    assert rc == 0, err
