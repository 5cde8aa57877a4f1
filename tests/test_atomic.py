"""Atomic writes: all or nothing, with the permissions a plain write would give."""

import contextlib
import os
import shutil
import stat
from pathlib import Path

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


def test_a_device_or_pipe_is_refused_and_a_link_is_written_through(tmp_path):
    from elmo.io.atomic import NotAFileError

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotAFileError, match="not a regular file"):
        with atomic_path(fifo) as tmp:
            tmp.write_text("x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old")
    os.symlink(target, link)
    with atomic_path(link) as tmp:
        tmp.write_text("new")
    assert link.is_symlink() and target.read_text() == "new"


def test_new_folders_are_removed_on_failure_unless_something_was_put_in_them(tmp_path):
    from elmo.io.atomic import new_folders

    with pytest.raises(RuntimeError):
        with new_folders(tmp_path / "a" / "b" / "c"):
            raise RuntimeError("failed")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError):
        with new_folders(tmp_path / "a" / "b") as folder:
            (folder.parent / "kept.txt").write_text("x")  # "a" received something: it stays, "b" goes
            raise RuntimeError("failed")
    assert (tmp_path / "a" / "kept.txt").exists() and not (tmp_path / "a" / "b").exists()


def test_same_file_answers_for_a_loop_of_links(tmp_path):
    """A loop of symbolic links is no file: the answer is False, not an exception (output checks call it on any
    path a user gives)."""
    from elmo.io.atomic import same_file

    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "f").write_text("x")
    assert not same_file(tmp_path / "a", tmp_path / "f") and not same_file(tmp_path / "f", tmp_path / "a")


@pytest.mark.parametrize("where", ["putting the new folder in place", "deleting the earlier one"])
def test_an_interrupt_while_an_earlier_output_is_replaced_loses_neither(tmp_path, monkeypatch, where):
    """Ctrl-C between moving the earlier output aside and putting the new one in place deleted the new one and left
    the earlier one under a hidden name; one while the earlier one was deleted left half of it there."""
    from elmo.io import atomic

    names = ("a.txt",)
    out = tmp_path / "out"
    for text in ("one", "two"):
        if text == "two":
            real_replace, real_rmtree = os.replace, shutil.rmtree

            def replace(src, dst):
                if where.startswith("putting") and Path(dst) == out and str(src).endswith(".tmp"):
                    raise KeyboardInterrupt
                real_replace(src, dst)

            def rmtree(path, ignore_errors=False):
                if where.startswith("deleting") and str(path).endswith(".old") and not ignore_errors:
                    (Path(path) / "a.txt").unlink()  # half deleted, then the interrupt
                    raise KeyboardInterrupt
                real_rmtree(path, ignore_errors=ignore_errors)

            monkeypatch.setattr(atomic.os, "replace", replace)
            monkeypatch.setattr(atomic.shutil, "rmtree", rmtree)
        with contextlib.ExitStack() as stack:
            if text == "two":
                stack.enter_context(pytest.raises(KeyboardInterrupt))
            with atomic.atomic_folder(out, names) as tmp:
                (tmp / "a.txt").write_text(text)
    expected = "one" if where.startswith("putting") else "two"
    assert (out / "a.txt").read_text() == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no hidden folder left


def test_atomic_folder_writes_a_whole_folder_or_nothing(tmp_path):
    """A new folder appears whole; an earlier output (exactly its names) is replaced whole; a failure leaves the
    earlier output as it was and no temporary folder; a folder holding anything else is refused untouched; a link to
    a folder stays a link."""
    from elmo.io.atomic import FolderInUseError, atomic_folder

    names = ("a.txt", "b.txt")

    def write(folder, text):
        with atomic_folder(folder, names) as tmp:
            for name in names:
                (tmp / name).write_text(text)
                if text == "fail":
                    raise OSError("disk on fire")

    out = tmp_path / "new" / "out"
    write(out, "one")
    assert {p.name: p.read_text() for p in out.iterdir()} == {"a.txt": "one", "b.txt": "one"}
    write(out, "two")
    assert {p.name: p.read_text() for p in out.iterdir()} == {"a.txt": "two", "b.txt": "two"}
    with pytest.raises(OSError, match="disk on fire"):
        write(out, "fail")
    assert {p.name: p.read_text() for p in out.iterdir()} == {"a.txt": "two", "b.txt": "two"}
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"]  # no temporary folder left
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "a.txt").write_text("my notes")
    with pytest.raises(FolderInUseError, match="mine: holds a.txt and is not an earlier output"):
        write(mine, "three")
    assert [(p.name, p.read_text()) for p in mine.iterdir()] == [("a.txt", "my notes")]
    with pytest.raises(OSError, match="disk on fire"):
        write(tmp_path / "p" / "q" / "r", "fail")
    assert not (tmp_path / "p").exists()  # the parents made for it are gone too
    (tmp_path / "link").symlink_to(out)
    write(tmp_path / "link", "four")
    assert (tmp_path / "link").is_symlink() and (out / "a.txt").read_text() == "four"
