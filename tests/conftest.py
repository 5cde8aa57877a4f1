"""Shared test helpers: where the real fixtures live, and small models with random weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from elmo.config import CharCNNConfig, ElmoConfig, LSTMConfig
from elmo.model.bilm import BiLM

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "data" / "fixtures" / "elmo"
OPTIONS = FIXTURES / "options.json"
WEIGHTS = FIXTURES / "lm_weights.hdf5"


def small_config(**lstm_changes) -> ElmoConfig:
    """A fixture-sized config (fast), with optional LSTM changes."""
    cnn = CharCNNConfig(embedding_dim=4, filters=((1, 4), (2, 8), (3, 16)), n_highway=1)
    return ElmoConfig(cnn, LSTMConfig(**{"dim": 24, "projection_dim": 8, "cell_clip": 3.0, "proj_clip": 3.0,
                                          "use_skip_connections": True, **lstm_changes}))


def random_bilm(config: ElmoConfig, seed: int = 0, scale: float = 1.0, stateful: bool = False) -> BiLM:
    """A biLM with random weights, biases included (the default init leaves them zero), so every path is exercised.

    ``scale`` > 1 makes the clips fire.
    """
    torch.manual_seed(seed)
    model = BiLM.from_config(config, stateful=stateful)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("char_embedding.weight"):
                p.normal_(0, 1.0)
                p[0].zero_()
            else:
                p.uniform_(-0.5 * scale, 0.5 * scale)
    return model.eval()


@pytest.fixture(scope="session")
def fixture_model() -> BiLM:
    from elmo.io.official import load_official

    return load_official(OPTIONS, WEIGHTS)


# ---- measured figures, printed at the end of every run (even with -q) -------------------------------------------
_FIGURES: list[str] = []


@pytest.fixture
def report():
    """``report("what", value)`` records a measured figure for the end-of-run summary."""
    def record(what: str, value: float) -> None:
        _FIGURES.append(f"{what}: {value:.2e}")
        print(f"{what}: {value:.2e}")
    return record


def pytest_terminal_summary(terminalreporter):
    if _FIGURES:
        terminalreporter.section("measured figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)
