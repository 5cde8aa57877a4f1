"""Ship a trained checkpoint inside the package: elmo/models/NAME/ (config.json, float16 model.safetensors,
MODEL_CARD.md with the measured perplexities next to the count-based baselines), in the sections the cards share.

    scripts/evaluate_lm.sh runs/en-ship runs/data/en > runs/en-ship/eval.txt
    python scripts/ship_model.py runs/en-ship --name en --tokenizer en --eval-report runs/en-ship/eval.txt \\
        --intended-use "..." --data "..." --tokenisation "..." --train-command "..." \\
        --eval-command "scripts/evaluate_lm.sh ..." --limitations "..."

The card is generated from the checkpoint (config, steps, tokens seen, training time) and the evaluation report
(the output of scripts/evaluate_lm.sh), so its numbers are the measured ones. The tokenizer goes into config.json:
the run's own (``elmo train --tokenize``), or ``--tokenizer`` for a run trained on text split beforehand (the
shipped models' text came from scripts/prepare_*.py). Everything is checked before anything is written, and the
folder is written whole (elmo.io.atomic.atomic_folder): a failure leaves the model shipped before as it was.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import torch

from elmo.errors import ElmoError, UsageError
from elmo.io.atomic import atomic_folder
from elmo.io.checkpoint import resolve_checkpoint
from elmo.io.native import save_model
from elmo.text.tokenize import TOKENIZER_NAMES
from elmo.training.checkpoint import load_language_model

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_FILES = ("config.json", "model.safetensors", "MODEL_CARD.md")  # elmo/models/NAME, written as one folder
_ROW_KEYS = ("tokens", "forward", "backward", "mean", "unigram", "kn-trigram")  # every held-out row needs them
_LM_LINE = re.compile(r"tokens (\d+)\s+forward ([\d.]+)\s+backward ([\d.]+)\s+mean ([\d.]+)")
_BASELINE_LINE = re.compile(r"(\S+)\s+(unigram|kn-trigram)\s+forward\s+([\d.]+)\s+backward\s+([\d.]+)\s+mean\s+([\d.]+)")


def parse_report(text: str) -> list[dict]:
    """Rows per held-out file: tokens, the LM's forward/backward/mean perplexity (a second LM line: the same from the
    zero state, ``elmo perplexity --zero-state``) and each baseline's mean."""
    rows: dict[str, dict] = {}
    current = None
    for line in text.split("\n"):
        if line.startswith("== ") and not line.startswith("== baselines"):
            current = line[3:].strip()
            rows[current] = {"set": current}
        elif (m := _LM_LINE.search(line)) and current:
            if "mean" in rows[current]:
                rows[current]["zero_state"] = float(m[4])
            else:
                rows[current].update(tokens=int(m[1]), forward=float(m[2]), backward=float(m[3]), mean=float(m[4]))
        elif m := _BASELINE_LINE.search(line):
            name = Path(m[1]).name
            rows.setdefault(name, {"set": name})[m[2]] = float(m[5])
    return list(rows.values())


def read_report(path: Path) -> list[dict]:
    """``parse_report`` of the file, refused in one line unless every held-out set has the LM's figures and both
    baselines' (an empty report, or one cut short, would give a card without results)."""
    rows = parse_report(path.read_text(encoding="utf-8"))
    if not rows:
        raise UsageError(f"{path}: no held-out results (is it the output of scripts/evaluate_lm.sh?)")
    for row in rows:
        if missing := [key for key in _ROW_KEYS if key not in row]:
            raise UsageError(f"{path}: the held-out set {row['set']} has no {missing[0]} figure; run "
                             f"scripts/evaluate_lm.sh again (its baselines included)")
    return rows


def shipped_tokenizer(recorded: str | None, given: str | None, run: str) -> str | None:
    """The tokenizer config.json names: the run's own, or ``--tokenizer`` where the run records none (its text was
    split beforehand). A run that records none needs it said: shipped without one, the model would split raw text
    at whitespace while its card says otherwise."""
    if given is None:
        if recorded is None:
            raise UsageError(f"{run}: the run records no tokenizer (its text was split beforehand): give --tokenizer "
                             f"({', '.join(TOKENIZER_NAMES)}), as that text was split")
        return recorded
    if recorded is not None and given != recorded:
        raise UsageError(f"{run}: trained with --tokenize {recorded}; --tokenizer {given} would split text otherwise")
    return None if given == "whitespace" else given


def table(rows: list[dict]) -> str:
    zero = all("zero_state" in r for r in rows)
    lines = ["| held-out set | tokens | ELMo forward | ELMo backward | ELMo mean "
             + ("| ELMo mean, from zeros " if zero else "") + "| unigram | KN trigram | beats both |",
             "|---|---:|---:|---:|---:|" + ("---:|" if zero else "") + "---:|---:|:---:|"]
    for r in rows:
        worst = max(r["mean"], r["zero_state"]) if zero else r["mean"]
        beats = "yes" if worst < min(r["unigram"], r["kn-trigram"]) else "no"
        lines.append(f"| {r['set']} | {r['tokens']:,} | {r['forward']:.1f} | {r['backward']:.1f} | {r['mean']:.1f} "
                     + (f"| {r['zero_state']:.1f} " if zero else "")
                     + f"| {r['unigram']:.1f} | {r['kn-trigram']:.1f} | {beats} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="run directory or checkpoint")
    parser.add_argument("--name", required=True)
    parser.add_argument("--eval-report", required=True, help="output of scripts/evaluate_lm.sh")
    parser.add_argument("--data", required=True, help="what the model was trained on (markdown)")
    parser.add_argument("--tokenisation", required=True)
    parser.add_argument("--train-command", required=True)
    parser.add_argument("--eval-command", required=True)
    parser.add_argument("--intended-use", required=True, help="what the model is for, and what not (markdown)")
    parser.add_argument("--limitations", required=True,
                        help="what it does badly, with measured figures (e.g. scripts/sense_check.py's)")
    parser.add_argument("--hardware", default="a 2-core CPU",
                        help="where it was trained, for the card")
    parser.add_argument("--tokenizer", choices=TOKENIZER_NAMES,
                        help="how raw text is split for this model (default: the run's own --tokenize)")
    args = parser.parse_args()
    try:
        print(f"wrote {ship(args)}")
    except (ElmoError, OSError) as err:
        sys.exit(f"ship_model.py: error: {' '.join(str(err).split())}")


def ship(args: argparse.Namespace) -> Path:
    """Check the report and the run, then write elmo/models/NAME whole; returns the folder."""
    rows = read_report(Path(args.eval_report))
    checkpoint = resolve_checkpoint(args.run)
    bilm, softmax, vocab = load_language_model(checkpoint)
    bilm.tokenizer_name = shipped_tokenizer(bilm.tokenizer_name, args.tokenizer, args.run)
    trainer = json.loads((checkpoint / "trainer.json").read_text(encoding="utf-8"))
    out = ROOT / "elmo" / "models" / args.name
    with atomic_folder(out, SHIPPED_FILES) as work:
        save_model(bilm, work, dtype=torch.float16)
        size_mb = (work / "model.safetensors").stat().st_size / 1e6
        (work / "MODEL_CARD.md").write_text(card(args, bilm, vocab, trainer, rows, size_mb), encoding="utf-8")
    return out


def card(args: argparse.Namespace, bilm, vocab, trainer: dict, rows: list[dict], size_mb: float) -> str:
    """The model card's text, in the sections the shipped cards share."""
    n_params = sum(p.numel() for p in bilm.parameters())
    c = bilm.config
    filters = ", ".join(str(f) for f in c.char_cnn.filters)
    return f"""# Model card: shipped model `{args.name}`

`Embedder.from_pretrained("{args.name}")`, `elmo embed --model {args.name} ...`: inside the package, no network needed.

## Intended use
{args.intended_use}

## Training data
{args.data}

## Tokenisation
{args.tokenisation}

## Architecture
Character CNN with filters {filters} ({sum(n for _, n in c.char_cnn.filters):,} in all) over
{c.char_cnn.embedding_dim}-dimensional character embeddings, {c.char_cnn.n_highway} highway layer(s); biLSTM of
{c.lstm.n_layers} layers with {c.lstm.dim} cells and {c.lstm.projection_dim}-dimensional projections, skip connections
{c.lstm.use_skip_connections}, cell clip {c.lstm.cell_clip}, projection clip {c.lstm.proj_clip}. {n_params:,} parameters
in the biLM; the softmax over the {len(vocab):,}-word vocabulary is used in training only and is not shipped. Stored
as float16 safetensors, {size_mb:.1f} MB.

## Training
{trainer['step']:,} batches: {trainer['tokens_seen']:,} tokens seen, {trainer['elapsed'] / 3600:.1f} hours on
{args.hardware}. The recipe (docs/training.md):

```bash
{args.train_command}
```

## Evaluation
Held-out perplexity of the full softmax over the {len(vocab):,}-word vocabulary (out-of-vocabulary words count as
`<UNK>`, for the biLM and the baselines alike); "mean" is the geometric mean of the forward and backward LMs. Each
batch row reads its sentences as one stream with the state carried, as in training; "from zeros" reads every
sentence on its own from the zero state, as embedding does. The baselines, an add-one unigram model and an
interpolated modified Kneser-Ney trigram model, are trained on the same training text with the same vocabulary.
Measured on the float32 weights before the float16 rounding:

```bash
{args.eval_command}
```

{table(rows)}

## Limitations
{args.limitations}
"""


if __name__ == "__main__":
    main()
