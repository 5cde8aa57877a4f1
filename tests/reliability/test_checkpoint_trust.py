"""A run folder's checkpoints as users meet them: outputs written into an old checkpoint survive pruning, and a
checkpoint whose files were edited, damaged or mixed up is refused in one line before any step, not trained on."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from elmo.data.vocab import Vocabulary
from elmo.io.checkpoint import list_checkpoints
from elmo.training.trainer import Trainer
from tests.conftest import micro_train_config
from tests.reliability.tiny import cli, one_error_line, reseal, text_file


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(training text, vocabulary, a run of 3 steps with a checkpoint at every step)."""
    folder = tmp_path_factory.mktemp("run")
    text = text_file(folder / "short.txt", 60)
    vocab = Vocabulary.build(line.split() for line in text.read_text(encoding="utf-8").splitlines())
    Trainer(micro_train_config(max_steps=3, checkpoint_every=1, keep_checkpoints=5), [text], folder / "r",
            vocab=vocab, progress=False).train()
    return text, vocab, folder / "r"


def _copy(run, tmp_path):
    text, vocab, folder = run
    shutil.copytree(folder, tmp_path / "r")
    return text, vocab, tmp_path / "r"


def _resume(text, vocab, folder, steps=4, keep=5):
    return Trainer(micro_train_config(max_steps=steps, checkpoint_every=1, keep_checkpoints=keep), [text], folder,
                   progress=False, resume=folder, given={"keep_checkpoints": keep, "max_steps": steps})


def test_pruning_keeps_a_checkpoint_holding_the_users_files(run, tmp_path, caplog):
    """`elmo embed ... RUN/step-2/vectors.hdf5`, an export into a checkpoint or a note: pruning deleted the whole
    folder, the user's files with it (exit 0, no word)."""
    text, vocab, folder = _copy(run, tmp_path)
    (folder / "step-00000002" / "vectors.hdf5").write_bytes(b"the user's vectors")
    trainer = _resume(text, vocab, folder, steps=5, keep=1)
    trainer.train()
    names = [p.name for p in list_checkpoints(folder)]
    assert names == ["step-00000002", "step-00000005"], names  # 1 and 3, 4 pruned; 2 kept for the user's file
    assert (folder / "step-00000002" / "vectors.hdf5").read_bytes() == b"the user's vectors"
    assert "kept although older" in caplog.text and "vectors.hdf5" in caplog.text


def _edit(path, name, change):
    """Change one tensor of a checkpoint's file, its hash recorded again (the structural checks behind the hash)."""
    tensors = load_file(str(path))
    tensors[name] = change(tensors[name])
    save_file(tensors, str(path))
    reseal(path.parent)


@pytest.mark.parametrize("file, name, change, fragment", [
    ("optimizer.safetensors", "0.sum", lambda t: torch.zeros(2, 2), "0.sum is (2, 2)"),
    ("optimizer.safetensors", "0.sum", lambda t: t.clone().fill_(float("nan")), "0.sum holds NaN"),
    ("state.safetensors", "r0.d0.l0.c", lambda t: t.clone().fill_(float("nan")), "r0.d0.l0.c holds NaN"),
    ("state.safetensors", "r0.d1.l0.h", lambda t: t[:, :-1].contiguous(), "r0.d1.l0.h is"),
    ("state.safetensors", "r0.d0.l0.h", lambda t: t.double(), "float64"),
])
def test_a_checkpoint_with_an_edited_tensor_is_refused_before_any_step(run, tmp_path, file, name, change, fragment):
    """A (2, 2) Adagrad sum ran the fused kernel on a state that did not fit (exit 0, other weights); a NaN state
    trained on with loss nan; a state of another shape or type was a traceback at the first step."""
    text, vocab, folder = _copy(run, tmp_path)
    _edit(folder / "step-00000003" / file, name, change)
    with pytest.raises(Exception) as err:
        _resume(text, vocab, folder)
    assert type(err.value).__name__ == "ModelFileError" and fragment in str(err.value), str(err.value)
    assert "\n" not in str(err.value) and [p.name for p in list_checkpoints(folder)][-1] == "step-00000003"


def test_a_missing_optimizer_tensor_is_one_line(run, tmp_path):
    text, vocab, folder = _copy(run, tmp_path)
    path = folder / "step-00000003" / "optimizer.safetensors"
    tensors = load_file(str(path))
    del tensors["0.sum"]
    save_file(tensors, str(path))
    reseal(path.parent)
    with pytest.raises(Exception, match="0.sum is missing"):
        _resume(text, vocab, folder)


def _flip_a_byte(path, from_end=100):
    """One byte inside the tensor data (far from the header): the file still loads as safetensors."""
    data = bytearray(path.read_bytes())
    data[-from_end] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("file", ["model.safetensors", "softmax.safetensors", "optimizer.safetensors",
                                  "state.safetensors", "vocab.txt"])
def test_a_flipped_byte_in_a_checkpoint_is_refused_on_resume(run, tmp_path, file):
    """safetensors has no checksum: a flipped bit in a weight loaded and trained on silently (exit 0)."""
    text, vocab, folder = _copy(run, tmp_path)
    path = folder / "step-00000003" / file
    if file == "vocab.txt":
        path.write_text(path.read_text().replace("w1\n", "w7\n", 1))  # one word for another: the same count
    else:
        _flip_a_byte(path)
    load_file(str(path)) if file != "vocab.txt" else None  # still a readable file: only the hash can tell
    with pytest.raises(Exception) as err:
        _resume(text, vocab, folder)
    assert type(err.value).__name__ == "ModelFileError", str(err.value)
    message = str(err.value)
    assert "\n" not in message and f"step-00000003/{file}: its bytes are not the ones written" in message, message
    assert "previous checkpoint" in message
    assert [p.name for p in list_checkpoints(folder)][-1] == "step-00000003"  # nothing trained, nothing saved


@pytest.mark.parametrize("command", ["export", "score", "perplexity"])
def test_a_flipped_byte_in_a_checkpoints_weights_is_refused_by_the_language_model_commands(run, tmp_path, capsys,
                                                                                           command):
    text, vocab, folder = _copy(run, tmp_path)
    _flip_a_byte(folder / "step-00000003" / "softmax.safetensors")
    argument = {"export": tmp_path / "exported", "score": "w1 w2 w3", "perplexity": text}[command]
    rc, err = cli(capsys, command, folder / "step-00000003", argument)
    assert rc == 1 and not (tmp_path / "exported").exists()
    one_error_line(err, "softmax.safetensors: its bytes are not the ones written")


def test_a_checkpoint_records_the_hash_of_every_file_it_holds_but_its_json(run):
    from elmo.io.work_folder import file_sha256

    text, vocab, folder = run
    checkpoint = list_checkpoints(folder)[-1]
    recorded = json.loads((checkpoint / "trainer.json").read_text())["sha256"]
    assert set(recorded) == {p.name for p in checkpoint.iterdir() if p.suffix != ".json"}
    assert all(file_sha256(checkpoint / name) == digest for name, digest in recorded.items())


def test_a_renamed_checkpoint_is_refused(run, tmp_path, capsys):
    """`mv step-00000003 step-00000099`: every resume restarted from step 3 and left the old weights newest; export
    and perplexity read them."""
    text, vocab, folder = _copy(run, tmp_path)
    (folder / "step-00000003").rename(folder / "step-00000099")
    rc, err = cli(capsys, "export", folder, tmp_path / "exported")
    assert rc == 1
    one_error_line(err, "step 3 in a folder named for step 99")
    assert json.loads((folder / "step-00000099" / "trainer.json").read_text())["step"] == 3


def test_a_full_disk_while_logging_names_the_log(run, tmp_path, monkeypatch):
    """Appending to metrics.jsonl on a full disk said only "No space left on device"."""
    import errno

    import elmo.training.trainer as trainer_module
    from elmo.io.atomic import DiskWriteError

    text, vocab, folder = _copy(run, tmp_path)
    trainer = _resume(text, vocab, folder)

    def full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(trainer_module, "open", full, raising=False)
    with pytest.raises(DiskWriteError, match=r"metrics\.jsonl: the disk is full"):
        trainer.train()


def test_a_bfloat16_carried_state_resumes(run, tmp_path):
    """A GPU run's bf16 autocast carries h in bfloat16: such a checkpoint resumes (the check must not refuse it)."""
    text, vocab, folder = _copy(run, tmp_path)
    _edit(folder / "step-00000003" / "state.safetensors", "r0.d0.l0.h", lambda t: t.bfloat16())
    trainer = _resume(text, vocab, folder)
    assert trainer.states[0][0][0].dtype == torch.bfloat16
    trainer.train()
    assert [p.name for p in list_checkpoints(folder)][-1] == "step-00000004"


def test_an_older_checkpoints_tokenizer_file_is_elmos_own(run, tmp_path, caplog):
    """Checkpoints written before config.json named the tokenizer hold tokenizer.json: still pruned, not kept as
    a user's file for ever."""
    text, vocab, folder = _copy(run, tmp_path)
    (folder / "step-00000001" / "tokenizer.json").write_text('{"tokenize": null}')
    _resume(text, vocab, folder, steps=5, keep=2).train()
    assert [p.name for p in list_checkpoints(folder)] == ["step-00000004", "step-00000005"]
    assert "kept although older" not in caplog.text


def _pruned_while_read(monkeypatch, folder, save_next=True):
    """The first read of ``folder``'s newest checkpoint meets what a run training there with keep_checkpoints = 1
    does meanwhile: it saves the next step (different weights) and deletes the one being read."""
    import elmo.io.load as load_module

    newest = list_checkpoints(folder)[-1]
    for old in list_checkpoints(folder)[:-1]:
        shutil.rmtree(old)
    step = int(newest.name.split("-")[1])
    following = folder / f"step-{step + 1:08d}"
    real, calls = load_module.load_model, []

    def load_model(path, **kwargs):
        if not calls and save_next:
            calls.append(path)
            shutil.copytree(newest, following)
            weights = load_file(str(following / "model.safetensors"))
            weights = {k: v + 1 if v.is_floating_point() else v for k, v in weights.items()}
            save_file(weights, str(following / "model.safetensors"))
            record = json.loads((following / "trainer.json").read_text()) | {"step": step + 1}
            (following / "trainer.json").write_text(json.dumps(record))
            reseal(following)
        calls.append(path)
        if path == newest:
            shutil.rmtree(newest, ignore_errors=True)
        return real(path, **kwargs)

    monkeypatch.setattr(load_module, "load_model", load_model)
    return following


def test_export_of_a_run_whose_newest_checkpoint_is_pruned_meanwhile_reads_the_next(run, tmp_path, capsys,
                                                                                     monkeypatch):
    """`elmo export RUN` (and perplexity, embed, --init-from) while the run trains with keep_checkpoints = 1: the
    checkpoint it picked was deleted under it once the next was saved, and the command failed naming a file that
    was there a moment before. It reads the new newest checkpoint instead."""
    text, vocab, folder = _copy(run, tmp_path)
    following = _pruned_while_read(monkeypatch, folder)
    rc, err = cli(capsys, "export", folder, tmp_path / "exported")
    assert rc == 0, err
    exported, newest = (load_file(str(p / "model.safetensors")) for p in (tmp_path / "exported", following))
    assert exported.keys() == newest.keys() and all(torch.equal(exported[k], newest[k]) for k in newest)


@pytest.mark.parametrize("command", ["score", "perplexity"])
def test_scoring_a_run_whose_newest_checkpoint_is_pruned_meanwhile_reads_the_next(run, tmp_path, capsys, monkeypatch,
                                                                                  command):
    text, vocab, folder = _copy(run, tmp_path)
    _pruned_while_read(monkeypatch, folder)
    rc, err = cli(capsys, command, folder, "w1 w2 w3" if command == "score" else text)
    assert rc == 0, err


def test_loading_a_run_whose_newest_checkpoint_is_pruned_meanwhile_loads_the_next(run, tmp_path, monkeypatch):
    from elmo.io.load import load_bilm

    text, vocab, folder = _copy(run, tmp_path)
    following = _pruned_while_read(monkeypatch, folder)
    bilm = load_bilm(folder)
    newest = load_file(str(following / "model.safetensors"))
    assert all(torch.equal(bilm.state_dict()[k], newest[k]) for k in newest)


@pytest.mark.parametrize("reader", ["resolve", "load_bilm"])
def test_a_newest_checkpoint_pruned_between_the_listing_and_its_check_gives_the_next(run, tmp_path, monkeypatch,
                                                                                    reader):
    """The prune lands inside the resolving itself: the checkpoints were listed, then the run saved the next step
    and deleted the newest before its files were checked. The next is taken, not an error naming a missing file."""
    import elmo.io.resolve as resolve_module
    from elmo.io.load import load_bilm

    text, vocab, folder = _copy(run, tmp_path)
    newest = list_checkpoints(folder)[-1]
    following = folder / f"step-{int(newest.name.split('-')[1]) + 1:08d}"
    real, calls = resolve_module.list_checkpoints, []

    def list_then_prune(root):
        found = real(root)
        if not calls:  # the first listing: the run saves the next step and prunes the one listed as newest
            calls.append(root)
            shutil.copytree(newest, following)
            weights = {k: v + 1 if v.is_floating_point() else v
                       for k, v in load_file(str(following / "model.safetensors")).items()}
            save_file(weights, str(following / "model.safetensors"))
            record = json.loads((following / "trainer.json").read_text())
            (following / "trainer.json").write_text(json.dumps(record | {"step": record["step"] + 1}))
            reseal(following)
            shutil.rmtree(newest)
        return found

    monkeypatch.setattr(resolve_module, "list_checkpoints", list_then_prune)
    if reader == "resolve":
        assert resolve_module.resolve(folder).folder == following
    else:
        state = load_bilm(folder).state_dict()
        assert all(torch.equal(state[k], v) for k, v in load_file(str(following / "model.safetensors")).items())


def test_a_newest_checkpoint_deleted_without_a_next_is_still_one_line(run, tmp_path, capsys, monkeypatch):
    text, vocab, folder = _copy(run, tmp_path)
    _pruned_while_read(monkeypatch, folder, save_next=False)
    rc, err = cli(capsys, "export", folder, tmp_path / "exported")
    assert rc == 1 and not (tmp_path / "exported").exists()
    one_error_line(err, "step-00000003")


def test_a_run_whose_newest_checkpoint_lost_a_file_names_it(run, tmp_path, capsys):
    """The run folder was "not a model directory; looked for ... checkpoint folders (a training run)", beside three
    checkpoints: the newest one's missing file is named, with the one before it."""
    text, vocab, folder = _copy(run, tmp_path)
    (folder / "step-00000003" / "model.safetensors").unlink()
    rc, err = cli(capsys, "score", folder, "w1 w2")
    assert rc == 1
    one_error_line(err, "step-00000003/model.safetensors: missing from the run's newest checkpoint",
                   "step-00000002 is the one before it")


def test_a_checkpoint_whose_vocabulary_was_cut_short_names_it_on_resume(run, tmp_path):
    """Resume said "softmax.safetensors: tensor 'bias' has shape (33,) where the config implies (18,)" and never named
    vocab.txt; export and perplexity named both files."""
    text, vocab, folder = _copy(run, tmp_path)
    words = folder / "step-00000003" / "vocab.txt"
    words.write_text("".join(words.read_text().splitlines(keepends=True)[:10]))
    reseal(words.parent)
    with pytest.raises(Exception) as err:
        _resume(text, vocab, folder)
    assert type(err.value).__name__ == "ModelFileError", str(err.value)
    assert "vocab.txt holds 10 words but" in str(err.value) and "softmax.safetensors has" in str(err.value)


def test_an_exports_softmax_cut_short_says_what_to_do(run, tmp_path, capsys):
    """An export has no record of hashes: its softmax cut short said "not readable (...)", and nothing to do."""
    text, vocab, folder = run
    assert cli(capsys, "export", folder, tmp_path / "exported")[0] == 0
    softmax = tmp_path / "exported" / "softmax.safetensors"
    softmax.write_bytes(softmax.read_bytes()[:-100])
    rc, err = cli(capsys, "score", tmp_path / "exported", "w1 w2")
    assert rc == 1
    one_error_line(err, "softmax.safetensors: not readable")
    assert "damaged or cut short: take it from an earlier checkpoint or export of the run" in err
