import json

import pytest

from elmo.config import PRESETS, ConfigError, ElmoConfig
from tests.conftest import OPTIONS


def test_fixture_options_round_trip():
    options = json.loads(OPTIONS.read_text())
    config = ElmoConfig.from_options(options)
    assert config.char_cnn.n_filters == 124 and config.lstm.dim == 64 and config.lstm.cell_clip == 3.0
    assert ElmoConfig.from_options(config.to_options()) == config


def test_n_characters_261_is_accepted_and_written_as_262():
    options = json.loads(OPTIONS.read_text())
    options["char_cnn"]["n_characters"] = 261
    config = ElmoConfig.from_options(options)
    assert config.to_options()["char_cnn"]["n_characters"] == 262


def test_unknown_keys_warn_and_training_keys_are_silent():
    options = json.loads(OPTIONS.read_text())
    options["n_tokens_vocab"] = 10
    options["lstm"]["mystery"] = 1
    with pytest.warns(UserWarning, match="lstm.mystery"):
        ElmoConfig.from_options(options)


@pytest.mark.parametrize("path,value,message", [
    (("lstm", "dim"), "64", "lstm.dim must be int"),
    (("lstm", "n_layers"), True, "lstm.n_layers must be int"),
    (("lstm", "cell_clip"), "3", "lstm.cell_clip must be a number"),
    (("char_cnn", "activation"), "gelu", "activation"),
    (("char_cnn", "filters"), [[1, 4], [2]], "filters"),
    (("char_cnn", "n_characters"), 300, "n_characters"),
    (("char_cnn", "n_highway"), -1, "n_highway must be 0 or more"),
])
def test_wrong_types_fail_with_the_key_named(path, value, message):
    options = json.loads(OPTIONS.read_text())
    options[path[0]][path[1]] = value
    with pytest.raises(ConfigError, match=message):
        ElmoConfig.from_options(options)


def test_missing_key_is_named():
    options = json.loads(OPTIONS.read_text())
    del options["lstm"]["projection_dim"]
    with pytest.raises(ConfigError, match="missing key lstm.projection_dim"):
        ElmoConfig.from_options(options)


def test_null_or_zero_clip_means_no_clip_and_skip_false_is_kept():
    options = json.loads(OPTIONS.read_text())
    options["lstm"].update(cell_clip=None, proj_clip=0, use_skip_connections=False)
    config = ElmoConfig.from_options(options)
    assert config.lstm.cell_clip is None and config.lstm.proj_clip is None
    assert config.lstm.use_skip_connections is False


def test_released_presets_have_the_published_parameter_counts():
    from elmo.model.bilm import BiLM

    for name, millions in (("small", 13.6), ("medium", 28.0)):
        model = BiLM.from_config(PRESETS[name])
        count = sum(p.numel() for p in model.parameters()) - 16  # our padding row is not a file parameter
        assert abs(count / 1e6 - millions) < 0.05, (name, count)


def test_a_preset_name_means_one_model():
    from elmo.training.config import TrainConfig

    for name, config in PRESETS.items():
        assert TrainConfig.load(name).model == config, name


def test_a_preset_name_is_a_preset_even_beside_a_folder_of_that_name(tmp_path, monkeypatch):
    from elmo.training.config import PRESET_DIR, TrainConfig

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").mkdir()
    assert TrainConfig.load("tiny") == TrainConfig.load(str(PRESET_DIR / "tiny.toml"))
