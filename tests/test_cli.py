"""The ``elmo`` command line, end to end on the fixture model."""

import json
import subprocess
import sys

import h5py
import numpy as np

from elmo.cli import main
from tests.conftest import OPTIONS, WEIGHTS
from tests.test_conformance import expected_top, interleaved_batches

MODEL = ["--options", str(OPTIONS), "--weights", str(WEIGHTS)]


def test_embed_stateful_batch_3_reproduces_the_fixture(tmp_path, report):
    batches = interleaved_batches()
    lines = [" ".join(sentence) for batch in batches for sentence in batch]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    rc = main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--top", "--stateful",
               "--batch-size", "3", "--quiet", *MODEL])
    assert rc == 0
    worst = 0.0
    with h5py.File(tmp_path / "out.hdf5") as f:
        for i in range(10):
            for k in range(3):
                got = f[str(3 * i + k)][()]
                assert got.dtype == np.float32 and got.shape == expected_top(k, i).shape
                worst = max(worst, float(np.abs(got - expected_top(k, i)).max()))
        index = json.loads(f["sentence_to_index"][0])
    assert index[lines[4]] == "4"
    report("elmo embed --stateful --batch-size 3 vs lm_embeddings: max abs diff", worst)
    assert worst <= 2e-6


def test_embed_all_layers_blank_lines_and_duplicates(tmp_path):
    (tmp_path / "in.txt").write_text("The bank .\n\n  \nA river\nThe bank .\r\n", encoding="utf-8")
    assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--all", "--quiet", *MODEL]) == 0
    with h5py.File(tmp_path / "out.hdf5") as f:
        assert f["0"].shape == (3, 3, 32) and f["1"].shape == (3, 0, 32) and f["2"].shape == (3, 0, 32)
        assert f["3"].shape == (3, 2, 32)
        assert np.allclose(f["0"][()], f["4"][()], atol=1e-5)  # deterministic: same sentence, same vectors
        index = json.loads(f["sentence_to_index"][0])
    assert index == {"The bank .": "4", "": "2", "A river": "3"}


def test_embed_to_npz_holds_what_the_hdf5_holds(tmp_path):
    """An output ending in .npz is a NumPy archive (np.load, no pickle) with the HDF5 file's keys and arrays."""
    (tmp_path / "in.txt").write_text("The bank .\n\nA river\n", encoding="utf-8")
    for name in ("out.hdf5", "out.npz"):
        assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / name), "--all", "--quiet", *MODEL]) == 0
    with h5py.File(tmp_path / "out.hdf5") as f, np.load(tmp_path / "out.npz", allow_pickle=False) as z:
        assert sorted(f.keys()) == ["0", "1", "2", "sentence_to_index"]
        assert sorted(z.files) == ["0", "1", "2", "__meta__", "sentence_to_index"]
        assert json.loads(str(z["__meta__"])) == {k: f.attrs[k] for k in f.attrs}  # the record the HDF5 keeps
        for key in ("0", "1", "2"):
            assert z[key].dtype == np.float32 and np.array_equal(z[key], f[key][()])
        assert json.loads(str(z["sentence_to_index"])) == json.loads(f["sentence_to_index"][0])
    assert not (tmp_path / "out.npz.parts").exists()


def test_embed_average_is_the_layer_mean_and_output_is_atomic(tmp_path):
    (tmp_path / "in.txt").write_text("a b c\nd\n", encoding="utf-8")
    for flag in ("--all", "--average"):
        main(["embed", str(tmp_path / "in.txt"), str(tmp_path / f"{flag[2:]}.hdf5"), flag, "--quiet",
              "--forget-sentences", *MODEL])
    with h5py.File(tmp_path / "all.hdf5") as a, h5py.File(tmp_path / "average.hdf5") as b:
        assert np.allclose(a["0"][()].mean(0), b["0"][()], atol=1e-6)
        assert "sentence_to_index" not in b
    assert not list(tmp_path.glob(".*.tmp"))


def test_embed_takes_allennlp_elmo_spellings(tmp_path, capsys):
    """allennlp elmo's --options-file / --weight-file / --cuda-device (-1: the CPU) work as ours."""
    import torch

    (tmp_path / "in.txt").write_text("The bank .\n", encoding="utf-8")
    assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "a.hdf5"), "--top", "--quiet", *MODEL]) == 0
    assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "b.hdf5"), "--top", "--quiet", "--cuda-device",
                 "-1", "--options-file", str(OPTIONS), "--weight-file", str(WEIGHTS)]) == 0
    with h5py.File(tmp_path / "a.hdf5") as a, h5py.File(tmp_path / "b.hdf5") as b:
        assert np.array_equal(a["0"][()], b["0"][()])
    if not torch.cuda.is_available():
        capsys.readouterr()
        assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "c.hdf5"), "--top", "--quiet",
                     "--cuda-device", "0", *MODEL]) == 1  # the machine's, not the command line's
        assert "cuda" in capsys.readouterr().err.lower()


def test_embed_sentence_keys(tmp_path):
    (tmp_path / "in.txt").write_text("a b\nc d\n", encoding="utf-8")
    main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "o.hdf5"), "--top", "--use-sentence-keys",
          "--quiet", *MODEL])
    with h5py.File(tmp_path / "o.hdf5") as f:
        assert sorted(f.keys()) == ["a b", "c d"]


def test_bad_input_is_one_line_and_no_output(tmp_path, capsys):
    (tmp_path / "in.txt").write_bytes(b"good line\nbad \xff byte\n")
    rc = main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "o.hdf5"), "--top", "--quiet", *MODEL])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and "line 2: invalid UTF-8" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o.hdf5").exists() and not list(tmp_path.glob(".*.tmp"))
    assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "o.hdf5"), "--top", "--quiet",
                 "--errors", "replace", *MODEL]) == 0


def test_missing_model_file_is_one_line(tmp_path, capsys):
    rc = main(["info", "--options", str(OPTIONS), "--weights", str(tmp_path / "nope.hdf5")])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and "no such weight file" in err and len(err.splitlines()) == 1


def test_convert_both_ways_and_info(tmp_path, capsys):
    assert main(["convert", *MODEL, str(tmp_path / "ours"), "--to", "ours"]) == 0
    assert main(["convert", "--model", str(tmp_path / "ours"), str(tmp_path / "official"), "--to", "official"]) == 0
    assert main(["info", "--model", str(tmp_path / "official")]) == 0
    out = capsys.readouterr().out
    assert "105,124 parameters" in out
    (tmp_path / "in.txt").write_text("a b c\n", encoding="utf-8")
    for name, args in (("orig", MODEL), ("ours", ["--model", str(tmp_path / "ours")]),
                       ("official", ["--model", str(tmp_path / "official")])):
        main(["embed", str(tmp_path / "in.txt"), str(tmp_path / f"{name}.hdf5"), "--all", "--quiet", *args])
    with h5py.File(tmp_path / "orig.hdf5") as a, h5py.File(tmp_path / "ours.hdf5") as b, \
            h5py.File(tmp_path / "official.hdf5") as c:
        assert np.array_equal(a["0"][()], b["0"][()]) and np.array_equal(a["0"][()], c["0"][()])


def test_show_through_the_entry_point():
    result = subprocess.run([sys.executable, "-m", "elmo", "show", "The bank was closed .", *MODEL],
                            capture_output=True, text=True, check=True)
    assert result.stdout.startswith("5 tokens, 3 layers of 32 dimensions")
    assert "bank" in result.stdout


def test_show_refuses_a_sentence_without_words(capsys):
    assert main(["show", "  ", *MODEL]) == 2
    assert "holds no words" in capsys.readouterr().err


def test_model_and_options_together_is_refused(capsys):
    assert main(["info", "--model", "x", *MODEL]) == 2
    assert "not both" in capsys.readouterr().err


def test_embed_with_a_token_cache_gives_the_same_vectors(tmp_path):
    (tmp_path / "in.txt").write_text("The bank .\nA river bank\n", encoding="utf-8")
    (tmp_path / "vocab.txt").write_text("The\nbank\n", encoding="utf-8")  # a plain word list will do
    main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "a.hdf5"), "--all", "--quiet", *MODEL])
    main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "b.hdf5"), "--all", "--quiet", "--cache-vocab",
          str(tmp_path / "vocab.txt"), *MODEL])
    with h5py.File(tmp_path / "a.hdf5") as a, h5py.File(tmp_path / "b.hdf5") as b:
        for key in ("0", "1"):
            assert np.allclose(a[key][()], b[key][()], atol=1e-6)


def test_show_says_how_many_dimensions_it_prints(capsys):
    """--dims beyond the vector's width prints the whole vector, and the header says so (not "first 1000 dims")."""
    assert main(["show", "a b", "--dims", "1000", *MODEL]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].endswith("top layer, all dims") and len(out[2].split()) == 1 + 3 + 32
    assert main(["show", "a b", "--dims", "2", *MODEL]) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith("top layer, first 2 dims")


def test_show_pads_wide_characters_by_the_columns_they_take():
    from elmo.cli.embed import _fit_columns

    assert _fit_columns("그녀는", 8) == "그녀는  " and _fit_columns("bank", 6) == "bank  "
    # a cut token ends in a mark, so that it is not taken for a token the tokenizer made
    assert _fit_columns("인출하기위해서", 5) == "인출…" and _fit_columns("x" * 20, 15) == "x" * 14 + "…"
    assert _fit_columns("인출하기위해서", 6) == "인출… " and _fit_columns("x" * 15, 15) == "x" * 15


def test_counts_below_one_are_refused_by_the_parser(tmp_path, capsys):
    (tmp_path / "c.txt").write_text("a b c\n", encoding="utf-8")
    assert main(["vocab", "build", str(tmp_path / "c.txt"), "-o", str(tmp_path / "v.txt"), "--min-count", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err
    assert main(["vocab", "build", str(tmp_path / "c.txt"), "-o", str(tmp_path / "v.txt"), "--max-size", "3"]) == 2
    assert "no room for words" in capsys.readouterr().err


def test_convert_into_the_folder_of_the_pair_it_reads_is_refused(tmp_path, capsys):
    """A second options.json + weights.hdf5 beside the pair read left the folder two models (loading it by name
    then failed as ambiguous)."""
    import shutil

    shutil.copy(OPTIONS, tmp_path / "elmo_options.json")
    shutil.copy(WEIGHTS, tmp_path / "elmo_weights.hdf5")
    for to in ("official", "ours"):  # ours: config.json + model.safetensors beside the pair, also two models
        assert main(["convert", "--options", str(tmp_path / "elmo_options.json"), "--weights",
                     str(tmp_path / "elmo_weights.hdf5"), "--to", to, str(tmp_path)]) == 2
        err = capsys.readouterr().err  # the message named options.json, which --to ours does not write
        assert "holds the model being converted" in err and "second model" in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["elmo_options.json", "elmo_weights.hdf5"]


def test_embed_records_the_model_as_the_python_api_does(tmp_path, monkeypatch):
    """The command wrote `--model DIR` as given (relative) and only the weights of a pair; the record names the
    model so that it works from elsewhere: an absolute path, or OPTIONS + WEIGHTS."""
    from elmo.io.native import save_model
    from elmo.io.official import load_official

    (tmp_path / "in.txt").write_text("The bank .\n", encoding="utf-8")
    save_model(load_official(OPTIONS, WEIGHTS), tmp_path / "ours")
    monkeypatch.chdir(tmp_path)
    assert main(["embed", "in.txt", "a.hdf5", "--top", "--quiet", *MODEL]) == 0
    assert main(["embed", "in.txt", "b.hdf5", "--top", "--quiet", "--model", "ours"]) == 0
    with h5py.File(tmp_path / "a.hdf5") as a, h5py.File(tmp_path / "b.hdf5") as b:
        assert a.attrs["model"] == f"{OPTIONS.resolve()} + {WEIGHTS.resolve()}"
        assert b.attrs["model"] == str(tmp_path / "ours")


def test_convert_leaves_a_users_file_of_an_output_name_alone(tmp_path, capsys):
    """`convert --to ours DIR` replaced a user's DIR/config.json (not half of a model) without a word."""
    (tmp_path / "config.json").write_text('{"x": 1}')
    assert main(["convert", *MODEL, "--to", "ours", str(tmp_path)]) == 2
    assert "holds config.json and is not an earlier output" in capsys.readouterr().err
    assert (tmp_path / "config.json").read_text() == '{"x": 1}' and len(list(tmp_path.iterdir())) == 1
    assert main(["convert", *MODEL, "--to", "ours", str(tmp_path / "m")]) == 0
    assert main(["convert", *MODEL, "--to", "ours", str(tmp_path / "m")]) == 0  # over its own earlier output
    # an export or run folder (a softmax, a vocabulary, checkpoints beside the model) would become two models
    (tmp_path / "export").mkdir()
    for name in ("config.json", "model.safetensors", "softmax.safetensors", "vocab.txt"):
        (tmp_path / "export" / name).write_text("x")
    assert main(["convert", *MODEL, "--to", "ours", str(tmp_path / "export")]) == 2
    assert "softmax.safetensors" in capsys.readouterr().err
    assert (tmp_path / "export" / "config.json").read_text() == "x"
