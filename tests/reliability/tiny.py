"""Helpers for the reliability tests: a tiny model folder with random weights, the command line run in this process
or in another one, and the checks every hostile case makes (one line, the exit code, no traceback, no litter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from elmo.cli import main
from elmo.io.native import save_model
from tests.conftest import micro_train_config, random_bilm, small_config

ROOT = Path(__file__).resolve().parents[2]


def tiny_model(folder: Path, **lstm_changes) -> Path:
    """A fixture-sized biLM with random weights saved in our format (``--model FOLDER``); output width 16."""
    return save_model(random_bilm(small_config(**lstm_changes)), folder)


def micro_run(folder: Path) -> Path:
    """A one-step training run of the micro config in ``folder``/run, from ``folder``/short.txt (40 lines) and
    ``folder``/vocab.txt (its words w0..w29 and the specials): a run folder with a checkpoint, to score and export."""
    text_file(folder / "short.txt", 40)
    (folder / "vocab.txt").write_text("<S>\n</S>\n<UNK>\n" + "".join(f"w{i}\n" for i in range(30)), encoding="utf-8")
    (folder / "micro.json").write_text(json.dumps(micro_train_config().to_dict()), encoding="utf-8")
    assert main([str(a) for a in ("train", folder / "short.txt", "--vocab", folder / "vocab.txt", "--config",
                                  folder / "micro.json", "--out", folder / "run", "--max-steps", "1", "--quiet")]) == 0
    return folder / "run"


def text_file(path: Path, lines: int, words: int = 6) -> Path:
    """``lines`` short whitespace-tokenised sentences."""
    path.write_text("".join(" ".join(f"w{(i * 7 + j) % 97}" for j in range(1 + (i + words) % words)) + "\n"
                            for i in range(lines)), encoding="utf-8")
    return path


def cli(capsys, *args: str) -> tuple[int, str]:
    """Run ``elmo ARGS`` in this process: (exit code, stderr)."""
    capsys.readouterr()
    rc = main([str(a) for a in args])
    return rc, capsys.readouterr().err


def elmo_process(*args: str, patch: str = "", **kwargs) -> subprocess.Popen:
    """``elmo ARGS`` as another process (``patch``: Python run first, in that process), its stderr piped."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    code = patch + "\nimport sys\nfrom elmo.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], **{"stdout": subprocess.DEVNULL, **kwargs},
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def waiting_for(go_file: Path, module: str, name: str) -> str:
    """A ``patch`` for :func:`elmo_process`: ``module.name`` (a function) first waits until ``go_file`` exists, so
    that the process is certainly at work (holding its output) while the test starts a second one."""
    return (f"import time, pathlib, {module} as m\n"
            f"original = m.{name}\n"
            f"def waiting(*a, **k):\n"
            f"    while not pathlib.Path({str(go_file)!r}).exists():\n"
            f"        time.sleep(0.02)\n"
            f"    return original(*a, **k)\n"
            f"m.{name} = waiting\n")


def one_error_line(err: str, *fragments: str) -> str:
    """The single ``error:`` line of ``err`` (no traceback, nothing else), holding every fragment."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert len(lines) == 1 and "error: " in lines[0], err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def litter(folder: Path, keep: set[str] = frozenset()) -> list[str]:
    """What is in ``folder`` besides ``keep``: temporary files, parts folders, locks."""
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


def interrupt_after_chunks(monkeypatch, done: int):
    """Make embedding stop with Ctrl-C (KeyboardInterrupt) as it starts chunk ``done`` + 1, as if the user or a
    kill stopped it there; returns the real chunk function (``monkeypatch.undo()`` puts it back)."""
    import elmo.embed_file as embed_file_module

    original, calls = embed_file_module._embed_chunk, []

    def dying(*args, **kwargs):
        if len(calls) == done:
            raise KeyboardInterrupt
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(embed_file_module, "_embed_chunk", dying)
    return original


def reseal(checkpoint: Path) -> None:
    """Record a hand-edited checkpoint's files' SHA-256 in its trainer.json, as ``save_checkpoint`` does for the files
    it writes: a test that edits a file to reach a later check (or to fake the run's next checkpoint) gets past the
    hash check, which ``test_checkpoint_trust`` tests on its own."""
    from elmo.io.work_folder import file_sha256

    record = json.loads((checkpoint / "trainer.json").read_text(encoding="utf-8"))
    record["sha256"] = {name: file_sha256(checkpoint / name) for name in record.get("sha256", {})
                        if (checkpoint / name).is_file()}
    (checkpoint / "trainer.json").write_text(json.dumps(record), encoding="utf-8")
