"""Case 8 of "Nothing lost": numbers are checked where they enter, and non-finite vectors are never silent.

`--max-minutes nan` / `0` / `inf` / `-1` are usage errors (a run that cannot do what was asked does not start and
exit 0 with an empty folder); weights of 3e38 that make NaN/inf vectors are an error naming the lines (exit 1, no
output, no parts), or with --allow-non-finite a warning naming them and the vectors kept.
"""

import h5py
import numpy as np
import pytest
import torch

from elmo.io.native import save_model
from tests.conftest import random_bilm, small_config
from tests.reliability.tiny import cli, litter, one_error_line, text_file


@pytest.mark.parametrize("value", ["nan", "0", "inf", "-1", "1e400", "ten"])
def test_max_minutes_must_be_a_finite_positive_number(tmp_path, capsys, value):
    text_file(tmp_path / "train.txt", 5)
    rc, err = cli(capsys, "train", tmp_path / "train.txt", "--out", tmp_path / "run", f"--max-minutes={value}")
    assert rc == 2 and "--max-minutes" in err and "Traceback" not in err
    assert litter(tmp_path) == ["train.txt"]


@pytest.mark.parametrize("flag, value", [("--zero-state-share", "nan"), ("--zero-state-share", "1.5"),
                                         ("--seed", "-1"), ("--freeze-bilm-steps", "-5"), ("--nproc", "100000")])
def test_other_training_numbers_are_checked(tmp_path, capsys, flag, value):
    text_file(tmp_path / "train.txt", 5)
    rc, err = cli(capsys, "train", tmp_path / "train.txt", "--out", tmp_path / "run", flag, value)
    assert rc == 2 and flag in err and "Traceback" not in err


def test_task_learning_rate_must_be_finite(tmp_path, capsys):
    rc, err = cli(capsys, "task", "train", "ner", "--train", "x", "--dev", "x", "--out", tmp_path / "o", "--lr", "nan")
    assert rc == 2 and "--lr" in err


@pytest.fixture
def overflowing_model(tmp_path):
    """A model whose projection weights of 3e38 overflow float32: its token layer is infinite."""
    model = random_bilm(small_config())
    with torch.no_grad():
        model.char_encoder.projection.weight.fill_(3e38)
    return save_model(model, tmp_path / "model")


def test_non_finite_vectors_are_an_error_naming_the_lines(tmp_path, capsys, overflowing_model):
    text_file(tmp_path / "in.txt", 7)
    rc, err = cli(capsys, "embed", tmp_path / "in.txt", tmp_path / "out.hdf5", "--all", "--model",
                  overflowing_model, "--quiet")
    assert rc == 1
    one_error_line(err, "in.txt, lines 1, 2, 3, 4, 5 and 2 more: NaN or infinite vectors", "--allow-non-finite")
    assert litter(tmp_path) == ["in.txt", "model"]


def test_allow_non_finite_keeps_them_with_a_warning(tmp_path, capsys, overflowing_model):
    text_file(tmp_path / "in.txt", 2)
    rc, err = cli(capsys, "embed", tmp_path / "in.txt", tmp_path / "out.hdf5", "--all", "--model",
                  overflowing_model, "--quiet", "--allow-non-finite")
    assert rc == 0 and "warning: " in err and "lines 1, 2: NaN or infinite vectors" in err
    with h5py.File(tmp_path / "out.hdf5") as f:
        assert not np.isfinite(f["0"][()]).all()


def test_the_python_embedder_refuses_non_finite_vectors_and_overlong_sentences(overflowing_model, caplog):
    """The same guards in the Python API: NaN/inf vectors an error naming the sentences (``allow_non_finite``: a
    warning), a sentence over the token limit refused before any work."""
    from elmo.embed import Embedder
    from elmo.embed_file import NonFiniteVectorsError
    from elmo.errors import UsageError
    from elmo.limits import MAX_TOKENS_PER_LINE

    with pytest.raises(NonFiniteVectorsError, match="sentences 0, 1: NaN or infinite vectors"):
        Embedder.from_pretrained(overflowing_model).embed([["a", "b"], ["c"]])
    kept = Embedder.from_pretrained(overflowing_model, allow_non_finite=True).embed([["a", "b"]])
    assert not np.isfinite(kept[0]).all() and "NaN or infinite vectors" in caplog.text
    fine = Embedder(random_bilm(small_config()))
    with pytest.raises(UsageError, match="sentence 1: 100,001 tokens"):
        fine.embed([["a"], ["w"] * (MAX_TOKENS_PER_LINE + 1)])


def test_the_finiteness_check_of_weights_is_exact_when_the_sum_overflows():
    """Model files are checked for NaN/inf by their sum first (one pass): a sum that overflows from large finite
    values must not be taken for a damaged file, and a NaN or inf anywhere must be found."""
    from elmo.io.native import all_finite

    assert all_finite(torch.full((10,), 3e38))  # the float32 sum is inf; every value is finite
    assert all_finite(torch.randn(1000))
    for bad in (float("nan"), float("inf"), -float("inf")):
        tensor = torch.randn(1000)
        tensor[517] = bad
        assert not all_finite(tensor)
    assert not all_finite(torch.tensor([3e38, 3e38, float("nan")]))
