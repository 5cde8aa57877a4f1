"""Pretraining the biLM: one explicit loop (setup, train, checkpoint, resume), single process or DDP under torchrun.

Per batch: the forward rows and the backward rows (independent streams) each run through their LSTM stack from the
states their rows ended in (or from zeros, for rows whose window begins a sentence: ``zero_state_share``); the
softmax shared by both directions scores the targets of each direction against that direction's own sampled
negatives (shared by its positions; each rank draws its own); loss = (forward + backward) / 2; the gradient of
loss x unroll_steps is clipped to a global norm and applied by Adagrad (docs/training.md §3-§4). Every random draw comes from
saved generators or from (seed, step), so a resumed run continues exactly where the checkpoint left off.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from elmo.data.corpus import LMBatch, LMBatcher, SentenceSource, expand_files
from elmo.data.vocab import Vocabulary
from elmo.errors import ElmoError, UsageError
from elmo.io.atomic import DiskWriteError, is_disk_full, make_folders, output_folder, remove_empty, write_errors
from elmo.io.checkpoint import list_checkpoints
from elmo.io.lock import OutputLock
from elmo.io.native import ModelFileError, load_state_strict
from elmo.text.tokenize import get_tokenizer
from elmo.training.checkpoint import Checkpoint, save_checkpoint
from elmo.training.checkpoint_fields import (check_carried_state, check_optimizer, data_position,
                                             data_positions_to_save)
from elmo.training.config import TrainConfig
from elmo.training.init_from import StartingWeights
from elmo.training.lm import LanguageModel
from elmo.training.metrics_log import drop_metrics_after
from elmo.training.row_gradients import RowGradients, adagrad_rows, clip_with_rows
from elmo.training.run_start import (Distributed, check_tokenizer_function, make_process_group, run_device,
                                     settle_run, training_files, training_text, warn_if_mostly_unknown)
from elmo.training.softmax import LogUniformSampler, check_softmax_size
from elmo.training.zero_starts import zero_some_sentence_starts

LOCK_NAME = ".lock"  # in the run folder, while a run writes it (elmo.io.lock)
STOP_NAME = ".stop"  # in the run folder: stop after the step under way (its text: why); removed when honoured


class TrainingDiverged(ElmoError, ValueError):
    """Too many consecutive batches with a non-finite loss."""


class Trainer:
    """Owns the model, optimiser, data streams and carried states of one training run."""

    def __init__(self, config: TrainConfig, files: Sequence[str | Path], out_dir: str | Path,
                 vocab: Vocabulary | None = None, tokenizer: Callable[[str], list[str]] | None = None,
                 resume: str | Path | None = None, init_from: str | Path | None = None,
                 device: str | None = None, progress: bool = True, given: dict | None = None) -> None:
        """``given``: the settings the user gave for this run (None where not given), applied over a resumed
        checkpoint's own by ``TrainConfig.resumed``; without it, what ``config`` sets apart from the defaults (but
        model sizes). ``tokenizer``: a function str -> list[str] for ``config.tokenize``; a resume needs it again."""
        self._join_processes(device)
        self.out_dir, self.progress = output_folder(out_dir, "out_dir"), progress and self.env.main  # no file, no ""
        self._checked_unknown, self._lock, self._made_folders, self.closed = False, None, [], False
        if self.env.main:  # one run at a time writes a run folder: a second gets "in use by pid N"
            self._made_folders = make_folders(self.out_dir)
            self._lock = OutputLock(self.out_dir / LOCK_NAME, str(self.out_dir)).acquire()
        try:
            self._set_up(config, files, vocab, tokenizer, resume, init_from, given)
        except BaseException:
            self._close(end_group=False)
            raise

    def _set_up(self, config: TrainConfig, files: Sequence[str | Path], vocab: Vocabulary | None,
                tokenizer: Callable[[str], list[str]] | None, resume: str | Path | None,
                init_from: str | Path | None, given: dict | None) -> None:
        """The run's settings, model, optimizer, data streams and, when resuming, the checkpoint's state."""
        checkpoint, start, config, vocab = settle_run(config, vocab, self.out_dir, resume, init_from, given, self.env)
        check_tokenizer_function(checkpoint, tokenizer, config, self.env, start)
        self._tokenizer_function = tokenizer is not None  # recorded in checkpoints: a resume must give it again
        if tokenizer is None:
            tokenizer = get_tokenizer(config.tokenize)
        if vocab is None:
            raise UsageError("a vocabulary is needed: pass --vocab (build one with `elmo vocab build`)")
        check_softmax_size(len(vocab), config.model.lstm.projection_dim, str(vocab.source or "the vocabulary"))
        self.config, self.vocab = config, vocab
        torch.manual_seed(config.seed + self.env.rank)  # dropout differs per rank, and so do the negatives
        self._build_model(checkpoint, start)
        self.optimizer = self._make_optimizer()
        if self.env.world == 1 and config.optimizer == "adagrad":  # DDP all-reduces dense gradients only
            self.model.softmax.row_gradients = RowGradients()
        # each rank draws its own negatives, as each bilm-tf tower does (rank 0: the seed of single-process runs)
        self.sampler = LogUniformSampler(len(vocab), seed=config.seed + 1_000_003 * self.env.rank)
        self._open_streams(training_files(files, checkpoint), tokenizer)
        self.states = self.model.zero_states(config.batch_size, self.device)
        self.step, self.tokens_seen, self.elapsed = 0, 0, 0.0
        self.bad_steps = 0  # consecutive batches skipped for a non-finite loss
        self.stop_requested: str | None = None  # why the run is to stop after its current step (request_stop)
        self.text = training_text(self.files, checkpoint) if self.env.main else None  # resumed: checked against it
        if checkpoint is not None:
            self._restore(checkpoint)
        self.ddp = self._wrap_for_processes()

    def close(self) -> None:
        """Give the run folder's lock back; the folders this run made and left empty are removed; a process group this
        Trainer joined under torchrun is closed (Gloo's threads, left to Python's exit, could abort a finished run:
        "terminate called without an active exception"). The Trainer is done: ``train``, ``train_step`` and ``save``
        are refused after it (they would write the folder unlocked)."""
        self._close(end_group=True)

    def _close(self, end_group: bool) -> None:
        """``close``; the process group is left open after a failure or an interrupt (``end_group`` False): the
        other processes may still wait for this one in a collective, and ending it can wait for them too."""
        self.closed = True
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        remove_empty(self._made_folders)
        if end_group and self._own_group and dist.is_initialized():
            self._own_group = False
            dist.destroy_process_group()

    # ---- setup ------------------------------------------------------------------------------------------------
    def _join_processes(self, device: str | None) -> None:
        """This process's rank and device; under torchrun, the process group it joins."""
        self.env = Distributed.from_env()
        self.device = run_device(device, self.env)  # checked: a device this machine runs on
        self._own_group = self.env.world > 1 and not dist.is_initialized()  # a caller's own group stays the caller's
        if self._own_group:
            make_process_group(self.env, self.device)

    def _build_model(self, checkpoint: Checkpoint | None, start: StartingWeights | None) -> None:
        """The language model, its weights from the checkpoint or the starting weights (else random), on the device."""
        config = self.config
        self.model = LanguageModel.from_config(config.model, len(self.vocab), dropout=config.dropout)
        # how the training text is split: every checkpoint's config.json names it (save_model), and so every model
        # loaded from this run splits raw text the same way
        self.model.bilm.tokenizer_name = None if config.tokenize == "whitespace" else config.tokenize
        if checkpoint is not None:
            self.model.bilm.load_state_dict(checkpoint.bilm.state_dict())
            load_state_strict(self.model.softmax, checkpoint.softmax, str(checkpoint.path / "softmax.safetensors"))
        elif start is not None:
            self.model.bilm.load_state_dict(start.bilm.state_dict())
            if start.softmax is not None:
                load_state_strict(self.model.softmax, start.softmax, f"{start.source}'s softmax")
        self.model.to(self.device).train()

    def _open_streams(self, files: Sequence[str | Path], tokenizer: Callable[[str], list[str]]) -> None:
        """This rank's rows of the global batch, and one batcher per direction reading them from the files."""
        config = self.config
        self.global_rows = config.batch_size * self.env.world  # the global batch
        self.rows = (self.env.rank * config.batch_size, (self.env.rank + 1) * config.batch_size)  # this rank's
        files = expand_files(files)
        self.files = [str(f) for f in files]  # as given: a run moved with its text resumes; hashes catch other text
        self.batchers = [
            LMBatcher(SentenceSource(files, tokenizer, seed=config.seed + 7919 * direction,
                                     chunk_size=config.chunk_size), self.vocab, self.global_rows, config.unroll_steps,
                      self.rows, reverse=bool(direction), width=config.model.char_cnn.max_characters_per_token)
            for direction in (0, 1)
        ]

    def _wrap_for_processes(self) -> torch.nn.parallel.DistributedDataParallel | None:
        """The model wrapped for DDP when several processes train (None for one)."""
        if self.env.world <= 1:
            return None
        return torch.nn.parallel.DistributedDataParallel(  # a frozen biLM's weights get no gradient
            self.model, device_ids=None, find_unused_parameters=self.step < self.config.freeze_bilm_steps)

    def _make_optimizer(self) -> torch.optim.Optimizer:
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.config.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.config.learning_rate, fused=self._fused_optimizer)
        return torch.optim.Adagrad(params, lr=self.config.learning_rate, fused=self._fused_optimizer,
                                   initial_accumulator_value=self.config.initial_accumulator)

    @property
    def _fused_optimizer(self) -> bool | None:
        """PyTorch's fused CPU kernels (torch >= 2.4; elsewhere its default): one pass over each parameter, not
        several (Adagrad over 13.5 M parameters, mostly the softmax: 59-76 -> 25-30 ms a step; same values to rounding)."""
        return True if self.device.type == "cpu" and torch.__version__ >= "2.4" else None

    def _restore(self, checkpoint) -> None:
        trainer = checkpoint.trainer
        if trainer.get("world", 1) != self.env.world:
            raise UsageError(f"{checkpoint.path}: written by {trainer.get('world', 1)} processes; resume it with "
                             f"the same number (got {self.env.world})")
        try:
            self._load_states(checkpoint)
        except ModelFileError:  # names the field itself
            raise
        except (KeyError, ValueError, TypeError, IndexError, RuntimeError) as err:
            raise ModelFileError(f"{checkpoint.path}: its optimizer, data or carried states do not fit this run "
                                 f"({type(err).__name__}: {' '.join(str(err).split())[:160]}); the checkpoint is "
                                 f"damaged or was edited: resume from another one") from None
        self.step, self.tokens_seen, self.elapsed = trainer["step"], trainer["tokens_seen"], trainer["elapsed"]

    def _load_states(self, checkpoint) -> None:
        """The optimizer, the data positions, the carried states and the random generators of ``checkpoint``."""
        if checkpoint.optimizer is not None:
            check_optimizer(checkpoint.optimizer, self.optimizer, self.config.optimizer, checkpoint.path)
            # the saved groups carry the kernel choice of the machine that wrote them: this one's applies
            groups = [{**group, "fused": self._fused_optimizer, "foreach": None}
                      for group in checkpoint.optimizer["param_groups"]]
            self.optimizer.load_state_dict({**checkpoint.optimizer, "param_groups": groups})
        rank = self.env.rank
        for direction, batcher in enumerate(self.batchers):
            batcher.load_state_dict(data_position(checkpoint.trainer["data"], rank, direction))
        t, lstm, rows = checkpoint.tensors, self.config.model.lstm, self.states[0][0][0].shape[0]
        carried = lambda name, width: check_carried_state(t.get(name), name, (rows, width),  # noqa: E731
                                                          checkpoint.path / "state.safetensors").to(self.device)
        self.states = [[(carried(f"r{rank}.d{d}.l{l}.h", lstm.projection_dim),
                         carried(f"r{rank}.d{d}.l{l}.c", lstm.dim)) for l in range(lstm.n_layers)] for d in range(2)]
        torch.set_rng_state(t[f"r{rank}.torch_rng"])
        if self.device.type == "cuda" and f"r{rank}.cuda_rng" in t:  # dropout on a GPU draws from the GPU's generator
            torch.cuda.set_rng_state(t[f"r{rank}.cuda_rng"], self.device)
        # "sampler_rng": checkpoints written before each rank drew its own (their other ranks keep their new seed)
        if f"r{rank}.sampler_rng" in t or rank == 0:
            self.sampler.set_state(t.get(f"r{rank}.sampler_rng", t.get("sampler_rng")))

    # ---- one step ---------------------------------------------------------------------------------------------
    def train_step(self) -> dict[str, float]:
        """One batch: returns the loss (mean of both directions) and each direction's sampled loss."""
        self._check_open()
        batches = [b.next_batch() for b in self.batchers]
        if any(b is None for b in batches):
            raise RuntimeError("the training stream ended")  # streams loop, so this means no text at all
        if not self._checked_unknown and self.env.main:  # once per run, from the first process
            self._checked_unknown = True
            warn_if_mostly_unknown(batches[0].targets, self.vocab)
        module = self.ddp or self.model
        self.states = zero_some_sentence_starts(self.states, batches, self.config.zero_state_share, self.config.seed,
                                                self.step, self.rows, self.global_rows, self.device)
        previous_states = self.states  # a skipped batch leaves its rows where this batch began
        n_neg = min(self.config.n_negative_samples, len(self.vocab))
        # one set of negatives per direction, as bilm-tf's one sampled_softmax_loss call per direction
        samples = [self.sampler.sample(n_neg) for _ in range(2)] if n_neg < len(self.vocab) else None
        autocast = torch.autocast("cuda", dtype=torch.bfloat16) if self.device.type == "cuda" else nullcontext()
        frozen = self.step < self.config.freeze_bilm_steps
        with autocast:
            losses, self.states = module(*self._inputs(batches), self.states, samples, self.sampler,
                                         freeze_bilm=frozen)
        loss = 0.5 * (losses[0] + losses[1])
        self.optimizer.zero_grad(set_to_none=True)
        row_gradients = self.model.softmax.row_gradients
        if row_gradients is not None:
            row_gradients.clear()  # nothing left over from an interrupted step
        (loss * self.config.unroll_steps).backward()
        rows = row_gradients.take() if row_gradients is not None else None  # the softmax weight's: (ids, rows)
        # after DDP's all-reduce the norm is the same on every rank, so all ranks skip a bad batch together
        norm = clip_with_rows(list(self.model.parameters()), rows[1] if rows else None, self.config.clip_norm)
        self.step += 1
        self.tokens_seen += sum(b.tokens for b in batches) // 2 * self.env.world
        metrics = {"loss": float(loss.detach()), "forward": float(losses[0].detach()),
                   "backward": float(losses[1].detach()), "grad_norm": float(norm),
                   **({"frozen": 1.0} if frozen else {})}  # in metrics.jsonl: the frozen start is visible
        if not math.isfinite(metrics["grad_norm"]):
            self._skip_bad_batch(previous_states)
            return {**metrics, "skipped": 1.0}
        self.bad_steps = 0
        self.optimizer.step()
        if rows is not None:
            group = self.optimizer.param_groups[0]
            adagrad_rows(self.model.softmax.weight, self.optimizer.state[self.model.softmax.weight], *rows,
                         group["lr"], group["eps"])
        self.states = [[(h.detach(), c.detach()) for h, c in direction] for direction in self.states]
        return metrics

    def _skip_bad_batch(self, previous_states: list) -> None:
        """A NaN/inf loss or gradient: drop the update, keep the states from before the batch, stop if it persists."""
        self.optimizer.zero_grad(set_to_none=True)
        self.states = previous_states
        self.bad_steps += 1
        warnings.warn(f"step {self.step}: loss or gradient is not finite; batch skipped "
                      f"({self.bad_steps} in a row, stopping at {self.config.max_bad_steps})")
        if self.bad_steps >= self.config.max_bad_steps:
            raise TrainingDiverged(f"training stopped at step {self.step}: {self.bad_steps} batches in a row had a "
                                   f"non-finite loss or gradient; start again from the last good checkpoint with a lower "
                                   f"learning rate: --init-from {self.out_dir} --out NEW_FOLDER --config FILE.toml "
                                   f"(a [train] learning_rate below {self.config.learning_rate:g})")

    def _inputs(self, batches: list[LMBatch]) -> tuple:
        return tuple((b.char_ids.to(self.device), b.targets.to(self.device)) for b in batches)

    # ---- the loop ---------------------------------------------------------------------------------------------
    def train(self) -> list[dict[str, float]]:
        """Train until max_steps or max_minutes; checkpoint every checkpoint_every steps and at the end. The run
        folder's lock is given back at the end, however the loop ends."""
        self._check_open()
        try:
            history = self._train()
        except BaseException:
            self._close(end_group=False)
            raise
        self.close()
        return history

    def _check_open(self) -> None:
        if self.closed:  # one line, as a misuse; not a write into a folder another run may hold
            raise UsageError(f"this Trainer of {self.out_dir} is closed (train() returned, or close() was called): "
                             f"make a new Trainer with resume={str(self.out_dir)!r} to go on")

    def _train(self) -> list[dict[str, float]]:
        cfg = self.config
        history: list[dict[str, float]] = []
        start, start_step, elapsed_before = time.monotonic(), self.step, self.elapsed
        log = (self.out_dir / "metrics.jsonl") if self.env.main else None
        if log:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            drop_metrics_after(log, self.step)  # a killed run's steps past its checkpoint: this run redoes them
        bar = tqdm(total=cfg.max_steps, initial=self.step, unit="batch", disable=not self.progress, desc="train")
        window_tokens, window_start = 0, time.monotonic()
        _, stop = self._sync(start)
        while (cfg.max_steps is None or self.step < cfg.max_steps) and not stop:
            metrics, stop = self._sync(start, self.train_step())
            history.append(metrics)
            window_tokens += cfg.batch_size * cfg.unroll_steps * self.env.world
            self.elapsed = elapsed_before + time.monotonic() - start
            if self.step % cfg.log_every == 0 or self.step == start_step + 1:
                rate = window_tokens / max(time.monotonic() - window_start, 1e-9)
                window_tokens, window_start = 0, time.monotonic()
                record = {"step": self.step, **metrics, "sampled_perplexity": math.exp(min(metrics["loss"], 50)),
                          "tokens_per_s": rate, "tokens_seen": self.tokens_seen, "elapsed_s": self.elapsed}
                if log:
                    with write_errors(log), open(log, "a", encoding="utf-8") as f:  # a full disk: one line naming it
                        f.write(json.dumps(record) + "\n")
                bar.set_postfix(loss=f"{metrics['loss']:.3f}", ppl=f"{record['sampled_perplexity']:.0f}",
                                tok_s=f"{rate:.0f}", **({"biLM": "frozen"} if "frozen" in metrics else {}))
            bar.update(1)
            if self.step % cfg.checkpoint_every == 0:
                self.save()
        bar.close()
        if self.step > start_step and self.step % cfg.checkpoint_every != 0:
            self.save()  # the end, a time limit or a stop request: the last steps are kept
        return history

    def request_stop(self, reason: str | None = None) -> None:
        """Stop after the step under way, with a checkpoint, as at the run's end (``reason``: e.g. "SIGTERM"). It only
        sets a flag (safe in a signal handler); the first rank to see it stops every rank. Without a reason: the
        request of a ``.stop`` file in the run folder (``elmo train --nproc`` writes one on Ctrl-C or SIGTERM; a user
        may), if there is one; it is consumed, so that a resume does not stop again."""
        if reason is None and self.env.main and (stop := self.out_dir / STOP_NAME).is_file():
            reason = stop.read_text(encoding="utf-8", errors="replace").strip()[:40] or STOP_NAME
            stop.unlink(missing_ok=True)
        self.stop_requested = self.stop_requested or reason

    def _sync(self, start: float, metrics: dict[str, float] | None = None) -> tuple[dict[str, float] | None, bool]:
        """Whether --max-minutes is reached, and the step's losses over the whole global batch (each process
        computes its own rows' share). With several processes one all-reduce settles both: a process that stopped
        alone would wait forever for the others' checkpoint state, and they for its step."""
        up = self.config.max_minutes is not None and (time.monotonic() - start) / 60 >= self.config.max_minutes
        self.request_stop()  # a .stop file's request, if any
        if self.env.world == 1:
            return metrics, up or self.stop_requested is not None
        names = [k for k in ("loss", "forward", "backward") if metrics and k in metrics]
        values = torch.tensor([*(metrics[k] for k in names), float(up), float(self.stop_requested is not None)],
                              dtype=torch.float64, device=self.device)
        dist.all_reduce(values)
        if metrics is not None:
            metrics = metrics | {k: float(v) / self.env.world for k, v in zip(names, values)}
        if values[-1] > 0:  # another rank was asked to stop: every rank stops at this step
            self.request_stop("another process's request")
        return metrics, bool(values[-2] > 0 or values[-1] > 0)

    def save(self) -> Path | None:
        """Checkpoint every rank's state (gathered to rank 0, which writes it); every rank returns once it exists."""
        self._check_open()
        rank_state = {
            "data": data_positions_to_save([b.state_dict() for b in self.batchers], self.env.rank),
            "tensors": {f"d{d}.l{l}.{name}": t.detach().cpu()
                        for d, direction in enumerate(self.states) for l, state in enumerate(direction)
                        for name, t in zip("hc", state)} | {"torch_rng": torch.get_rng_state()}
                       | ({"cuda_rng": torch.cuda.get_rng_state(self.device)} if self.device.type == "cuda" else {})
                       | {"sampler_rng": self.sampler.state()},
        }
        gathered = [rank_state] if self.env.world == 1 else [None] * self.env.world
        if self.env.world > 1:
            dist.all_gather_object(gathered, rank_state)
        if not self.env.main:  # None, once rank 0 has written it: a script's next step may read it (resume, export)
            return dist.barrier()
        tensors = {f"r{r}.{k}": v for r, s in enumerate(gathered) for k, v in s["tensors"].items()}
        trainer = {"tokens_seen": self.tokens_seen, "elapsed": self.elapsed, "world": self.env.world,
                   **self.text.record(), "data": [s["data"] for s in gathered],
                   "tokenizer_function": self._tokenizer_function}
        try:
            path = save_checkpoint(self.out_dir, self.step, self.model.bilm, self.model.softmax, self.vocab,
                                   self.config.to_dict(), self.optimizer.state_dict(), tensors, trainer,
                                   keep=self.config.keep_checkpoints)
        except Exception as err:  # an OSError, or a writer's own error for a full disk (safetensors)
            if not (isinstance(err, OSError) or is_disk_full(err)):
                raise
            previous = list_checkpoints(self.out_dir)
            kept = f"the previous checkpoint {previous[-1]} is intact" if previous else "no earlier checkpoint exists"
            reason = " ".join(str(getattr(err, "strerror", None) or err).split())[:200]
            raise DiskWriteError(f"checkpoint at step {self.step} not written to {self.out_dir} ({reason}); "
                                 f"{kept}") from None
        if self.env.world > 1:  # a failed write raised above: the others wait until torchrun ends them
            dist.barrier()
        return path
