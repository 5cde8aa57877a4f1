"""Downstream task heads on cached features: the CRF against brute force, the feature cache, and every
`elmo task` pipeline end to end on small slices of the real data sets (with the tiny fixture biLM)."""

from __future__ import annotations

import itertools
import shutil

import numpy as np
import pytest
import torch

from elmo.cli import main
from elmo.embed import Embedder
from elmo.tasks.features import cached_features
from elmo.tasks.heads import CRF, LayerInput
from tests.conftest import DATA, OPTIONS, WEIGHTS, data_path, needs_data


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fixture-model")
    shutil.copy(OPTIONS, folder / "options.json")
    shutil.copy(WEIGHTS, folder / "weights.hdf5")
    return folder


def test_crf_likelihood_and_viterbi_match_brute_force():
    torch.manual_seed(0)
    crf = CRF(3)
    for p in crf.parameters():
        torch.nn.init.normal_(p)
    emissions = torch.randn(2, 4, 3)  # (B, T, K)
    mask = torch.tensor([[True] * 4, [True, True, True, False]])
    paths = [tags for n in (4, 3) for tags in itertools.product(range(3), repeat=n)]
    for b, n in enumerate((4, 3)):
        def total(tags):
            s = crf.start[tags[0]] + crf.end[tags[-1]] + sum(emissions[b, t, k] for t, k in enumerate(tags))
            return s + sum(crf.transitions[a, c] for a, c in zip(tags, tags[1:]))
        candidates = [p for p in paths if len(p) == n]
        scores = torch.stack([total(p) for p in candidates])
        gold = candidates[5]
        padded = torch.tensor(list(gold) + [0] * (4 - n)).unsqueeze(0)
        nll = crf.nll(emissions[b : b + 1], padded, mask[b : b + 1])
        assert torch.allclose(nll, torch.logsumexp(scores, 0) - total(gold), atol=1e-5)
        assert crf.decode(emissions[b : b + 1], mask[b : b + 1])[0] == list(candidates[int(scores.argmax())])



def _valid_bio(tags: list[str]) -> bool:
    previous = "O"
    for tag in tags:
        if tag.startswith("I-") and previous[2:] != tag[2:]:
            return False
        previous = tag
    return True


def test_constrained_viterbi_is_the_best_valid_bio_sequence():
    """With labels, decoding never puts I-X after O or after another type, nor first; it is the brute-force best
    of the sequences that obey BIO (and differs from the unconstrained best on these random scores)."""
    torch.manual_seed(1)
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    crf = CRF(5, labels)
    for p in crf.parameters():
        torch.nn.init.normal_(p, std=2.0)
    emissions = torch.randn(6, 4, 5) * 2  # (B, T, K)
    mask = torch.ones(6, 4, dtype=torch.bool)
    free = CRF(5)
    free.load_state_dict(crf.state_dict())  # the constraints are not part of the saved weights
    changed = 0
    for b in range(6):
        def total(tags):
            s = crf.start[tags[0]] + crf.end[tags[-1]] + sum(emissions[b, t, k] for t, k in enumerate(tags))
            return s + sum(crf.transitions[a, c] for a, c in zip(tags, tags[1:]))
        valid = [p for p in itertools.product(range(5), repeat=4) if _valid_bio([labels[k] for k in p])]
        best = valid[int(torch.stack([total(p) for p in valid]).argmax())]
        assert crf.decode(emissions[b : b + 1], mask[b : b + 1])[0] == list(best)
        changed += free.decode(emissions[b : b + 1], mask[b : b + 1])[0] != list(best)
    assert changed > 0
    assert CRF(3, ["A", "B", "I-"]).allowed.all()  # tags not in BIO form are left free

def test_layer_input_modes():
    features = torch.randn(2, 5, 3, 8)  # (B, T, L+1, D)
    assert torch.equal(LayerInput(3, "token")(features), features[:, :, 0])
    assert torch.equal(LayerInput(3, "2")(features), features[:, :, 2])
    assert torch.allclose(LayerInput(3, "mix")(features), features.mean(2), atol=1e-6)  # w = 0, gamma = 1
    with pytest.raises(ValueError, match="layer number below 3"):
        LayerInput(3, "7")


def test_feature_cache_is_reused_and_matches_the_embedder(model_dir, tmp_path):
    embedder = Embedder.from_pretrained(str(model_dir))
    sentences = [["The", "bank", "."], ["A", "river", "bank", "flooded", "."]]
    cache = cached_features(embedder, sentences, tmp_path, progress=False)
    expected = embedder.embed(sentences)
    for i in range(2):
        assert np.allclose(cache[i], expected[i].transpose(1, 0, 2), atol=2e-3)  # float16 storage
    files = list(tmp_path.iterdir())
    assert len(files) == 1
    again = cached_features(embedder, sentences, tmp_path, progress=False)
    assert again.path == cache.path and len(list(tmp_path.iterdir())) == 1
    cached_features(embedder, sentences[:1], tmp_path, progress=False)
    assert len(list(tmp_path.iterdir())) == 2  # different sentences, different file


@pytest.mark.slow
@pytest.mark.parametrize("task,fmt,train,dev,extra", [
    ("ner", "conll2003", "en/conll2003/train.txt.gz", "en/conll2003/valid.txt.gz", []),
    ("pos", "conllu", "en/ud-ewt/en_ewt-ud-train.conllu.gz", "en/ud-ewt/en_ewt-ud-dev.conllu.gz", []),
    ("pos", "conllu", "ko/ud-gsd/ko_gsd-ud-train.conllu.gz", "ko/ud-gsd/ko_gsd-ud-dev.conllu.gz", []),
    ("ner", "kmou", "ko/kmou-ner/ner.train.gz", "ko/kmou-ner/ner.dev.gz", []),
    ("classify", "tsv", "ko/nsmc/train.tsv.gz", "ko/nsmc/dev.tsv.gz", ["--tokenize", "ko"]),
    ("classify", "sst", "en/sst/trees/train.txt.gz", "en/sst/trees/dev.txt.gz", []),
])
def test_task_pipelines_end_to_end(task, fmt, train, dev, extra, model_dir, tmp_path, capsys):
    data_path(train), data_path(dev)  # skips when the real-data folder does not have them
    out = tmp_path / "task"
    common = ["--format", fmt, "--cache", str(tmp_path / "cache"), "--max-items", "40", "--quiet"]
    assert main(["task", "train", task, "--train", str(DATA / train), "--dev", str(DATA / dev), "--model",
                 str(model_dir), "--out", str(out), "--epochs", "2", "--hidden", "16", "--max-dev", "40", *common,
                 *extra]) == 0
    assert "best" in capsys.readouterr().out
    # no --format: eval reads the file in the format the model was trained on
    assert main(["task", "eval", str(out), "--data", str(DATA / dev), *common[2:]]) == 0
    metric = float(capsys.readouterr().out.split()[-5])
    assert 0.0 <= metric <= 1.0
    (tmp_path / "raw.txt").write_text("The bank is closed .\n\n은행 에 갔다\n", encoding="utf-8")
    assert main(["task", "predict", str(out), "--input", str(tmp_path / "raw.txt"), "--cache",
                 str(tmp_path / "cache")]) == 0
    printed = capsys.readouterr().out.split("\n")
    assert len(printed) == 4 and printed[1] == "" and printed[0] and printed[2] and printed[3] == ""  # line for line


@needs_data("en/ud-ewt/en_ewt-ud-train.conllu.gz", "en/ud-ewt/en_ewt-ud-dev.conllu.gz")
def test_pos_tagger_learns_beyond_the_majority_tag(model_dir, tmp_path):
    from elmo.tasks.commands import train_task

    ewt = DATA / "en/ud-ewt"
    config = train_task("pos", ewt / "en_ewt-ud-train.conllu.gz", ewt / "en_ewt-ud-dev.conllu.gz", tmp_path / "t",
                        model=str(model_dir), epochs=4, hidden_dim=32, cache=tmp_path / "c", max_items=300,
                        max_dev=300, learning_rate=1e-2, batch_size=8, progress=False)
    assert max(config.history) > 0.35  # the most frequent tag (NOUN) is about 17% of EWT dev tokens


def test_bad_task_input_is_one_clear_error(model_dir, tmp_path, capsys):
    bad = tmp_path / "bad.conll"
    bad.write_text("EU NNP B-NP B-ORG\nrejects VBZ\n", encoding="utf-8")
    assert main(["task", "train", "ner", "--train", str(bad), "--dev", str(bad), "--model", str(model_dir),
                 "--out", str(tmp_path / "o"), "--quiet"]) == 1
    assert f"{bad}:2:" in capsys.readouterr().err
    assert main(["task", "train", "classify", "--format", "conllu", "--train", str(bad), "--dev", str(bad),
                 "--model", str(model_dir), "--out", str(tmp_path / "o"), "--quiet"]) == 2  # a flag: exit 2
    assert "does not fit task" in capsys.readouterr().err
    for value in ("top", " 1", "1.0", "\u0663"):  # a flag's form: a usage error, exit 2, before any data is read
        assert main(["task", "train", "classify", "--train", str(bad), "--dev", str(bad), "--model", str(model_dir),
                     "--out", str(tmp_path / "o"), "--input", value, "--quiet"]) == 2
        assert "expected mix, token or a layer number" in capsys.readouterr().err


@pytest.mark.slow
@needs_data("en/ud-ewt/en_ewt-ud-train.conllu.gz", "en/wsd/semcor/semcor.data.xml.gz", "en/wordnet/index.sense.gz")
def test_probe_commands_print_a_row_per_layer_and_the_static_baseline(model_dir, tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("\n".join(["the bank of the river", "money in the bank", "a river runs"] * 50) + "\n")
    w2v = tmp_path / "w2v.txt"
    assert main(["probe", "word2vec", str(text), "--out", str(w2v), "--dim", "8", "--epochs", "1"]) == 0
    common = ["--model", str(model_dir), "--static", str(w2v), "--cache", str(tmp_path / "c"),
              "--max-sentences", "30", "--quiet"]
    ewt = DATA / "en/ud-ewt"
    assert main(["probe", "pos", "--train", str(ewt / "en_ewt-ud-train.conllu.gz"), "--dev",
                 str(ewt / "en_ewt-ud-dev.conllu.gz"), "--epochs", "1", *common]) == 0
    out = capsys.readouterr().out
    for row in ("layer 0", "layer 1", "layer 2", "mix", "word2vec"):
        assert f"\n{row}" in out
    wsd = DATA / "en/wsd"
    assert main(["probe", "wsd", "--semcor-xml", str(wsd / "semcor/semcor.data.xml.gz"), "--semcor-keys",
                 str(wsd / "semcor/semcor.gold.key.txt.gz"), "--eval-xml",
                 str(wsd / "semeval2007/semeval2007.data.xml.gz"), "--eval-keys",
                 str(wsd / "semeval2007/semeval2007.gold.key.txt.gz"), "--wordnet",
                 str(DATA / "en/wordnet/index.sense.gz"), *common]) == 0
    out = capsys.readouterr().out
    rows = {line[:22].strip(): float(line[22:]) for line in out.strip().split("\n")[2:]}
    assert set(rows) == {"layer 0", "layer 1", "layer 2", "mean of layers", "word2vec (context)",
                         "first WordNet sense"}
    assert abs(rows["first WordNet sense"] - 55.16) < 0.01  # 251 / 455 on SemEval-2007, the known baseline


@needs_data("en/ud-ewt/en_ewt-ud-train.conllu.gz", "en/ud-ewt/en_ewt-ud-dev.conllu.gz")
def test_saved_task_models_refuse_damage_and_a_different_bilm(model_dir, tmp_path, capsys):
    from elmo.tasks.commands import train_task

    ewt = DATA / "en/ud-ewt"
    out = tmp_path / "t"
    train_task("pos", ewt / "en_ewt-ud-train.conllu.gz", ewt / "en_ewt-ud-dev.conllu.gz", out, model=str(model_dir),
               epochs=1, hidden_dim=8, cache=tmp_path / "c", max_items=20, max_dev=20, progress=False)
    other = tmp_path / "other-model"
    shutil.copytree(model_dir, other)
    import h5py

    with h5py.File(other / "weights.hdf5", "r+") as f:  # same shapes, different weights
        f["char_embed"][1] += 0.5
    import json

    record = json.loads((out / "task.json").read_text())
    (out / "task.json").write_text(json.dumps(record | {"model": str(other)}))
    data = ["--data", str(ewt / "en_ewt-ud-dev.conllu.gz"), "--max-items", "5", "--quiet"]
    assert main(["task", "eval", str(out), *data]) == 1
    assert "not the one this task model was trained on" in capsys.readouterr().err
    (out / "head.safetensors").write_bytes(b"garbage")
    assert main(["task", "eval", str(out), *data]) == 1
    assert "not a valid task model" in capsys.readouterr().err
    assert main(["task", "train", "pos", "--train", str(ewt / "en_ewt-ud-dev.conllu.gz"), "--dev",
                 str(ewt / "en_ewt-ud-dev.conllu.gz"), "--model", str(model_dir), "--out", str(tmp_path / "z"),
                 "--epochs", "0", "--max-items", "5", "--quiet"]) == 2
    assert "--epochs: must be at least 1" in capsys.readouterr().err


def test_eval_counts_labels_unseen_in_training_as_errors(model_dir, tmp_path, capsys):
    """A dev or test file may hold a label the training file lacked: the head cannot predict it, so it is scored
    as an error (a missed span for NER), with a warning, instead of refusing the whole evaluation."""
    seen = tmp_path / "seen.conll"
    seen.write_text("Anna NNP B-NP B-PER\nsmiled VBD B-VP O\n\nBob NNP B-NP B-PER\nran VBD B-VP O\n",
                    encoding="utf-8")
    unseen = tmp_path / "unseen.conll"
    unseen.write_text("Anna NNP B-NP B-PER\nsmiled VBD B-VP O\n\nIBM NNP B-NP B-ORG\nran VBD B-VP O\n",
                      encoding="utf-8")
    out = tmp_path / "t"
    assert main(["task", "train", "ner", "--train", str(seen), "--dev", str(seen), "--model", str(model_dir),
                 "--out", str(out), "--epochs", "1", "--cache", str(tmp_path / "c"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["task", "eval", str(out), "--data", str(unseen), "--cache", str(tmp_path / "c"), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "B-ORG" in captured.err and "count as errors" in captured.err
    from elmo.tasks.commands import evaluate_task

    with pytest.warns(UserWarning, match="never saw"):
        _, f1 = evaluate_task(out, unseen, cache=tmp_path / "c", progress=False)
    assert f1 <= 2 / 3 + 1e-9  # the ORG span can never be found: recall is at most 1/2


def test_wsd_probe_breaks_near_ties_by_wordnet_order():
    """Two senses with the same vector up to float rounding (seen with one word form only, at layer 0): the sense
    WordNet lists first wins, whichever vector rounding made a hair larger; a clear winner still wins."""
    from elmo.tasks.probes import _f1

    v = np.array([0.6, 0.8])
    turned = np.array([0.6 + 1e-4 * 0.8, 0.8 - 1e-4 * 0.6])  # cosine with v: 1 - 5e-9
    senses = {"first%1": turned, "second%1": v, "other%1": np.array([1.0, 0.0])}
    instance = (None, 0, "id", ["first%1"], v)
    read = lambda s, t, vectors: vectors  # noqa: E731
    assert _f1([instance], lambda s, t: ["first%1", "second%1"], senses, read) == 1.0
    assert _f1([instance], lambda s, t: ["other%1", "first%1"], senses, read) == 1.0
    assert _f1([instance], lambda s, t: ["second%1", "first%1"], senses, read) == 0.0


@pytest.mark.parametrize("damage", ["garbage", "truncated", "no offsets", "offsets past the vectors",
                                    "89 GiB claimed, none stored", "float32 vectors"])
def test_a_damaged_feature_cache_is_one_error_naming_it(tmp_path, damage):
    """Each refused in one line, the sizes before anything is read: a 2 kB file claiming (10^9, 3, 16) unwritten
    vectors was read whole (a MemoryError traceback asking for 89 GiB, or the machine's memory)."""
    import h5py

    from elmo.errors import ElmoError
    from elmo.tasks.features import FeatureCache

    path = tmp_path / "features-x.h5"
    with h5py.File(path, "w") as f:
        if damage != "no offsets":
            f["offsets"] = np.array([0, 2, 9 if damage == "offsets past the vectors" else 5])
        if damage == "89 GiB claimed, none stored":
            f.create_dataset("vectors", shape=(10**9, 3, 16), dtype=np.float16, chunks=(1024, 3, 16))
        else:
            f["vectors"] = np.zeros((5, 3, 4), dtype=np.float32 if damage == "float32 vectors" else np.float16)
    if damage == "garbage":
        path.write_bytes(b"\x89HDF\r\n" + bytes(range(256)) * 4)
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:1500])
    with pytest.raises(ElmoError, match="damaged feature cache.*delete it"):
        FeatureCache(path)


@pytest.mark.parametrize("content,problem", [
    (b"hello world\n", ":1: the header"), (b"", ":1: no word vectors"), (b"2 2\na x y\n", ":2: a value that is not"),
    (b"2 2\na 1 2 3\n", ":2: 3 values, expected 2"), (b"2 2\na \xff 2\n", ":2:"),
    (b"2 2\na 1 nan\n", ":2: a value that is NaN"), (b"2 2\na 1 2\nb inf 2\n", ":3: a value that is NaN"),
    (b"10 2\na 1 2\nb 3 4\n", ":1: the header says 10 words and the file holds 2"),  # cut short: was accepted
    (b"2 2\na 1 2\na 3 4\n", ":3: the word 'a' again \\(line 2\\)")])  # the last vector was kept in silence
def test_a_bad_word2vec_file_is_one_error_naming_the_line(tmp_path, content, problem):
    from elmo.errors import ElmoError
    from elmo.tasks.probes import load_word_vectors

    (tmp_path / "w.txt").write_bytes(content)
    with pytest.raises(ElmoError, match=problem):
        load_word_vectors(tmp_path / "w.txt")


@pytest.mark.parametrize("text", ["", "the bank . a river\n"])
def test_word2vec_on_text_without_a_frequent_word_is_one_line(tmp_path, capsys, text):
    """gensim failed deep inside (you must first build vocabulary) on empty text or words seen fewer than 3 times."""
    pytest.importorskip("gensim")
    (tmp_path / "t.txt").write_text(text)
    assert main(["probe", "word2vec", str(tmp_path / "t.txt"), "--out", str(tmp_path / "w.txt")]) == 1
    err = capsys.readouterr().err
    assert "no word occurs 3 times or more" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "w.txt").exists()


def test_word2vec_lines_ending_in_a_space_as_the_c_tool_writes_them(tmp_path):
    from elmo.tasks.probes import load_word_vectors

    (tmp_path / "w.txt").write_text("2 2\na 1 2 \nb 3 4 \n")
    assert {k: v.tolist() for k, v in load_word_vectors(tmp_path / "w.txt").items()} == {"a": [1, 2], "b": [3, 4]}


def test_a_pos_probe_with_an_empty_dev_set_is_refused(model_dir, tmp_path, capsys):
    train = tmp_path / "train.conllu"
    train.write_text("1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n2\tbank\tbank\tNOUN\t_\t_\t0\troot\t_\t_\n\n")
    (tmp_path / "empty.conllu").write_text("")
    rc = main(["probe", "pos", "--train", str(train), "--dev", str(tmp_path / "empty.conllu"), "--model",
               str(model_dir), "--cache", str(tmp_path / "c"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 1 and "empty.conllu: no tagged tokens" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("bad", ["input", "train data"])
def test_a_failed_task_train_leaves_no_folder_it_made(model_dir, tmp_path, capsys, bad):
    good = tmp_path / "good.tsv"
    good.write_text("text\tlabel\na fine film\tpos\na bad film\tneg\n")
    broken = tmp_path / "broken.tsv"
    broken.write_text("no header here\n")
    out = tmp_path / "new" / "task"
    rc = main(["task", "train", "classify", "--train", str(broken if bad == "train data" else good), "--dev",
               str(good), "--model", str(model_dir), "--out", str(out), "--cache", str(tmp_path / "c"), "--quiet",
               *(["--input", "7"] if bad == "input" else [])])
    assert rc in (1, 2) and "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())  # no embedding work was done


def test_a_task_model_without_a_model_id_is_checked_against_the_bilms_sizes(model_dir):
    from elmo.errors import ElmoError
    from elmo.tasks.commands import _checked_embedder
    from elmo.tasks.train import TaskConfig

    config = TaskConfig(task="classify", labels=["a", "b"], n_layers=3, dim=16, model=str(model_dir))
    with pytest.raises(ElmoError, match="this task model reads 3 of 16"):
        _checked_embedder(config)


def test_predict_keeps_a_line_for_every_input_line_and_names_untokenisable_ones(model_dir, tmp_path, capsys):
    good = tmp_path / "good.tsv"
    good.write_text("text\tlabel\na fine film\tpos\na bad film\tneg\n")
    assert main(["task", "train", "classify", "--train", str(good), "--dev", str(good), "--model", str(model_dir),
                 "--out", str(tmp_path / "t"), "--cache", str(tmp_path / "c"), "--epochs", "1", "--hidden", "4",
                 "--tokenize", "en", "--quiet"]) == 0
    (tmp_path / "raw.txt").write_text("good movie\n\n<br />\nbad\n")
    capsys.readouterr()
    assert main(["task", "predict", str(tmp_path / "t"), "--input", str(tmp_path / "raw.txt"), "--cache",
                 str(tmp_path / "c")]) == 0
    captured = capsys.readouterr()
    assert "raw.txt: line(s) 3 have no tokens" in captured.err
    printed = captured.out.split("\n")
    assert len(printed) == 5 and printed[0] in ("pos", "neg") and printed[1:3] == ["", ""] and printed[3]
    dev = tmp_path / "dev.tsv"
    dev.write_text("text\tlabel\na fine film\tpos\nso so\tmeh\n")  # a class the training data never shows
    assert main(["task", "train", "classify", "--train", str(good), "--dev", str(dev), "--model", str(model_dir),
                 "--out", str(tmp_path / "t2"), "--cache", str(tmp_path / "c"), "--epochs", "1", "--hidden", "4",
                 "--tokenize", "en", "--quiet"]) == 0
    assert "dev.tsv: 1 label(s) appear in the dev data but not in the training data: meh" in capsys.readouterr().err
    (tmp_path / "mac.txt").write_bytes(b"good movie\rbad movie\r")  # old Mac line ends: not one line
    assert main(["task", "predict", str(tmp_path / "t"), "--input", str(tmp_path / "mac.txt"), "--cache",
                 str(tmp_path / "c")]) == 1
    assert "mac.txt, line 1: a carriage return" in capsys.readouterr().err


@pytest.mark.parametrize("change, problem", [({"dropout": float("nan")}, "dropout must be"),
                                             ({"labels": "abc"}, "labels must be a list"),
                                             ({"labels": []}, "labels must be a list"),
                                             ({"hidden_dim": 100_000_000}, "above the limit")])
def test_task_settings_no_head_can_use_are_one_line(change, problem):
    """A hand-edited task.json (dropout NaN, labels as a string) or --hidden 10^8 failed inside torch or predicted
    single characters; each is refused before a head is built."""
    from elmo.errors import ElmoError
    from elmo.tasks.train import TaskConfig

    settings = {"task": "classify", "labels": ["neg", "pos"], "n_layers": 3, "dim": 8} | change
    with pytest.raises(ElmoError, match=problem):
        TaskConfig(**settings)


def test_wsd_probe_f1_counts_precision_over_the_instances_answered():
    """An instance whose lemma WordNet's index lacks gets no answer: Raganato et al.'s scorer takes precision over
    the answered instances and recall over all with a gold key (2 of 2 answered right, 3 with keys: P 1, R 2/3,
    F1 0.8). The probe printed recall under the name F1."""
    from elmo.tasks.probes import _f1

    instances = [(None, 0, "a", ["bank%1"], None), (None, 0, "b", ["bank%1", "bank%2"], None),
                 (None, 1, "c", ["zzz%1"], None)]
    senses = lambda s, t: ["bank%1", "bank%2"] if t == 0 else []  # noqa: E731
    assert _f1(instances, senses, {}, lambda s, t, v: v) == pytest.approx(0.8)
    assert _f1(instances[:2], senses, {}, lambda s, t, v: v) == 1.0
