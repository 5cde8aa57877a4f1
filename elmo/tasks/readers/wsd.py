"""Word sense disambiguation: Raganato et al.'s unified framework (``*.data.xml`` + ``*.gold.key.txt``) and
WordNet 3.0 ``index.sense``."""

from __future__ import annotations

import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from elmo.limits import is_digits
from elmo.tasks.readers.common import DataFormatError, is_blank, iter_lines


@dataclass
class WsdSentence:
    """One WSD sentence: every token with its lemma and POS, and the instances to disambiguate.

    ``instances`` holds ``(token index, instance id, gold sense keys)``; the key list is empty when no gold key is
    known (e.g. no key file was given). ``sentence_id`` is the ``<sentence id=...>`` attribute.
    """

    tokens: list[str]
    lemmas: list[str]
    pos: list[str]
    instances: list[tuple[int, str, list[str]]]
    sentence_id: str = ""

# ---- WSD (Raganato et al. unified framework) and WordNet ---------------------------------------------------------
_WN_SS_TYPE_POS = {"1": "NOUN", "2": "VERB", "3": "ADJ", "4": "ADV", "5": "ADJ"}


def read_wsd_keys(path: str | Path) -> dict[str, list[str]]:
    """A ``*.gold.key.txt`` file: ``instance_id sense_key [sense_key ...]`` per line -> {instance id: keys}."""
    keys: dict[str, list[str]] = {}
    for number, line in iter_lines(path):
        if is_blank(line):
            continue
        instance, *senses = [part for part in line.split(" ") if part]
        if not senses:
            raise DataFormatError(path, number, f"instance {instance!r} has no sense key",
                                  "each line must be 'instance_id sense_key [sense_key ...]'")
        if instance in keys:
            raise DataFormatError(path, number, f"instance {instance!r} listed twice", "merge its keys on one line")
        keys[instance] = senses
    return keys


def read_wsd_xml(xml_path: str | Path, keys_path: str | Path | None = None) -> list[WsdSentence]:
    """The sentences of a unified-framework ``*.data.xml`` file, with gold keys from ``keys_path`` when given.

    ``<wf>`` and ``<instance>`` elements are the tokens, in order; token text is kept as written (SemCor multiword
    tokens contain spaces, ``took place``). Instances without a gold key get an empty key list. The XML is fed to
    ``ElementTree.XMLPullParser`` line by line so errors can name the line.
    """
    keys = read_wsd_keys(keys_path) if keys_path is not None else {}
    parser = ET.XMLPullParser(events=("start", "end"))
    sentences: list[WsdSentence] = []
    current: WsdSentence | None = None
    number = 0
    for number, line in iter_lines(xml_path):
        for event, element in _feed_xml(parser, line + "\n", xml_path, number):
            current = _wsd_event(event, element, current, sentences, keys, xml_path, number)
    _feed_xml(parser, None, xml_path, number)
    _check_instances(sentences, keys, xml_path, keys_path)
    return sentences


def _check_instances(sentences: list[WsdSentence], keys: dict[str, list[str]], xml_path: str | Path,
                     keys_path: str | Path | None) -> None:
    """An instance id used twice is refused (its gold keys would count twice); instances without a gold key and
    keys of no instance are reported (a score leaves them out)."""
    ids = [instance for sentence in sentences for _, instance, _ in sentence.instances]
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        twice = next(i for i in ids if i in seen or seen.add(i))
        line = [n for n, text in iter_lines(xml_path) if f'"{twice}"' in text][1:2] or [0]
        raise DataFormatError(xml_path, line[0], f"instance id {twice!r} used twice",
                              "every <instance> needs its own id (its gold keys are looked up by it)")
    if keys_path is None:
        return
    unkeyed = sum(1 for sentence in sentences for _, _, gold in sentence.instances if not gold)
    unused = len(set(keys) - set(ids))
    if unkeyed or unused:
        warnings.warn(f"{keys_path}: {unkeyed:,} of {len(ids):,} instances of {xml_path} have no gold key (they are "
                      f"left out of scores) and {unused:,} keys name no instance: do the two files belong together?")


def _feed_xml(parser: ET.XMLPullParser, data: str | None, path: str | Path,
              number: int) -> list[tuple[str, ET.Element]]:
    """Feed ``data`` (or close the parser when None) and return the new events; XML errors become DataFormatError."""
    try:
        if data is None:
            parser.close()
        else:
            parser.feed(data)
        return list(parser.read_events())
    except ET.ParseError as error:
        line = error.position[0] if error.position and error.position[0] else number
        raise DataFormatError(path, line, f"malformed XML ({error})", "fix the XML at that line") from None


def _wsd_event(event: str, element: ET.Element, current: WsdSentence | None, sentences: list[WsdSentence],
               keys: dict[str, list[str]], path: str | Path, number: int) -> WsdSentence | None:
    """Apply one parser event; returns the sentence being built (None between sentences)."""
    if element.tag == "sentence" and event == "start":
        if current is not None:
            raise DataFormatError(path, number, "<sentence> inside another <sentence>", "close the previous one")
        return WsdSentence([], [], [], [], sentence_id=element.get("id", ""))
    if element.tag == "sentence":
        sentences.append(current)
        element.clear()
        return None
    if element.tag in ("wf", "instance") and event == "end":
        if current is None:
            raise DataFormatError(path, number, f"<{element.tag}> outside a <sentence>", "put it inside a sentence")
        _add_wsd_token(current, element, keys, path, number)
    return current


def _add_wsd_token(sentence: WsdSentence, element: ET.Element, keys: dict[str, list[str]], path: str | Path,
                   number: int) -> None:
    """Append one ``<wf>``/``<instance>`` token (and its instance entry) to ``sentence``."""
    lemma, pos, text = element.get("lemma"), element.get("pos"), element.text
    if lemma is None or pos is None or not text:
        raise DataFormatError(path, number, f"<{element.tag}> without lemma, pos or text",
                              "every token needs lemma=\"...\" pos=\"...\" and its word as text")
    if element.tag == "instance":
        instance = element.get("id")
        if not instance:
            raise DataFormatError(path, number, "<instance> without an id", "add id=\"...\"")
        sentence.instances.append((len(sentence.tokens), instance, list(keys.get(instance, []))))
    sentence.tokens.append(text)
    sentence.lemmas.append(lemma)
    sentence.pos.append(pos)


def read_wordnet_index_sense(path: str | Path) -> dict[tuple[str, str], list[str]]:
    """WordNet 3.0 ``index.sense`` -> {(lemma, POS): sense keys in sense-number order (first = most frequent)}.

    Lines are ``sense_key synset_offset sense_number tag_cnt``; the lemma is the key before ``%`` and the digit
    after it is the synset type: 1 NOUN, 2 VERB, 3 and 5 (satellite) ADJ, 4 ADV.
    """
    ranked: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for number, line in iter_lines(path):
        if is_blank(line):
            continue
        fields = line.split(" ")
        lemma, _, lex = fields[0].partition("%")
        if len(fields) != 4 or not lemma or lex[:1] not in _WN_SS_TYPE_POS or not is_digits(fields[2]):
            raise DataFormatError(path, number, f"not an index.sense line: {line[:60]!r}",
                                  "expected 'lemma%ss_type:lex_filenum:lex_id:head:head_id offset sense_no tag_cnt'")
        ranked.setdefault((lemma, _WN_SS_TYPE_POS[lex[0]]), []).append((int(fields[2]), fields[0]))
    if not ranked:
        raise DataFormatError(path, 1, "no sense in the file", "give WordNet 3.0's index.sense")
    return {key: [sense for _, sense in sorted(senses)] for key, senses in ranked.items()}


def first_sense(index: dict[tuple[str, str], list[str]], lemma: str, pos: str) -> str | None:
    """The WordNet first sense key of ``lemma`` (lower-cased, spaces as ``_``) with POS NOUN/VERB/ADJ/ADV, or None."""
    senses = index.get((lemma.lower().replace(" ", "_"), pos))
    return senses[0] if senses else None
