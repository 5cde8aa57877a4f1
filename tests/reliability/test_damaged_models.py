"""Damaged and hostile model files: each is refused in one line naming the file (and the tensor, dataset or key),
never loaded as other numbers, never allowed to block or to allocate what the file only claims."""

import json
import os
import shutil
import tracemalloc
import zipfile

import h5py
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from elmo.config import ElmoConfig
from elmo.data.vocab import Vocabulary
from elmo.io import official
from elmo.training.checkpoint import save_language_model
from elmo.training.softmax import LMSoftmax
from tests.conftest import OPTIONS, WEIGHTS, random_bilm, small_config
from tests.reliability.tiny import cli, tiny_model

BIAS = "forward_stack.layers.0.bias"
LSTM_BIAS = "RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/B"


def _official_copy(folder):
    folder.mkdir()
    shutil.copy(OPTIONS, folder / "options.json")
    shutil.copy(WEIGHTS, folder / "lm_weights.hdf5")
    return folder


def _replace_dataset(path, name, **create):
    with h5py.File(path, "r+") as f:
        del f[name]
        f.create_dataset(name, **create)


def _lm(folder):
    vocab, bilm = Vocabulary(["<S>", "</S>", "<UNK>", "the", "cat"]), random_bilm(small_config())
    return save_language_model(folder, bilm, LMSoftmax(len(vocab), bilm.config.lstm.projection_dim), vocab)


def test_float64_weights_beyond_float32_are_refused_not_loaded_as_inf(tmp_path, capsys):
    model = tiny_model(tmp_path / "m")
    state = load_file(str(model / "model.safetensors"))
    state[BIAS] = state[BIAS].double() * 1e300  # finite in float64, infinite in float32
    save_file(state, str(model / "model.safetensors"))
    rc, err = cli(capsys, "show", "--model", model, "a b")
    assert rc == 1 and BIAS in err and "float32's range" in err and len(err.strip().splitlines()) == 1

    folder = _official_copy(tmp_path / "official")
    with h5py.File(folder / "lm_weights.hdf5", "r") as f:
        bias = f[LSTM_BIAS][()]
    _replace_dataset(folder / "lm_weights.hdf5", LSTM_BIAS, data=bias.astype("f8") * 1e300)
    rc, err = cli(capsys, "show", "--model", folder, "a b")
    assert rc == 1 and LSTM_BIAS in err and "float32's range" in err and "overflow" not in err


@pytest.mark.parametrize("damage", ["int8", "float64 beyond float32"])
def test_a_softmax_of_integers_or_of_values_beyond_float32_is_refused(tmp_path, capsys, damage):
    model = _lm(tmp_path / "lm")
    state = load_file(str(model / "softmax.safetensors"))
    state = ({k: (v * 10).to(torch.int8) for k, v in state.items()} if damage == "int8"
             else {k: v.double() * 1e300 for k, v in state.items()})
    save_file(state, str(model / "softmax.safetensors"))
    rc, err = cli(capsys, "score", model, "the cat")
    assert rc == 1 and "softmax.safetensors" in err and len(err.strip().splitlines()) == 1
    assert ("int8" in err) if damage == "int8" else ("float32's range" in err)


@pytest.mark.parametrize("key", ["cell_clip", "proj_clip"])
def test_a_clip_of_hundreds_of_digits_is_one_line(tmp_path, capsys, key):
    model = tiny_model(tmp_path / "m")
    config = json.loads((model / "config.json").read_text())
    config["lstm"][key] = 10**400
    (model / "config.json").write_text(json.dumps(config))
    rc, err = cli(capsys, "info", "--model", model)
    assert rc == 1 and f"lstm.{key}" in err and len(err) < 300 and "Traceback" not in err


@pytest.mark.parametrize("change", ["renamed", "missing", "format_version true"])
def test_our_config_json_is_read_strictly(tmp_path, capsys, change):
    """A typo or a missing key in our own config.json would build another model from defaults: refused."""
    model = tiny_model(tmp_path / "m")
    config = json.loads((model / "config.json").read_text())
    if change == "renamed":
        config["lstm"]["use_skip_connection"] = config["lstm"].pop("use_skip_connections")
    elif change == "missing":
        del config["lstm"]["cell_clip"]
    else:
        config["format_version"] = True
    (model / "config.json").write_text(json.dumps(config))
    rc, err = cli(capsys, "show", "--model", model, "a b")
    expected = {"renamed": "lstm.use_skip_connection", "missing": "missing key lstm.cell_clip",
                "format_version true": "format_version True"}[change]
    assert rc == 1 and expected in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("storage", ["virtual", "external", "never written"])
def test_hdf5_datasets_whose_values_are_not_in_the_file_are_refused(tmp_path, capsys, storage):
    """HDF5 reads such datasets as fill values (zeros): weights that would load without an error."""
    folder = _official_copy(tmp_path / "official")
    with h5py.File(folder / "lm_weights.hdf5", "r") as f:
        table = f["char_embed"][()]
    if storage == "virtual":
        layout = h5py.VirtualLayout(shape=table.shape, dtype=table.dtype)
        layout[:] = h5py.VirtualSource(str(tmp_path / "missing.h5"), "x", shape=table.shape)
        with h5py.File(folder / "lm_weights.hdf5", "r+") as f:
            del f["char_embed"]
            f.create_virtual_dataset("char_embed", layout)
    elif storage == "external":
        (tmp_path / "half.raw").write_bytes(table.tobytes()[: table.nbytes // 2])
        _replace_dataset(folder / "lm_weights.hdf5", "char_embed", shape=table.shape, dtype=table.dtype,
                         external=[(str(tmp_path / "half.raw"), 0, table.nbytes)])
    else:
        _replace_dataset(folder / "lm_weights.hdf5", "char_embed", shape=table.shape, dtype=table.dtype)
    rc, err = cli(capsys, "show", "--model", folder, "a b")
    assert rc == 1 and "'char_embed'" in err and len(err.strip().splitlines()) == 1


def test_a_chunked_dataset_with_every_chunk_written_loads(tmp_path):
    folder = _official_copy(tmp_path / "official")
    with h5py.File(folder / "lm_weights.hdf5", "r") as f:
        table = f["char_embed"][()]
    _replace_dataset(folder / "lm_weights.hdf5", "char_embed", data=table, chunks=(7, table.shape[1]),
                     compression="gzip")
    model = official.load_official(folder / "options.json", folder / "lm_weights.hdf5")
    assert torch.equal(model.char_encoder.char_embedding.weight[1:], torch.from_numpy(table))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
@pytest.mark.parametrize("role", ["--options", "--weights"])
def test_a_pipe_as_the_options_or_the_weights_is_refused_not_waited_on(tmp_path, capsys, role):
    os.mkfifo(tmp_path / "fifo")
    files = {"--options": str(OPTIONS), "--weights": str(WEIGHTS), role: str(tmp_path / "fifo")}
    rc, err = cli(capsys, "info", *(x for pair in files.items() for x in pair))
    assert rc == 1 and "fifo" in err and "pipe" in err


def test_a_config_json_larger_than_any_models_settings_is_not_read(tmp_path, capsys):
    model = tiny_model(tmp_path / "m")
    with open(model / "config.json", "ab") as f:
        f.write(b" " * (2 << 20))
    rc, err = cli(capsys, "info", "--model", model)
    assert rc == 1 and "config.json" in err and "bytes" in err


def _nlpl_zip(path, options: bytes | None = None, damage_deflate: bool = False):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("options.json", options if options is not None else OPTIONS.read_bytes())
        z.write(WEIGHTS, "model.hdf5")
    if damage_deflate:
        data = bytearray(path.read_bytes())
        at = data.find(b"model.hdf5") + len("model.hdf5")  # the member's compressed data follows its name
        data[at : at + 8] = b"\xff" * 8
        path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("damage", ["deflate stream", "options.json", "a dataset's shape"])
def test_a_damaged_nlpl_zip_is_refused_naming_it_and_nothing_is_kept(tmp_path, capsys, monkeypatch, damage):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    options = json.loads(OPTIONS.read_text())
    if damage == "a dataset's shape":
        options["lstm"]["dim"] *= 2
    archive = _nlpl_zip(tmp_path / "model.zip", damage_deflate=damage == "deflate stream",
                        options=b"{oops" if damage == "options.json" else json.dumps(options).encode())
    for _ in range(2):  # the second run finds nothing kept from the first
        rc, err = cli(capsys, "info", "--model", archive)
        assert rc == 1 and str(archive) in err and "cache" not in err and len(err.strip().splitlines()) == 1
    assert not any(p.is_file() for p in (tmp_path / "cache").rglob("*"))


def test_a_cache_where_the_zip_cannot_be_unpacked_is_named_not_the_temporary_folder(tmp_path, capsys, monkeypatch):
    """The unpacking folder cannot be made (read-only cache, as a non-root user would meet): one line naming the
    cache folder and the way out, not the random name of the temporary folder that was never made."""
    import tempfile

    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    archive = _nlpl_zip(tmp_path / "model.zip")

    def refused(prefix, suffix, dir):  # what mkdtemp raises in a folder the user may not write
        raise PermissionError(13, "Permission denied", os.path.join(dir, f"{prefix}k3j9x2ab{suffix}"))

    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    rc, err = cli(capsys, "info", "--model", archive)
    assert rc == 1 and len(err.strip().splitlines()) == 1, err
    assert str(tmp_path / "cache" / "nlpl") in err and "Permission denied" in err and "ELMO_CACHE" in err
    assert "k3j9x2ab" not in err and ".tmp" not in err


@pytest.mark.parametrize("flags", [("--model", "https://example.com/elmo/model.zip"),
                                   ("--options", "https://example.com/elmo/model.zip", "--weights", "w.hdf5"),
                                   ("--options", "o.json", "--weights", "https://example.com/elmo/model.zip")])
def test_a_url_as_the_model_says_so(capsys, flags):
    """As --options or --weights it said "https:/example.com/...: no such file": the "//" folded."""
    rc, err = cli(capsys, "info", *flags)
    assert rc == 1 and "https://example.com/elmo/model.zip: a URL" in err


def test_checking_an_official_file_does_not_build_its_identity_fallbacks():
    """A 2 KB file whose options describe P = C = F = 8,192 is refused by name without 1 GB of identities."""
    config = ElmoConfig.from_options({"lstm": {"dim": 8192, "projection_dim": 8192, "n_layers": 1},
                                      "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 8192]], "n_highway": 0}})
    tracemalloc.start()
    try:
        with pytest.raises(official.WeightFileError, match="CNN/W_cnn_0"):
            official.check_datasets(WEIGHTS, config, {"char_embed": ((261, 4), np.dtype("f4"))})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10 << 20
