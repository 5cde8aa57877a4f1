"""The run folder's ``metrics.jsonl``: one JSON record per logged step, appended as training goes."""

from __future__ import annotations

import json
from pathlib import Path

from elmo.io.atomic import atomic_path


def drop_metrics_after(log: Path, step: int) -> None:
    """Remove from ``metrics.jsonl`` the records of steps after ``step`` (written by a run killed after its last
    checkpoint, which a resumed run redoes and logs again) and a last line the kill cut short; every other line,
    ours or not, stays as it was. Rewritten atomically, and only when something is removed."""
    if not log.is_file():
        return
    lines = log.read_text(encoding="utf-8", errors="surrogateescape").splitlines(keepends=True)
    kept = [line for i, line in enumerate(lines) if not _later_step(line, step)
            and (line.endswith("\n") or i < len(lines) - 1)]
    if len(kept) == len(lines):
        return
    with atomic_path(log) as tmp:
        tmp.write_text("".join(kept), encoding="utf-8", errors="surrogateescape")


def _later_step(line: str, step: int) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False
    return isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] > step
