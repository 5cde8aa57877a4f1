"""Official weights converted once into our format in the cache: the same vectors to the last bit, a new copy when a
file changes, nothing lost when the cache cannot be written, and `elmo cache clear` removes only its copies."""

import logging

import pytest
import torch

from elmo.cli import main
from elmo.data.chars import batch_to_ids
from elmo.io import converted, official
from elmo.io.load import load_bilm
from elmo.io.official import export_official
from elmo.model.engine import InferenceEngine
from tests.conftest import random_bilm, small_config

SENTENCES = [["The", "bank", "closed", "."], ["A", "river", "bank"]]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ELMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ELMO_CONVERT_CACHE", raising=False)
    return tmp_path / "cache" / "converted"


def _pair(folder, seed=3, tokenizer="en"):
    model = random_bilm(small_config(), seed=seed)
    model.tokenizer_name = tokenizer
    return export_official(model, folder)


def _layers(bilm):
    return InferenceEngine.build(bilm)(batch_to_ids(SENTENCES)).layers


def test_the_second_load_reads_the_converted_copy_with_the_same_vectors(cache, tmp_path, monkeypatch):
    options, weights = _pair(tmp_path / "official")
    first = load_bilm(options=options, weights=weights)
    copies = [p for p in cache.iterdir() if converted.is_key(p.name)]
    assert len(copies) == 1 and {p.name for p in copies[0].iterdir()} == {"config.json", "model.safetensors"}
    monkeypatch.setattr(official, "read_official_state", lambda *a, **k: pytest.fail("read the HDF5 again"))
    second = load_bilm(options=options, weights=weights)
    assert second.tokenizer_name == first.tokenizer_name == "en" and second.config == first.config
    assert all(torch.equal(a, b) for a, b in zip(_layers(first), _layers(second)))
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_a_changed_weight_file_is_converted_again(cache, tmp_path):
    options, weights = _pair(tmp_path / "official", seed=3)
    before = _layers(load_bilm(options=options, weights=weights))
    _pair(tmp_path / "official", seed=4)  # the same names, other weights
    after = load_bilm(options=options, weights=weights)
    assert not torch.equal(before[-1], _layers(after)[-1])
    assert torch.equal(_layers(after)[-1], _layers(official.load_official(options, weights))[-1])
    assert len([p for p in cache.iterdir() if converted.is_key(p.name)]) == 2


@pytest.mark.parametrize("damage", ["truncate", "config"])
def test_a_damaged_copy_is_converted_again(cache, tmp_path, caplog, damage):
    """A converted copy cut short (or its config.json spoiled) made every later load of the official pair fail,
    naming the cache file; the copy is ours, so it is replaced from the user's files, with a warning."""
    options, weights = _pair(tmp_path / "official")
    expected = _layers(load_bilm(options=options, weights=weights))
    (copy,) = [p for p in cache.iterdir() if converted.is_key(p.name)]
    if damage == "truncate":
        with open(copy / "model.safetensors", "r+b") as f:
            f.truncate(1000)
    else:
        (copy / "config.json").write_text("{not json")
    with caplog.at_level(logging.WARNING):
        again = load_bilm(options=options, weights=weights)
    assert "damaged" in caplog.text and "converting the official files again" in caplog.text
    assert all(torch.equal(a, b) for a, b in zip(expected, _layers(again)))
    assert load_bilm(options=options, weights=weights) is not None  # the new copy loads
    assert (copy / "model.safetensors").stat().st_size > 1000 and "{not json" not in (copy / "config.json").read_text()


def test_another_file_with_the_same_size_and_time_is_not_given_the_old_copy(cache, tmp_path):
    """The hash index knew a file by its path, size and mtime: a new file put in place by `cp -p`, `rsync -a` or a
    tar (same size and mtime) got the old model's copy, another model's vectors with exit 0."""
    import os
    import shutil

    options, weights = _pair(tmp_path / "official", seed=3)
    load_bilm(options=options, weights=weights)
    stat = weights.stat()
    other_options, other = _pair(tmp_path / "other", seed=4)  # same shapes: the same size
    assert other.stat().st_size == stat.st_size
    shutil.copyfile(other, weights)
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as `cp -p` keeps it
    got = _layers(load_bilm(options=options, weights=weights))
    assert torch.equal(got[-1], _layers(official.load_official(other_options, other))[-1])


def test_a_file_replaced_while_it_is_read_leaves_no_copy_under_the_new_key(cache, tmp_path, monkeypatch):
    """store() took the key again after reading: a file replaced between the two filed the old model's copy under
    the new file's key, given to every later load (exit 0)."""
    import shutil

    import elmo.io.load as load_module

    options, weights = _pair(tmp_path / "official", seed=3)
    _, other = _pair(tmp_path / "other", seed=4)
    original = load_module.load_official

    def read_then_replace(*args, **kwargs):
        model = original(*args, **kwargs)
        shutil.copyfile(other, weights)  # another writer, just after the read
        return model

    monkeypatch.setattr(load_module, "load_official", read_then_replace)
    load_bilm(options=options, weights=weights)
    monkeypatch.setattr(load_module, "load_official", original)
    assert not cache.exists() or not any(converted.is_key(p.name) for p in cache.iterdir())
    got = _layers(load_bilm(options=options, weights=weights))  # now converted from the new file
    assert torch.equal(got[-1], _layers(official.load_official(options, other))[-1])


def test_cache_clear_removes_only_its_own_unfinished_copies_and_says_so(cache, tmp_path, capsys):
    """Any "." + 12 hex digits + "." name holding a config.json was taken for a leftover and deleted, and the
    command said "removed 0"."""
    options, weights = _pair(tmp_path / "official")
    load_bilm(options=options, weights=weights)
    mine = cache / ".0123456789ab.mydata"
    mine.mkdir()
    (mine / "config.json").write_text('{"mine": 1}')
    leftover = cache / ".0123456789ab.k3j4h5g6.tmp"  # store's temporary folder, its process killed
    older = cache / ".0123456789ab.q7w8e9r0"  # the same, as an older elmo named it (no .tmp)
    for folder in (leftover, older):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    assert main(["cache", "clear"]) == 0
    assert "removed 1 converted model(s) and 2 unfinished one(s)" in capsys.readouterr().out
    assert (mine / "config.json").read_text() == '{"mine": 1}' and not leftover.exists() and not older.exists()


def test_a_copy_that_cannot_be_written_for_a_file_size_limit_still_loads(cache, tmp_path, monkeypatch, caplog):
    """safetensors reports a refused write as its own error ("I/O error: File too large (os error 27)"): the first
    load of an official pair under a file size limit was that traceback, where a failed copy costs only speed."""
    from safetensors import SafetensorError

    import elmo.io.native as native

    def refused(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: File too large (os error 27)")

    monkeypatch.setattr(native, "save_file", refused)
    options, weights = _pair(tmp_path / "official")
    with caplog.at_level(logging.WARNING):
        model = load_bilm(options=options, weights=weights)
    assert model.tokenizer_name == "en" and "could not keep a converted copy" in caplog.text


def test_an_unwritable_cache_still_loads(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("ELMO_CACHE", str(blocker))
    options, weights = _pair(tmp_path / "official")
    with caplog.at_level(logging.WARNING):
        model = load_bilm(options=options, weights=weights)
    assert model.tokenizer_name == "en" and "could not keep a converted copy" in caplog.text
    assert blocker.read_text() == "a file where the cache folder would be"


def test_the_cache_can_be_turned_off(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("ELMO_CONVERT_CACHE", "0")
    options, weights = _pair(tmp_path / "official")
    load_bilm(options=options, weights=weights)
    assert not cache.exists() or not any(converted.is_key(p.name) for p in cache.iterdir())


def test_cache_clear_removes_its_copies_and_nothing_else(cache, tmp_path, capsys):
    options, weights = _pair(tmp_path / "official")
    load_bilm(options=options, weights=weights)
    keep = cache / "notes.txt"
    keep.write_text("mine")
    (cache / "my-folder").mkdir()
    empty = cache / ("ab" * 32)  # named like a copy but empty: no copy of ours (they are renamed in whole)
    empty.mkdir()
    assert main(["cache", "list"]) == 0
    assert "1 converted model(s)" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert "removed 1 converted model(s)" in capsys.readouterr().out
    assert sorted(p.name for p in cache.iterdir()) == sorted(["my-folder", "notes.txt", empty.name])
    assert keep.read_text() == "mine"
    assert weights.exists() and options.exists()  # the user's files untouched


def test_cache_clear_keeps_a_key_named_folder_of_the_users_and_links(cache, tmp_path, capsys):
    options, weights = _pair(tmp_path / "official")
    load_bilm(options=options, weights=weights)
    mine = cache / ("ab" * 32)
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "config.json").write_text("theirs")
    (cache / ("cd" * 32)).symlink_to(elsewhere, target_is_directory=True)
    assert main(["cache", "clear"]) == 0
    assert "removed 1 converted model(s)" in capsys.readouterr().out
    assert (mine / "notes.txt").read_text() == "mine" and (elsewhere / "config.json").read_text() == "theirs"
    assert (cache / ("cd" * 32)).is_symlink()


def test_a_copy_cleared_while_it_loads_is_converted_again(cache, tmp_path, monkeypatch):
    """`elmo cache clear` in another process between finding the copy and reading it: the load converts again."""
    import shutil

    import elmo.io.load as load_module

    options, weights = _pair(tmp_path / "pair")
    first = load_bilm(options=options, weights=weights)
    original = load_module.load_model
    monkeypatch.setattr(load_module, "load_model",
                        lambda folder, **k: shutil.rmtree(folder) or original(folder, **k))
    again = load_bilm(options=options, weights=weights)
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values()))


def test_a_copy_this_user_may_not_read_falls_back_to_the_official_files(cache, tmp_path, monkeypatch, caplog):
    """A converted copy another user made (mode 000 to this one) stopped the user's own good files from loading:
    "config.json: Permission denied". The official files are read instead."""
    import errno

    import elmo.io.converted as converted_module
    import elmo.io.load as load_module

    options, weights = _pair(tmp_path / "pair")
    first = load_bilm(options=options, weights=weights)

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", "config.json")

    monkeypatch.setattr(load_module, "load_model", denied)
    monkeypatch.setattr(converted_module, "_holds_only_a_copy", denied)  # nor may it list the folder to remove it
    with caplog.at_level(logging.INFO):
        again = load_bilm(options=options, weights=weights)
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values()))


def test_the_cache_folder_is_expanded_and_absolute(monkeypatch, tmp_path):
    from pathlib import Path

    from elmo.io.download import cache_dir

    monkeypatch.setenv("ELMO_CACHE", "~/elmo-cache-test")
    assert cache_dir() == Path.home() / "elmo-cache-test"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ELMO_CACHE", "relative")
    assert cache_dir() == tmp_path / "relative"


@pytest.mark.parametrize("action", ["list", "clear"])
def test_a_cache_half_this_user_may_not_read_does_not_hide_the_other(cache, tmp_path, monkeypatch, capsys, action):
    """An unreadable unpacked NLPL copy made `cache list` print nothing at all, and `cache clear` delete the converted
    copies without saying so: each half now says what it did, then one line names the path that stopped it."""
    import errno

    from elmo.io import nlpl

    options, weights = _pair(tmp_path / "official")
    load_bilm(options=options, weights=weights)
    blocked = str(cache.parent / "nlpl" / ("ab" * 32))

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", blocked)

    monkeypatch.setattr(nlpl, "clear_unpacked" if action == "clear" else "unpacked_copies", denied)
    assert main(["cache", action]) == 1
    out, err = capsys.readouterr()
    assert ("removed 1 converted model(s)" if action == "clear" else "1 converted model(s)") in out
    last = err.strip().splitlines()[-1]  # (above it: the first load's own log line)
    assert last.startswith("elmo cache: error: ") and f"{blocked}: Permission denied" in last and "ELMO_CACHE" in last
    assert "Traceback" not in err
