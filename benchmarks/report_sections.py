"""The measured sections of ``benchmarks/report.py``; each returns its Markdown lines."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from common import DATA, flops_per_token, memory_bandwidth_gbs, sentences
from random_weights import random_bilm

from elmo.data.chars import batch_to_ids
from elmo.io.native import save_model
from elmo.io.official import export_official
from elmo.model.bilm import BiLMOutput
from elmo.model.engine import InferenceEngine
from tests.reference_engines import reference_forward

ROOT = Path(__file__).resolve().parents[1]
PRECISIONS = ("fp32", "bf16", "int8")


# ---- inference ----------------------------------------------------------------------------------------------------

def _per_sentence(out: BiLMOutput, batch: list[list[str]]) -> list[torch.Tensor]:
    """Every layer of each sentence without its boundaries: (L+1, n, 2P) each."""
    stacked = torch.stack(out.layers, 1)  # (B, L+1, T+2, 2P)
    return [stacked[row, :, 1 : len(s) + 1].clone() for row, s in enumerate(batch)]


def _pass(run, batches: list[list[list[str]]]) -> tuple[float, list[torch.Tensor]]:
    """Seconds of one pass over the batches and the per-sentence outputs, in the batches' order."""
    ids = [batch_to_ids(b) for b in batches]
    arrays = []
    start = time.perf_counter()
    with torch.inference_mode():
        outs = [run(x) for x in ids]
    seconds = time.perf_counter() - start
    for out, batch in zip(outs, batches):
        arrays += _per_sentence(out, batch)
    return seconds, arrays


def _diff(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    return max((float((a - b).abs().max()) for a, b in zip(got, want) if a.numel()), default=0.0)


def _cosines(got: list[torch.Tensor], want: list[torch.Tensor]) -> str:
    """Per layer, the lowest cosine similarity between a token's vector in ``got`` and in ``want``."""
    a = torch.cat([g for g in got if g.numel()], dim=1).double()  # (L+1, tokens, 2P)
    b = torch.cat([w for w in want if w.numel()], dim=1).double()
    cosine = torch.nn.functional.cosine_similarity(a, b, dim=-1)  # (L+1, tokens)
    return " / ".join(f"{float(c.min()):.5f}" for c in cosine)


def inference_section(peak: float, bandwidth: float) -> list[str]:
    model = random_bilm("original")
    flops = flops_per_token(model.config)
    lstm = model.config.lstm
    weight_bytes = 4 * 2 * lstm.n_layers * 5 * lstm.dim * lstm.projection_dim
    def limit(size: int, precision: str, bandwidth: float) -> float:
        scale = {"fp32": 1, "bf16": 2, "int8": 4}[precision]
        return bandwidth * 1e9 / weight_bytes * scale if size == 1 else peak * 1e9 / flops
    lines = ["## Inference, original-size model (93.6 M parameters)", "",
             "Deterministic mode; 12 sentences at batch 1, 128 at batch 32 (1B Word Benchmark held-out dev, in file "
             "order, or sorted by length first as `Embedder` and `elmo embed` do). % of limit: of the batch-1 "
             "bandwidth limit for the precision's weights at batch 1, of the compute limit at batch 32. The "
             "bandwidth of this shared machine moves from minute to minute, so batch 1 runs three rounds of (bandwidth, pass, "
             "bandwidth), each pass against the higher of its two bandwidths: the median rate, share and bandwidth "
             "(in brackets) of the three; over 100 % means the batch-1 products read the weights faster than those two "
             "streaming reads do. "
             "Max abs diff: every layer against the reference in float32. Cosine: per layer (token layer / LSTM 1 / "
             "LSTM 2), the lowest cosine similarity of a token's vector to its fp32 vector.", "",
             "| batch | order | path | tokens/s | % of limit | x reference | max abs diff | lowest cosine to fp32 |",
             "| ---: | --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for size, count in ((1, 12), (32, 128)):
        text = sentences(count)
        tokens = sum(len(s) for s in text)
        batches = [text[i : i + size] for i in range(0, len(text), size)]
        reference_seconds, reference = _pass(lambda x: reference_forward(model, x), batches)
        reference_rate = tokens / reference_seconds
        reference_line = len(lines)  # its % of limit is written once the run's bandwidth is known
        lines.append("")
        orders = [("file", batches, list(range(len(text))))]
        if size > 1:
            order = sorted(range(len(text)), key=lambda i: -len(text[i]))
            ranked = [text[i] for i in order]
            orders.append(("sorted", [ranked[i : i + size] for i in range(0, len(ranked), size)], order))
        for name, these, index in orders:
            fp32 = None
            for precision in PRECISIONS:
                engine = InferenceEngine.build(model, precision)
                _pass(engine, these[:2])  # warm-up
                engine.forget_tokens()
                if size == 1:  # three rounds of (bandwidth, pass, bandwidth): the median rate and share
                    rounds = []
                    for _ in range(3):
                        before = memory_bandwidth_gbs(repeats=2)
                        seconds, arrays = _pass(engine, these)
                        around = max(before, memory_bandwidth_gbs(repeats=2))
                        rounds.append((tokens / seconds, tokens / seconds / limit(1, precision, around), around))
                    rate, fraction, around = (statistics.median(r[k] for r in rounds) for k in range(3))
                    share = f"{100 * fraction:.0f}% ({around:.1f} GB/s)"
                else:
                    seconds, arrays = min((_pass(engine, these) for _ in range(2)), key=lambda r: r[0])
                    rate = tokens / seconds
                    share = f"{100 * rate / limit(size, precision, bandwidth):.0f}%"
                seconds = tokens / rate
                by_sentence = [None] * len(text)
                for i, array in zip(index, arrays):
                    by_sentence[i] = array
                fp32 = fp32 or by_sentence
                lines.append(f"| {size} | {name} | {precision} | {rate:,.0f} | {share} | "
                             f"{reference_seconds / seconds:.2f} | "
                             f"{_diff(by_sentence, reference):.1e} | {_cosines(by_sentence, fp32)} |")
                sys.stderr.write(lines[-1] + "\n")
                engine.close()
        lines[reference_line] = (f"| {size} | file | reference (AllenNLP's computation) | {reference_rate:,.0f} | "
                                 f"{100 * reference_rate / limit(size, 'fp32', bandwidth):.0f}% | 1.00 | 0 | |")
    return lines + [""]


# ---- start-up -------------------------------------------------------------------------------------------------------

REFERENCE_COMMAND = r"""
import sys, h5py, torch
sys.path.insert(0, {root!r})
from elmo.data.chars import batch_to_ids
from elmo.io.official import load_official
from tests.reference_engines import reference_forward
model = load_official({options!r}, {weights!r})
lines = [l.split() for l in open({text!r}, encoding="utf-8")]
with h5py.File({out!r}, "w") as f:
    for start in range(0, len(lines), 32):
        batch = lines[start : start + 32]
        out = reference_forward(model, batch_to_ids(batch))
        for row, s in enumerate(batch):
            f[str(start + row)] = out.layers[-1][row, 1 : len(s) + 1].numpy()
"""


def _process_seconds(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, cwd=ROOT)
    return time.perf_counter() - start


def _first_vector_seconds(code: str, env: dict[str, str]) -> tuple[float, float]:
    """Seconds from starting a fresh Python to the moment ``code`` has its first vector (it prints the clock then),
    and to the process's exit."""
    start = time.time()
    out = subprocess.run([sys.executable, "-c", code + "; import time; print(time.time(), flush=True)"], env=env,
                         check=True, capture_output=True, cwd=ROOT, text=True).stdout
    return float(out.split()[-1]) - start, time.time() - start


def _median_of(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def startup_section(work: Path, count: int) -> list[str]:
    model = random_bilm("original")
    options, weights = export_official(model, work / "official")
    ours = save_model(model, work / "ours")
    text = work / "sentences.txt"
    text.write_text("\n".join(" ".join(s) for s in sentences(count)) + "\n", encoding="utf-8")
    env = {**os.environ, "ELMO_CACHE": str(work / "cache"), "PYTHONPATH": str(ROOT)}
    python = sys.executable
    first = "from elmo import Embedder; Embedder.from_pretrained({}).embed('The bank closed .')"
    pair = f"options={str(options)!r}, weights={str(weights)!r}"
    import_elmo = _median_of([_first_vector_seconds("import elmo", env) for _ in range(3)])
    official_first = _first_vector_seconds(first.format(pair), env)  # converts into the cache
    official_again = _median_of([_first_vector_seconds(first.format(pair), env) for _ in range(3)])
    ours_first = _median_of([_first_vector_seconds(first.format(repr(str(ours))), env) for _ in range(3)])
    timings = [("`import elmo`", import_elmo), ("first vector, official HDF5 (first use)", official_first),
               ("first vector, official HDF5 (again)", official_again), ("first vector, our format", ours_first)]
    embed = [python, "-m", "elmo", "embed", str(text), str(work / "out.hdf5"), "--top", "--batch-size", "32",
             "--quiet"]
    # each command three times, alternating, the median of each: one run moves by 10 % on this shared machine
    runs = [(_process_seconds(embed + ["--model", str(ours)], env),
             _process_seconds(embed[:5] + [str(work / "out2.hdf5")] + embed[6:]
                              + ["--options", str(options), "--weights", str(weights)], env)) for _ in range(3)]
    ours_seconds, official_seconds = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
    reference = REFERENCE_COMMAND.format(root=str(ROOT), options=str(options), weights=str(weights), text=str(text),
                                         out=str(work / "reference.hdf5"))
    reference_seconds = _process_seconds([python, "-c", reference], env)
    lines = ["## Start-up and the whole command", "",
             "Fresh processes (median of 3, but the first use of the official files, which converts them once). "
             "First vector: `Embedder.from_pretrained(...).embed('The bank closed .')`, timed from starting Python "
             "to the moment the vector exists, and to the process's exit. The whole command: "
             f"{count} sentences of the 1B Word Benchmark held-out dev set through `elmo embed --top "
             "--batch-size 32`, start to exit (median of 3, alternating the two model formats), beside one run of "
             "the reference (AllenNLP's computation over the official files, batches of 32 in file order, the top "
             "layer written to HDF5).", "",
             "| what | seconds to the vector | seconds to exit |", "| --- | ---: | ---: |"]
    lines += [f"| {name} | {vector:.2f} | {done:.2f} |" for name, (vector, done) in timings]
    lines += [f"| `elmo embed`, our format | | {ours_seconds:.1f} |",
              f"| `elmo embed`, official HDF5 | | {official_seconds:.1f} |",
              f"| reference, official HDF5 | | {reference_seconds:.1f} |",
              "", f"`elmo embed` is {reference_seconds / ours_seconds:.1f}x (our format) and "
              f"{reference_seconds / official_seconds:.1f}x (official files) as fast as the reference, whole process.",
              ""]
    return lines


# ---- training -------------------------------------------------------------------------------------------------------

def _prepare_slice(work: Path, bilmtf: Path) -> Path:
    out = work / "imdb2m"
    subprocess.run([sys.executable, str(bilmtf), "prepare", "--imdb", str(DATA / "en" / "imdb" / "reviews.jsonl.gz"),
                    "--tokens", "2000000", "--max-vocab", "50000", "--out-dir", str(out)], check=True,
                   capture_output=True)
    return out


TRAIN_WORKER = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from elmo.data.vocab import Vocabulary
from elmo.training.config import TrainConfig
from elmo.training.trainer import Trainer
from elmo.memory import keep_freed_memory
keep_freed_memory()  # as `elmo train` does
config = TrainConfig.load({preset!r}).replace(max_steps=10**9, checkpoint_every=10**9)
trainer = Trainer(config, [{text!r}], {out!r}, vocab=Vocabulary.load({vocab!r}), progress=False)
losses = [trainer.train_step()["loss"] for _ in range({warmup})]
start = time.perf_counter()
losses += [trainer.train_step()["loss"] for _ in range({batches} - {warmup})]
seconds = time.perf_counter() - start
print(json.dumps({{"tokens_per_s": config.batch_size * config.unroll_steps * ({batches} - {warmup}) / seconds,
                  "loss": losses}}))
"""


def _ours(preset: str, data: Path, batches: int, warmup: int, out: Path) -> tuple[float, list[float]]:
    """Our trainer in a fresh process, as bilm-tf's runs: neither inherits the report's memory or thread state."""
    code = TRAIN_WORKER.format(root=str(ROOT), preset=preset, text=str(data / "train.txt"), out=str(out),
                               vocab=str(data / "vocab.txt"), batches=batches, warmup=warmup)
    result = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                       check=True).stdout.splitlines()[-1])
    return result["tokens_per_s"], result["loss"]


def _bilmtf(python: str, bilmtf: Path, preset: str, data: Path, batches: int, warmup: int,
            out: Path) -> tuple[float, list[float]]:
    subprocess.run([python, str(bilmtf), "train", "--preset", preset, "--train", str(data / "train.txt"), "--vocab",
                    str(data / "vocab.txt"), "--batches", str(batches), "--warmup", str(warmup), "--out", str(out)],
                   check=True, capture_output=True)
    result = json.loads(out.read_text())
    return result["tokens_per_s"], result["loss"]


def _windows(losses: list[float], size: int = 30) -> list[float]:
    return [statistics.fmean(losses[i : i + size]) for i in range(0, len(losses) - size + 1, size)]


def training_section(work: Path, python: str, bilmtf: Path, batches: int,
                     small_cpu_batches: int = 30) -> list[str]:
    has_tf = Path(python).exists()
    data = _prepare_slice(work, bilmtf)
    lines = ["## Training, side by side with bilm-tf's trainer", "",
             "The same 2 M-token IMDB slice and 50,003-word vocabulary (bilm-tf's harness `prepare`), the same preset, "
             "each trainer in a fresh process, one at a time; tokens/s = rows x unroll steps per batch after 5 warm-up "
             "batches. Loss: mean sampled-softmax loss of both directions per 30-batch window.", "",
             "| preset | batches | elmo tokens/s | bilm-tf tokens/s | x bilm-tf | elmo loss by window | "
             "bilm-tf loss by window | largest window difference |",
             "| --- | ---: | ---: | ---: | ---: | --- | --- | ---: |"]
    for preset, n in (("tiny", batches), ("small-cpu", small_cpu_batches)):
        ours, our_losses = _ours(preset, data, n, 5, work / f"run-{preset}")
        if has_tf:
            theirs, their_losses = _bilmtf(python, bilmtf, preset, data, n, 5, work / f"bilmtf-{preset}.json")
        else:
            theirs, their_losses = float("nan"), []
        mine, peer = _windows(our_losses), _windows(their_losses)
        gap = max((abs(a - b) / b for a, b in zip(mine, peer)), default=float("nan"))
        lines.append(f"| {preset} | {n} | {ours:,.0f} | {theirs:,.0f} | {ours / theirs:.2f} | "
                     f"{' '.join(f'{x:.2f}' for x in mine)} | {' '.join(f'{x:.2f}' for x in peer)} | {gap:.1%} |")
        sys.stderr.write(lines[-1] + "\n")
    if not has_tf:
        lines += ["", f"bilm-tf was not run: no Python at {python}. Set it up as `tools/bilmtf/README` says "
                  "(a venv with tensorflow-cpu 2.21 and tf_keras) and pass `--bilmtf-python`."]
    return lines + [""]


# ---- memory on long files ---------------------------------------------------------------------------------------

MEMORY_WORKER = r"""
import sys, time
sys.path.insert(0, {root!r}); sys.path.insert(0, {bench!r})
from common import peak_rss_mb
from random_weights import random_bilm
from elmo.embed_file import embed_file
from elmo.memory import keep_freed_memory
keep_freed_memory()  # as `elmo embed` does
model = random_bilm("tiny")
start = time.perf_counter()
n = embed_file(model, {src!r}, {dst!r}, layers="top", batch_size=64, progress=False)
print(n, time.perf_counter() - start, peak_rss_mb())
"""


def memory_section(work: Path, counts: list[int]) -> list[str]:
    pool = [" ".join(s) for s in sentences(12_000)]
    lines = ["## Memory of embedding long files", "",
             "Peak RSS of a fresh process embedding a file with the tiny model (top layer, HDF5), the input cycling "
             "through the first 12,000 1B Word Benchmark held-out dev sentences (every count from 12,000 on holds the "
             "longest of them). The heap settles at its working size within the first tens of thousands of "
             "sentences; from there the peak should not grow with the file.", "",
             "| sentences | seconds | sentences/s | peak RSS (MB) |", "| ---: | ---: | ---: | ---: |"]
    for count in counts:
        src = work / f"long{count}.txt"
        src.write_text("\n".join(pool[i % len(pool)] for i in range(count)) + "\n", encoding="utf-8")
        code = MEMORY_WORKER.format(root=str(ROOT), bench=str(ROOT / "benchmarks"), src=str(src),
                                    dst=str(work / f"long{count}.hdf5"))
        n, seconds, rss = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                         check=True).stdout.split()
        lines.append(f"| {int(n):,} | {float(seconds):.0f} | {int(n) / float(seconds):,.0f} | {float(rss):,.0f} |")
        src.unlink()
    return lines + [""]
