"""The models shipped inside the package: the README's first command, size and cards, and that their top layer
groups the occurrences of a word by sense on average ("bank": money vs river; 은행: bank vs ginkgo, the example
sentences of docs/examples). The stricter sense checks are an evaluation, not a test: scripts/sense_check.py."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pytest

from elmo import pretrained
from elmo.cli import main
from elmo.context import cosine, occurrences, read_labelled_sentences
from elmo.embed import Embedder

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"


@pytest.fixture(scope="module", params=["en", "ko"])
def shipped(request):
    return request.param


def test_both_models_are_shipped_small_and_documented(shipped):
    assert shipped in pretrained.shipped_names()
    folder = pretrained.SHIPPED_DIR / shipped
    assert (folder / "model.safetensors").stat().st_size <= 25 * 1024 * 1024
    card = (folder / "MODEL_CARD.md").read_text(encoding="utf-8")
    for heading in ("## Intended use", "## Training data", "## Tokenisation", "## Architecture", "## Training",
                    "## Evaluation", "## Limitations"):
        assert heading in card
    rows = [line for line in card.split("\n") if re.match(r"\| \S+\.txt \| [\d,]+ \|", line)]
    assert rows, "the card has no perplexity table"


def test_the_readme_first_command_needs_no_flags_and_no_network(capsys):
    assert main(["show", "He went to the bank to withdraw money ."]) == 0
    out = capsys.readouterr().out
    assert out.startswith("9 tokens, 3 layers of 256 dimensions")


def test_the_korean_model_embeds_korean_text():
    embedder = Embedder.from_pretrained("ko")
    vectors = embedder.embed("그녀는 돈을 인출하기 위해 은행에 갔다.")  # eojeol + the final "."
    assert vectors.shape[:2] == (3, 7) and np.isfinite(vectors).all()


def _sense_similarities(model: str, word: str, examples: str) -> dict[tuple[str, str], list[float]]:
    sentences, labels = read_labelled_sentences(EXAMPLES / examples)
    found = occurrences(Embedder.from_pretrained(model), word, sentences, labels)
    assert len(found) == len(sentences)
    pairs: dict[tuple[str, str], list[float]] = {}
    for a, b in itertools.combinations(found, 2):
        pairs.setdefault(tuple(sorted((a.label, b.label))), []).append(cosine(a.vectors[-1], b.vectors[-1]))
    return pairs


CASES = [("en", "bank", "bank-en.tsv", "money", "river"), ("ko", "은행", "eunhaeng-ko.tsv", "bank", "ginkgo")]


@pytest.mark.parametrize("model,word,examples,sense,other", CASES)
def test_top_layer_groups_occurrences_by_sense(model, word, examples, sense, other, report):
    """Same-sense pairs (both senses) are closer on average than pairs across the senses."""
    pairs = _sense_similarities(model, word, examples)
    across = pairs[tuple(sorted((sense, other)))]
    same = pairs[(sense, sense)] + pairs[(other, other)]
    report(f"shipped {model}: top-layer cosine of {word!r}: same-sense pairs {np.mean(same):.3f}, "
           f"{sense}-{sense} {np.mean(pairs[(sense, sense)]):.3f}, {other}-{other} "
           f"{np.mean(pairs[(other, other)]):.3f}, across {np.mean(across):.3f}")
    assert np.mean(same) > np.mean(across)
