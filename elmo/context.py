"""Seeing context: a word's vectors in each sentence where it occurs, its nearest contexts, and a PCA picture.

The same word gets a different vector in each sentence; these helpers make that visible ("bank" of a river vs of
money, Korean "은행" bank vs ginkgo). In Korean a word is usually followed by particles inside its eojeol
("은행에", "은행을"), so a token also matches when the word is followed only by Hangul (see ``matches``).
"""

from __future__ import annotations

import re
import unicodedata
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from elmo.embed import Embedder
from elmo.errors import InputTypeError, MissingDependencyError, UsageError
from elmo.io.atomic import atomic_path
from elmo.io.text_lines import sentence_lines
from elmo.limits import is_whole
from elmo.model.mix import check_layers

if TYPE_CHECKING:
    from elmo.tasks.readers import WsdSentence

# common Korean particles (josa) and copula endings, by what the syllable before them must end in: some follow only
# a vowel (가, 를), some only a consonant (이, 을), the rest either; so 은행가 (banker) is not 은행 + 가
_AFTER_VOWEL = {"가", "를", "는", "와", "로", "로서", "로써", "로부터", "랑", "야", "여", "나", "예요", "였다", "다"}
_AFTER_CONSONANT = {"이", "을", "은", "과", "으로", "으로서", "으로써", "으로부터", "이랑", "아", "이여", "이나",
                    "이다", "이야", "이에요", "이었다"}
_EITHER = {"의", "에", "에서", "에게", "에게서", "한테", "한테서", "께", "께서", "도", "만", "까지", "부터", "처럼", "보다",
           "하고", "조차", "마저", "밖에", "요"}
_RIEUL = 8  # final consonant ㄹ: takes 로 like a vowel (서울로)
_HANGUL = re.compile(r"[\uac00-\ud7a3]")

TIE = 1e-9  # cosines this close are equal (identical vectors give identical cosines; float64 rounding aside)


@dataclass
class Occurrence:
    """One occurrence of the word: which sentence, which token, and its vector at every layer."""

    sentence: int
    token: int
    label: str
    vectors: np.ndarray  # (L+1, D)


def matches(token: str, word: str) -> bool:
    """``token`` is ``word``, or (Korean) ``word`` followed by one or two particles that fit the syllable before
    them: 은행에, 은행에서는, 은행이에요 — but not 은행나무, 은행원 or 은행가, which are other words."""
    if token == word:
        return True
    return bool(token.startswith(word) and _HANGUL.fullmatch(word[-1:])
                and _particles_fit(token[len(word):], word[-1], 2))


def _particles_fit(rest: str, before: str, most: int) -> bool:
    """``rest`` is 1..``most`` particles in a row, each fitting the syllable before it."""
    for end in range(1, len(rest) + 1):
        particle = rest[:end]
        if _fits(particle, before) and (end == len(rest) or (most > 1 and _particles_fit(rest[end:], particle[-1],
                                                                                          most - 1))):
            return True
    return False


def _fits(particle: str, before: str) -> bool:
    if particle in _EITHER:
        return True
    final = (ord(before) - 0xAC00) % 28 if _HANGUL.fullmatch(before) else 0  # 0: ends in a vowel
    if particle in _AFTER_VOWEL:
        return final == 0 or (final == _RIEUL and particle.startswith("로"))
    return particle in _AFTER_CONSONANT and final != 0 and not (final == _RIEUL and particle.startswith("으로"))


def word_as_token(embedder: Embedder, word: str) -> str:
    """``word`` as the model's tokenizer writes it, so that it meets its occurrences in the tokenised sentences (the
    ``ko`` tokenizer composes Hangul typed as separate jamo in the sentences: the word must be composed too). A word
    the tokenizer splits (``don't`` -> ``do n't``) or leaves nothing of can never equal one token, so it is refused
    rather than reported as absent from sentences that hold it."""
    if not isinstance(word, str):
        raise InputTypeError(f"the word: expected a string, got {type(word).__name__}")
    tokens = embedder.tokenize([word])[0]
    if len(tokens) != 1:
        made = f"{len(tokens)} tokens ({' '.join(tokens)})" if tokens else "no token"
        raise UsageError(f"this model's tokenizer makes {word!r} {made}, and an occurrence is one token; give one "
                         f"word as the tokenizer writes it")
    return tokens[0]


def occurrences(embedder: Embedder, word: str, sentences: Sequence[str], labels: Sequence[str] | None = None,
                ) -> list[Occurrence]:
    """Every occurrence of ``word`` (``word_as_token``) in ``sentences`` with its vectors (sentences without it are
    not embedded). Tokens that are the word in another Unicode form (NFD "café") are left out, with a warning."""
    if isinstance(sentences, (str, bytes)) or labels is not None and isinstance(labels, (str, bytes)):
        raise InputTypeError("sentences and labels: expected lists of strings, got a single string (it would be read "
                             "letter by letter); pass [sentence]")
    sentences, labels = list(sentences), None if labels is None else list(labels)
    if labels is not None and len(labels) != len(sentences):
        raise UsageError(f"{len(labels)} labels for {len(sentences)} sentences: give one label per sentence")
    word = word_as_token(embedder, word)
    token_lists = embedder.tokenize(sentences)
    _warn_other_forms(token_lists, word)
    wanted = [i for i, tokens in enumerate(token_lists) if any(matches(t, word) for t in tokens)]
    if not wanted:
        return []
    arrays = embedder.embed([token_lists[i] for i in wanted])  # each (L+1, n, D)
    found = []
    for i, array in zip(wanted, arrays):
        label = labels[i] if labels is not None else str(i)
        found += [Occurrence(i, j, label, array[:, j]) for j, t in enumerate(token_lists[i]) if matches(t, word)]
    return found


def _warn_other_forms(token_lists: Sequence[Sequence[str]], word: str) -> None:
    """Say which tokens are ``word`` in another Unicode form: they look the same but are other characters, so the
    model gives them other vectors; they stay apart, as written, but not in silence."""
    nfc = unicodedata.normalize("NFC", word)
    other = Counter(t for tokens in token_lists for t in tokens
                    if not matches(t, word) and matches(unicodedata.normalize("NFC", t), nfc))
    if other:
        warnings.warn(f"{sum(other.values())} token(s) are {word!r} written in another Unicode form "
                      f"({', '.join(map(ascii, other))}, where the word is {ascii(word)}) and are left out; "
                      f"normalise the text and the word (e.g. to NFC) to compare them")


def annotated_occurrences(embedder: Embedder, sentences: Sequence[WsdSentence], senses: dict[str, str],
                          form: str | None = None) -> list[Occurrence]:
    """The sense-annotated instances (SemCor-style) whose gold keys hold exactly one of ``senses`` (sense key ->
    label), with their vectors; only those written exactly ``form`` when given (bank, not banks or Bank). The
    sentences' own tokens are embedded as given."""
    wanted: list[tuple[int, int, str]] = []  # (sentence, token, label)
    for i, sentence in enumerate(sentences):
        for token, _, keys in sentence.instances:
            labels = {senses[key] for key in keys if key in senses}
            if len(labels) == 1 and form in (None, sentence.tokens[token]):
                wanted.append((i, token, labels.pop()))
    rows = sorted({i for i, _, _ in wanted})
    if not rows:
        return []
    arrays = dict(zip(rows, embedder.embed([sentences[i].tokens for i in rows])))  # each (L+1, n, D)
    return [Occurrence(i, token, label, arrays[i][:, token]) for i, token, label in wanted]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def nearest(query: Occurrence, pool: Sequence[Occurrence], layer: int = -1, k: int = 5,
            ) -> list[tuple[float, Occurrence]]:
    """The ``k`` occurrences of ``pool`` most similar (cosine at ``layer``) to ``query``, itself excluded."""
    if not is_whole(k, 1):  # -1 would drop the last neighbour
        raise UsageError(f"k={k!r}: give a whole number of neighbours, 1 or more")
    layer = check_layers(layer, query.vectors.shape[0], names=())
    scored = [(cosine(query.vectors[layer], o.vectors[layer]), o) for o in pool if o is not query]
    return sorted(scored, key=lambda pair: -pair[0])[:k]


@dataclass(frozen=True)
class SenseSeparation:
    """How well one layer's vectors of a word group its occurrences by sense (the labels).

    ``within``: mean cosine of same-label pairs, per label; ``across``: mean cosine of pairs with different labels;
    ``triplets``: of all (anchor, same-label other, different-label other) triples, the share where the same-label
    occurrence is the closer one to the anchor (a tie counts half); ``nearest``: leave-one-out 1-nearest-neighbour
    accuracy (neighbours tied for nearest share the credit: the expected accuracy of picking one at random).
    """

    within: dict[str, float]
    across: float
    triplets: float
    nearest: float


def sense_separation(found: Sequence[Occurrence], layer: int = -1) -> SenseSeparation:
    """Sense statistics of ``found`` at ``layer``; needs at least two labels and two occurrences of each."""
    counts = Counter(o.label for o in found)
    if len(counts) < 2 or min(counts.values()) < 2:
        raise UsageError(f"need two or more labels with two or more occurrences each, got {dict(counts)}")
    layer = check_layers(layer, found[0].vectors.shape[0], names=())
    labels = np.array([o.label for o in found])
    vectors = np.stack([o.vectors[layer] for o in found]).astype(np.float64)  # (N, D)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    cosines = vectors @ vectors.T  # (N, N)
    same = labels[:, None] == labels[None, :]  # (N, N)
    off_diagonal = ~np.eye(len(found), dtype=bool)
    within = {name: float(cosines[np.outer(labels == name, labels == name) & off_diagonal].mean())
              for name in sorted(counts)}
    # ties (equal up to rounding: at the context-free layer 0 every occurrence of a word form has one vector) count
    # half in a triple, and share a nearest neighbour's credit among the tied: no result depends on file order
    closer = [np.where(np.abs(d) <= TIE, 0.5, (d > 0).astype(float)) for d in (
        cosines[i, same[i] & off_diagonal[i]][:, None] - cosines[i, ~same[i]][None, :] for i in range(len(found)))]
    # per anchor: (same-label others x other-label occurrences), 1 closer, 0.5 a tie, 0 farther
    masked = np.where(off_diagonal, cosines, -np.inf)
    tied = masked >= masked.max(axis=1, keepdims=True) - TIE  # (N, N) the nearest, ties included
    nearest = (tied & same).sum(axis=1) / tied.sum(axis=1)  # (N,) expected hit of a random pick among them
    return SenseSeparation(within=within, across=float(cosines[~same].mean()),
                           triplets=float(np.concatenate([c.ravel() for c in closer]).mean()),
                           nearest=float(nearest.mean()))


def separation_report(found: Sequence[Occurrence]) -> list[str]:
    """A table, one line per layer, of ``sense_separation`` — or nothing when the labels cannot be compared (fewer
    than two labels, or a label with a single occurrence, as when sentences are named by line number)."""
    counts = Counter(o.label for o in found)
    if len(counts) < 2 or min(counts.values()) < 2:
        return []
    names = sorted(counts)
    lines = ["layer  " + "  ".join(f"{name}-{name}" for name in names) + "  across  triplets  1-NN"]
    for layer in range(found[0].vectors.shape[0]):
        stats = sense_separation(found, layer)
        within = "  ".join(f"{stats.within[name]:>{2 * len(name) + 1}.3f}" for name in names)
        lines.append(f"{layer:>5}  {within}  {stats.across:>6.3f}  {stats.triplets:>8.2f}  {stats.nearest:>4.2f}")
    return lines


def pca_2d(vectors: np.ndarray) -> np.ndarray:
    """(N, D) -> (N, 2): the first two principal components (centred SVD); fewer than 2 points stay at 0."""
    centred = vectors - vectors.mean(axis=0, keepdims=True)
    if len(vectors) < 2:
        return np.zeros((len(vectors), 2))
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    points = centred @ vt[:2].T
    return np.pad(points, ((0, 0), (0, 2 - points.shape[1])))


def plot_word(found: Sequence[Occurrence], word: str, out: str | Path, layer_names: Sequence[str] | None = None,
              title: str | None = None) -> Path:
    """One panel per layer: the word's occurrences projected on that layer's first two principal components,
    coloured and labelled by their label. Writes a PNG (or any format matplotlib knows from the suffix)."""
    if len(found) < 2:  # one point has no principal components, and would read as "one vector for all"
        raise UsageError(f"{len(found)} occurrence(s) of {word!r}: a plot compares two or more")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError("plotting needs matplotlib: pip install 'elmo-bilm[plot]'") from None

    n_layers = found[0].vectors.shape[0]
    names = list(layer_names or [f"layer {k}" for k in range(n_layers)])
    labels = sorted({o.label for o in found})
    colours = {label: plt.get_cmap("tab10")(i % 10) for i, label in enumerate(labels)}
    figure, axes = plt.subplots(1, n_layers, figsize=(4.2 * n_layers, 4.0), squeeze=False)
    for layer, axis in enumerate(axes[0]):
        vectors = np.stack([o.vectors[layer] for o in found])  # (N, D)
        points = pca_2d(vectors)  # (N, 2)
        same = bool(np.ptp(vectors, axis=0).max() < 1e-5)  # the token layer ignores context
        for (x, y), o in zip(points, found):
            axis.scatter(x, y, color=colours[o.label], s=36)
            # parse_math=False: a label, word or title is the user's text, drawn as it is ("$5", "$\\foo$")
            axis.annotate(o.label, (x, y), fontsize=8, xytext=(3, 3), textcoords="offset points", parse_math=False)
        axis.set_title(f"{title or word}: {names[layer]}" + (" (one vector for all)" if same else ""), parse_math=False)
        axis.set_xticks([])
        axis.set_yticks([])
    figure.tight_layout()
    out = Path(out)
    try:
        with atomic_path(out) as tmp:
            figure.savefig(tmp, dpi=110, format=out.suffix.lstrip(".") or "png")
    except (RuntimeError, ValueError) as err:  # a format that needs a program or library this machine lacks
        raise UsageError(f"{out}: matplotlib cannot write this format here ({err}); use .png, .svg or .pdf") from None
    finally:
        plt.close(figure)
    return out


def read_labelled_sentences(path: str | Path) -> tuple[list[str], list[str]]:
    """Lines ``label<TAB>sentence``, or plain ``sentence`` lines labelled by their line number ("line 6"); blank
    lines skipped. A file mixing the two is refused: a label would otherwise be read as part of its sentence."""
    numbered = [(n, line) for n, line in sentence_lines(path) if line.strip()]
    tabbed = [n for n, line in numbered if "\t" in line]
    if not tabbed:
        return [line for _, line in numbered], [f"line {n}" for n, _ in numbered]
    if len(tabbed) < len(numbered):
        plain = next(n for n, line in numbered if "\t" not in line)
        raise UsageError(f"{path}, line {plain}: no label (label<TAB>sentence) though line {tabbed[0]} has one; "
                         f"label every line or none")
    pairs = [line.split("\t", 1) for _, line in numbered]
    unlabelled = next((n for (n, _), (label, _) in zip(numbered, pairs) if not label.strip()), None)
    if unlabelled is not None:  # an empty label would be a class of its own in the plot's legend
        raise UsageError(f"{path}, line {unlabelled}: an empty label before the TAB; give the label "
                         f"(label<TAB>sentence), or remove the TAB")
    return [s for _, s in pairs], [label for label, _ in pairs]
