"""Run by the DDP test under torchrun: trains a few steps and writes this rank's weights and losses."""

import json
import os
import sys
import time
from pathlib import Path

import torch.distributed as dist
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from elmo.data.vocab import Vocabulary  # noqa: E402
from elmo.training.trainer import Trainer  # noqa: E402
from tests.conftest import micro_train_config  # noqa: E402


def main() -> None:
    train, vocab, out, rows, steps = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    minutes, late = (float(sys.argv[6]), float(sys.argv[7])) if len(sys.argv) > 6 else (None, 0.0)
    negatives = {"n_negative_samples": int(os.environ["NEGATIVES"])} if "NEGATIVES" in os.environ else {}
    zero_starts = {"zero_state_share": float(os.environ["ZERO_SHARE"])} if "ZERO_SHARE" in os.environ else {}
    frozen = {"freeze_bilm_steps": int(os.environ["FREEZE"])} if "FREEZE" in os.environ else {}
    config = micro_train_config(batch_size=rows, max_steps=steps or None, max_minutes=minutes, dropout=0.0,
                                **negatives, **zero_starts, **frozen)
    trainer = Trainer(config, [train], out / "run", vocab=Vocabulary.load(vocab), progress=False)
    if trainer.env.rank == 1:
        time.sleep(late)  # this rank's clock starts later: --max-minutes runs out for rank 0 first
    losses = [m["loss"] for m in trainer.train()]
    if "AGAIN" in os.environ:  # a second Trainer in the same processes: it joins a new group and resumes the run
        trainer = Trainer(config.replace(max_steps=steps + int(os.environ["AGAIN"])), [train], out / "run",
                          resume=out / "run", progress=False)
        losses += [m["loss"] for m in trainer.train()]
    rank = trainer.env.rank
    save_file({k: v.contiguous() for k, v in trainer.model.state_dict().items()}, str(out / f"rank{rank}.safetensors"))
    (out / f"rank{rank}.json").write_text(json.dumps(losses))
    (out / f"rank{rank}.group").write_text(str(dist.is_initialized()))  # train() closed the group it joined


if __name__ == "__main__":
    main()
