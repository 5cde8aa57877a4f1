"""Case 5 of "Nothing lost": sizes are checked before anything is allocated.

Every size in options.json / config.json against a stated limit (elmo.limits), the weight file's datasets (names,
shapes, types) against the options before any data is read or the model is built, tokens per line and bytes per
line in the input, and batch sizes on the command line. Each case must fail in one line, fast, and small.
"""

import gzip
import json
import resource

import h5py
import numpy as np
import pytest

import elmo.embed_file as embed_file_module
from elmo.io.native import load_model
from elmo.io.official import export_official
from elmo.limits import MAX_TOKENS_PER_LINE, MODEL_LIMITS
from elmo.training.config import PRESET_DIR
from tests.reliability.tiny import cli, litter, micro_run, one_error_line, text_file, tiny_model


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.fixture
def official(tmp_path):
    options, weights = export_official(load_model(tiny_model(tmp_path / "model")), tmp_path / "official")
    return options, weights


def _edit_options(options, change):
    data = json.loads(options.read_text(encoding="utf-8"))
    change(data)
    options.write_text(json.dumps(data), encoding="utf-8")


HUGE = {
    "projection_dim 10^6": lambda d: d["lstm"].update(projection_dim=10**6),
    "dim 10^9": lambda d: d["lstm"].update(dim=10**9),
    "n_layers 10^6": lambda d: d["lstm"].update(n_layers=10**6),
    "n_highway 10^6": lambda d: d["char_cnn"].update(n_highway=10**6),
    "max_characters_per_token 10^9": lambda d: d["char_cnn"].update(max_characters_per_token=10**9),
    "embedding dim 10^9": lambda d: d["char_cnn"]["embedding"].update(dim=10**9),
    "a filter of 10^9": lambda d: d["char_cnn"].update(filters=[[1, 10**9]]),
    "10^5 filters": lambda d: d["char_cnn"].update(filters=[[1, 1]] * 10**5),
    "dims of 1e30": lambda d: d["lstm"].update(dim=1e30, projection_dim=1e30),
    "each size under its limit, the whole model over": lambda d: d["lstm"].update(dim=32_768, projection_dim=8_192,
                                                                                   n_layers=16),
}


@pytest.mark.parametrize("case", sorted(HUGE))
def test_huge_sizes_in_options_are_refused_before_allocation(official, capsys, case):
    options, weights = official
    _edit_options(options, HUGE[case])
    before = _max_rss_mb()
    rc, err = cli(capsys, "info", "--options", options, "--weights", weights)
    assert rc == 1
    line = one_error_line(err, str(options))
    assert "above the limit" in line
    assert _max_rss_mb() - before < 200  # nothing near the gigabytes the sizes ask for


def test_config_json_sizes_are_bounded_too(tmp_path, capsys):
    model = tiny_model(tmp_path / "model")
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    config["lstm"]["projection_dim"] = 10**6
    (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
    rc, err = cli(capsys, "info", "--model", model)
    assert rc == 1
    one_error_line(err, "config.json: lstm.projection_dim is 1,000,000, above the limit of "
                        f"{MODEL_LIMITS['lstm.projection_dim']:,}")


def test_a_sparse_dataset_of_terabytes_is_refused_before_it_is_read(official, capsys):
    """A small file can declare a huge chunked dataset that holds no data: its shape is checked first."""
    options, weights = official
    with h5py.File(weights, "a") as f:
        del f["char_embed"]
        f.create_dataset("char_embed", shape=(1_000_000, 1_000_000), dtype="float32", chunks=(1, 1024))
    assert weights.stat().st_size < 5_000_000
    before = _max_rss_mb()
    rc, err = cli(capsys, "info", "--options", options, "--weights", weights)
    assert rc == 1
    one_error_line(err, "dataset 'char_embed' has shape (1000000, 1000000)")
    assert _max_rss_mb() - before < 200


def test_an_unexpected_huge_dataset_is_refused_before_it_is_read(official, capsys):
    options, weights = official
    with h5py.File(weights, "a") as f:
        f.create_dataset("RNN_0/extra", shape=(10**7, 10**7), dtype="float64", chunks=(1, 1024))
    rc, err = cli(capsys, "info", "--options", options, "--weights", weights)
    assert rc == 1
    one_error_line(err, "unexpected dataset 'RNN_0/extra'")


def test_safetensors_header_shapes_are_checked_before_the_model_is_built(tmp_path, capsys):
    from safetensors.numpy import save_file

    model = tiny_model(tmp_path / "model")
    save_file({"char_encoder.char_embedding.weight": np.zeros((3, 3), np.float32)}, str(model / "model.safetensors"))
    rc, err = cli(capsys, "info", "--model", model)
    assert rc == 1
    one_error_line(err, "model.safetensors: tensor")


def test_a_gzip_bomb_of_one_endless_line_is_refused_in_the_first_pass(tmp_path, capsys, monkeypatch):
    """100 KB of gzip that expands to one line of millions of tokens: refused, naming the line, before any work."""
    model = tiny_model(tmp_path / "model")
    with gzip.open(tmp_path / "bomb.txt.gz", "wb", compresslevel=9) as f:
        for _ in range(40):
            f.write(b"a " * 100_000)
    assert (tmp_path / "bomb.txt.gz").stat().st_size < 100_000
    monkeypatch.setattr(embed_file_module, "_embed_chunk", lambda *a, **k: pytest.fail("embedded the bomb"))
    rc, err = cli(capsys, "embed", tmp_path / "bomb.txt.gz", tmp_path / "out.hdf5", "--top", "--model", model,
                  "--quiet")
    assert rc == 1
    one_error_line(err, "bomb.txt.gz, line 1: 4,000,000 tokens", f"limit of {MAX_TOKENS_PER_LINE:,} per line",
                   "split it")
    assert litter(tmp_path) == ["bomb.txt.gz", "model"]


def test_a_line_over_the_byte_limit_is_refused_without_reading_it_whole(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(embed_file_module, "MAX_LINE_BYTES", 1000)
    model = tiny_model(tmp_path / "model")
    (tmp_path / "in.txt").write_bytes(b"short\n" + b"x" * 5000 + b"\nshort\n")
    rc, err = cli(capsys, "embed", tmp_path / "in.txt", tmp_path / "out.hdf5", "--top", "--model", model, "--quiet")
    assert rc == 1
    one_error_line(err, "in.txt, line 2: longer than 1,000 bytes", "split it")


def test_a_long_token_is_cut_to_the_models_width(tmp_path, capsys):
    """Characters per token are bounded by the model (max_characters_per_token, itself bounded): a token of a
    million characters is cut, as bilm-tf and AllenNLP cut it, not refused."""
    model = tiny_model(tmp_path / "model")
    (tmp_path / "in.txt").write_text("x" * 1_000_000 + " y\n", encoding="utf-8")
    rc, _ = cli(capsys, "embed", tmp_path / "in.txt", tmp_path / "out.hdf5", "--top", "--model", model, "--quiet")
    assert rc == 0
    with h5py.File(tmp_path / "out.hdf5") as f:
        assert f["0"].shape == (2, 16)


@pytest.mark.parametrize("command", [["embed", "IN", "OUT", "--top"], ["train", "IN", "--out", "OUT"],
                                     ["perplexity", "M", "IN"], ["task", "train", "ner", "--train", "IN", "--dev",
                                                                 "IN", "--out", "OUT"]])
def test_batch_sizes_are_bounded(capsys, command):
    rc, err = cli(capsys, *command, "--batch-size", "1000000000")
    assert rc == 2 and "--batch-size: must be at most 65,536" in err and "Traceback" not in err


def test_training_config_sizes_are_bounded(tmp_path, capsys):
    corpus = text_file(tmp_path / "train.txt", 10)
    (tmp_path / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nw1\n", encoding="utf-8")
    config = tmp_path / "huge.toml"
    tiny = (PRESET_DIR / "tiny.toml").read_text(encoding="utf-8")
    config.write_text(tiny.replace("unroll_steps = 20", "unroll_steps = 1000000000"), encoding="utf-8")
    rc, err = cli(capsys, "train", corpus, "--vocab", tmp_path / "vocab.txt", "--out", tmp_path / "run",
                  "--config", config, "--quiet")
    assert rc == 1
    one_error_line(err, "huge.toml: training key 'unroll_steps' must be at most 100,000")
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def long_line_place(tmp_path_factory):
    """A one-step micro run, short text, and a gzip file of 0.1 MB whose one line is 65 MiB of letters."""
    folder = tmp_path_factory.mktemp("long_line")
    micro_run(folder)
    with gzip.open(folder / "long.txt.gz", "wb", compresslevel=1) as f:
        for _ in range(65):
            f.write(b"a" * (1 << 20))
        f.write(b"\n")
    return folder


@pytest.mark.parametrize("command", ["vocab build", "perplexity", "baselines --train", "baselines --eval",
                                     "baselines vocabulary", "dump-token-embeddings /dev/zero"])
def test_every_reader_refuses_a_line_over_64_mib(long_line_place, capsys, command):
    """Only `elmo embed` bounded its lines: the others read a line whole, however long (a 1.5 GB line of a 7 MB gzip
    file: a MemoryError traceback, or the machine's memory), and a vocabulary named /dev/zero was read without end.
    Refused at the limit: the reader stops after 64 MiB + 1 bytes of the line (Utf8Lines.readline's bound)."""
    t = long_line_place
    long, short, vocab, run = t / "long.txt.gz", t / "short.txt", t / "vocab.txt", t / "run"
    args = {"vocab build": ["vocab", "build", long, "-o", t / "v.txt"],
            "perplexity": ["perplexity", run, long, "--quiet"],
            "baselines --train": ["baselines", vocab, "--train", long, "--eval", short],
            "baselines --eval": ["baselines", vocab, "--train", short, "--eval", long],
            "baselines vocabulary": ["baselines", long, "--train", short, "--eval", short],
            "dump-token-embeddings /dev/zero": ["dump-token-embeddings", "/dev/zero", t / "t.hdf5", "--model", run],
            }[command]
    rc, err = cli(capsys, *args)
    assert rc == 1
    name = "/dev/zero" if "zero" in command else "long.txt.gz"
    one_error_line(err, f"{name}, line 1: longer than 67,108,864 bytes")
    assert not (t / "v.txt").exists() and not (t / "t.hdf5").exists()


def test_a_chunk_holds_a_bounded_size_of_vectors_whatever_the_batch_size(tmp_path, monkeypatch):
    """A chunk was max(batch_size x 16, 1,024) lines, all its vectors held (twice) until its part was written:
    `--batch-size 65536` meant chunks of a million lines, hundreds of GB for the original model. Chunks now also
    stop at CHUNK_BYTES of vectors; the output is the same, to float32 rounding."""
    import h5py

    from elmo.embed_file import embed_file
    from tests.conftest import OPTIONS, WEIGHTS
    from elmo.io.official import load_official

    lines = [" ".join(f"w{(i + j) % 30}" for j in range(1 + i % 7)) for i in range(60)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    bilm = load_official(OPTIONS, WEIGHTS)
    embed_file(bilm, tmp_path / "in.txt", tmp_path / "whole.hdf5", batch_size=65_536, progress=False)
    per_token = bilm.config.n_output_layers * bilm.config.output_dim * 4
    monkeypatch.setattr(embed_file_module, "CHUNK_BYTES", 20 * per_token)  # 20 tokens a chunk
    sizes = []
    original = embed_file_module._embed_chunk
    monkeypatch.setattr(embed_file_module, "_embed_chunk",
                        lambda engine, chunk, *a: sizes.append(sum(len(l.tokens) for l in chunk)) or
                        original(engine, chunk, *a))
    embed_file(bilm, tmp_path / "in.txt", tmp_path / "chunked.hdf5", batch_size=65_536, progress=False)
    assert len(sizes) > 10 and max(sizes) <= 20 and sum(sizes) == sum(len(l.split()) for l in lines)
    with h5py.File(tmp_path / "whole.hdf5") as whole, h5py.File(tmp_path / "chunked.hdf5") as chunked:
        assert sorted(whole.keys()) == sorted(chunked.keys())
        # other batches, so float32 rounding may differ (deterministic mode: the same vectors however grouped)
        assert all(np.allclose(whole[k][()], chunked[k][()], atol=1e-5) for k in whole if k != "sentence_to_index")
