"""The run folder's ``metrics.jsonl``: one JSON record per logged step, appended as training goes."""

from __future__ import annotations

import json
from pathlib import Path

from elmo.io.atomic import atomic_path


def drop_metrics_after(log: Path, step: int) -> None:
    """Remove from ``metrics.jsonl`` the records of steps after ``step`` (written by a run killed after its last
    checkpoint, which a resumed run redoes and logs again) and a last line the kill cut short; every other line,
    ours or not, stays byte for byte. Rewritten atomically, and only when something is removed."""
    if not log.is_file():
        return
    pieces = log.read_bytes().split(b"\n")  # lines end at "\n" only, as they were written
    lines = [piece + b"\n" for piece in pieces[:-1]]  # the last piece: "" after a final "\n", else a cut-short line
    kept = [line for line in lines if not _later_step(line, step)]
    if len(kept) == len(lines) and not pieces[-1]:
        return
    with atomic_path(log) as tmp:
        tmp.write_bytes(b"".join(kept))


def _later_step(line: bytes, step: int) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] > step
