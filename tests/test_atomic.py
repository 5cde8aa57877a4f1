"""Atomic writes: all or nothing, with the permissions a plain write would give."""

import os
import stat

import pytest

from elmo.io.atomic import atomic_path


def test_new_file_gets_the_umask_mode_and_a_replaced_file_keeps_its_mode(tmp_path):
    old = os.umask(0o027)
    try:
        with atomic_path(tmp_path / "new.txt") as tmp:
            tmp.write_text("x")
        assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o640  # not the 0o600 of a temp file
        kept = tmp_path / "kept.txt"
        kept.write_text("old")
        kept.chmod(0o604)
        with atomic_path(kept) as tmp:
            tmp.write_text("new")
        assert kept.read_text() == "new" and stat.S_IMODE(kept.stat().st_mode) == 0o604
    finally:
        os.umask(old)


def test_an_error_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
