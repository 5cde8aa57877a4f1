"""The table of bad inputs (docs/reliability.md): each gives a correct result or one clear error line."""

import json
import os

import h5py
import numpy as np
import pytest

from elmo.cli import main
from elmo.data.chars import word_to_char_ids
from tests.conftest import OPTIONS, WEIGHTS

MODEL = ["--options", str(OPTIONS), "--weights", str(WEIGHTS)]


def _embed(tmp_path, data: bytes, *flags):
    (tmp_path / "in.txt").write_bytes(data)
    rc = main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--top", "--quiet", *MODEL, *flags])
    if rc != 0:
        return rc, None
    with h5py.File(tmp_path / "out.hdf5") as f:
        return rc, {k: f[k][()] for k in f.keys()}


def test_empty_file(tmp_path):
    rc, out = _embed(tmp_path, b"")
    assert rc == 0 and json.loads(out["sentence_to_index"][0]) == {}


def test_blank_and_whitespace_only_lines(tmp_path):
    rc, out = _embed(tmp_path, b"\n   \n\t\na b\n")
    assert rc == 0 and [out[k].shape for k in "0123"] == [(0, 32), (0, 32), (0, 32), (2, 32)]


def test_a_10000_token_line(tmp_path):
    line = " ".join(f"w{i % 300}" for i in range(10_000))
    rc, out = _embed(tmp_path, (line + "\nshort one\n").encode())
    assert rc == 0 and out["0"].shape == (10_000, 32) and np.isfinite(out["0"]).all()


def test_tokens_longer_than_48_bytes_are_cut(tmp_path):
    long_word = "x" * 60
    assert word_to_char_ids(long_word) == word_to_char_ids("x" * 48)
    rc, out = _embed(tmp_path, f"{long_word} y\n{'x' * 48} y\n".encode())
    assert rc == 0 and np.allclose(out["0"], out["1"], atol=1e-6)


def test_invalid_utf8_strict_names_the_line_and_replace_goes_on(tmp_path, capsys):
    rc, _ = _embed(tmp_path, b"fine\nbad \xc3\x28 here\n")
    err = capsys.readouterr().err
    assert rc == 1 and "line 2: invalid UTF-8" in err and "--errors replace" in err
    rc, out = _embed(tmp_path, b"fine\nbad \xc3\x28 here\n", "--errors", "replace")
    assert rc == 0 and out["1"].shape == (3, 32)


def test_nul_and_control_characters(tmp_path):
    rc, out = _embed(tmp_path, b"a\x00b c\x07d \x1b[31m\n")
    assert rc == 0 and out["0"].shape == (3, 32) and np.isfinite(out["0"]).all()


def test_crlf_lines_equal_lf_lines(tmp_path):
    _, crlf = _embed(tmp_path, b"the bank .\r\nA river\r\n")
    _, lf = _embed(tmp_path, b"the bank .\nA river\n")
    assert all(np.array_equal(crlf[k], lf[k]) for k in ("0", "1"))
    assert json.loads(crlf["sentence_to_index"][0]) == {"the bank .": "0", "A river": "1"}


def test_mixed_scripts_emoji_korean_combining_marks(tmp_path):
    rc, out = _embed(tmp_path, "Ünïcödé 은행 😀👍🏽 e\u0301 Ω ру́сский ١٢٣\n".encode())
    assert rc == 0 and out["0"].shape == (7, 32) and np.isfinite(out["0"]).all()


def test_duplicate_sentences_map_to_the_last_line(tmp_path):
    rc, out = _embed(tmp_path, b"same\nother\nsame\n")
    assert json.loads(out["sentence_to_index"][0]) == {"same": "2", "other": "1"}
    assert np.allclose(out["0"], out["2"], atol=1e-6)
    rc, _ = _embed(tmp_path, b"same\nsame\n", "--use-sentence-keys")
    assert rc == 1


def test_a_sentence_with_a_slash(tmp_path, capsys):
    rc, out = _embed(tmp_path, b"and/or 1/2\n")
    assert rc == 0 and out["0"].shape == (2, 32)
    rc, _ = _embed(tmp_path, b"and/or 1/2\n", "--use-sentence-keys")
    assert rc == 1 and "holding '/'" in capsys.readouterr().err
    rc, _ = _embed(tmp_path, b"a\x00b\n", "--use-sentence-keys")
    assert rc == 1 and "line 1" in capsys.readouterr().err


@pytest.mark.parametrize("change,message", [
    (lambda o: o["lstm"].pop("dim"), "missing key lstm.dim"),
    (lambda o: o["char_cnn"].update(filters="wide"), "char_cnn.filters must be list"),
    (lambda o: o.update(lstm=[]), "lstm must be an object"),
])
def test_options_with_wrong_types_or_missing_keys(tmp_path, capsys, change, message):
    options = json.loads(OPTIONS.read_text())
    change(options)
    (tmp_path / "options.json").write_text(json.dumps(options))
    assert main(["info", "--options", str(tmp_path / "options.json"), "--weights", str(WEIGHTS)]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_options_not_json(tmp_path, capsys):
    (tmp_path / "options.json").write_text("{lstm: 1")
    assert main(["info", "--options", str(tmp_path / "options.json"), "--weights", str(WEIGHTS)]) == 1
    assert "not valid JSON (line 1" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_damaged_hdf5_and_safetensors(tmp_path, capsys, damage):
    assert main(["convert", *MODEL, str(tmp_path / "ours"), "--to", "ours"]) == 0
    weights = tmp_path / "w.hdf5"
    safetensors = tmp_path / "ours" / "model.safetensors"
    for path, original in ((weights, WEIGHTS.read_bytes()), (safetensors, safetensors.read_bytes())):
        data = {"truncate": original[: len(original) // 3], "garbage": b"\x89HDF\r\n" + bytes(range(256)) * 10,
                "empty": b""}[damage]
        path.write_bytes(data)
    capsys.readouterr()
    assert main(["info", "--options", str(OPTIONS), "--weights", str(weights)]) == 1
    assert main(["info", "--model", str(tmp_path / "ours")]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all("error:" in line for line in lines)


def test_vocabulary_with_duplicates(tmp_path, capsys):
    (tmp_path / "v.txt").write_text("<S>\n</S>\n<UNK>\na\nb\na\n")
    (tmp_path / "t.txt").write_text("a b\n")
    assert main(["train", str(tmp_path / "t.txt"), "--vocab", str(tmp_path / "v.txt"), "--out", str(tmp_path / "r")]) == 1
    assert "line 6: 'a' repeats line 4" in capsys.readouterr().err


def test_non_finite_weights_are_refused_in_both_formats(tmp_path):
    """Official hdf5 and our safetensors: a NaN or inf anywhere is one error naming the tensor."""
    import shutil

    import h5py
    import numpy as np
    import torch
    from safetensors.torch import load_file, save_file

    from elmo.io.native import ModelFileError, load_model, save_model
    from elmo.io.official import WeightFileError, load_official
    from tests.conftest import OPTIONS, WEIGHTS

    poisoned = tmp_path / "w.hdf5"
    shutil.copy(WEIGHTS, poisoned)
    with h5py.File(poisoned, "r+") as f:
        data = f["CNN_proj/b_proj"][()]
        data[0] = np.inf
        f["CNN_proj/b_proj"][...] = data
    with pytest.raises(WeightFileError, match="CNN_proj/b_proj"):
        load_official(OPTIONS, poisoned)
    folder = save_model(load_official(OPTIONS, WEIGHTS), tmp_path / "ours")
    state = load_file(str(folder / "model.safetensors"))
    name = sorted(state)[0]
    state[name] = torch.full_like(state[name], float("nan"))
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(ModelFileError, match="NaN"):
        load_model(folder)


def test_a_byte_order_mark_is_not_part_of_the_first_sentence(tmp_path):
    _, plain = _embed(tmp_path, "the bank .\nA river\n".encode())
    _, marked = _embed(tmp_path, "\ufeffthe bank .\nA river\n".encode())
    assert all(np.array_equal(plain[k], marked[k]) for k in ("0", "1"))
    assert json.loads(marked["sentence_to_index"][0]) == {"the bank .": "0", "A river": "1"}


def test_input_that_is_not_a_regular_file_gets_one_line(tmp_path, capsys):
    """A folder was called "not a regular file (a pipe or device?)"."""
    rc = main(["embed", str(tmp_path), str(tmp_path / "out.hdf5"), "--top", "--quiet", *MODEL])
    assert rc == 1 and "is a folder; give a text file" in capsys.readouterr().err
    os.mkfifo(tmp_path / "pipe")
    rc = main(["embed", str(tmp_path / "pipe"), str(tmp_path / "out.hdf5"), "--top", "--quiet", *MODEL])
    assert rc == 1 and "not a regular file" in capsys.readouterr().err


@pytest.mark.parametrize("device,message", [("gpu", "not a device name"), ("cuda:7", "CUDA"), ("mps", "MPS")])
def test_a_device_this_machine_lacks_gets_one_line(tmp_path, capsys, device, message):
    import torch

    if (device.startswith("cuda") and torch.cuda.device_count() > 7) or (
            device == "mps" and torch.backends.mps.is_available()):
        pytest.skip("this machine has that device")
    rc, _ = _embed(tmp_path, b"a b\n", "--device", device)
    err = capsys.readouterr().err
    assert rc == (2 if device == "gpu" else 1) and message in err and "Traceback" not in err  # 2: a usage error


def test_a_gzipped_input_is_read_like_the_plain_file(tmp_path):
    import gzip

    _, plain = _embed(tmp_path, b"the bank .\nA river\n")
    (tmp_path / "in.txt.gz").write_bytes(gzip.compress(b"the bank .\nA river\n"))
    assert main(["embed", str(tmp_path / "in.txt.gz"), str(tmp_path / "gz.hdf5"), "--top", "--quiet", *MODEL]) == 0
    with h5py.File(tmp_path / "gz.hdf5") as f:
        assert all(np.array_equal(plain[k], f[k][()]) for k in ("0", "1"))


def test_the_output_may_not_be_the_input_or_a_folder(tmp_path, capsys):
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    (tmp_path / "link.txt").symlink_to(tmp_path / "in.txt")
    for output, message, code in ((tmp_path / "in.txt", "would overwrite its own input", 2),
                                  (tmp_path / "link.txt", "would overwrite its own input", 2),
                                  (tmp_path, "is a folder", 2)):  # 2, as for "folder/": the command line
        rc = main(["embed", str(tmp_path / "in.txt"), str(output), "--top", "--quiet", *MODEL])
        assert rc == code and message in capsys.readouterr().err
    assert (tmp_path / "in.txt").read_text(encoding="utf-8") == "a b\n"


@pytest.mark.parametrize("command", [["vocab", "build", "{f}", "-o", "{d}/v.txt"], ["probe", "word2vec", "{f}", "--out", "{d}/w.txt"]])
def test_invalid_utf8_far_into_a_corpus_names_its_own_line(tmp_path, capsys, command):
    """Text-mode readers decode kilobytes ahead and used to blame line 1."""
    text = b"".join(b"fine line number %d\n" % i for i in range(1, 3000)) + b"bad \xff here\n"
    (tmp_path / "c.txt").write_bytes(text)
    rc = main([a.format(f=tmp_path / "c.txt", d=tmp_path) for a in command])
    err = capsys.readouterr().err
    assert rc == 1 and "line 3000" in err and len(err.strip().splitlines()) == 1, err


def test_carriage_returns_inside_lines_are_refused_not_merged(tmp_path, capsys):
    """Old Mac line ends: AllenNLP's reader would see three sentences where splitting on \\n sees one."""
    rc, _ = _embed(tmp_path, b"hello world\rfoo bar baz\rlast one\r")
    err = capsys.readouterr().err
    assert rc == 1 and "line 1: a carriage return" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out.hdf5").exists()


def test_npz_sentence_keys_longer_than_a_zip_name_are_refused(tmp_path, capsys):
    long_line = " ".join(f"word{i % 300}" for i in range(12_000))  # ~96 KB
    (tmp_path / "in.txt").write_text(f"short one\n{long_line}\n", encoding="utf-8")
    rc = main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.npz"), "--top", "--quiet", *MODEL,
               "--use-sentence-keys"])
    err = capsys.readouterr().err
    assert rc == 1 and "line 2" in err and ".npz" in err and "Traceback" not in err
    assert not (tmp_path / "out.npz").exists()


def test_a_failed_embed_leaves_no_folders_it_made(tmp_path, capsys):
    (tmp_path / "in.txt").write_bytes(b"fine\nbad \xc3\x28\n")
    out = tmp_path / "new" / "deeper" / "out.hdf5"
    assert main(["embed", str(tmp_path / "in.txt"), str(out), "--top", "--quiet", *MODEL]) == 1
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("value", ["NaN", "Infinity"])
def test_a_non_finite_clip_is_refused(tmp_path, capsys, value):
    options = OPTIONS.read_text().replace('"cell_clip": 3', f'"cell_clip": {value}')
    assert value in options
    (tmp_path / "options.json").write_text(options)
    assert main(["info", "--options", str(tmp_path / "options.json"), "--weights", str(WEIGHTS)]) == 1
    assert "lstm.cell_clip must be a finite number" in capsys.readouterr().err


def test_an_integer_too_long_to_read_is_one_line(tmp_path, capsys):
    options = json.loads(OPTIONS.read_text())
    text = json.dumps(options).replace(f'"dim": {options["lstm"]["dim"]}', '"dim": ' + "9" * 4_401)
    (tmp_path / "options.json").write_text(text)
    assert main(["info", "--options", str(tmp_path / "options.json"), "--weights", str(WEIGHTS)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and "options.json" in err


@pytest.mark.parametrize("content", [b"[train]\nbatch_size = 4\n# caf\xe9\n", b"[train]\nbatch_size = " + b"9" * 4401])
def test_a_training_config_that_cannot_be_read_is_one_line(tmp_path, capsys, content):
    (tmp_path / "bad.toml").write_bytes(content)
    (tmp_path / "t.txt").write_text("a b\n")
    (tmp_path / "v.txt").write_text("<S>\n</S>\n<UNK>\na\nb\n")
    rc = main(["train", str(tmp_path / "t.txt"), "--vocab", str(tmp_path / "v.txt"), "--out", str(tmp_path / "r"),
               "--config", str(tmp_path / "bad.toml")])
    err = capsys.readouterr().err
    assert rc in (1, 2) and "Traceback" not in err and "bad.toml" in err and len(err.strip().splitlines()) == 1


def test_a_users_folder_named_like_a_checkpoint_is_refused_untouched(tmp_path, capsys):
    (tmp_path / "t.txt").write_text("a b a b\n" * 20)
    (tmp_path / "v.txt").write_text("<S>\n</S>\n<UNK>\na\nb\n")
    mine = tmp_path / "run" / "step-00000001"
    mine.mkdir(parents=True)
    (mine / "mine.txt").write_text("notes")
    rc = main(["train", str(tmp_path / "t.txt"), "--vocab", str(tmp_path / "v.txt"), "--out", str(tmp_path / "run"),
               "--config", "tiny", "--max-steps", "1", "--batch-size", "2"])
    err = capsys.readouterr().err
    assert rc in (1, 2) and "step-00000001" in err and "Traceback" not in err
    assert (mine / "mine.txt").read_text() == "notes"


def test_sentence_keys_are_checked_before_any_work(tmp_path, monkeypatch):
    """A duplicate sentence near the end (line 150 of 150) was found only in its chunk, after the chunks before it
    were embedded, and the message said --resume would continue (it failed the same way every time)."""
    import elmo.embed_file as embed_file_module
    from elmo.embed_file import InputFileError, embed_file
    from elmo.io.official import load_official
    from tests.conftest import OPTIONS, WEIGHTS

    lines = [f"sentence number {i}" for i in range(149)] + ["sentence number 3"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setattr(embed_file_module, "_embed_chunk", lambda *a, **k: pytest.fail("embedded before the check"))
    with pytest.raises(InputFileError, match=r"in\.txt, line 150: duplicate sentence"):
        embed_file(load_official(OPTIONS, WEIGHTS), tmp_path / "in.txt", tmp_path / "out.hdf5", use_sentence_keys=True,
                   chunk_size=2, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


@pytest.mark.parametrize("kwargs, fragment", [({"chunk_size": -1}, "chunk_size"), ({"chunk_size": 2.5}, "chunk_size"),
                                              ({"chunk_size": True}, "chunk_size"),
                                              ({"output": "out.npz/"}, "ends with a slash")])
def test_embed_file_arguments_are_checked(tmp_path, kwargs, fragment):
    """chunk_size -1 or 2.5 was islice's ValueError, True a chunk of one line; "out.npz/" wrote a file "out.npz"."""
    from elmo.embed_file import embed_file
    from elmo.errors import UsageError
    from elmo.io.official import load_official
    from tests.conftest import OPTIONS, WEIGHTS

    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    output = f"{tmp_path}/{kwargs.pop('output', 'out.hdf5')}"  # a str: Path() would drop a trailing slash
    with pytest.raises(UsageError, match=fragment):
        embed_file(load_official(OPTIONS, WEIGHTS), tmp_path / "in.txt", output, progress=False, **kwargs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]
