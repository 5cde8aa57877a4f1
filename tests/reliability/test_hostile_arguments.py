"""Hostile arguments to the Python API and to the less-used commands: each refused in one line before any work (or
handled as the user's text says), never an input overwritten, a token changed or a sentence merged in silence."""

import os
import subprocess

import pytest
import torch

from elmo import Elmo, Embedder, batch_to_ids
from elmo.errors import ElmoError
from elmo.io.load import load_bilm
from elmo.io.native import save_model
from elmo.io.official import export_official
from elmo.model.mix import ComponentProjection, ScalarMix
from tests.reliability.tiny import cli, elmo_process, one_error_line, text_file, tiny_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_an_open_input_file_is_not_overwritten_by_its_own_output(model, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n")
    embedder = Embedder.from_pretrained(model)
    for mode, output in (("r", text), ("rb", tmp_path / "." / "in.txt")):
        with open(text, mode) as handle, pytest.raises(ElmoError, match="would overwrite the input"):
            embedder.embed_file(handle, output, progress=False)
    assert text.read_text() == "the cat sat\n"


@pytest.mark.parametrize("errors", ["ignore", "surrogateescape", "bogus"])
def test_embed_file_takes_only_the_two_documented_error_handlers(model, tmp_path, errors):
    """'ignore' would drop bytes from a token ("caf\\xffe" -> "cafe") without a word."""
    text = text_file(tmp_path / "in.txt", 2)
    with pytest.raises(ElmoError, match="'strict' or 'replace'"):
        Embedder.from_pretrained(model).embed_file(text, tmp_path / "out.hdf5", errors=errors, progress=False)
    assert not (tmp_path / "out.hdf5").exists()


@pytest.mark.parametrize("width", [0, 2, -1, 2.5, None, 10**11])
def test_batch_to_ids_refuses_a_width_no_model_has(width):
    with pytest.raises(ElmoError, match="width"):
        batch_to_ids([["abc"]], width=width)


def test_sizes_and_types_are_checked_before_anything_is_built(model):
    bilm = load_bilm(model)
    embedder = Embedder.from_pretrained(model)
    calls = [lambda: Elmo(bilm, output="projection", projection_dim=10**11), lambda: ComponentProjection(8, 10**9, 4),
             lambda: Elmo(bilm, 10**9), lambda: ScalarMix(-1), lambda: Elmo(bilm, dropout="0.5"),
             lambda: embedder.embed_tokens([["a", "b"]], layers=9), lambda: Embedder(None), lambda: Embedder("en"),
             lambda: Embedder(bilm, device=None), lambda: Embedder(bilm, max_tokens="10"),
             lambda: Embedder(bilm, max_tokens=float("nan")), lambda: Embedder(bilm, max_tokens=1.5),
             lambda: Embedder(bilm, mix_weights="abc"), lambda: Embedder(bilm, gamma="1")]
    for index, call in enumerate(calls):
        with pytest.raises(ElmoError):
            call()
            pytest.fail(f"call {index} was taken")


@pytest.mark.parametrize("method", ["embed", "encode", "embed_sentences"])
def test_a_token_that_is_not_a_string_is_named_by_its_place_in_the_input(model, method):
    """The check ran inside a batch sorted by length: the error named the row there ("sentence 0"), not the input's."""
    embedder = Embedder.from_pretrained(model)
    sentences = [["a"], ["a", "b"], ["the", "long", 7, "one"]]
    with pytest.raises(ElmoError, match=r"^sentence 2, token 2: 7 is not a string$"):
        result = getattr(embedder, method)(sentences)
        list(result) if method == "embed_sentences" else result


def test_text_with_carriage_returns_inside_lines_is_refused_where_it_is_read_as_sentences(tmp_path, capsys):
    (tmp_path / "cr.txt").write_bytes(b"the cat\rsat\r")
    (tmp_path / "crlf.txt").write_bytes(b"the cat\r\nsat\r\n")
    rc, err = cli(capsys, "vocab", "build", tmp_path / "cr.txt", "-o", tmp_path / "v.txt")
    assert rc == 1 and "cr.txt, line 1: a carriage return" in err and not (tmp_path / "v.txt").exists()
    rc, _ = cli(capsys, "vocab", "build", tmp_path / "crlf.txt", "-o", tmp_path / "v.txt")
    assert rc == 0 and "sat" in (tmp_path / "v.txt").read_text().split()


def test_a_text_file_named_twice_is_refused_not_counted_twice(tmp_path, capsys):
    (tmp_path / "xy.txt").write_text("x y y\n")
    os.symlink(tmp_path / "xy.txt", tmp_path / "link.txt")
    for second in (tmp_path / "." / "xy.txt", tmp_path / "link.txt", tmp_path / "x*.txt"):
        rc, err = cli(capsys, "vocab", "build", tmp_path / "xy.txt", second, "-o", tmp_path / "v.txt")
        assert rc == 1 and "named twice" in err and not (tmp_path / "v.txt").exists()


def test_baselines_refuses_standard_input_as_both_training_and_held_out_text(tmp_path, capsys, monkeypatch):
    (tmp_path / "v.txt").write_text("<S>\n</S>\n<UNK>\nthe\n")
    rc, err = cli(capsys, "baselines", tmp_path / "v.txt", "--train", "-", "--eval", "-")
    assert rc == 2 and "standard input is one stream" in err


def test_plot_draws_labels_and_titles_as_written(model, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    (tmp_path / "lab.txt").write_text("$\\foo$\tthe bank on it\n$5 or $6\tthe bank closed\n")
    rc, err = cli(capsys, "plot", "bank", "--sentences", tmp_path / "lab.txt", "--model", model,
                  "--out", tmp_path / "p.png", "--title", "$\\foo$")
    assert rc == 0 and (tmp_path / "p.png").stat().st_size > 0, err
    rc, err = cli(capsys, "plot", "bank", "--sentences", tmp_path / "lab.txt", "--model", model,
                  "--out", tmp_path / "new" / "p.pgf")
    assert rc == 2 and ".pgf" in err and not (tmp_path / "new").exists()


@pytest.mark.skipif(not os.path.exists("/dev/stdout"), reason="no /dev/stdout on this system")
def test_dev_stdout_as_the_output_of_a_piped_command_is_refused_as_a_pipe(model, tmp_path):
    """/dev/stdout leads to the pipe behind it, which has no path: the check must not follow the link to a name."""
    (tmp_path / "v.txt").write_text("<S>\n</S>\n<UNK>\nthe\n")
    process = elmo_process("dump-token-embeddings", tmp_path / "v.txt", "/dev/stdout", "--model", model,
                           stdout=subprocess.PIPE)
    out, err = process.communicate(timeout=120)
    assert process.returncode != 0 and not out
    one_error_line(err, "/dev/stdout", "pipe")


def test_an_output_name_too_long_for_elmos_work_files_is_refused_naming_it(model, tmp_path, capsys):
    text = text_file(tmp_path / "in.txt", 2)
    long_name = tmp_path / ("o" * 245 + ".hdf5")  # 250 bytes: fine alone, too long with ".lock" or ".tmp" beside it
    rc, err = cli(capsys, "embed", text, long_name, "--top", "--model", model)
    assert rc == 1 and f"{long_name}: a name of 250 bytes" in err and sorted(p.name for p in tmp_path.iterdir()) == [
        "in.txt"]
    rc, err = cli(capsys, "export", model, tmp_path / ("e" * 250))
    assert rc != 0 and "a name of 250 bytes" in err


@pytest.mark.parametrize("value, dtype, match", [
    (1e5, "float16", "beyond torch.float16's range"),  # float16 would store inf
    (float("nan"), None, "NaN or infinite"),
    (float("inf"), "bfloat16", "NaN or infinite"),
])
def test_a_model_that_would_not_load_again_is_not_written(model, tmp_path, value, dtype, match):
    """Every reader refuses a weight holding NaN or inf: writing one would give a folder that cannot be used."""
    bilm = load_bilm(model)
    with torch.no_grad():
        bilm.char_encoder.projection.weight[0, 0] = value
    with pytest.raises(ElmoError, match=match):
        save_model(bilm, tmp_path / "ours", dtype=getattr(torch, dtype) if dtype else None)
    assert not (tmp_path / "ours").exists()
    if dtype is None:
        with pytest.raises(ElmoError, match=match):
            export_official(bilm, tmp_path / "official")
        assert not (tmp_path / "official").exists()
    with torch.no_grad():
        bilm.char_encoder.projection.weight[0, 0] = 1.0  # a finite model is written and loads again
    save_model(bilm, tmp_path / "fine", dtype=getattr(torch, dtype) if dtype else None)
    assert load_bilm(tmp_path / "fine") is not None


def test_embedder_from_pretrained_refuses_stateful_naming_where_it_belongs(model):
    """Embedder sorts sentences into batches: a stateful biLM would give each sentence its neighbours' state."""
    with pytest.raises(ElmoError, match=r"Elmo.from_pretrained\(\.\.\., stateful=True\)"):
        Embedder.from_pretrained(model, stateful=True)


@pytest.mark.parametrize("args, fragment", [
    (["task", "train", "ner", "--train", "T", "--dev", "T", "--out", "OUT", "--lr", "1e38"], "argument --lr: must be "
                                                                                              "at most"),
    (["probe", "word2vec", "T", "--out", "OUT", "--dim", "1000000000"], "argument --dim: must be at most 65,536"),
])
def test_sizes_and_rates_beyond_any_use_are_usage_errors_before_any_work(tmp_path, capsys, args, fragment):
    """``task train --lr 1e38`` ended in Adam's overflow traceback after the features were computed; ``probe
    word2vec --dim 1000000000`` asked for 11 GiB of three words' vectors (a traceback, or the machine's memory)."""
    text = text_file(tmp_path / "t.txt", 4)
    rc, err = cli(capsys, *[str(text) if a == "T" else str(tmp_path / "out") if a == "OUT" else a for a in args])
    assert rc == 2 and not (tmp_path / "out").exists()
    one_error_line(err, fragment)


def test_train_word2vec_refuses_a_dimension_beyond_the_limit_before_allocating(tmp_path):
    from elmo.tasks.probes import train_word2vec

    with pytest.raises(ElmoError, match="dim must be a whole number"):
        train_word2vec([["a", "b"]] * 4, tmp_path / "v.txt", dim=10**9)
    assert not (tmp_path / "v.txt").exists()
