"""`elmo similar` and `elmo plot`: a word's contexts, nearest neighbours and PCA panels (on the fixture model)."""

from __future__ import annotations

import numpy as np
import pytest

from elmo.cli import main
from elmo.context import (Occurrence, annotated_occurrences, matches, nearest, pca_2d, read_labelled_sentences,
                          sense_separation)
from elmo.embed import Embedder
from elmo.tasks.readers import WsdSentence
from tests.conftest import OPTIONS, WEIGHTS

MODEL = ["--options", str(OPTIONS), "--weights", str(WEIGHTS)]


def test_korean_particles_match_but_other_words_do_not():
    assert matches("은행에", "은행") and matches("은행", "은행") and matches("은행에서는", "은행")
    assert matches("배가", "배") and matches("배를", "배")
    assert not matches("bankrupt", "bank") and not matches("배우", "배") and not matches("은행.", "은행")
    assert not matches("은행나무", "은행") and not matches("은행원", "은행")
    # a particle must fit the syllable before it: 가 follows a vowel, 이/을 a consonant
    assert not matches("은행가", "은행") and not matches("가을", "가") and not matches("국가", "국")
    assert not matches("배을", "배") and not matches("은행를", "은행")
    assert matches("은행이에요", "은행") and matches("은행조차", "은행") and matches("은행에게서", "은행")
    assert matches("서울로", "서울") and not matches("서울으로", "서울")


def test_pca_finds_the_direction_of_largest_spread():
    rng = np.random.default_rng(0)
    points = np.outer(rng.normal(size=50), [3.0, 4.0, 0.0]) + 0.01 * rng.normal(size=(50, 3))
    projected = pca_2d(points)  # (50, 2)
    assert projected.shape == (50, 2)
    assert np.var(projected[:, 0]) > 1000 * np.var(projected[:, 1])
    assert pca_2d(points[:1]).shape == (1, 2)


def test_nearest_ranks_by_cosine_and_skips_itself():
    make = lambda i, v: Occurrence(i, 0, str(i), np.array(v, dtype=float))  # noqa: E731
    query, a, b = make(0, [[1.0, 0.0]]), make(1, [[0.0, 1.0]]), make(2, [[1.0, 0.1]])
    ranked = nearest(query, [query, a, b], layer=0, k=5)
    assert [o.sentence for _, o in ranked] == [2, 1]
    assert ranked[0][0] > 0.99 and abs(ranked[1][0]) < 1e-9


def test_sense_separation_counts_pairs_triples_and_neighbours_by_hand():
    make = lambda label, v: Occurrence(0, 0, label, np.array([v], dtype=float))  # noqa: E731
    a1, a2, b1, b2 = make("a", [1, 0]), make("a", [0.8, 0.6]), make("b", [0, 1]), make("b", [0.6, 0.8])
    stats = sense_separation([a1, a2, b1, b2], layer=0)
    assert np.allclose(list(stats.within.values()), [0.8, 0.8])
    assert np.isclose(stats.across, np.mean([0.0, 0.6, 0.6, 0.96]))
    # per anchor, is its same-sense partner closer than each other-sense point: a1 2/2, a2 1/2, b1 2/2, b2 1/2
    assert np.isclose(stats.triplets, 6 / 8)
    assert stats.nearest == 0.5  # a2's nearest is b2 (0.96) and b2's is a2
    with pytest.raises(ValueError, match="two or more"):
        sense_separation([a1, a2, b1], layer=0)


def test_annotated_occurrences_take_instances_with_exactly_one_wanted_sense():
    embedder = Embedder.from_pretrained(options=OPTIONS, weights=WEIGHTS)
    sentences = [WsdSentence(["The", "bank", "lent", "money", "."], [], [],
                             [(1, "s0.t0", ["bank%1:14:00::"]), (3, "s0.t1", ["money%1:21:00::"])]),
                 WsdSentence(["the", "river", "bank"], [], [], [(2, "s1.t0", ["bank%1:17:01::", "bank%1:14:00::"])]),
                 WsdSentence(["a", "grassy", "bank"], [], [], [(2, "s2.t0", ["bank%1:17:01::"])])]
    found = annotated_occurrences(embedder, sentences, {"bank%1:14:00::": "money", "bank%1:17:01::": "river"})
    assert [(o.sentence, o.token, o.label) for o in found] == [(0, 1, "money"), (2, 2, "river")]
    expected = embedder.embed([["a", "grassy", "bank"]])[0][:, 2]  # (L+1, D)
    assert np.allclose(found[1].vectors, expected, atol=1e-6)
    assert annotated_occurrences(embedder, sentences, {"bank%1:06:00::": "building"}) == []
    only_the_bank = annotated_occurrences(embedder, sentences, {"bank%1:14:00::": "money"}, form="bank")
    assert [(o.sentence, o.token) for o in only_the_bank] == [(0, 1), (1, 2)]  # one wanted key each
    assert annotated_occurrences(embedder, sentences, {"bank%1:14:00::": "money"}, form="Bank") == []


def test_similar_and_plot_commands(tmp_path, capsys):
    sentences = tmp_path / "s.tsv"
    sentences.write_text("money\tI took money from the bank .\nriver\tThe bank of the river .\n"
                         "other\tNothing here .\n", encoding="utf-8")
    assert main(["similar", "bank", "--sentences", str(sentences), *MODEL]) == 0
    out = capsys.readouterr().out
    assert "[money] I took money from the bank ." in out and out.count("[river]") == 2
    assert "how each layer groups" not in out  # one occurrence per label: nothing to compare
    two_each = tmp_path / "two.tsv"
    two_each.write_text(sentences.read_text(encoding="utf-8") + "money\tThe bank lent money .\n"
                        "river\tA grassy bank .\n", encoding="utf-8")
    assert main(["similar", "bank", "--sentences", str(two_each), "-k", "1", *MODEL]) == 0
    table = capsys.readouterr().out.split("how each layer groups")[1].splitlines()[1:]
    assert table[0].split() == ["layer", "money-money", "river-river", "across", "triplets", "1-NN"]
    assert [row.split()[0] for row in table[1:]] == ["0", "1", "2"]
    assert main(["similar", "bank", "--sentences", str(sentences), "--query", "A bank loan .", "--layer", "0",
                 *MODEL]) == 0
    out = capsys.readouterr().out
    assert "[query] A bank loan ." in out and out.count("[money]") == 1 and out.count("[river]") == 1
    assert main(["similar", "bank", "--sentences", str(sentences), "--layer", "9", *MODEL]) == 2
    assert "--layer" in capsys.readouterr().err
    assert main(["plot", "bank", "--sentences", str(sentences), "--out", str(tmp_path / "p.png"), *MODEL]) == 0
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", "absent", "--sentences", str(sentences), "--out", str(tmp_path / "q.png"), *MODEL]) == 1
    assert "does not occur" in capsys.readouterr().err


def test_a_file_mixing_labelled_and_plain_lines_is_refused_and_plain_lines_are_named_by_number(tmp_path, capsys):
    mixed = tmp_path / "mixed.tsv"
    mixed.write_text("money\tI took money from the bank .\n\nThe bank closed .\n", encoding="utf-8")
    assert main(["similar", "bank", "--sentences", str(mixed), *MODEL]) == 1
    assert "line 3: no label" in capsys.readouterr().err
    # a TAB with nothing before it: an empty label would be a class of its own in the plot's legend
    mixed.write_text("money\tI took money from the bank .\n\tThe bank closed .\n", encoding="utf-8")
    assert main(["similar", "bank", "--sentences", str(mixed), *MODEL]) == 1
    assert "line 2: an empty label before the TAB" in capsys.readouterr().err
    plain = tmp_path / "plain.txt"
    plain.write_text("I took money from the bank .\n\nThe bank closed .\n", encoding="utf-8")
    assert read_labelled_sentences(plain) == (["I took money from the bank .", "The bank closed ."],
                                              ["line 1", "line 3"])
    assert main(["similar", "bank", "--sentences", str(plain), *MODEL, "-k", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err
    assert main(["similar", "bank", "--sentences", str(plain), *MODEL, "--layer", "-1"]) == 2
    assert "from 0 to" in capsys.readouterr().err
    assert main(["similar", "bank", "--sentences", str(plain), *MODEL, "--layer", "\u00b2"]) == 2  # "²".isdigit()
    assert "from 0 to" in capsys.readouterr().err
    # old Mac line ends: refused naming the line, not read as one sentence (as `elmo embed` refuses them)
    (tmp_path / "mac.txt").write_bytes(b"the bank of the river\rhe went to the bank\r")
    assert main(["similar", "bank", "--sentences", str(tmp_path / "mac.txt"), *MODEL]) == 1
    assert "mac.txt, line 1: a carriage return" in capsys.readouterr().err


def test_sense_separation_counts_ties_half_and_not_by_file_order():
    """At the context-free layer 0 every occurrence of a word form has one vector: tied triples counted as losses
    (triplets 0.00) and the nearest neighbour was the first in the file (1-NN 0.50 or 0.33 by sentence order)."""
    same = np.ones((1, 4), dtype=np.float32)
    for order in ("mmmrrr", "rmrmrm", "rrrmmm"):
        found = [Occurrence(i, 0, "money" if c == "m" else "river", same) for i, c in enumerate(order)]
        stats = sense_separation(found, layer=0)
        assert stats.triplets == 0.5 and stats.nearest == pytest.approx(2 / 5), order
