"""Models by name: official ones downloaded once from their URL (a local HTTP server here) and verified; the
names resolve through every entry point (Embedder.from_pretrained, load_bilm, the CLI's --model)."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import replace

import numpy as np
import pytest

from elmo import pretrained
from elmo.cli import main
from elmo.embed import Embedder
from elmo.io.download import DownloadError
from elmo.io.load import load_bilm
from tests.conftest import OPTIONS, WEIGHTS

SENTENCE = "The cryptocurrency bank collapsed ."


@pytest.fixture
def official_small(server, tmp_path, monkeypatch):
    """The registry's "small" entry served from 127.0.0.1 (the fixture model under the official file names)."""
    root, url = server
    entry = pretrained.OFFICIAL["small"]
    folder = root / entry.folder
    folder.mkdir()
    shutil.copy(OPTIONS, folder / f"elmo_{entry.folder}_options.json")
    shutil.copy(WEIGHTS, folder / f"elmo_{entry.folder}_weights.hdf5")
    monkeypatch.setattr(pretrained, "_S3", url)
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ELMO_ALLOW_UNPINNED", raising=False)
    digests = {name: hashlib.sha256(path.read_bytes()).hexdigest()
               for name, path in (("options", OPTIONS), ("weights", WEIGHTS))}
    return entry, folder, digests


def test_official_name_downloads_once_verifies_and_embeds(official_small, monkeypatch, fixture_model):
    entry, served, digests = official_small
    monkeypatch.setitem(pretrained.OFFICIAL, "small", replace(entry, options_sha256=digests["options"],
                                                              weights_sha256=digests["weights"]))
    got = Embedder.from_pretrained("small").embed(SENTENCE)  # (L+1, n, D)
    expected = Embedder(fixture_model).embed(SENTENCE)
    assert np.array_equal(got, expected)
    shutil.rmtree(served)  # the server no longer has it: the verified cache answers
    assert np.array_equal(Embedder.from_pretrained("small").embed(SENTENCE), expected)


def test_a_download_that_does_not_match_its_pin_is_refused(official_small, monkeypatch):
    entry, _, digests = official_small
    monkeypatch.setitem(pretrained.OFFICIAL, "small", replace(entry, options_sha256=digests["options"],
                                                              weights_sha256="0" * 64))
    with pytest.raises(DownloadError, match="does not match the pinned"):
        load_bilm("small")
    assert not list((pretrained.cache_dir() / entry.folder).glob("*.hdf5"))  # nothing unverified kept


def test_unpinned_official_models_need_consent_then_are_pinned_on_first_use(official_small, monkeypatch):
    entry, served, _ = official_small
    with pytest.raises(DownloadError, match="ELMO_ALLOW_UNPINNED=1"):
        load_bilm("small")
    monkeypatch.setenv("ELMO_ALLOW_UNPINNED", "1")
    load_bilm("small")
    monkeypatch.delenv("ELMO_ALLOW_UNPINNED")
    load_bilm("small")  # the recorded hash now verifies the cached files
    weights = pretrained.cache_dir() / entry.folder / f"elmo_{entry.folder}_weights.hdf5"
    weights.write_bytes(b"tampered")
    shutil.rmtree(served)
    with pytest.raises(DownloadError, match="the server answered 404"):
        load_bilm("small")


@pytest.mark.parametrize("which", ["options", "weights"])
def test_a_first_download_that_is_no_model_file_is_not_trusted(official_small, monkeypatch, which):
    """An error page served in place of the file: not kept, no hash recorded, so a later good download is used."""
    entry, served, _ = official_small
    monkeypatch.setenv("ELMO_ALLOW_UNPINNED", "1")
    name = f"elmo_{entry.folder}_{'options.json' if which == 'options' else 'weights.hdf5'}"
    good = (served / name).read_bytes()
    (served / name).write_bytes(b"<!DOCTYPE html><html><body>Service unavailable</body></html>\n")
    with pytest.raises(DownloadError, match=f"the download is an HTML/XML page.*not the model's {which}"):
        load_bilm("small")
    cached = pretrained.cache_dir() / entry.folder
    assert not (cached / name).exists() and not (cached / (name + ".sha256")).exists()
    (served / name).write_bytes(good)  # the server is fixed: the next use downloads and trusts the real file
    load_bilm("small")
    assert (cached / (name + ".sha256")).is_file()


def _other_models_weights(path):
    from elmo.io.official import export_official
    from tests.conftest import random_bilm, small_config
    _, weights = export_official(random_bilm(small_config(dim=12)), path.parent / "other")
    shutil.copy(weights, path)


def _one_nan(path):
    import h5py
    with h5py.File(path, "r+") as f:
        data = f["char_embed"]
        values = data[()]
        values[1, 0] = np.nan
        data[...] = values


@pytest.mark.parametrize("spoil", [_other_models_weights, _one_nan])
def test_a_first_download_that_does_not_load_with_its_options_is_not_trusted(official_small, monkeypatch, spoil):
    """Weights of another model (or holding a NaN) were trusted on first use, their hash recorded: every later use
    failed "check that the two files belong together", even once the server had the right file."""
    entry, served, _ = official_small
    monkeypatch.setenv("ELMO_ALLOW_UNPINNED", "1")
    name = f"elmo_{entry.folder}_weights.hdf5"
    good = (served / name).read_bytes()
    spoil(served / name)
    with pytest.raises(DownloadError, match="the download does not load with its options.*nothing was kept"):
        load_bilm("small")
    cached = pretrained.cache_dir() / entry.folder
    assert not list(cached.glob("*.sha256")) and not (cached / name).exists()
    (served / name).write_bytes(good)  # the server is fixed: the next use downloads and trusts the real pair
    load_bilm("small")
    assert len(list(cached.glob("*.sha256"))) == 2


def test_a_failed_first_download_leaves_no_empty_folder(official_small, monkeypatch):
    entry, served, _ = official_small
    monkeypatch.setenv("ELMO_ALLOW_UNPINNED", "1")
    (served / f"elmo_{entry.folder}_options.json").write_text("<!DOCTYPE html><html></html>\n")
    with pytest.raises(DownloadError, match="the download is an HTML/XML page"):
        load_bilm("small")
    assert not (pretrained.cache_dir() / entry.folder).exists()


def test_offline_the_cli_says_how_to_pass_local_files(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(pretrained, "_S3", "http://127.0.0.1:9")  # nothing listens on port 9
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path))
    monkeypatch.setitem(pretrained.OFFICIAL, "medium", replace(pretrained.OFFICIAL["medium"],
                                                               options_sha256="a" * 64, weights_sha256="b" * 64))
    assert main(["show", "a b", "--model", "medium"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--options/--weights" in err


def test_unknown_names_and_missing_paths_are_one_clear_error(capsys):
    assert main(["show", "a b", "--model", "no-such-model"]) == 1
    assert "not a model directory" in capsys.readouterr().err


def test_a_local_folder_named_like_a_model_wins(tmp_path, monkeypatch):
    folder = tmp_path / "small"
    folder.mkdir()
    shutil.copy(OPTIONS, folder / "options.json")
    shutil.copy(WEIGHTS, folder / "weights.hdf5")
    monkeypatch.chdir(tmp_path)
    assert load_bilm("small").config.lstm.dim == 64  # the local folder, no download attempted


def test_a_local_folder_named_en_does_not_replace_the_default_model(tmp_path, monkeypatch, capsys):
    """With no model given the shipped default loads, whatever folders the working directory holds; naming the
    shadowed model explicitly says what shadows it."""
    from elmo.embed import Embedder

    (tmp_path / "en").mkdir()  # e.g. a project's English data folder
    monkeypatch.chdir(tmp_path)
    default = Embedder.from_pretrained()
    assert default.bilm.config.lstm.dim == load_bilm(pretrained.SHIPPED_DIR / "en").config.lstm.dim
    assert default.tokenize(["Don't stop."])[0] == ["Do", "n't", "stop", "."]  # the shipped model's tokenizer
    assert main(["show", "a b", "--model", "en"]) == 1
    assert "shadows the model name 'en'" in capsys.readouterr().err
