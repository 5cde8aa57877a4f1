"""`elmo embed`'s input contract on real tokenised text: one vector per whitespace token by default, and with
``--tokenize en`` one per token the English tokenizer makes (the shipped `en` model, 1B Word held-out lines)."""

from __future__ import annotations

from itertools import islice
from pathlib import Path

import h5py
import pytest

from elmo.cli import main
from tests.conftest import DATA, needs_data

DEV = DATA / "en" / "1b-heldout" / "dev.tokens"
LINES = 2000

pytestmark = needs_data("en/1b-heldout/dev.tokens")


@pytest.fixture(scope="module")
def dev_lines(tmp_path_factory) -> tuple[Path, list[str]]:
    """The first LINES lines of the 1B Word dev file (already tokenised, one sentence per line), as a file."""
    with DEV.open(encoding="utf-8") as f:
        lines = list(islice(f, LINES))
    path = tmp_path_factory.mktemp("dev") / "dev.txt"
    path.write_text("".join(lines), encoding="utf-8")
    return path, [line.strip() for line in lines]


def _mismatches(output: Path, lines: list[str], count) -> list[str]:
    """Lines whose dataset does not hold ``count(line)`` vectors, as ``line N: got G, want W: text``."""
    wrong = []
    with h5py.File(output) as f:
        for number, line in enumerate(lines):
            got, want = f[str(number)].shape[0], count(line)
            if got != want:
                wrong.append(f"line {number}: got {got}, want {want}: {line[:80]}")
    return wrong


def test_embed_gives_one_vector_per_whitespace_token_by_default(dev_lines, tmp_path, report):
    """Tokenised text stays as it is: the default model's tokenizer would split some words again."""
    from elmo.text.tokenize import english_tokenize

    path, lines = dev_lines
    assert main(["embed", str(path), str(tmp_path / "out.hdf5"), "--top", "--quiet"]) == 0
    wrong = _mismatches(tmp_path / "out.hdf5", lines, lambda line: len(line.split()))
    assert not wrong, f"{len(wrong)} of {len(lines)} lines: " + "; ".join(wrong[:3])
    resplit = sum(len(english_tokenize(line)) != len(line.split()) for line in lines)
    report(f"1B Word dev, first {len(lines)} lines: english_tokenize changes the token count of {resplit}")


def test_embed_tokenize_en_gives_one_vector_per_english_token(dev_lines, tmp_path):
    from elmo.text.tokenize import english_tokenize

    path, lines = dev_lines
    assert main(["embed", str(path), str(tmp_path / "out.hdf5"), "--top", "--quiet", "--tokenize", "en"]) == 0
    wrong = _mismatches(tmp_path / "out.hdf5", lines, lambda line: len(english_tokenize(line)))
    assert not wrong, f"{len(wrong)} of {len(lines)} lines: " + "; ".join(wrong[:3])
