"""Readers for the downstream datasets, in the formats they are published in.

* NER: CoNLL-2003 (``word POS chunk NER``, IOB1 -> BIO), WNUT-17 (``token<TAB>tag``, BIO), KMOU 2016klp (Korean,
  morpheme lines, returned per eojeol or per morpheme).
* POS: CoNLL-U (UD EWT, UD Korean-GSD), UPOS or XPOS.
* Sentiment: SST PTB-style trees, the ``stsa.*`` sentence files (``label text``), label/text TSV files (NSMC).
* WSD: Raganato et al.'s unified framework (``*.data.xml`` + ``*.gold.key.txt``) and WordNet 3.0 ``index.sense``.

Every reader takes a plain or gzipped file (detected by its magic bytes), splits lines on ``"\\n"`` only
(``str.splitlines`` would also split on U+2028/U+0085, which occur inside some texts) and drops one trailing
``"\\r"`` per line (KMOU has CRLF endings). Anything malformed raises :class:`DataFormatError`, whose message starts
with ``path:line:`` so the offending line can be opened directly.

The readers live by format family: :mod:`~elmo.tasks.readers.tagging` (NER and POS),
:mod:`~elmo.tasks.readers.classification` (sentiment), :mod:`~elmo.tasks.readers.wsd` (WSD and WordNet); every
public name is importable from here.
"""

from elmo.tasks.readers.classification import LabelledText, read_label_text_tsv, read_sst_trees, read_stsa
from elmo.tasks.readers.common import DataFormatError
from elmo.tasks.readers.tagging import (
    TaggedSentence,
    iob1_to_bio,
    read_conll2003,
    read_conllu,
    read_kmou_ner,
    read_wnut17,
)
from elmo.tasks.readers.wsd import WsdSentence, first_sense, read_wordnet_index_sense, read_wsd_keys, read_wsd_xml

__all__ = [
    "DataFormatError",
    "LabelledText",
    "TaggedSentence",
    "WsdSentence",
    "first_sense",
    "iob1_to_bio",
    "read_conll2003",
    "read_conllu",
    "read_kmou_ner",
    "read_label_text_tsv",
    "read_sst_trees",
    "read_stsa",
    "read_wnut17",
    "read_wordnet_index_sense",
    "read_wsd_keys",
    "read_wsd_xml",
]
