"""scripts/prepare_common.py, shared by the scripts that build the shipped models' training text: inputs checked
first, an unreadable input as one line naming it, and outputs written all or none."""

import gzip
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from prepare_common import DataFolderError, check_inputs, reading, write_outputs  # noqa: E402


def test_the_outputs_are_written_all_or_none(tmp_path, monkeypatch):
    """A full disk at the last file kept every earlier file as it was (they had been replaced one by one, the first
    left cut under its own name)."""
    out = tmp_path / "out"
    write_outputs(out, {"train.txt.gz": "a b\n", "dev.txt": "c\n"})
    assert gzip.open(out / "train.txt.gz", "rt", encoding="utf-8").read() == "a b\n"
    real_write_text = Path.write_text

    def full_disk(self, *args, **kwargs):
        if self.name.startswith(".dev.txt."):
            raise OSError(28, "No space left on device")
        return real_write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(OSError):
        write_outputs(out, {"train.txt.gz": "new\n", "dev.txt": "new\n"})
    monkeypatch.undo()
    assert gzip.open(out / "train.txt.gz", "rt", encoding="utf-8").read() == "a b\n"
    assert (out / "dev.txt").read_text(encoding="utf-8") == "c\n"
    assert sorted(p.name for p in out.iterdir()) == ["dev.txt", "train.txt.gz"]  # no temporary file left


def test_a_new_output_folder_is_not_left_after_a_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(gzip, "GzipFile", lambda *a, **k: (_ for _ in ()).throw(OSError(28, "No space left")))
    with pytest.raises(OSError):
        write_outputs(tmp_path / "new" / "out", {"train.txt.gz": "x\n"})
    assert list(tmp_path.iterdir()) == []


def test_a_missing_or_unreadable_input_is_one_line_naming_it(tmp_path):
    data = tmp_path / "en"
    (data / "imdb").mkdir(parents=True)
    with pytest.raises(DataFolderError, match=r"en/imdb/reviews.jsonl.gz: no such file; check --data"):
        check_inputs(data, ["imdb/reviews.jsonl.gz"])
    (data / "imdb" / "reviews.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(DataFolderError, match=r"reviews.jsonl.gz: unreadable or not the expected data") as err:
        with reading(data / "imdb" / "reviews.jsonl.gz"):
            gzip.open(data / "imdb" / "reviews.jsonl.gz", "rt").read()
    assert "\n" not in str(err.value)
