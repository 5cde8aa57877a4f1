"""Training on real text: it learns, resumes exactly, exports, and its scores agree with its perplexity."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from elmo.data.vocab import Vocabulary
from elmo.io.native import save_model
from elmo.training.checkpoint import load_language_model
from elmo.training.config import TrainConfig
from elmo.training.evaluate import perplexity, score, zero_state_perplexity
from elmo.training.lm import LanguageModel
from elmo.training.trainer import Trainer
from tests.conftest import micro_train_config, random_bilm, small_config


def _ppl(trainer, dev):
    model = trainer.model
    result = perplexity(model, trainer.vocab, [dev], batch_size=16)
    model.train()
    return result


@pytest.mark.slow
def test_tiny_preset_halves_held_out_perplexity_in_both_directions(review_slices, tmp_path, report):
    """Both LMs learn, and each reads a sentence from the zero state (as embedding does) as well as from a carried
    state. Without zero-state sentence starts in training (``zero_state_share = 0``, bilm-tf's way), this very run
    reads sentences from the zero state 14-19 % worse than from a carried one (docs/training.md §6)."""
    train, dev, vocab_file = review_slices
    config = TrainConfig.load("tiny").replace(max_steps=200, batch_size=16, checkpoint_every=10_000)  # seed 0
    trainer = Trainer(config, [train], tmp_path / "run", vocab=Vocabulary.load(vocab_file), progress=False)
    before = _ppl(trainer, dev)
    trainer.train()
    after = _ppl(trainer, dev)
    zero = zero_state_perplexity(trainer.model, trainer.vocab, [dev])
    trainer.model.train()
    zero_forward, zero_backward = zero.forward, zero.backward
    report(f"tiny, 200 batches x 16 rows: held-out perplexity fwd / bwd: before {before.forward:.0f} / "
           f"{before.backward:.0f}; after {after.forward:.0f} / {after.backward:.0f} (carried state), "
           f"{zero_forward:.0f} / {zero_backward:.0f} (each sentence from the zero state)")
    assert after.forward <= 0.5 * before.forward and after.backward <= 0.5 * before.backward
    assert zero_forward <= 1.25 * after.forward and zero_backward <= 1.25 * after.backward
    assert after.backward <= 2 * after.forward
    log = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert log[-1]["step"] == 200 and log[-1]["tokens_per_s"] > 0


def test_resume_continues_exactly(text_slices, tmp_path, report):
    train, _, vocab_file = text_slices
    vocab = Vocabulary.load(vocab_file)
    config = micro_train_config(max_steps=12, zero_state_share=0.5)  # half the sentence starts: a random draw
    straight = [m["loss"] for m in Trainer(config, [train], tmp_path / "a", vocab=vocab, progress=False).train()]
    first = Trainer(config.replace(max_steps=7), [train], tmp_path / "b", vocab=vocab, progress=False)
    part1 = [m["loss"] for m in first.train()]
    # the same file spelled another way (relative / absolute, ./) is the same data position
    respelled = f"{Path(train).parent}/./{Path(train).name}"
    resumed = Trainer(config, [respelled], tmp_path / "b2", resume=tmp_path / "b", progress=False)
    assert resumed.step == 7
    part2 = [m["loss"] for m in resumed.train()]
    worst = max(abs(a - b) for a, b in zip(straight, part1 + part2))
    report("12 steps straight vs 7 + resume + 5: max loss diff", worst)
    assert len(part1 + part2) == 12 and worst <= 1e-6
    # a checkpoint from before each rank saved its own sampler state ("sampler_rng") resumes the same way
    from safetensors.torch import load_file, save_file

    state_file = next((tmp_path / "b").glob("step-*/state.safetensors"))
    record_file = state_file.parent / "trainer.json"  # ... written before files' hashes were recorded, too
    record = json.loads(record_file.read_text())
    assert record.pop("sha256").keys() == {"model.safetensors", "softmax.safetensors", "vocab.txt",
                                           "optimizer.safetensors", "state.safetensors"}
    record_file.write_text(json.dumps(record))
    tensors = load_file(str(state_file))
    tensors["sampler_rng"] = tensors.pop("r0.sampler_rng")
    save_file(tensors, str(state_file))
    # ... and so does one whose optimizer did not use the fused kernels (the saved groups say so)
    groups_file = state_file.parent / "optimizer.json"
    plain = json.loads(groups_file.read_text())
    assert all(group["fused"] for group in plain["param_groups"])
    for group in plain["param_groups"]:
        group["fused"] = None
    groups_file.write_text(json.dumps(plain))
    old = Trainer(config, [train], tmp_path / "b3", resume=tmp_path / "b", progress=False)
    assert all(group["fused"] for group in old.optimizer.param_groups)
    assert [m["loss"] for m in old.train()] == part2
    # a checkpoint written before zero_state_share existed resumes as its run trained: every state carried
    config_file = state_file.parent / "train_config.json"
    recorded = json.loads(config_file.read_text())
    assert recorded["train"].pop("zero_state_share") == 0.5
    config_file.write_text(json.dumps(recorded))
    unset = config.replace(zero_state_share=TrainConfig().zero_state_share)  # as a config that does not set it
    older = Trainer(unset, [train], tmp_path / "b4", resume=tmp_path / "b", progress=False)
    assert older.config.zero_state_share == 0.0
    adapted = Trainer(config, [train], tmp_path / "b5", init_from=tmp_path / "b", progress=False)
    assert adapted.config.zero_state_share == 0.5  # a new run from those weights takes the config given


def test_checkpoints_keep_the_last_k(text_slices, tmp_path):
    train, _, vocab_file = text_slices
    config = micro_train_config(max_steps=5, checkpoint_every=1, keep_checkpoints=2)
    Trainer(config, [train], tmp_path / "r", vocab=Vocabulary.load(vocab_file), progress=False).train()
    assert sorted(p.name for p in (tmp_path / "r").glob("step-*")) == ["step-00000004", "step-00000005"]
    assert not list((tmp_path / "r").glob(".*"))


def test_init_from_keeps_the_vocabulary_on_new_text(text_slices, tmp_path):
    train, dev, vocab_file = text_slices
    config = micro_train_config(max_steps=3)
    Trainer(config, [train], tmp_path / "base", vocab=Vocabulary.load(vocab_file), progress=False).train()
    adapted = Trainer(config, [dev], tmp_path / "adapt", init_from=tmp_path / "base", progress=False)
    assert adapted.vocab.words == Vocabulary.load(vocab_file).words and adapted.step == 0
    base_weight = load_language_model(tmp_path / "base")[0].forward_stack.layers[0].weight_ih
    assert torch.equal(adapted.model.bilm.forward_stack.layers[0].weight_ih.cpu(), base_weight)


def test_full_softmax_when_negatives_cover_the_vocabulary(text_slices, tmp_path):
    train, _, vocab_file = text_slices
    config = micro_train_config(max_steps=2, n_negative_samples=10**6)
    history = Trainer(config, [train], tmp_path / "f", vocab=Vocabulary.load(vocab_file), progress=False).train()
    assert all(math.isfinite(m["loss"]) for m in history)


def test_export_load_embed_round_trip_and_score_matches_perplexity(text_slices, tmp_path):
    from elmo.embed import Embedder
    from elmo.io.official import load_official
    from elmo.training.export import dump_token_embeddings, export_checkpoint, token_embeddings

    train, _, vocab_file = text_slices
    Trainer(micro_train_config(max_steps=3), [train], tmp_path / "r", vocab=Vocabulary.load(vocab_file),
            progress=False).train()
    out = export_checkpoint(tmp_path / "r", tmp_path / "exp")
    options = json.loads((out / "options.json").read_text())
    assert options["char_cnn"]["n_characters"] == 262
    ours = Embedder.from_pretrained(model=out)
    official = Embedder(load_official(out / "options.json", out / "weights.hdf5"))
    sentence = "the film was not good ."
    assert np.array_equal(ours.embed(sentence), official.embed(sentence))

    bilm, softmax, vocab = load_language_model(out)
    tokens = sentence.split()
    forward, backward = score(bilm, softmax, vocab, [tokens])[0]
    (tmp_path / "one.txt").write_text(sentence + "\n", encoding="utf-8")
    ppl = perplexity(LanguageModel(bilm, softmax), vocab, [tmp_path / "one.txt"], batch_size=1, unroll_steps=50)
    n = len(tokens) + 1
    assert ppl.tokens == n
    assert math.isclose(-forward / n, math.log(ppl.forward), rel_tol=1e-5)
    assert math.isclose(-backward / n, math.log(ppl.backward), rel_tol=1e-5)
    # one long line fills one row of the batch: the empty rows are skipped, and the figure is that of one row
    long_line = " ".join(train.read_text(encoding="utf-8").split()[:400])
    (tmp_path / "long.txt").write_text(long_line + "\n", encoding="utf-8")
    alone, among = (perplexity(LanguageModel(bilm, softmax), vocab, [tmp_path / "long.txt"], batch_size=b)
                    for b in (1, 16))
    assert alone.tokens == among.tokens == 401
    assert math.isclose(alone.forward, among.forward, rel_tol=1e-6)
    assert math.isclose(alone.backward, among.backward, rel_tol=1e-6)

    # from the zero state: the same as each sentence in a run of its own (a file of one line, one row)
    lines = train.read_text(encoding="utf-8").splitlines()[:5]
    (tmp_path / "five.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    each = []
    for i, line in enumerate(lines):
        (tmp_path / f"line{i}.txt").write_text(line + "\n", encoding="utf-8")
        each.append(perplexity(LanguageModel(bilm, softmax), vocab, [tmp_path / f"line{i}.txt"], batch_size=1,
                               unroll_steps=500))
    zero = zero_state_perplexity(LanguageModel(bilm, softmax), vocab, [tmp_path / "five.txt"])
    carried = perplexity(LanguageModel(bilm, softmax), vocab, [tmp_path / "five.txt"], batch_size=1)
    assert zero.tokens == carried.tokens == sum(p.tokens for p in each) and zero.unknown == carried.unknown
    assert zero.words == carried.words == sum(len(line.split()) for line in lines)  # </S> is no word of the text
    (tmp_path / "unknown.txt").write_text("qqqzz xxxyy\n", encoding="utf-8")
    for path in (perplexity, zero_state_perplexity):
        assert path(LanguageModel(bilm, softmax), vocab, [tmp_path / "unknown.txt"]).unknown_share == 1.0
    for direction in ("forward", "backward"):
        pooled = math.exp(sum(p.tokens * math.log(getattr(p, direction)) for p in each) / zero.tokens)
        assert math.isclose(getattr(zero, direction), pooled, rel_tol=1e-5)
        assert not math.isclose(getattr(carried, direction), pooled, rel_tol=1e-4)  # one row: the state carries

    dump_token_embeddings(bilm, vocab_file, tmp_path / "tok.hdf5")
    import h5py
    with h5py.File(tmp_path / "tok.hdf5") as f:
        cache = f["embedding"][()]
    assert cache.shape == (len(vocab), 16)
    assert np.allclose(cache[5], token_embeddings(bilm, [vocab.words[5]])[0].numpy(), atol=1e-6)
    # a task's word list, without <S>, </S>, <UNK>: taken as bilm-tf's takes it
    (tmp_path / "task_words.txt").write_text("bank\nriver\nthe\n", encoding="utf-8")
    assert dump_token_embeddings(bilm, tmp_path / "task_words.txt", tmp_path / "task.hdf5") == 3
    with h5py.File(tmp_path / "task.hdf5") as f:
        assert np.allclose(f["embedding"][()], token_embeddings(bilm, ["bank", "river", "the"]).numpy(), atol=1e-6)


def test_substitutes_and_bad_position(text_slices, tmp_path):
    """substitutes reads one position's distributions: those of the whole sentence's at that position."""
    from elmo.training.evaluate import direction_log_probs, substitutes

    train, _, vocab_file = text_slices
    Trainer(micro_train_config(max_steps=2), [train], tmp_path / "r", vocab=Vocabulary.load(vocab_file),
            progress=False).train()
    bilm, softmax, vocab = load_language_model(tmp_path / "r")
    result = substitutes(bilm, softmax, vocab, "the cat sat".split(), 1, k=4)
    assert set(result) == {"forward", "backward", "both"} and all(len(v) == 4 for v in result.values())
    assert all(w not in ("<S>", "</S>", "<UNK>") for v in result.values() for w, _ in v)
    _, fwd, bwd = direction_log_probs(bilm, softmax, [["the", "cat", "sat"]])  # the whole sentence's distributions
    for name, logp in (("forward", fwd[0, 2]), ("backward", bwd[0, 2])):  # token 1 sits at 2, after <S>
        for word, probability in result[name]:
            assert math.isclose(probability, math.exp(float(logp[vocab.id(word)])), rel_tol=1e-5)
    with pytest.raises(ValueError, match="outside the sentence"):
        substitutes(bilm, softmax, vocab, ["a"], 3)


def test_a_new_run_refuses_a_directory_that_holds_another_run(text_slices, tmp_path):
    """Pruning would delete the new run's checkpoints as the oldest and --resume would pick up the old run."""
    train, _, vocab_file = text_slices
    vocab = Vocabulary.load(vocab_file)
    Trainer(micro_train_config(max_steps=3), [train], tmp_path / "r", vocab=vocab, progress=False).train()
    with pytest.raises(ValueError, match=r"already holds a run .*step-00000003.*--resume"):
        Trainer(micro_train_config(max_steps=1), [train], tmp_path / "r", vocab=vocab, progress=False)
    with pytest.raises(ValueError, match="already holds a run"):
        Trainer(micro_train_config(max_steps=1), [train], tmp_path / "r", init_from=tmp_path / "r", progress=False)
    resumed = Trainer(micro_train_config(max_steps=4), [train], tmp_path / "r", resume=tmp_path / "r", progress=False)
    resumed.train()
    assert resumed.step == 4


def test_a_new_run_refuses_a_model_folder_and_an_earlier_runs_log(text_slices, tmp_path):
    """A run inside a model folder would be hidden by that model wherever the folder is named as a model; an earlier
    run's metrics.jsonl (its checkpoints moved away) would be replaced. Both are refused before anything is written,
    and the log is left byte for byte."""
    train, _, vocab_file = text_slices
    vocab = Vocabulary.load(vocab_file)
    model = tmp_path / "model"
    save_model(random_bilm(small_config()), model)
    before = sorted(p.name for p in model.iterdir())
    with pytest.raises(ValueError, match="holds a model"):
        Trainer(micro_train_config(max_steps=1), [train], model, vocab=vocab, progress=False)
    assert sorted(p.name for p in model.iterdir()) == before
    run = tmp_path / "run"
    run.mkdir()
    log = b'{"step": 100, "loss": 1.5}\n'
    (run / "metrics.jsonl").write_bytes(log)
    with pytest.raises(ValueError, match=r"metrics.jsonl: the log of an earlier run"):
        Trainer(micro_train_config(max_steps=1), [train], run, vocab=vocab, progress=False)
    assert (run / "metrics.jsonl").read_bytes() == log and sorted(p.name for p in run.iterdir()) == ["metrics.jsonl"]
    # resuming a checkpoint of another folder into it: the log is not that run's either (it would be cut at its step)
    first = Trainer(micro_train_config(max_steps=1, checkpoint_every=1), [train], tmp_path / "first", vocab=vocab,
                    progress=False)
    first.train()
    with pytest.raises(ValueError, match=r"metrics.jsonl: the log of an earlier run"):
        Trainer(micro_train_config(max_steps=2), [train], run, resume=tmp_path / "first", progress=False)
    assert (run / "metrics.jsonl").read_bytes() == log


def test_a_language_model_whose_vocabulary_and_softmax_disagree_says_so(text_slices, tmp_path):
    """A cut-short vocab.txt beside its softmax was reported as a softmax of the wrong shape."""
    from elmo.training.export import export_checkpoint

    train, _, vocab_file = text_slices
    Trainer(micro_train_config(max_steps=1), [train], tmp_path / "r", vocab=Vocabulary.load(vocab_file),
            progress=False).train()
    out = export_checkpoint(tmp_path / "r", tmp_path / "exp")
    words = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
    (out / "vocab.txt").write_text("\n".join(words[:20]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"vocab.txt holds 20 words but .*softmax.safetensors has "
                                         rf"{len(words):,} rows: one of them is damaged"):
        load_language_model(out)


def test_checkpoint_files_get_a_plain_files_permissions(text_slices, tmp_path):
    """safetensors writes owner-only (0600) files; a shared run folder needs them readable like the others."""
    from elmo.io.atomic import new_file_mode

    train, _, vocab_file = text_slices
    Trainer(micro_train_config(max_steps=1), [train], tmp_path / "r", vocab=Vocabulary.load(vocab_file),
            progress=False).train()
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "r" / "step-00000001").iterdir()}
    assert modes and all(mode == new_file_mode() for mode in modes.values()), modes


def test_each_direction_scores_against_its_own_negatives(text_slices, tmp_path):
    """bilm-tf calls sampled_softmax_loss once per direction: two draws per step, the forward loss depends only on
    the first set of negatives and the backward loss only on the second."""
    train, _, vocab = text_slices
    trainer = Trainer(micro_train_config(dropout=0.0), [train], tmp_path / "run", vocab=Vocabulary.load(vocab),
                      progress=False)
    drawn = []
    original = trainer.sampler.sample
    trainer.sampler.sample = lambda n: drawn.append(original(n)) or drawn[-1]
    trainer.train_step()
    assert len(drawn) == 2 and not torch.equal(drawn[0][0], drawn[1][0])
    inputs = trainer._inputs([b.next_batch() for b in trainer.batchers])
    states = trainer.model.zero_states(4)
    with torch.no_grad():
        a = trainer.model(*inputs, states, [drawn[0], drawn[1]], trainer.sampler)[0]
        b = trainer.model(*inputs, states, [drawn[0], drawn[0]], trainer.sampler)[0]
        c = trainer.model(*inputs, states, [drawn[1], drawn[1]], trainer.sampler)[0]
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], c[1])
    assert not torch.equal(a[1], b[1]) and not torch.equal(a[0], c[0])


def test_rows_whose_window_begins_a_sentence_start_it_from_zeros(text_slices, tmp_path):
    """zero_state_share = 1: every such row starts from zeros, every other row goes on from its carried state;
    0 (bilm-tf): every row carries its state."""
    train, _, vocab = text_slices
    for share in (1.0, 0.0):
        trainer = Trainer(micro_train_config(zero_state_share=share), [train], tmp_path / f"run{share}",
                          vocab=Vocabulary.load(vocab), progress=False)
        batches, states_in = [], []
        for batcher in trainer.batchers:
            batcher.next_batch = (lambda original: lambda: batches.append(original()) or batches[-1])(batcher.next_batch)
        model_forward = trainer.model.forward
        trainer.model.forward = (lambda f, b, states, *rest, **kw:
                                 states_in.append(states) or model_forward(f, b, states, *rest, **kw))
        started = carried = 0
        for _ in range(12):
            trainer.states = [[(torch.ones_like(h), torch.ones_like(c)) for h, c in d] for d in trainer.states]
            trainer.train_step()
            for batch, direction in zip(batches[-2:], states_in[-1]):
                for h, c in direction:
                    zeroed = h.eq(0).all(1) & c.eq(0).all(1)  # (B,)
                    assert torch.equal(zeroed, batch.starts if share == 1 else torch.zeros_like(zeroed))
                    assert h.eq(1).all(1).eq(~zeroed).all() and c.eq(1).all(1).eq(~zeroed).all()
                started += int(batch.starts.sum())
                carried += int((~batch.starts).sum())
        assert started > 0 and carried > 0


def test_score_in_batches_and_position_chunks_matches_the_whole_distribution(text_slices, tmp_path, monkeypatch):
    """score() runs 16 sentences at a time and the softmax a few positions at a time: the same log-probabilities
    as reading them off the full (B, T + 2, V) distributions of one call."""
    from elmo.training import evaluate
    from elmo.training.evaluate import direction_log_probs

    train, _, vocab_file = text_slices
    Trainer(micro_train_config(max_steps=2), [train], tmp_path / "r", vocab=Vocabulary.load(vocab_file),
            progress=False).train()
    bilm, softmax, vocab = load_language_model(tmp_path / "r")
    sentences = [line.split() for line in train.read_text(encoding="utf-8").splitlines()[:19]] + [[]]
    monkeypatch.setattr(evaluate, "SCORE_POSITIONS", 7)
    got = score(bilm, softmax, vocab, sentences)
    _, fwd, bwd = direction_log_probs(bilm, softmax, sentences)
    for row, tokens in enumerate(sentences):
        ids = vocab.ids(["<S>", *tokens, "</S>"])
        n = len(tokens)
        want_f = sum(float(fwd[row, t, ids[t]]) for t in range(1, n + 2))
        want_b = sum(float(bwd[row, t, ids[t]]) for t in range(0, n + 1))
        assert math.isclose(got[row][0], want_f, rel_tol=1e-5) and math.isclose(got[row][1], want_b, rel_tol=1e-5)
    bilm.stateful = True  # a stateful model is scored from the zero state too, batch after batch
    assert score(bilm, softmax, vocab, sentences) == got and bilm.stateful


def _weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_init_from_a_bilm_without_softmax_learns_a_new_softmax_over_it_first(text_slices, tmp_path, capsys):
    """Published ELMo weights hold no softmax: a new run from them needs a vocabulary, and keeps the biLM frozen for
    ``freeze_bilm_steps`` batches while its new softmax learns; then everything trains."""
    from elmo.cli import main
    from elmo.io.resolve import recorded_tokenizer
    from elmo.io.native import save_model

    train, dev, vocab_file = text_slices
    vocab = Vocabulary.load(vocab_file)
    base = Trainer(micro_train_config(max_steps=3, tokenize="en"), [train], tmp_path / "base", vocab=vocab,
                   progress=False)
    base.train()
    bilm_only = save_model(base.model.bilm, tmp_path / "bilm")  # config.json + model.safetensors, no softmax
    assert recorded_tokenizer(bilm_only) == "en"  # save_model keeps the tokenizer the run was trained with
    with pytest.raises(ValueError, match="without a softmax.*--vocab"):
        Trainer(micro_train_config(), [dev], tmp_path / "x", init_from=bilm_only, progress=False)
    assert Trainer(micro_train_config(), [dev], tmp_path / "y", init_from=bilm_only, vocab=vocab,
                   progress=False).config.freeze_bilm_steps == 1000  # the default for a new softmax
    assert Trainer(micro_train_config(), [dev], tmp_path / "z", init_from=tmp_path / "base",
                   progress=False).config.freeze_bilm_steps == 0  # its own softmax came along

    adapted = Trainer(micro_train_config(freeze_bilm_steps=2), [dev], tmp_path / "adapt", init_from=bilm_only,
                      vocab=vocab, progress=False)
    assert adapted.config.tokenize == "en" and adapted.config.model == base.config.model  # as the source was made
    assert Trainer(micro_train_config(tokenize="whitespace"), [dev], tmp_path / "w", init_from=bilm_only, vocab=vocab,
                   progress=False).config.tokenize is None  # a tokenizer given wins over the source's
    pretrained, softmax = _weights(base.model.bilm), _weights(adapted.model.softmax)
    assert all(torch.equal(v, _weights(adapted.model.bilm)[k]) for k, v in pretrained.items())
    for _ in range(2):  # frozen: only the softmax moves
        metrics = adapted.train_step()
        assert math.isfinite(metrics["loss"]) and metrics["frozen"] == 1.0
    assert all(torch.equal(v, _weights(adapted.model.bilm)[k]) for k, v in pretrained.items())
    assert not torch.equal(softmax["weight"], adapted.model.softmax.weight.detach())
    assert "frozen" not in adapted.train_step()  # step 3: the biLM learns too
    changed = [k for k, v in pretrained.items() if not torch.equal(v, _weights(adapted.model.bilm)[k])]
    assert any("stack" in k for k in changed) and any("char_encoder" in k for k in changed)
    # the CLI: one line saying what to add
    assert main(["train", str(dev), "--init-from", str(bilm_only), "--out", str(tmp_path / "cli"), "--quiet"]) == 1
    assert "--vocab" in capsys.readouterr().err


def test_init_from_the_official_format(text_slices, tmp_path):
    """A folder with the official options.json + .hdf5 (AllenNLP's test biLM) starts a run on new text."""
    import shutil

    from elmo.io.official import load_official
    from tests.conftest import OPTIONS, WEIGHTS

    train, _, vocab_file = text_slices
    folder = tmp_path / "official"
    folder.mkdir()
    shutil.copy(OPTIONS, folder / "options.json")
    shutil.copy(WEIGHTS, folder / "lm_weights.hdf5")
    trainer = Trainer(micro_train_config(max_steps=4, freeze_bilm_steps=2), [train], tmp_path / "run",
                      init_from=folder, vocab=Vocabulary.load(vocab_file), progress=False)
    official = _weights(load_official(OPTIONS, WEIGHTS))
    assert all(torch.equal(v, _weights(trainer.model.bilm)[k]) for k, v in official.items())
    losses = [trainer.train_step()["loss"] for _ in range(2)]  # frozen
    assert all(torch.equal(v, _weights(trainer.model.bilm)[k]) for k, v in official.items())
    losses += [m["loss"] for m in trainer.train()]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)
    assert not all(torch.equal(v, _weights(trainer.model.bilm)[k]) for k, v in official.items())
    reloaded = load_language_model(tmp_path / "run")[0]
    assert reloaded.config == trainer.model.bilm.config


def test_a_run_resumed_inside_its_frozen_start_continues_exactly(text_slices, tmp_path):
    """The freeze is counted in batches of the run: a resumed run knows where it is, and ends it at the same step."""
    train, _, vocab_file = text_slices
    vocab = Vocabulary.load(vocab_file)
    config = micro_train_config(max_steps=6, freeze_bilm_steps=4)
    with pytest.warns(UserWarning, match="randomly initialised biLM"):  # allowed, but rarely what was meant
        straight = Trainer(config, [train], tmp_path / "a", vocab=vocab, progress=False)
    losses = [m["loss"] for m in straight.train()]
    first = Trainer(config.replace(max_steps=3), [train], tmp_path / "b", vocab=vocab, progress=False)
    start = _weights(first.model.bilm)
    part1 = [m["loss"] for m in first.train()]
    assert all(torch.equal(v, _weights(first.model.bilm)[k]) for k, v in start.items())  # still frozen
    resumed = Trainer(config, [train], tmp_path / "b2", resume=tmp_path / "b", progress=False)
    assert resumed.config.freeze_bilm_steps == 4
    assert part1 + [m["loss"] for m in resumed.train()] == losses
    assert all(torch.equal(v, _weights(straight.model.bilm)[k]) for k, v in _weights(resumed.model.bilm).items())


@pytest.mark.parametrize("freeze", [False, True])
def test_the_frozen_and_the_trained_step_run_under_bf16_autocast(freeze):
    """The GPU trainer runs under bf16 autocast; the frozen biLM's no-grad path must too (checked here on the CPU's
    autocast, the same dispatch): a finite loss, the softmax's gradient, and the biLM's only when it trains."""
    model = LanguageModel.from_config(micro_train_config().model, 100, dropout=0.1).train()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 200, (4, 6, 50), generator=generator)
    ids[..., 10:] = 0
    targets = torch.randint(0, 100, (4, 6), generator=generator)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        losses, _ = model((ids, targets), (ids, targets), model.zero_states(4), None, freeze_bilm=freeze)
    (losses[0] + losses[1]).backward()
    assert math.isfinite(float(losses[0] + losses[1])) and model.softmax.weight.grad is not None
    assert (model.bilm.forward_stack.layers[0].weight_hh.grad is None) == freeze


@pytest.mark.parametrize("clip_norm", [10.0, 0.1])  # 0.1: the clip scales every step
def test_the_softmax_weight_learns_from_its_rows_as_from_the_dense_gradient(text_slices, tmp_path, clip_norm):
    """Single-process Adagrad sends the softmax weight's gradient as rows (``elmo.training.row_gradients``): the
    same losses, norms and weights as autograd's dense (V, P) gradient through torch's own Adagrad step."""
    train, _, vocab_file = text_slices
    config = micro_train_config(max_steps=6, clip_norm=clip_norm)
    runs = []
    for name, rows in (("rows", True), ("dense", False)):
        trainer = Trainer(config, [train], tmp_path / name, vocab=Vocabulary.load(vocab_file), progress=False)
        assert trainer.model.softmax.row_gradients is not None
        if not rows:
            trainer.model.softmax.row_gradients = None
        metrics = [trainer.train_step() for _ in range(6)]
        assert trainer.model.softmax.weight.grad is None if rows else trainer.model.softmax.weight.grad is not None
        runs.append((metrics, _weights(trainer.model), trainer.optimizer.state[trainer.model.softmax.weight]))
    (rows_metrics, rows_weights, rows_state), (dense_metrics, dense_weights, dense_state) = runs
    for a, b in zip(rows_metrics, dense_metrics):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5) and a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
    for name in dense_weights:
        torch.testing.assert_close(rows_weights[name], dense_weights[name], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rows_state["sum"], dense_state["sum"], rtol=1e-5, atol=1e-6)
    assert float(rows_state["step"]) == float(dense_state["step"]) == 6


def test_a_resumed_run_drops_the_metrics_of_the_steps_it_redoes(tmp_path):
    from elmo.training.metrics_log import drop_metrics_after

    log = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "loss": 1.0}) + "\n" for s in (1, 10, 20)]
    log.write_text(lines[0] + "a note of the user's\n" + lines[1] + lines[2] + '{"step": 2', encoding="utf-8")
    drop_metrics_after(log, 16)  # the checkpoint the run resumes from is step 16
    assert log.read_text(encoding="utf-8") == lines[0] + "a note of the user's\n" + lines[1]
    before = log.read_bytes()
    drop_metrics_after(log, 16)
    assert log.read_bytes() == before


def test_metrics_lines_that_stay_are_kept_byte_for_byte(tmp_path):
    from elmo.training.metrics_log import drop_metrics_after

    log = tmp_path / "metrics.jsonl"
    kept = b'{"step": 1}\r\nnote\x0cwith a form feed\n'
    log.write_bytes(kept + b'{"step": 30}\n')
    drop_metrics_after(log, 20)
    assert log.read_bytes() == kept


def test_only_a_step_folder_name_counts_as_a_foreign_checkpoint(tmp_path):
    from elmo.io.checkpoint import foreign_checkpoint_names

    (tmp_path / "step-notes.txt").write_text("mine")
    (tmp_path / "step-00000007").mkdir()
    assert [p.name for p in foreign_checkpoint_names(tmp_path)] == ["step-00000007"]


def test_only_step_folders_are_checkpoints_and_they_sort_by_step(tmp_path):
    """A user's copy named like a checkpoint (``step-00000005-backup``) is never listed, so pruning never deletes
    it; from step 100,000,000 on the names grow a digit and still sort by step."""
    from elmo.io.checkpoint import list_checkpoints

    for name in ("step-00000005", "step-00000005-backup", "step-99999999", "step-100000000", "step-7"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "trainer.json").write_text("{}")
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000005", "step-99999999", "step-100000000"]


def test_a_checkpoint_save_removes_the_hidden_folders_of_saves_killed_earlier(text_slices, tmp_path):
    """A SIGKILL during a save or a pruning leaves its hidden folder (the size of a checkpoint); the next save
    removes it: folders of exactly those names holding nothing but a checkpoint's files. A folder of the user's of
    such a name holding anything else stays (it was deleted, with the user's files, and one named like the save's
    own temporary folder was emptied first), and the save writes into a new name of its own."""
    train, _, vocab_file = text_slices
    run = tmp_path / "run"
    killed = (".step-00000055.tmp", ".step-00000009.deleting", ".step-00000003.k2j4x9qa.tmp",
              ".step-00000002.ab12cd34.deleting")
    users = (".step-notes.tmp", ".step-00000001.tmp", ".step-00000007.zz99yy88.tmp")
    for name in killed + users:
        (run / name).mkdir(parents=True)
        (run / name / ("model.safetensors" if name in killed else "mine.txt")).write_text("x")
    (run / ".step-00000001.deleting").write_text("a file of the user's")
    Trainer(micro_train_config(max_steps=1, checkpoint_every=1), [train], run, vocab=Vocabulary.load(vocab_file),
            progress=False).train()
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".step")) == sorted(
        [*users, ".step-00000001.deleting"])
    assert all((run / name / "mine.txt").read_text() == "x" for name in users)
    assert (run / "step-00000001" / "trainer.json").is_file()


def test_a_resume_on_training_text_that_changed_is_refused(text_slices, tmp_path):
    """The checkpoint's data position points into the text as it was: other text of the same name is refused."""
    train, _, vocab_file = text_slices
    text = tmp_path / "a.txt"
    text.write_bytes(train.read_bytes())
    Trainer(micro_train_config(max_steps=1, checkpoint_every=1), [text], tmp_path / "run",
            vocab=Vocabulary.load(vocab_file), progress=False).train()
    text.write_text("".join(reversed(train.read_text().splitlines(keepends=True)[:100])))
    with pytest.raises(ValueError, match=r"a.txt: [0-9,]+ bytes, [0-9,]+ when step-00000001 was saved"):
        Trainer(micro_train_config(max_steps=2), [text], tmp_path / "run", resume=tmp_path / "run", progress=False)


def test_a_resume_on_training_text_edited_to_the_same_size_is_refused(text_slices, tmp_path):
    """Only the sizes were recorded: two lines swapped (a corrected word of the same length) resumed into the new
    text at the old position without a word. Unchanged text still resumes."""
    train, _, vocab_file = text_slices
    text = tmp_path / "a.txt"
    lines = train.read_text(encoding="utf-8").splitlines(keepends=True)[:200]
    text.write_text("".join(lines), encoding="utf-8")
    Trainer(micro_train_config(max_steps=1, checkpoint_every=1), [text], tmp_path / "run",
            vocab=Vocabulary.load(vocab_file), progress=False).train()
    Trainer(micro_train_config(max_steps=2), [text], tmp_path / "run", resume=tmp_path / "run", progress=False).train()
    lines[3], lines[4] = lines[4], lines[3]
    text.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ValueError, match=r"a.txt: its text changed since step-00000002 was saved \(the same size"):
        Trainer(micro_train_config(max_steps=3), [text], tmp_path / "run", resume=tmp_path / "run", progress=False)
