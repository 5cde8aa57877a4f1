"""Every published ELMo layout loads by path through ``load_bilm`` with the vectors of the model it was written
from, and every wrong file or name is refused in one line that names the real problem. All files are written here
from random weights: no downloads."""

from __future__ import annotations

import json
import os
import shutil
import time
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from elmo.data.chars import batch_to_ids
from elmo.errors import ElmoError, UsageError
from elmo.io import nlpl
from elmo.io.work_folder import file_sha256
from elmo.io.load import load_bilm
from elmo.io.native import ModelFileError, save_model
from elmo.io.official import WeightFileError, export_official, load_official
from elmo.model.bilm import BiLM
from elmo.model.engine import InferenceEngine
from elmo.downstream import Elmo
from tests.conftest import random_bilm, small_config

SENTENCES = [["The", "cat", "sat", "on", "the", "mat", "."], ["Añoranza", "zzyzx"], ["<S>", "word", "</S>"]]
S3 = "elmo_2x4096_512_2048cnn_2xhighway"
VOCAB = ["<S>", "</S>", "<UNK>", "The", "the", "cat", "sat", "on", "mat", ".", "word", "the"]  # a repeat: skipped


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> BiLM:
    """A random model whose weights survive the official format exactly (its forget biases already went through
    bilm-tf's -1 / +1 once), so every layout must give its vectors to the last bit."""
    folder = tmp_path_factory.mktemp("source")
    return load_official(*export_official(random_bilm(small_config(n_layers=2), seed=3), folder))


def vectors(bilm: BiLM, cache: bool = False) -> list[torch.Tensor]:
    """Every layer from an engine; without the model's own token cache (an NLPL vocabulary) unless ``cache``."""
    return InferenceEngine.build(bilm, cache_words=None if cache else [])(batch_to_ids(SENTENCES)).layers


def assert_same(loaded: BiLM, source: BiLM) -> None:
    """Same config, same weights, same vectors to the last bit (a vocabulary token cache, as NLPL folders bring,
    set aside: the character CNN's last bit depends on which words share its batch; see the NLPL tests)."""
    assert loaded.config == source.config
    want_state = source.state_dict()
    assert all(torch.equal(value, want_state[name]) for name, value in loaded.state_dict().items())
    for got, want in zip(vectors(loaded), vectors(source), strict=True):
        assert (got - want).abs().max().item() == 0


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text and isinstance(err.value, ElmoError)
    return text


def official_folder(model: BiLM, folder: Path, options: str = "options.json", weights: str = "weights.hdf5") -> Path:
    options_path, _ = export_official(model, folder, weights_name=weights)
    if options != "options.json":
        options_path.rename(folder / options)
    return folder


def nlpl_folder(model: BiLM, folder: Path) -> Path:
    official_folder(model, folder, weights=nlpl.WEIGHTS_NAME)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    (folder / "meta.json").write_text(json.dumps({"id": 999, "corpus": "random"}), encoding="utf-8")
    (folder / "README").write_text("a random test model\n", encoding="utf-8")
    return folder


def zip_folder(folder: Path, archive: Path) -> Path:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(folder.iterdir()):
            z.write(path, path.name)
    return archive


# ---- the layouts --------------------------------------------------------------------------------------------------

def test_our_folder(source, tmp_path):
    assert_same(load_bilm(save_model(source, tmp_path / "ours")), source)


def test_training_run_folder_loads_its_newest_checkpoint(source, tmp_path):
    run = tmp_path / "run"
    save_model(random_bilm(source.config, seed=9), run / "step-00000001")
    save_model(source, run / "step-00000002")
    for step in ("step-00000001", "step-00000002"):
        (run / step / "trainer.json").write_text("{}", encoding="utf-8")
    assert_same(load_bilm(run), source)


def test_options_json_and_one_hdf5(source, tmp_path):
    assert_same(load_bilm(official_folder(source, tmp_path / "pair")), source)


def test_official_s3_file_names(source, tmp_path):
    folder = official_folder(source, tmp_path / "s3", f"{S3}_options.json", f"{S3}_weights.hdf5")
    assert_same(load_bilm(folder), source)
    assert_same(load_bilm(str(folder)), source)


def test_s3_names_pair_the_files_when_a_folder_holds_more(source, tmp_path):
    folder = official_folder(source, tmp_path / "s3", f"{S3}_options.json", f"{S3}_weights.hdf5")
    (folder / "notes_options.json").write_text("{}", encoding="utf-8")  # an options-like file without weights
    assert_same(load_bilm(folder), source)


def test_allennlp_fixture_folder_picks_the_weights_by_content(source, tmp_path):
    folder = official_folder(source, tmp_path / "fixture", weights="lm_weights.hdf5")
    for k in range(3):  # vectors written by an embedding run: datasets "0", "1", ...
        with h5py.File(folder / f"lm_embeddings_{k}.hdf5", "w") as f:
            for i in range(4):
                f.create_dataset(str(i), data=np.random.rand(3, 5, 16).astype(np.float32))
    with h5py.File(folder / "elmo_token_embeddings.hdf5", "w") as f:
        f.create_dataset("embedding", data=np.random.rand(20, 16).astype(np.float32))
    assert_same(load_bilm(folder), source)


def test_nlpl_folder_caches_its_vocabulary_without_changing_any_vector(source, tmp_path):
    loaded = load_bilm(nlpl_folder(source, tmp_path / "nlpl"))
    cache = InferenceEngine.build(loaded).token_cache  # an engine precomputes the model's vocabulary by default
    assert cache is not None and len(cache) == len(set(VOCAB))
    assert loaded.tokenizer_name is None  # whitespace-tokenised training text
    assert_same(loaded, source)
    words = list(dict.fromkeys(VOCAB))  # the cache holds the CNN's vectors of the vocabulary (to float32 rounding:
    with torch.no_grad():  # the engine multiplies by packed copies of the highway and projection matrices) ...
        torch.testing.assert_close(cache.vectors, source.char_encoder(batch_to_ids([words])[0]), rtol=1e-6, atol=1e-6)
    for a, b in zip(vectors(loaded, cache=True), vectors(loaded), strict=True):  # ... and the vectors stay within the last bit that
        assert (a - b).abs().max().item() <= 1e-6  # depends on which words share a CNN batch (tests/test_modes.py)


def test_nlpl_zip_is_unpacked_once_into_the_cache(source, tmp_path, monkeypatch):
    archive = zip_folder(nlpl_folder(source, tmp_path / "nlpl"), tmp_path / "209.zip")
    loaded = load_bilm(archive)
    assert_same(loaded, source)
    assert loaded.cache_words and loaded.tokenizer_name is None
    unpacked = tmp_path / "cache" / "nlpl" / file_sha256(archive)
    assert sorted(p.name for p in unpacked.iterdir()) == ["README", "meta.json", "model.hdf5", "options.json",
                                                          "vocab.txt"]
    assert [p.name for p in unpacked.parent.iterdir()] == [unpacked.name]  # no temporary folder left
    monkeypatch.setattr(nlpl, "_extract", lambda *a: pytest.fail("extracted twice"))
    assert_same(load_bilm(str(archive)), source)
    assert_same(load_bilm(unpacked), source)  # the unpacked folder is a layout of its own


def test_cache_clear_removes_unpacked_zips_and_nothing_else(source, tmp_path, capsys):
    """`elmo cache clear` removed the converted copies only: an unpacked NLPL zip (the size of its weights, again)
    stayed in the cache with no command to list or remove it."""
    from elmo.cli import main

    archive = zip_folder(nlpl_folder(source, tmp_path / "nlpl"), tmp_path / "209.zip")
    load_bilm(archive)
    root = tmp_path / "cache" / "nlpl"
    unpacked = root / file_sha256(archive)
    leftover = root / ".0123456789abcdef.k3j4h5g6.tmp"  # an unpacking killed midway, hours ago
    running = root / ".fedcba9876543210.a1b2c3d4.tmp"  # one under way in another process
    for folder in (leftover, running):
        folder.mkdir()
        (folder / "model.hdf5").write_bytes(b"partial")
    for path in (leftover / "model.hdf5", leftover):
        os.utime(path, (time.time() - 7200, time.time() - 7200))
    mine = root / ("ab" * 32)  # named like a copy, holding a file of the user's
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    partial = root / ("cd" * 32)  # member names, but no weights: not an unpacked copy
    partial.mkdir()
    (partial / "README").write_text("mine too")
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert str(unpacked) in out and "1 unpacked NLPL zip(s)" in out
    assert main(["cache", "clear"]) == 0
    assert "removed 2 unpacked NLPL zip(s)" in capsys.readouterr().out
    assert sorted(p.name for p in root.iterdir()) == sorted([mine.name, partial.name, running.name])
    assert (mine / "notes.txt").read_text() == "mine"
    assert archive.exists()
    assert_same(load_bilm(archive), source)  # unpacked again


def test_an_unpacked_copy_cut_short_is_unpacked_again(source, tmp_path):
    """A model.hdf5 of the unpacked copy cut short failed every later load ("download it again", which gives the
    same zip, hence the same broken folder): the copy is checked against the zip's sizes and unpacked again. A user's
    file put into the folder keeps it from being deleted: one line naming the folder."""
    archive = zip_folder(nlpl_folder(source, tmp_path / "nlpl"), tmp_path / "209.zip")
    load_bilm(archive)
    unpacked = tmp_path / "cache" / "nlpl" / file_sha256(archive)
    size = (unpacked / nlpl.WEIGHTS_NAME).stat().st_size
    with open(unpacked / nlpl.WEIGHTS_NAME, "r+b") as f:
        f.truncate(size // 2)
    assert_same(load_bilm(archive), source)
    assert (unpacked / nlpl.WEIGHTS_NAME).stat().st_size == size
    (unpacked / "my_notes.txt").write_text("mine")
    (unpacked / nlpl.VOCAB_NAME).unlink()
    with pytest.raises(ElmoError, match="no longer matches it and holds other things") as err:
        load_bilm(archive)
    assert str(unpacked) in str(err.value) and (unpacked / "my_notes.txt").read_text() == "mine"


def test_an_unpacking_killed_midway_is_cleared_by_the_next(source, tmp_path):
    """An unpacking killed by SIGKILL left its temporary folder (up to the whole model) for ever: the next unpacking
    of the same zip removes it once it is an hour old; a folder of a similar name of the user's stays."""
    import os
    import time

    archive = zip_folder(nlpl_folder(source, tmp_path / "nlpl"), tmp_path / "209.zip")
    root = tmp_path / "cache" / "nlpl"
    root.mkdir(parents=True)
    prefix = f".{file_sha256(archive)[:16]}."
    stale, mine = root / f"{prefix}abcd1234.tmp", root / f"{prefix}my-files.tmp"
    for folder in (stale, mine):
        folder.mkdir()
        (folder / nlpl.WEIGHTS_NAME).write_bytes(b"half")
        hour_ago = time.time() - 3700
        for path in (folder / nlpl.WEIGHTS_NAME, folder):
            os.utime(path, (hour_ago, hour_ago))
    assert_same(load_bilm(archive), source)
    assert not stale.exists() and (mine / nlpl.WEIGHTS_NAME).read_bytes() == b"half"


def test_nlpl_zip_with_a_top_folder(source, tmp_path):
    folder = nlpl_folder(source, tmp_path / "nlpl")
    with zipfile.ZipFile(tmp_path / "m.zip", "w") as z:
        for path in sorted(folder.iterdir()):
            z.write(path, f"model_42/{path.name}")
    assert_same(load_bilm(tmp_path / "m.zip"), source)


# ---- refusals -----------------------------------------------------------------------------------------------------

def _set_recorded_size(archive: Path, member: str, size: int) -> None:
    """Rewrite the uncompressed size the zip records for ``member`` (local header and central directory)."""
    data = bytearray(archive.read_bytes())
    name = member.encode()
    for signature, offset, name_at in ((b"PK\x03\x04", 22, 30), (b"PK\x01\x02", 24, 46)):
        start = 0
        while (start := data.find(signature, start)) >= 0:
            if data[start + name_at : start + name_at + len(name)] == name:
                data[start + offset : start + offset + 4] = size.to_bytes(4, "little")
            start += 4
    archive.write_bytes(bytes(data))


def test_a_zip_bomb_is_refused_before_anything_is_written(source, tmp_path):
    archive = zip_folder(nlpl_folder(source, tmp_path / "nlpl"), tmp_path / "bomb.zip")
    _set_recorded_size(archive, "model.hdf5", 0xFFFF0000)  # claims 4 GB from a few kB
    with pytest.raises(ModelFileError) as err:
        load_bilm(archive)
    assert "claims 4,294,901,760 bytes" in one_line(err) and "zip bomb" in str(err.value)
    assert not (tmp_path / "cache" / "nlpl").exists() or not any((tmp_path / "cache" / "nlpl").iterdir())


def test_a_zip_member_longer_than_recorded_is_refused_and_nothing_kept(source, tmp_path):
    archive = zip_folder(nlpl_folder(source, tmp_path / "nlpl"), tmp_path / "lies.zip")
    _set_recorded_size(archive, "model.hdf5", 1000)
    with pytest.raises(ModelFileError) as err:
        load_bilm(archive)
    assert "damaged" in one_line(err)
    assert not any((tmp_path / "cache" / "nlpl").iterdir())


def test_a_zip_whose_weights_are_not_hdf5_names_the_zip_and_keeps_nothing(source, tmp_path):
    """The error named the unpacked copy in the cache (which stayed there, and `cache clear` left it)."""
    folder = nlpl_folder(source, tmp_path / "nlpl")
    (folder / "model.hdf5").write_text("not hdf5 at all")
    archive = zip_folder(folder, tmp_path / "bad.zip")
    with pytest.raises(ModelFileError) as err:
        load_bilm(archive)
    assert one_line(err).startswith(f"{archive}: its model.hdf5 is not HDF5 weights") and "download it" in str(err.value)
    assert not any((tmp_path / "cache" / "nlpl").iterdir())


def test_a_zip_without_the_nlpl_files(tmp_path):
    with zipfile.ZipFile(tmp_path / "x.zip", "w") as z:
        z.writestr("corpus.txt", "a b c\n")
    with pytest.raises(ModelFileError) as err:
        load_bilm(tmp_path / "x.zip")
    assert "no options.json (it holds corpus.txt)" in one_line(err)


def test_swapped_options_and_weights(source, tmp_path):
    folder = official_folder(source, tmp_path / "pair")
    with pytest.raises(UsageError) as err:
        load_bilm(options=folder / "weights.hdf5", weights=folder / "options.json")
    assert one_line(err).startswith("options and weights look swapped")


def test_a_folder_as_weights_or_options(source, tmp_path):
    folder = official_folder(source, tmp_path / "pair")
    with pytest.raises(UsageError) as err:
        load_bilm(options=folder / "options.json", weights=folder)
    assert "is a folder, where the weights file (weights .hdf5) is expected" in one_line(err)
    with pytest.raises(UsageError) as err:
        load_bilm(options=folder, weights=folder / "weights.hdf5")
    assert "is a folder, where the options file (options.json) is expected" in one_line(err)


def test_a_safetensors_or_zip_or_json_file_as_weights_says_what_it_is(source, tmp_path):
    options = official_folder(source, tmp_path / "pair") / "options.json"
    ours = save_model(source, tmp_path / "ours")
    archive = zip_folder(nlpl_folder(source, tmp_path / "nlpl"), tmp_path / "m.zip")
    for wrong, said in ((ours / "model.safetensors", "not an HDF5 weight file but a safetensors file"),
                        (archive, "not an HDF5 weight file but a zip archive"),
                        (ours / "config.json", "not an HDF5 weight file but JSON text")):
        with pytest.raises(WeightFileError) as err:
            load_bilm(options=options, weights=wrong)
        assert said in one_line(err) and "truncated" not in str(err.value)


def test_an_hdf5_file_without_weights(source, tmp_path):
    options = official_folder(source, tmp_path / "pair") / "options.json"
    with h5py.File(tmp_path / "lm_embeddings_0.hdf5", "w") as f:
        for i in range(5):
            f.create_dataset(str(i), data=np.zeros((3, 4, 16), np.float32))
    with pytest.raises(WeightFileError) as err:
        load_bilm(options=options, weights=tmp_path / "lm_embeddings_0.hdf5")
    assert "an HDF5 file without bilm-tf weights (it holds 5 entries: '0', '1', '2', ...;" in one_line(err)


def test_a_truncated_weight_file_says_so_in_plain_words(source, tmp_path):
    folder = official_folder(source, tmp_path / "pair")
    data = (folder / "weights.hdf5").read_bytes()
    (folder / "weights.hdf5").write_bytes(data[:3000])
    with pytest.raises(WeightFileError) as err:
        load_bilm(folder)
    assert f"not a readable HDF5 file: truncated (3,000 of {len(data):,} bytes)" in one_line(err)
    assert "sblock" not in str(err.value)


def test_a_folder_with_no_layout_lists_what_was_looked_for(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hello", encoding="utf-8")
    with pytest.raises(ModelFileError) as err:
        load_bilm(tmp_path / "empty")
    message = one_line(err)
    assert "not a model directory; looked for config.json + model.safetensors" in message
    assert "options.json + model.hdf5 (NLPL)" in message


def test_options_without_weights_and_weights_without_options(source, tmp_path):
    folder = official_folder(source, tmp_path / "pair")
    (folder / "weights.hdf5").rename(tmp_path / "elsewhere.hdf5")
    with h5py.File(folder / "lm_embeddings_0.hdf5", "w") as f:
        f.create_dataset("0", data=np.zeros((1, 2, 16), np.float32))
    with pytest.raises(WeightFileError) as err:
        load_bilm(folder)
    assert "options.json but no weight file beside it (lm_embeddings_0.hdf5: no bilm-tf weights" in one_line(err)
    (folder / "options.json").unlink()
    shutil.move(tmp_path / "elsewhere.hdf5", folder / "weights.hdf5")
    with pytest.raises(ModelFileError) as err:
        load_bilm(folder)
    assert "weights.hdf5 but no options file beside it" in one_line(err)


def test_several_official_pairs_are_listed(source, tmp_path):
    folder = official_folder(source, tmp_path / "two", f"{S3}_options.json", f"{S3}_weights.hdf5")
    other = official_folder(source, tmp_path / "other", "elmo_small_options.json", "elmo_small_weights.hdf5")
    for path in other.iterdir():
        shutil.move(path, folder / path.name)
    with pytest.raises(UsageError) as err:
        load_bilm(folder)
    assert (f"holds 2 models ({S3}_options.json + {S3}_weights.hdf5, elmo_small_options.json + "
            f"elmo_small_weights.hdf5); give one pair" in one_line(err))


def test_a_model_file_instead_of_its_folder(source, tmp_path):
    ours = save_model(source, tmp_path / "ours")
    with pytest.raises(ModelFileError) as err:
        load_bilm(ours / "model.safetensors")
    assert "a safetensors file, where a model folder, an NLPL .zip or a model name is expected" in one_line(err)


def test_an_unknown_model_name_suggests_the_closest(tmp_path, monkeypatch):
    from elmo import pretrained

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as err:
        load_bilm("originl")
    message = one_line(err)
    assert message.startswith("unknown model name 'originl'")
    assert f"choose one of {', '.join(pretrained.known_names())} (did you mean 'original'?), or give a path" in message
    with pytest.raises(UsageError, match="did you mean 'original'"):
        pretrained.resolve("originl")
    with pytest.raises(ModelFileError, match="no such file or folder"):
        load_bilm("./originl")


def test_char_ids_beyond_the_table_are_a_usage_error(source):
    ids = batch_to_ids([["a", "b"]])
    ids[0, 1, 2] = 262
    with pytest.raises(UsageError) as err:
        source(ids)
    assert one_line(err).startswith("character id 262 is out of range: this model takes ids 0..261")
    with pytest.raises(UsageError, match="character id 300 is out of range"):
        Elmo(source, dropout=0.0)(ids + 38)
    ids[0, 1, 2] = -1
    with pytest.raises(UsageError, match="character id -1 is out of range"):
        source(ids)


def test_cache_clear_follows_a_linked_nlpl_folder_and_names_a_file_in_its_place(source, tmp_path, capsys):
    """A linked `nlpl` folder was unpacked into, but listed as empty and never cleared; a file in its place was
    listed as 0 copies, exit 0 (the converted half of the cache already did both right)."""
    from elmo.cli import main

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "nlpl").symlink_to(elsewhere, target_is_directory=True)
    archive = zip_folder(nlpl_folder(source, tmp_path / "nlpl"), tmp_path / "209.zip")
    load_bilm(archive)
    assert main(["cache", "list"]) == 0 and "1 unpacked NLPL zip(s)" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0 and "removed 1 unpacked NLPL zip(s)" in capsys.readouterr().out
    assert list(elsewhere.iterdir()) == [] and (tmp_path / "cache" / "nlpl").is_symlink()
    (tmp_path / "cache" / "nlpl").unlink()
    (tmp_path / "cache" / "nlpl").write_text("a file of the user's")
    assert main(["cache", "list"]) == 1
    assert "nlpl: a file, where elmo keeps the NLPL zips it unpacks" in capsys.readouterr().err
    assert (tmp_path / "cache" / "nlpl").read_text() == "a file of the user's"
