"""The package against an independent NumPy implementation of docs/format.md, on model variants with random weights."""

import numpy as np
import pytest
import torch

from elmo.config import CharCNNConfig
from elmo.data.chars import batch_to_ids
from elmo.io.official import export_official, load_official
from tests.conftest import random_bilm, small_config
from tests.numpy_reference import reference_layers

SENTENCES = [["The", "bank", "closed", "."], ["은행", "에", "갔다"], ["x" * 60], ["a"]]


def _compare(config, tmp_path, scale=1.0, dtype=torch.float32):
    options, weights = export_official(random_bilm(config, seed=3, scale=scale), tmp_path)
    model = load_official(options, weights).to(dtype)
    with torch.no_grad():
        out = model(batch_to_ids(SENTENCES))
    worst = 0.0
    for row, tokens in enumerate(SENTENCES):
        expected = reference_layers(options, weights, tokens)  # (L+1, n, 2P)
        got = torch.stack(out.layers)[:, row, 1 : len(tokens) + 1].numpy()
        worst = max(worst, float(np.abs(got - expected).max()))
    return worst


@pytest.mark.parametrize("variant", ["default", "no_skip", "tanh_3_layers", "no_clips", "clips_fire"])
def test_matches_numpy_reference(variant, tmp_path, report):
    config, scale = small_config(), 1.0
    if variant == "no_skip":
        config = small_config(use_skip_connections=False)
    elif variant == "tanh_3_layers":
        config = small_config(n_layers=3).replace(char_cnn=CharCNNConfig(
            embedding_dim=3, filters=((2, 5), (4, 7)), n_highway=2, activation="tanh"))
    elif variant == "no_clips":
        config = small_config(cell_clip=None, proj_clip=None)
    elif variant == "clips_fire":
        scale = 4.0
    # float64 checks the arithmetic exactly; float32 checks it is accurate enough where values stay moderate
    exact = _compare(config, tmp_path, scale, torch.float64)
    report(f"{variant} vs NumPy reference, float64: max abs diff", exact)
    assert exact <= 1e-9
    if scale == 1.0:
        worst = _compare(config, tmp_path, scale)
        report(f"{variant} vs NumPy reference, float32: max abs diff", worst)
        assert worst <= 1e-5


def test_clips_really_fire_in_the_clips_fire_variant():
    model = random_bilm(small_config(), seed=3, scale=4.0)
    with torch.no_grad():
        out = model(batch_to_ids(SENTENCES))
    assert float(out.forward_layers[0].abs().max()) == pytest.approx(3.0)


def test_no_projection_means_no_projection_clip_and_n_layers_defaults_to_one(tmp_path, report):
    """bilm-tf gives its cells num_proj only when P < C: a file with P == C has no W_P_0, and TensorFlow then skips
    proj_clip (here 0.5, small enough to matter). An options.json without lstm.n_layers means one layer."""
    import json

    import h5py

    config = small_config(dim=8, proj_clip=0.5, n_layers=1)
    options, weights = export_official(random_bilm(config, seed=3, scale=2.0), tmp_path)
    with h5py.File(weights, "a") as f:
        for d in range(2):
            del f[f"RNN_{d}/RNN/MultiRNNCell/Cell0/LSTMCell/W_P_0"]
    raw = json.loads(options.read_text())
    del raw["lstm"]["n_layers"]
    options.write_text(json.dumps(raw))
    model = load_official(options, weights).double()
    assert model.config.lstm.proj_clip is None and model.config.lstm.n_layers == 1
    with torch.no_grad():
        out = model(batch_to_ids(SENTENCES))
    assert float(out.forward_layers[0].abs().max()) > 0.6  # unclipped
    worst = max(float(np.abs(torch.stack(out.layers)[:, row, 1 : len(tokens) + 1].numpy()
                             - reference_layers(options, weights, tokens)).max())
                for row, tokens in enumerate(SENTENCES))
    report("P == C without W_P_0 vs NumPy reference, float64: max abs diff", worst)
    assert worst <= 1e-9
