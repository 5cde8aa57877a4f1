"""Dataset readers: small hand-written files for every format (malformed lines included) and the real dev files."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import pytest

from elmo.tasks.readers import (
    DataFormatError,
    LabelledText,
    TaggedSentence,
    first_sense,
    iob1_to_bio,
    read_conll2003,
    read_conllu,
    read_kmou_ner,
    read_label_text_tsv,
    read_sst_trees,
    read_stsa,
    read_wnut17,
    read_wordnet_index_sense,
    read_wsd_keys,
    read_wsd_xml,
)

from tests.conftest import data_path


def write(path: Path, text: str, gz: bool = False) -> Path:
    """Write ``text`` byte for byte (no newline translation), gzipped when asked."""
    data = text.encode("utf-8")
    if gz:
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


real = data_path  # a file of the real-data folder; the test is skipped when it is not there


def assert_format_error(excinfo: pytest.ExceptionInfo[DataFormatError], path: Path, line: int) -> None:
    message = str(excinfo.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert path.name in message and excinfo.value.line == line


# ---- IOB1 -> BIO -------------------------------------------------------------------------------------------------
def test_iob1_to_bio_starts_entities_with_b():
    iob1 = ["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-LOC", "I-ORG", "I-MISC", "O"]
    assert iob1_to_bio(iob1) == ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "B-ORG", "B-MISC", "O"]


def test_iob1_to_bio_leaves_bio_unchanged_and_rejects_junk():
    bio = ["B-PER", "I-PER", "B-PER", "O", "B-LOC"]
    assert iob1_to_bio(bio) == bio
    assert iob1_to_bio([]) == []
    with pytest.raises(ValueError, match="not an IOB tag"):
        iob1_to_bio(["O", "PER"])


# ---- CoNLL-2003 / WNUT-17 ----------------------------------------------------------------------------------------
CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC
call NN I-NP O

Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

Paris NNP B-NP I-LOC
"""


def test_conll2003_reads_sentences_and_converts_iob1(tmp_path):
    sentences = read_conll2003(write(tmp_path / "c.txt.gz", CONLL, gz=True))
    assert sentences == [
        TaggedSentence(["EU", "rejects", "German", "call"], ["B-ORG", "O", "B-MISC", "O"]),
        TaggedSentence(["Peter", "Blackburn"], ["B-PER", "I-PER"]),
        TaggedSentence(["Paris"], ["B-LOC"]),
    ]


def test_conll2003_trailing_spaces_are_not_a_column(tmp_path):
    path = write(tmp_path / "t.txt", "EU NNP B-NP B-ORG \nrejects VBZ B-VP O  \n")
    assert read_conll2003(path) == [TaggedSentence(["EU", "rejects"], ["B-ORG", "O"])]


def test_conll2003_bad_column_count_names_file_and_line(tmp_path):
    path = write(tmp_path / "bad.txt", "EU NNP B-NP B-ORG\nrejects VBZ O\n")
    with pytest.raises(DataFormatError, match="expected 4") as excinfo:
        read_conll2003(path)
    assert_format_error(excinfo, path, 2)


def test_conll2003_bad_tag_is_reported(tmp_path):
    path = write(tmp_path / "bad.txt", "\nEU NNP B-NP ORG\n")
    with pytest.raises(DataFormatError, match="bad tag") as excinfo:
        read_conll2003(path)
    assert_format_error(excinfo, path, 2)


def test_wnut17_tab_columns_and_odd_separators(tmp_path):
    # a TAB-only line (WNUT train) and a BOM-only line (WNUT dev) end sentences; a U+2028 inside a token is kept
    text = "Going\tO\nto\tO\nParis\tB-location\n\t\nNew\tB-location\nYork\u2028x\tI-location\n\ufeff\n"
    assert read_wnut17(write(tmp_path / "w.conll", text)) == [
        TaggedSentence(["Going", "to", "Paris"], ["O", "O", "B-location"]),
        TaggedSentence(["New", "York\u2028x"], ["B-location", "I-location"]),
    ]


def test_wnut17_space_separated_line_is_an_error(tmp_path):
    path = write(tmp_path / "w.conll", "Going\tO\nto O\n")
    with pytest.raises(DataFormatError) as excinfo:
        read_wnut17(path)
    assert_format_error(excinfo, path, 2)


# ---- CoNLL-U -----------------------------------------------------------------------------------------------------
CONLLU = (
    "# sent_id = 1\n# text = I don't know.\n"
    "1\tI\tI\tPRON\tPRP\t_\t4\tnsubj\t_\t_\n"
    "2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n"
    "2\tdo\tdo\tAUX\tVBP\t_\t4\taux\t_\t_\n"
    "3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t_\t_\n"
    "4\tknow\tknow\tVERB\tVB\t_\t0\troot\t_\t_\n"
    "4.1\tgo\tgo\tVERB\tVB\t_\t_\t_\t0:root\t_\n"
    "5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t_\t_\n"
    "\n"
    "# sent_id = 2\n"
    "1\tYes\tyes\tINTJ\tUH\t_\t0\troot\t_\t_\n"
    "\n"
)


def test_conllu_skips_comments_ranges_and_empty_nodes(tmp_path):
    path = write(tmp_path / "x.conllu", CONLLU)
    assert read_conllu(path) == [
        TaggedSentence(["I", "do", "n't", "know", "."], ["PRON", "AUX", "PART", "VERB", "PUNCT"]),
        TaggedSentence(["Yes"], ["INTJ"]),
    ]
    assert read_conllu(path, column="xpos")[0].tags == ["PRP", "VBP", "RB", "VB", "."]
    with pytest.raises(ValueError, match="column"):
        read_conllu(path, column="lemma")


def test_conllu_wrong_field_count_names_file_and_line(tmp_path):
    path = write(tmp_path / "x.conllu", "# c\n1\tI\tI\tPRON\tPRP\t_\t0\troot\t_\t_\n2 know know VERB\n")
    with pytest.raises(DataFormatError, match="10 TAB-separated") as excinfo:
        read_conllu(path)
    assert_format_error(excinfo, path, 3)


def test_conllu_without_the_chosen_tags_is_refused(tmp_path):
    """Many UD treebanks write '_' for every XPOS: trained on, it scored a meaningless 100 %."""
    path = write(tmp_path / "x.conllu", "1\tI\tI\tPRON\t_\t_\t0\troot\t_\t_\n")
    assert read_conllu(path)[0].tags == ["PRON"]
    with pytest.raises(DataFormatError, match=r"no XPOS tag \('_'\); .*--column upos") as excinfo:
        read_conllu(path, column="xpos")
    assert_format_error(excinfo, path, 1)


# ---- SST ---------------------------------------------------------------------------------------------------------
def test_sst_trees_root_label_and_leaves(tmp_path):
    text = ("(3 (2 It) (4 (4 (2 's) (3 good)) (2 .)))\n"
            "(1 (2 -LRB-) (1 (2 8\u00a01\\/2) (2 bad)) (2 -RRB-))\n"
            "(2 (2 ``) (2 (2 A\\/B) (2 `) (2 x) (2 ') (2 -LSB-) (2 \\*) (2 -RSB-)) (2 ''))\n")
    assert read_sst_trees(write(tmp_path / "t.txt", text)) == [
        LabelledText("It 's good .", "3"),
        LabelledText("( 8\u00a01/2 bad )", "1"),
        LabelledText('" A/B \' x \' [ * ] "', "2"),
    ]
    stsa = "1 -lrb- 8\u00a01\\/2 bad -rrb-\n2 `` a\\/b ` x ' -lsb- \\* -rsb- ''\n"
    assert [item.text for item in read_stsa(write(tmp_path / "s.txt", stsa))] == ["( 8\u00a01/2 bad )",
                                                                              '" a/b \' x \' [ * ] "']


@pytest.mark.parametrize("tree", [
    "(3 (2 It) (2 works)",        # '(' never closed
    "(3 (2 It) (2 works)))",      # one ')' too many
    "(3 (2 It)) (2 works)",       # two trees on one line
    "(9 (2 It) (2 works))",       # not an SST label
    "(3 (2 It) ())",              # empty node
    "(3 (2 a) (x b))",            # an inner node's label that is not an SST label
    "(3 (2 a) (2 ))",             # a node with a label but no words
])
def test_sst_malformed_tree_names_file_and_line(tmp_path, tree):
    path = write(tmp_path / "t.txt", f"(2 (2 fine) (2 .))\n{tree}\n")
    with pytest.raises(DataFormatError) as excinfo:
        read_sst_trees(path)
    assert_format_error(excinfo, path, 2)


def test_stsa_label_space_text(tmp_path):
    path = write(tmp_path / "stsa.fine.dev", "2 in his first stab .\n0 -lrb- bad -rrb- .\n")
    assert read_stsa(path) == [LabelledText("in his first stab .", "2"), LabelledText("( bad ) .", "0")]
    bad = write(tmp_path / "bad", "1 ok .\nnolabel\n")
    with pytest.raises(DataFormatError) as excinfo:
        read_stsa(bad)
    assert_format_error(excinfo, bad, 2)


# ---- label/text TSV ----------------------------------------------------------------------------------------------
def test_label_text_tsv_with_header(tmp_path):
    # quotes are text (no quoting), U+2028 does not split a record, CRLF endings are tolerated
    text = 'id\ttext\tlabel\n1\t"정말" 좋다\t1\r\n2\t별로\u2028임\t0\n\n'
    assert read_label_text_tsv(write(tmp_path / "n.tsv.gz", text, gz=True)) == [
        LabelledText('"정말" 좋다', "1"), LabelledText("별로\u2028임", "0")]


def test_label_text_tsv_missing_column_lists_the_header(tmp_path):
    path = write(tmp_path / "n.tsv", "id\tdocument\tlabel\n1\tgood\t1\n")
    with pytest.raises(DataFormatError, match="'id', 'document', 'label'") as excinfo:
        read_label_text_tsv(path)
    assert_format_error(excinfo, path, 1)
    assert read_label_text_tsv(path, text_column="document") == [LabelledText("good", "1")]


def test_label_text_tsv_empty_label_is_refused(tmp_path):
    """An empty label became a class whose predictions printed as blank lines."""
    path = write(tmp_path / "n.tsv", "text\tlabel\nthe cat sat\tpos\nhe went\t \n")
    with pytest.raises(DataFormatError, match="empty 'label'") as excinfo:
        read_label_text_tsv(path)
    assert_format_error(excinfo, path, 3)
    path = write(tmp_path / "t.tsv", "text\tlabel\nthe cat sat\tpos\n \tneg\n")
    with pytest.raises(DataFormatError, match="empty 'text'") as excinfo:
        read_label_text_tsv(path)
    assert_format_error(excinfo, path, 3)


def test_label_text_tsv_wrong_field_count(tmp_path):
    path = write(tmp_path / "n.tsv", "id\ttext\tlabel\n1\tgood\t1\n2\tgood\tbut\ttabbed\t0\n")
    with pytest.raises(DataFormatError, match="5 TAB-separated fields") as excinfo:
        read_label_text_tsv(path)
    assert_format_error(excinfo, path, 3)


# ---- KMOU NER ----------------------------------------------------------------------------------------------------
KMOU = (
    "; 한석규가 22일밤 서울에\r\n"
    "$<한석규:PS>가 <22일:DT><밤:TI> <서울:LC>에\r\n"
    "1\t한석규\tNNP\tB_PS\r\n"
    "1\t가\tJKS\tO\r\n"
    "2\t22\tSN\tB_DT\r\n"
    "2\t일\tNNB\tI\r\n"
    "2\t밤\tNNG\tB_TI\r\n"
    "3\t서울\tNNP\tB_LC\r\n"
    "3\t에\tJKB\tO\r\n"
    "\r\n"
    "; 오전 9시 \"미야자와\r\n"
    "$<오전 9시:TI> \"<미야자와:PS>\r\n"
    "1\t오전\tNNG\tB_TI\r\n"
    "2\t9\tSN\tI\r\n"
    "2\t시\tNNB\tI\r\n"
    "3\t\"\tSS\tO\r\n"
    "3\t미야자와\tNNP\tB_PS\r\n"
    "\r\n"
)


def test_kmou_eojeol_level_bio(tmp_path):
    sentences = read_kmou_ner(write(tmp_path / "ner.dev.gz", KMOU, gz=True))
    assert sentences == [
        TaggedSentence(["한석규가", "22일밤", "서울에"], ["B-PS", "B-DT", "B-LC"]),
        TaggedSentence(["오전", "9시", '"미야자와'], ["B-TI", "I-TI", "B-PS"]),
    ]


def test_kmou_morpheme_level_bio(tmp_path):
    sentences = read_kmou_ner(write(tmp_path / "ner.dev", KMOU), morphemes=True)
    assert sentences[0] == TaggedSentence(["한석규", "가", "22", "일", "밤", "서울", "에"],
                                          ["B-PS", "O", "B-DT", "I-DT", "B-TI", "B-LC", "O"])
    assert sentences[1].tags == ["B-TI", "I-TI", "I-TI", "O", "B-PS"]


def test_kmou_falls_back_to_morpheme_forms_when_words_do_not_match_and_says_so(tmp_path):
    """The tokens are then not the sentence's words (those `task predict` sees): a warning names the line."""
    text = "; 한석규가왔다\n$<한석규:PS>가왔다\n1\t한석규\tNNP\tB_PS\n1\t가\tJKS\tO\n2\t오\tVV\tO\n2\t았다\tEP\tO\n\n"
    with pytest.warns(UserWarning, match="1 sentence.*the first at line 1.*joined morpheme forms"):
        sentences = read_kmou_ner(write(tmp_path / "ner", text))
    assert sentences == [TaggedSentence(["한석규가", "오았다"], ["B-PS", "O"])]


def test_kmou_eojeol_starting_with_i_after_another_type_becomes_b(tmp_path):
    # eojeol 1's first entity is DT, the I in eojeol 2 continues the TI entity: BIO needs B-TI there
    text = "; 22일밤 늦게\n$x\n1\t22\tSN\tB_DT\n1\t일\tNNB\tI\n1\t밤\tNNG\tB_TI\n2\t늦게\tNNG\tI\n\n"
    assert read_kmou_ner(write(tmp_path / "ner", text))[0].tags == ["B-DT", "B-TI"]


@pytest.mark.parametrize("lines, bad_line", [
    (["; 가", "$가", "1\t가\tNNG"], 3),                       # 3 fields
    (["; 가", "$가", "1\t가\tNNG\tI"], 3),                     # I outside an entity
    (["; 가", "$가", "1\t가\tNNG\tB_PS", "3\t나\tNNG\tO"], 4),  # eojeol number jumps
    (["; 가", "$가", "1\t가\tNNG\tX_PS"], 3),                  # unknown tag
    (["; 가", "1\t가\tNNG\tO"], 2),                            # no '$' line
    (["가", "$가", "1\t가\tNNG\tO"], 1),                        # no '; ' line
])
def test_kmou_malformed_names_file_and_line(tmp_path, lines, bad_line):
    path = write(tmp_path / "ner.dev", "\r\n".join(lines) + "\r\n\r\n")
    with pytest.raises(DataFormatError) as excinfo:
        read_kmou_ner(path)
    assert_format_error(excinfo, path, bad_line)


# ---- WSD + WordNet -----------------------------------------------------------------------------------------------
WSD_XML = """<?xml version="1.0" encoding="UTF-8" ?>
<corpus lang="en" source="toy">
<text id="d000">
<sentence id="d000.s000">
<wf lemma="he" pos="PRON">He</wf>
<instance id="d000.s000.t000" lemma="take_place" pos="VERB">took place</instance>
<wf lemma="at" pos="ADP">at</wf>
<instance id="d000.s000.t001" lemma="bank" pos="NOUN">banks</instance>
</sentence>
<sentence id="d000.s001">
<instance id="d000.s001.t000" lemma="good" pos="ADJ">Good</instance>
</sentence>
</text>
</corpus>
"""
WSD_KEYS = "d000.s000.t000 take_place%2:30:00::\nd000.s000.t001 bank%1:17:01:: bank%1:14:00::\n"


def test_wsd_xml_with_keys(tmp_path):
    xml = write(tmp_path / "toy.data.xml.gz", WSD_XML, gz=True)
    with pytest.warns(UserWarning, match="1 of 3 instances .* have no gold key .* and 0 keys name no instance"):
        sentences = read_wsd_xml(xml, write(tmp_path / "toy.gold.key.txt", WSD_KEYS))
    assert [s.sentence_id for s in sentences] == ["d000.s000", "d000.s001"]
    first = sentences[0]
    assert first.tokens == ["He", "took place", "at", "banks"]
    assert first.lemmas == ["he", "take_place", "at", "bank"]
    assert first.pos == ["PRON", "VERB", "ADP", "NOUN"]
    assert first.instances == [(1, "d000.s000.t000", ["take_place%2:30:00::"]),
                               (3, "d000.s000.t001", ["bank%1:17:01::", "bank%1:14:00::"])]
    assert sentences[1].instances == [(0, "d000.s001.t000", [])]          # no gold key: empty list
    assert read_wsd_xml(xml)[0].instances[0] == (1, "d000.s000.t000", [])  # no key file at all


def test_wsd_instance_ids_used_twice_are_refused_naming_the_line(tmp_path):
    """The same id twice would score its gold keys twice."""
    twice = WSD_XML.replace('id="d000.s001.t000"', 'id="d000.s000.t001"')
    with pytest.raises(DataFormatError, match=r":11: instance id 'd000.s000.t001' used twice"):
        read_wsd_xml(write(tmp_path / "twice.data.xml", twice))


def test_wsd_malformed_xml_names_file_and_line(tmp_path):
    path = write(tmp_path / "bad.data.xml", WSD_XML.replace('<wf lemma="at" pos="ADP">at</wf>', "<wf lemma=at>"))
    with pytest.raises(DataFormatError, match="malformed XML") as excinfo:
        read_wsd_xml(path)
    assert_format_error(excinfo, path, 7)


def test_wsd_token_without_lemma_names_file_and_line(tmp_path):
    path = write(tmp_path / "bad.data.xml", WSD_XML.replace('<wf lemma="at" pos="ADP">', '<wf pos="ADP">'))
    with pytest.raises(DataFormatError, match="without lemma") as excinfo:
        read_wsd_xml(path)
    assert_format_error(excinfo, path, 7)


def test_wsd_keys_malformed(tmp_path):
    path = write(tmp_path / "k.txt", "a.t0 x%1:00:00::\na.t1\n")
    with pytest.raises(DataFormatError, match="no sense key") as excinfo:
        read_wsd_keys(path)
    assert_format_error(excinfo, path, 2)


INDEX_SENSE = """bank%1:14:00:: 08420278 1 25
bank%1:17:01:: 09213565 2 20
bank%2:40:00:: 02343110 5 0
good%5:00:00:ample:00 00105746 2 0
good%3:00:01:: 01123148 1 100
good%1:07:00:: 05159725 2 0
run%2:38:00:: 01926311 1 30
"""


def test_wordnet_index_sense_orders_by_sense_number(tmp_path):
    index = read_wordnet_index_sense(write(tmp_path / "index.sense", INDEX_SENSE))
    assert index[("bank", "NOUN")] == ["bank%1:14:00::", "bank%1:17:01::"]
    assert index[("good", "ADJ")] == ["good%3:00:01::", "good%5:00:00:ample:00"]  # 3 and 5 are both ADJ
    assert first_sense(index, "Bank", "NOUN") == "bank%1:14:00::"
    assert first_sense(index, "bank", "VERB") == "bank%2:40:00::"
    assert first_sense(index, "bank", "ADV") is None and first_sense(index, "river", "NOUN") is None


def test_wordnet_index_sense_malformed(tmp_path):
    path = write(tmp_path / "index.sense", "bank%1:14:00:: 08420278 1 25\nbank 08420278 2 20\n")
    with pytest.raises(DataFormatError) as excinfo:
        read_wordnet_index_sense(path)
    assert_format_error(excinfo, path, 2)


# ---- real files (counts from the data folder's README.md) ------------------------------------------------------
def n_tokens(sentences: list[TaggedSentence]) -> int:
    return sum(len(s.tokens) for s in sentences)


def test_real_conll2003_valid():
    sentences = read_conll2003(real("en/conll2003/valid.txt.gz"))
    assert (len(sentences), n_tokens(sentences)) == (3250, 51362)
    assert sum(tag.startswith("B-") for s in sentences for tag in s.tags) == 5942  # the standard testa entity count


def test_real_wnut17_dev():
    sentences = read_wnut17(real("en/wnut17/dev.conll.gz"))
    assert (len(sentences), n_tokens(sentences)) == (1009, 15733)


def test_real_ud_ewt_dev():
    sentences = read_conllu(real("en/ud-ewt/en_ewt-ud-dev.conllu.gz"))
    assert (len(sentences), n_tokens(sentences)) == (2001, 25147)
    assert sentences[0].tags == ["ADP", "DET", "PROPN", "VERB", "DET", "NOUN", "PUNCT"]


def test_real_ud_gsd_dev():
    sentences = read_conllu(real("ko/ud-gsd/ko_gsd-ud-dev.conllu.gz"), column="xpos")
    assert (len(sentences), n_tokens(sentences)) == (950, 11958)
    assert sentences[0].tags[:2] == ["NNG", "VA+ETM"]


def test_real_sst_dev_trees_match_stsa_fine():
    trees = read_sst_trees(real("en/sst/trees/dev.txt.gz"))
    stsa = read_stsa(real("en/sst/stsa.fine.dev.gz"))
    assert len(trees) == len(stsa) == 1101
    assert {item.label for item in trees} == set("01234")
    # the stsa file holds the same sentences, lower-cased (in another order); both readers undo the PTB escapes
    as_stsa = Counter((t.text.lower(), t.label) for t in trees)
    assert not any(escape in t.text for t in trees for escape in ("-LRB-", "``", "''", "\\/"))
    assert as_stsa == Counter((s.text, s.label) for s in stsa)


def test_real_stsa_binary_dev():
    items = read_stsa(real("en/sst/stsa.binary.dev.gz"))
    assert len(items) == 872 and {item.label for item in items} == {"0", "1"}


def test_real_nsmc_dev():
    items = read_label_text_tsv(real("ko/nsmc/dev.tsv.gz"))
    assert len(items) == 10000
    assert Counter(item.label for item in items) == {"0": 5049, "1": 4951}


def test_real_kmou_dev():
    path = real("ko/kmou-ner/ner.dev.gz")
    eojeols, morphemes = read_kmou_ner(path), read_kmou_ner(path, morphemes=True)
    assert len(eojeols) == len(morphemes) == 366
    assert (n_tokens(eojeols), n_tokens(morphemes)) == (6448, 14077)
    assert eojeols[0].tokens[0] == "한석규가" and eojeols[0].tags[0] == "B-PS"
    for sentence in eojeols:
        assert iob1_to_bio(sentence.tags) == sentence.tags  # valid BIO: no I-X without a preceding X


def test_real_semeval2007_first_sense_baseline():
    folder = real("en/wsd/semeval2007")
    sentences = read_wsd_xml(folder / "semeval2007.data.xml.gz", folder / "semeval2007.gold.key.txt.gz")
    instances = [(s, i, keys) for s in sentences for i, _, keys in s.instances]
    assert (len(sentences), sum(len(s.tokens) for s in sentences)) == (135, 3201)
    assert (len(instances), sum(len(keys) for _, _, keys in instances)) == (455, 459)
    index = read_wordnet_index_sense(real("en/wordnet/index.sense.gz"))
    assert sum(map(len, index.values())) == 206941
    correct = sum(first_sense(index, s.lemmas[i], s.pos[i]) in keys for s, i, keys in instances)
    assert round(100 * correct / len(instances), 1) == 55.2  # WordNet first sense on SE07, as in docs/results.md


@pytest.mark.parametrize("reader,content,problem", [
    ("wnut", "\tB-PER\n", ":1: an empty token"),
    ("conllu", "1\t\tthe\tDET\t_\t_\t0\troot\t_\t_\n", ":1: an empty FORM field"),
    ("conllu", "1\tthe\tthe\t\t_\t_\t0\troot\t_\t_\n", ":1: an empty UPOS field"),
    ("tsv", "text\tlabel\tlabel\na film\tpos\tneg\n", ":1: the header names column 'label' 2 times"),
    ("stsa", "\u00b2 a film\n", ":1:"),
])
def test_malformed_fields_are_refused_naming_the_line(tmp_path, reader, content, problem):
    path = tmp_path / "data.txt"
    path.write_text(content, encoding="utf-8")
    read = {"wnut": read_wnut17, "conllu": read_conllu, "tsv": read_label_text_tsv, "stsa": read_stsa}[reader]
    with pytest.raises(DataFormatError, match=problem):
        read(path)


def test_a_wsd_probe_over_a_sentence_without_words_names_the_file(tmp_path):
    from elmo.errors import ElmoError
    from elmo.tasks.probes import probe_wsd

    empty = WSD_XML.replace('<sentence id="d000.s001">\n<instance id="d000.s001.t000" lemma="good" pos="ADJ">Good'
                            '</instance>\n</sentence>', '<sentence id="d000.s001">\n</sentence>')
    assert empty != WSD_XML
    xml, keys = write(tmp_path / "toy.data.xml", empty), write(tmp_path / "toy.gold.key.txt", WSD_KEYS)
    index = write(tmp_path / "index.sense", INDEX_SENSE)
    with pytest.raises(ElmoError, match="toy.data.xml: <sentence> 2 .counting from 1. has no words"):
        probe_wsd(None, xml, keys, xml, keys, index, tmp_path / "cache")  # refused before the embedder is used
    # training data without a keyed instance, or an index.sense without senses: refused, not a row of scores
    xml, no_keys = write(tmp_path / "ok.data.xml", WSD_XML), write(tmp_path / "none.key.txt", "")
    with pytest.raises(ElmoError, match="none.key.txt: no instance of .*ok.data.xml has a gold key"):
        probe_wsd(None, xml, no_keys, xml, keys, index, tmp_path / "cache")
    with pytest.raises(DataFormatError, match="no sense in the file"):
        probe_wsd(None, xml, keys, xml, keys, write(tmp_path / "empty.sense", "\n"), tmp_path / "cache")


def test_a_tsv_header_without_the_columns_says_what_to_rename(tmp_path):
    """The advice was Python's text_column=/label_column=, which the command line has no flag for (NSMC's own
    header is `id document label`)."""
    from elmo.tasks.readers.classification import read_label_text_tsv

    path = tmp_path / "nsmc.tsv"
    path.write_text("id\tdocument\tlabel\n1\tgood film\t1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="rename the header's columns to 'text' and 'label'"):
        read_label_text_tsv(path)


def test_conllu_sentences_without_a_blank_line_between_are_refused(tmp_path):
    """Two sentences with no blank line between them were read as one (a wrong count and a wrong context)."""
    path = write(tmp_path / "x.conllu", "# sent_id = 1\n1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_\n"
                                         "# sent_id = 2\n1\tBye\tbye\tINTJ\tUH\t_\t0\troot\t_\t_\n")
    with pytest.raises(DataFormatError, match="word ID 1 where 2 was expected") as excinfo:
        read_conllu(path)
    assert_format_error(excinfo, path, 4)
    assert "a blank line is missing" in str(excinfo.value)
