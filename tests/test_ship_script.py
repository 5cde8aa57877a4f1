"""scripts/ship_model.py checks what it ships before writing anything: the evaluation report and the tokenizer."""

import importlib.util
from pathlib import Path

import pytest

from elmo.errors import UsageError

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "ship_model.py"
REPORT = """== 1b-dev.txt
tokens 1200  forward 210.0  backward 206.0  mean 208.0  unknown 3.1%
tokens 1200  forward 211.0  backward 207.0  mean 209.0  unknown 3.1%
== baselines (trained on runs/data/en/train.txt.gz)
runs/data/en/1b-dev.txt  unigram     forward   1364.30  backward   1364.30  mean   1364.30
runs/data/en/1b-dev.txt  kn-trigram  forward    341.40  backward    341.40  mean    341.40
"""


@pytest.fixture(scope="module")
def ship():
    spec = importlib.util.spec_from_file_location("ship_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_whole_report_gives_its_rows(ship, tmp_path):
    (tmp_path / "eval.txt").write_text(REPORT, encoding="utf-8")
    [row] = ship.read_report(tmp_path / "eval.txt")
    assert row == {"set": "1b-dev.txt", "tokens": 1200, "forward": 210.0, "backward": 206.0, "mean": 208.0,
                   "zero_state": 209.0, "unigram": 1364.3, "kn-trigram": 341.4}
    assert "| 1b-dev.txt | 1,200 | 210.0 | 206.0 | 208.0 | 209.0 | 1364.3 | 341.4 | yes |" in ship.table([row])


@pytest.mark.parametrize("text, fragment", [("", "no held-out results"),
                                            (REPORT.split("== baselines")[0], "has no unigram figure")])
def test_an_empty_or_cut_report_is_refused(ship, tmp_path, text, fragment):
    """An empty report shipped a card with no results (exit 0); one without baselines failed with a KeyError after
    the new weights were written."""
    (tmp_path / "eval.txt").write_text(text, encoding="utf-8")
    with pytest.raises(UsageError, match=fragment):
        ship.read_report(tmp_path / "eval.txt")


def test_the_tokenizer_is_the_runs_or_said(ship):
    """A run on text split beforehand records no tokenizer: shipped as it was, the model split raw text at whitespace
    while its card described the PTB or eojeol tokenizer."""
    assert ship.shipped_tokenizer("en", None, "run") == "en"
    assert ship.shipped_tokenizer(None, "ko", "run") == "ko"
    assert ship.shipped_tokenizer(None, "whitespace", "run") is None
    with pytest.raises(UsageError, match="records no tokenizer"):
        ship.shipped_tokenizer(None, None, "run")
    with pytest.raises(UsageError, match="trained with --tokenize en"):
        ship.shipped_tokenizer("en", "ko", "run")
