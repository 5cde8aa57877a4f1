"""Test helpers: the vendored AllenNLP fixture, the real-data folder (optional), and small random models.

The AllenNLP ELMo test fixture lives in ``tests/fixtures/elmo`` (Apache-2.0, see its NOTICE). Tests that need
the larger real data sets (text corpora, task data) read them from the folder named by the ``ELMO_DATA``
environment variable, by default ``../shared/data`` beside the repository; without it they are skipped, each with
one line naming the file it needs. ``data_path`` and ``needs_data`` are the only ways tests reach that folder.
"""

from __future__ import annotations

import http.server
import os
import shutil
import tempfile
import threading
from itertools import islice
from pathlib import Path

import pytest
import torch

from elmo.config import CharCNNConfig, ElmoConfig, LSTMConfig
from elmo.model.bilm import BiLM

ROOT = Path(__file__).resolve().parents[1]
# elmo's cache (downloads, converted official weights) in a folder of the test run, never the user's ~/.cache/elmo
TEST_CACHE = os.environ["ELMO_CACHE"] = tempfile.mkdtemp(prefix="elmo-test-cache-")
FIXTURES = ROOT / "tests" / "fixtures" / "elmo"
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
def _session_fixture_model() -> BiLM:
    from elmo.io.official import load_official

    return load_official(OPTIONS, WEIGHTS)


@pytest.fixture
def fixture_model(_session_fixture_model: BiLM) -> BiLM:
    """The official test fixture model, loaded once (it holds no caches: what earlier tests embedded cannot change
    this test's numbers)."""
    return _session_fixture_model


# ---- measured figures, printed at the end of every run (even with -q) -------------------------------------------
_FIGURES: list[str] = []


@pytest.fixture
def report():
    """``report("what", value)`` records a measured figure for the end-of-run summary (or a whole line of text)."""
    def record(what: str, value: float | None = None) -> None:
        line = what if value is None else f"{what}: {value:.2e}"
        _FIGURES.append(line)
        print(line)
    return record


def pytest_sessionfinish(session, exitstatus):
    """The test run's cache goes with it (a folder in the system's temporary folder was left by every run)."""
    shutil.rmtree(TEST_CACHE, ignore_errors=True)


def pytest_terminal_summary(terminalreporter):
    if _FIGURES:
        terminalreporter.section("measured figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)


# ---- the real-data folder (optional) ---------------------------------------------------------------------------
DATA = Path(os.environ.get("ELMO_DATA") or ROOT.parent / "shared" / "data")


def _missing(relative: str) -> str | None:
    """Why ``DATA / relative`` cannot be used (one line), or None when it is there."""
    if (DATA / relative).exists():
        return None
    return f"needs {relative} of the real-data folder (set ELMO_DATA; looked in {DATA})"


def data_path(relative: str) -> Path:
    """A file or folder of the real-data folder; skips the calling test (or fixture) when it is not there."""
    reason = _missing(relative)
    if reason:
        pytest.skip(reason)
    return DATA / relative


def needs_data(*relatives: str) -> pytest.MarkDecorator:
    """A mark that skips a test (or, as ``pytestmark``, a module) unless these real-data files are there."""
    reasons = [r for r in map(_missing, relatives) if r]
    return pytest.mark.skipif(bool(reasons), reason=reasons[0] if reasons else "")


# ---- real text slices for training tests -----------------------------------------------------------------------


def write_text_slice(path: Path, start: int, count: int) -> Path:
    """Lines start .. start+count of nlp-corpus, tokenised with the English tokenizer, one sentence per line."""
    import gzip

    from elmo.text.tokenize import english_tokenize

    with gzip.open(data_path("en/nlp-corpus/sentences.txt.gz"), "rt", encoding="utf-8") as f:
        lines = [" ".join(english_tokenize(line)) for line in islice(f, start, start + count)]
    path.write_text("\n".join(line for line in lines if line) + "\n", encoding="utf-8")
    return path


def write_review_slice(path: Path, reviews: int) -> Path:
    """The sentences of the first ``reviews`` IMDB reviews, tokenised as scripts/prepare_english.py does."""
    import gzip
    import json

    from elmo.text.sentences import split_sentences
    from elmo.text.tokenize import english_tokenize

    with gzip.open(data_path("en/imdb/reviews.jsonl.gz"), "rt", encoding="utf-8") as f:
        lines = [" ".join(english_tokenize(sentence)) for review in islice(f, reviews)
                 for sentence in split_sentences(json.loads(review)["text"])]
    path.write_text("\n".join(line for line in lines if line) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def review_slices(tmp_path_factory):
    """Running text as the shipped English model trains on it (the sentences of 600 IMDB reviews), the first 300
    lines of the 1B Word held-out dev set, and a vocabulary of every word of the training slice."""
    from elmo.data.vocab import Vocabulary

    dev_tokens = data_path("en/1b-heldout/dev.tokens")
    root = tmp_path_factory.mktemp("reviews")
    train = write_review_slice(root / "train.txt", 600)
    with dev_tokens.open(encoding="utf-8") as f:
        (root / "dev.txt").write_text("".join(islice(f, 300)), encoding="utf-8")
    Vocabulary.build(line.split() for line in train.open(encoding="utf-8")).save(root / "vocab.txt")
    return train, root / "dev.txt", root / "vocab.txt"


@pytest.fixture(scope="session")
def text_slices(tmp_path_factory):
    """A training slice, a held-out slice, and a vocabulary built on the training slice."""
    from elmo.data.vocab import Vocabulary

    root = tmp_path_factory.mktemp("text")
    train = write_text_slice(root / "train.txt", 0, 6000)
    dev = write_text_slice(root / "dev.txt", 90_000, 300)
    vocab = Vocabulary.build((line.split() for line in train.open(encoding="utf-8")), min_count=2)
    vocab.save(root / "vocab.txt")
    return train, dev, root / "vocab.txt"


def micro_train_config(**changes):
    """A very small model for loop-mechanics tests (seconds)."""
    from elmo.training.config import TrainConfig

    model = ElmoConfig(CharCNNConfig(embedding_dim=8, filters=((1, 8), (2, 8), (3, 16)), n_highway=1),
                       LSTMConfig(dim=32, projection_dim=16))
    base = TrainConfig(model=model, batch_size=4, unroll_steps=6, n_negative_samples=64, checkpoint_every=1000,
                       log_every=1, chunk_size=200)
    return base.replace(**changes)


@pytest.fixture
def server(tmp_path):
    """A local HTTP server on 127.0.0.1 serving ``tmp_path/site``: (folder, base URL)."""
    root = tmp_path / "site"
    root.mkdir()
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(root), **k)  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.RequestHandlerClass.log_message = lambda *a: None
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
