"""The models shipped inside the package: the README's first command, size, cards, and that their top layer
separates word senses ("bank": money vs river; 은행: bank vs ginkgo) on the example sentences in docs/examples."""

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
    for heading in ("## Data", "## Tokenisation", "## Training", "## Held-out perplexity"):
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


_EN_NOT_YET = pytest.mark.xfail(strict=True, reason="not yet: the English model's top layer (step 61,500, 39.4 M "
                                "training tokens) puts two money contexts of 'bank' less close (0.678) than a money "
                                "and a river context (0.706); see its model card and the shipped-models issue")


@pytest.mark.parametrize("model,word,examples,sense,other",
                         [pytest.param(*CASES[0], marks=_EN_NOT_YET), CASES[1]])
def test_top_layer_puts_two_contexts_of_one_sense_closer_than_across(model, word, examples, sense, other):
    """The shipped-models issue's check: money-money above money-river (bank-bank above bank-ginkgo)."""
    pairs = _sense_similarities(model, word, examples)
    same, across = pairs[(sense, sense)], pairs[tuple(sorted((sense, other)))]
    assert same[0] > across[0] and np.mean(same) > np.mean(across)


SEMCOR = Path(__file__).resolve().parents[2] / "shared" / "data" / "en" / "wsd" / "semcor"


@pytest.mark.xfail(strict=True, reason="not yet: on SemCor's own sentences (written 'bank', 11 financial-institution "
                   "and 13 river-bank instances) the shipped en top layer puts two money contexts less close (0.658) "
                   "than a money and a river context (0.687); see the en model card")
def test_semcor_bank_senses_on_sentences_nobody_chose(report):
    """The same check on sentences annotated by others (SemCor, WordNet 3.0 keys), not written for the test."""
    if not SEMCOR.is_dir():
        pytest.skip(f"{SEMCOR} not found (the shared data)")
    from elmo.context import annotated_occurrences, sense_separation
    from elmo.tasks.readers import read_wsd_xml

    sentences = read_wsd_xml(SEMCOR / "semcor.data.xml.gz", SEMCOR / "semcor.gold.key.txt.gz")
    senses = {"bank%1:14:00::": "money", "bank%1:17:01::": "river"}
    found = annotated_occurrences(Embedder.from_pretrained("en"), sentences, senses, form="bank")
    counts = {label: sum(o.label == label for o in found) for label in senses.values()}
    assert counts["money"] >= 10 and counts["river"] >= 10
    stats = sense_separation(found)  # two labels: "across" is the money-river mean
    report(f"shipped en, SemCor 'bank' ({counts}): top-layer money-money {stats.within['money']:.3f}, money-river "
           f"{stats.across:.3f}, triplets {stats.triplets:.2f}, 1-NN {stats.nearest:.2f}")
    assert stats.within["money"] > stats.across
