"""Hostile uses of `elmo task train|eval|predict` and `elmo probe`: flags outside their choices, data whose metric
means nothing (one label, NER gold without an entity), predictions that must line up with the tokens the head was
trained on, and dev tags the probe's training data never shows. Each gives a correct result or one error line."""

import json

import pytest

from elmo.cli import main
from elmo.io.native import save_model
from elmo.tasks.commands import _checked_embedder, features_for, read_examples
from elmo.tasks.train import load_task, predict
from tests.conftest import random_bilm, small_config
from tests.reliability.tiny import cli, one_error_line, tiny_model

KMOU = """; 한석규가 사진관을 운영한다.
$<한석규:PS>가 사진관을 운영한다.
1\t한석규\tNNP\tB_PS
1\t가\tJKS\tO
2\t사진관\tNNG\tO
2\t을\tJKO\tO
3\t운영\tNNG\tO
3\t한다\tXSV\tO
3\t.\tSF\tO

; 서울에 갔다, 김철수와.
$<서울:LC>에 갔다, <김철수:PS>와.
1\t서울\tNNP\tB_LC
1\t에\tJKB\tO
2\t가\tVV\tO
2\t았다\tEP\tO
2\t,\tSP\tO
3\t김철수\tNNP\tB_PS
3\t와\tJKB\tO
3\t.\tSF\tO
"""
CONLLU = ("# text = I left b/c it rained .\n"
          + "".join(f"{i}\t{w}\t{w}\t{t}\t_\t_\t0\t_\t_\t_\n" for i, (w, t) in
                    enumerate(zip("I left b/c it rained .".split(), "PRON VERB SCONJ PRON VERB PUNCT".split()), 1))
          + "\n")


def _model_with_tokenizer(folder, name: str):
    bilm = random_bilm(small_config())
    bilm.tokenizer_name = name
    return save_model(bilm, folder)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.mark.parametrize("args, problem", [
    (["task", "train", "classify", "--format", "bogus"], "argument --format: invalid choice: 'bogus'"),
    (["task", "train", "classify", "--tokenize", "bogus"], "argument --tokenize: invalid choice: 'bogus'"),
    (["task", "train", "classify", "--format", "conllu"], "format 'conllu' does not fit task 'classify'"),
    (["task", "eval", "TASK", "--format", "bogus"], "argument --format: invalid choice: 'bogus'"),
    (["task", "predict", "TASK", "--tokenize", "bogus"], "argument --tokenize: invalid choice: 'bogus'"),
    (["probe", "word2vec", "DATA", "--out", "OUT", "--tokenize", "bogus"], "argument --tokenize: invalid choice"),
])
def test_a_format_or_tokenizer_outside_the_choices_is_a_usage_error(args, problem, model, tmp_path, capsys):
    """A wrong --format or --tokenize exits 2, before any file is read or folder made; otherwise exit 1, and
    `task train --tokenize bogus` only after reading both data files."""
    data = tmp_path / "data.tsv"
    data.write_text("text\tlabel\ngood film\tpos\nbad film\tneg\n")
    names = {"TASK": str(tmp_path / "task"), "DATA": str(data), "OUT": str(tmp_path / "w2v.txt")}
    args = [names.get(a, a) for a in args]
    if args[1] == "train":
        args += ["--train", str(data), "--dev", str(data), "--model", str(model), "--out", str(tmp_path / "t")]
    if args[1] == "eval":
        args += ["--data", str(data)]
    if args[1] == "predict":
        args += ["--input", str(data)]
    rc, err = cli(capsys, *args)
    assert rc == 2 and problem in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.tsv"]


def test_training_data_of_one_label_is_refused_naming_the_files(model, tmp_path, capsys):
    """One label in train and dev (a file sorted by label cut by --max-items): the head could only predict it and
    would report 100 %; refused before any embedding, nothing saved."""
    data = tmp_path / "one.tsv"
    data.write_text("text\tlabel\n" + "".join(f"film {i}\tpos\n" for i in range(6)))
    rc, err = cli(capsys, "task", "train", "classify", "--train", data, "--dev", data, "--model", model, "--out",
                  tmp_path / "t", "--cache", tmp_path / "c", "--epochs", "1", "--hidden", "4", "--quiet")
    assert rc == 1
    one_error_line(err, "one.tsv", "one label only ('pos')")
    assert not (tmp_path / "t").exists() and not (tmp_path / "c").exists()


def test_ner_gold_without_an_entity_is_refused_naming_the_file(model, tmp_path, capsys):
    """NER dev or eval data whose every tag is O: one line naming that file (before any embedding, for train);
    otherwise a line naming no file, after the training set was embedded and an epoch trained."""
    train, empty = tmp_path / "train.txt", tmp_path / "no-entity.txt"
    train.write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nGerman JJ B-NP B-MISC\ncall NN I-NP O\n")
    empty.write_text("EU NNP B-NP O\nrejects VBZ B-VP O\n")
    common = ["--model", model, "--cache", tmp_path / "c", "--epochs", "1", "--hidden", "4", "--quiet"]
    rc, err = cli(capsys, "task", "train", "ner", "--train", train, "--dev", empty, "--out", tmp_path / "bad",
                  *common)
    assert rc == 1
    one_error_line(err, "no-entity.txt: every tag is O")
    assert not (tmp_path / "c").exists()
    assert cli(capsys, "task", "train", "ner", "--train", train, "--dev", train, "--out", tmp_path / "t",
               *common)[0] == 0
    rc, err = cli(capsys, "task", "eval", tmp_path / "t", "--data", empty, "--cache", tmp_path / "c", "--quiet")
    assert rc == 1
    one_error_line(err, "no-entity.txt: every tag is O")


def _evaluated(task, data):
    """(tokens, tags) per example as `task eval` reads and predicts them."""
    head, config = load_task(task)
    inputs, _, _ = read_examples(config.task, data, config.data_format)
    features, tokens = features_for(_checked_embedder(config), inputs, task.parent / "c", False)
    return [list(zip(t, (config.labels[i] for i in p))) for t, p in zip(tokens, predict(head, features))]


def _predicted(capsys, task, raw, *flags):
    capsys.readouterr()
    assert main(["task", "predict", str(task), "--input", str(raw), "--cache", str(task.parent / "c"), *flags]) == 0
    return [[tuple(pair.rsplit("/", 1)) for pair in line.split()] for line in capsys.readouterr().out.splitlines()]


def test_predict_on_kmou_raw_sentences_reads_the_eojeols_eval_reads(tmp_path, capsys):
    """A KMOU head learns on eojeols with their punctuation ("운영한다."): `task predict` on the raw sentences gives
    those tokens and the tags `task eval` gives; otherwise the ko tokenizer split "운영한다 ." and "갔다 ,", tokens
    the head never saw, and every sentence with punctuation was tagged otherwise than in eval."""
    model = _model_with_tokenizer(tmp_path / "ko-model", "ko")
    data = tmp_path / "kmou.txt"
    data.write_text(KMOU, encoding="utf-8")
    task = tmp_path / "task"
    assert cli(capsys, "task", "train", "ner", "--format", "kmou", "--train", data, "--dev", data, "--model", model,
               "--out", task, "--cache", tmp_path / "c", "--epochs", "1", "--hidden", "4", "--quiet")[0] == 0
    raw = tmp_path / "raw.txt"
    raw.write_text("".join(line[2:] + "\n" for line in KMOU.splitlines() if line.startswith("; ")), encoding="utf-8")
    predicted = _predicted(capsys, task, raw)
    assert [[t for t, _ in s] for s in predicted] == [["한석규가", "사진관을", "운영한다."], ["서울에", "갔다,", "김철수와."]]
    assert predicted == _evaluated(task, data)
    record = json.loads((task / "task.json").read_text(encoding="utf-8"))
    assert record["tokenize"] == "whitespace"
    record["tokenize"] = None  # a KMOU head that recorded no tokenizer (trained before heads recorded one)
    (task / "task.json").write_text(json.dumps(record), encoding="utf-8")
    assert _predicted(capsys, task, raw) == predicted


def test_predict_tokenize_whitespace_gives_one_tag_per_given_token(tmp_path, capsys):
    """Text already tokenised as the training data (CoNLL tokens such as "b/c"): `--tokenize whitespace` tags each
    given token, as `task eval` does; the model's en tokenizer would split "b/c" into three tokens."""
    model = _model_with_tokenizer(tmp_path / "en-model", "en")
    data = tmp_path / "pos.conllu"
    data.write_text(CONLLU, encoding="utf-8")
    task = tmp_path / "task"
    assert cli(capsys, "task", "train", "pos", "--train", data, "--dev", data, "--model", model, "--out", task,
               "--cache", tmp_path / "c", "--epochs", "1", "--hidden", "4", "--quiet")[0] == 0
    raw = tmp_path / "raw.txt"
    raw.write_text("I left b/c it rained .\n\n", encoding="utf-8")
    assert [t for t, _ in _predicted(capsys, task, raw)[0]] == ["I", "left", "b", "/", "c", "it", "rained", "."]
    predicted = _predicted(capsys, task, raw, "--tokenize", "whitespace")
    assert predicted == _evaluated(task, data) + [[]]


def test_probe_pos_names_dev_tags_the_training_data_never_shows(model, tmp_path, capsys):
    """A dev tag absent from the probe's training sentences counts as an error in every row: a warning says so
    with its share of the dev tokens; otherwise the rows were lower without a word."""
    train, dev = tmp_path / "train.conllu", tmp_path / "dev.conllu"
    train.write_text(CONLLU, encoding="utf-8")
    dev.write_text(CONLLU.replace("\tSCONJ\t", "\tX\t"), encoding="utf-8")
    rc, err = cli(capsys, "probe", "pos", "--model", model, "--train", train, "--dev", dev, "--cache",
                  tmp_path / "c", "--epochs", "1", "--quiet")
    assert rc == 0 and "Traceback" not in err
    assert "dev.conllu: 1 tag(s) appear in the dev data but not in the training data, 16.7% of the dev tokens" in err


def test_ner_tags_that_are_not_bio_are_refused_or_said(model, tmp_path, capsys, caplog):
    """IOB1 tags read as WNUT (kept as written): an entity opened by I-LOC can never be decoded (I- only follows B-
    or I- of its type), so its recall was 0 without a word."""
    good, iob1 = tmp_path / "good.txt", tmp_path / "iob1.txt"
    good.write_text("EU\tB-ORG\nrejects\tO\n\nGerman\tB-MISC\ncall\tO\n", encoding="utf-8")
    iob1.write_text("EU\tB-ORG\nrejects\tO\n\nin\tO\nParis\tI-LOC\n", encoding="utf-8")
    common = ["--format", "wnut17", "--model", model, "--cache", tmp_path / "c", "--epochs", "1", "--hidden", "4",
              "--quiet"]
    rc, err = cli(capsys, "task", "train", "ner", "--train", iob1, "--dev", good, "--out", tmp_path / "t", *common)
    assert rc == 1
    one_error_line(err, "iob1.txt: tags I-LOC, and no file B-LOC", "--format conll2003")
    assert not (tmp_path / "t").exists()
    slip = tmp_path / "slip.txt"  # WNUT17's dev set has one: "I-person I-creative-work"
    slip.write_text("EU\tB-ORG\nrejects\tO\n\nthe\tB-LOC\nParis\tI-LOC\nshow\tI-ORG\n", encoding="utf-8")
    assert cli(capsys, "task", "train", "ner", "--train", good, "--dev", slip, "--out", tmp_path / "t", *common)[0] == 0
    assert "slip.txt: 1 I- tag(s) open an entity instead of continuing one (first: sentence 2 (counting from 1), " \
           "tag 3 is I-ORG after I-LOC)" in caplog.text
