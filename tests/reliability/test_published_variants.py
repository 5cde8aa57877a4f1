"""Valid but varied published ELMo files load and give the vectors of the model they hold, as AllenNLP and bilm-tf
read them; near-misses of them are refused in one line naming the file and the dataset. Files written here from
random weights: no downloads."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from elmo.data.chars import batch_to_ids
from elmo.io.load import load_bilm
from elmo.io.official import WeightFileError, export_official, load_official
from tests.conftest import random_bilm, small_config
from tests.reliability.tiny import cli

SENTENCES = [["The", "bank", "closed", "."], ["은행", "에"], ["a"]]
VOCAB = 40  # rows of the softmax written into the weight file


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))


def _layers(bilm) -> list[torch.Tensor]:
    with torch.no_grad():
        return bilm(batch_to_ids(SENTENCES)).layers


def _with_softmax(folder: Path, weight_shape: tuple[int, ...], bias_shape: tuple[int, ...]) -> tuple[Path, Path]:
    """An official pair as bilm-tf's dump_weights writes it with its softmax filter taken out (bilm-tf issue #126):
    the biLM's datasets plus ``softmax/W`` and ``softmax/b``."""
    options, weights = export_official(random_bilm(small_config(), seed=5), folder)
    rng = np.random.default_rng(0)
    with h5py.File(weights, "a") as f:
        f.create_dataset("softmax/W", data=rng.normal(size=weight_shape).astype(np.float32))
        f.create_dataset("softmax/b", data=rng.normal(size=bias_shape).astype(np.float32))
    return options, weights


def test_a_weight_file_holding_bilm_tfs_softmax_loads_with_the_same_vectors(tmp_path, capsys):
    """AllenNLP and bilm-tf read the datasets they need and pass over the softmax; so does elmo, by path, by folder
    and on the command line, with the vectors of the biLM without it."""
    plain = load_official(*export_official(random_bilm(small_config(), seed=5), tmp_path / "plain"))
    options, weights = _with_softmax(tmp_path / "lm", (VOCAB, 8), (VOCAB,))
    for loaded in (load_official(options, weights), load_bilm(tmp_path / "lm")):
        assert all(torch.equal(got, want) for got, want in zip(_layers(loaded), _layers(plain), strict=True))
    (tmp_path / "in.txt").write_text("The bank closed .\n", encoding="utf-8")
    rc, err = cli(capsys, "embed", "--top", "--quiet", "--model", tmp_path / "lm", tmp_path / "in.txt",
                  tmp_path / "out.hdf5")
    assert rc == 0, err
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        assert f["0"].shape == (4, 16)


@pytest.mark.parametrize("weight_shape, bias_shape", [((VOCAB, 9), (VOCAB,)), ((VOCAB, 8), (VOCAB - 1,)),
                                                       ((VOCAB * 8,), (VOCAB,))])
def test_a_softmax_that_is_not_one_over_the_projection_is_refused_naming_it(tmp_path, capsys, weight_shape,
                                                                             bias_shape):
    options, weights = _with_softmax(tmp_path / "lm", weight_shape, bias_shape)
    with pytest.raises(WeightFileError) as caught:
        load_official(options, weights)
    message = str(caught.value)
    assert message.startswith(f"{weights}: ") and "'softmax/W'" in message and "'softmax/b'" in message
    assert "\n" not in message
    rc, err = cli(capsys, "info", "--model", tmp_path / "lm")
    assert rc == 1 and len(err.strip().splitlines()) == 1 and str(weights) in err and "Traceback" not in err
