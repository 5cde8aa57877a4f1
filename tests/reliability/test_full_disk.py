"""Case 4 of "Nothing lost": a full disk, on a real small file system where the test can make one (a tmpfs in a
user and mount namespace: `unshare -rm`, no root needed where the kernel allows it) and with a faked ENOSPC where
it cannot, so that every path runs everywhere.

Each asserts: one error line naming the path and the space needed, exit 1, no temporary file left, the finished parts
or the previous checkpoint intact, and --resume completing the work once there is room.
"""

import errno
import json
import shutil
import subprocess
import sys
import textwrap

import h5py
import pytest
from safetensors import SafetensorError

import elmo.io.parts as parts_module
from tests.reliability.tiny import ROOT, cli, litter, one_error_line, text_file, tiny_model


def _namespace_works() -> str | None:
    """None when a tmpfs can be mounted in a user + mount namespace here, else why not."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"],
                           capture_output=True, text=True)
    return None if probe.returncode == 0 else f"cannot mount a tmpfs in a namespace: {probe.stderr.strip()[:80]}"


SMALL_FS = pytest.mark.skipif(bool(_namespace_works()), reason=_namespace_works() or "")


def _in_small_fs(tmp_path, script: str, mb: int = 3) -> dict:
    """Run ``script`` (Python; ``DISK`` is a tmpfs of ``mb`` MB, ``remount(mb)`` resizes it) in a namespace of its
    own; what it prints last, as JSON."""
    disk = tmp_path / "disk"
    disk.mkdir()
    program = textwrap.dedent("""
        import json, subprocess, sys
        from pathlib import Path
        DISK = Path(sys.argv[1])
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={sys.argv[2]}m", "tmpfs", str(DISK)], check=True)
        def remount(mb):
            subprocess.run(["mount", "-o", f"remount,size={mb}m", str(DISK)], check=True)
        def elmo(*args, patch=""):
            code = patch + "import sys; from elmo.cli import main; sys.exit(main(sys.argv[1:]))"
            done = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True)
            return done.returncode, done.stderr
    """) + textwrap.dedent(script)
    (tmp_path / "script.py").write_text(program, encoding="utf-8")
    done = subprocess.run(["unshare", "-rm", sys.executable, str(tmp_path / "script.py"), str(disk), str(mb)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@SMALL_FS
def test_embed_on_a_small_file_system_refuses_before_writing(tmp_path):
    model = tiny_model(tmp_path / "model")
    source = text_file(tmp_path / "in.txt", 8000)
    result = _in_small_fs(tmp_path, f"""
        rc, err = elmo("embed", "{source}", DISK / "out.hdf5", "--all", "--model", "{model}", "--quiet")
        print(json.dumps({{"rc": rc, "err": err, "left": sorted(p.name for p in DISK.iterdir())}}))
    """)
    assert result["rc"] == 1 and result["left"] == []
    one_error_line(result["err"], "out.hdf5: embedding 8,000 lines", "needs about", "free")


@SMALL_FS
def test_embed_filling_a_small_file_system_keeps_its_parts_and_resumes(tmp_path):
    """The first check passes (patched out, as if the disk filled later): the part that does not fit is refused, the
    parts before it are intact, and --resume on a larger disk finishes the same file."""
    model = tiny_model(tmp_path / "model")
    source = text_file(tmp_path / "in.txt", 6000)
    result = _in_small_fs(tmp_path, f"""
        patch = "import elmo.embed_file as m; m.check_free_space = lambda *a, **k: None; "
        rc, err = elmo("embed", "{source}", DISK / "out.hdf5", "--top", "--model", "{model}", "--quiet", patch=patch)
        parts = sorted(p.name for p in (DISK / "out.hdf5.parts").iterdir())
        remount(40)
        rc2, err2 = elmo("embed", "{source}", DISK / "out.hdf5", "--top", "--model", "{model}", "--quiet", "--resume")
        import h5py
        with h5py.File(DISK / "out.hdf5") as f:
            n = len(f.keys()) - 1
        print(json.dumps({{"rc": rc, "err": err, "parts": parts, "rc2": rc2, "err2": err2, "n": n,
                          "left": sorted(p.name for p in DISK.iterdir())}}))
    """, mb=5)
    assert result["rc"] == 1
    one_error_line(result["err"], "out.hdf5.parts: part ", "needs about", "free")
    assert "manifest.json" in result["parts"] and "part-00000000.h5" in result["parts"]
    assert not [name for name in result["parts"] if name.endswith(".tmp")]
    assert result["rc2"] == 0 and "wrote 6000 sentences" in result["err2"] and result["n"] == 6000
    assert result["left"] == ["out.hdf5"]


@SMALL_FS
def test_embed_with_no_room_for_the_merge_keeps_its_parts_and_resumes(tmp_path):
    """The parts fit (the estimates patched down to the vectors alone) but the merged file does not: refused before
    the merge writes a byte, the parts intact, and --resume merges them once there is room."""
    model = tiny_model(tmp_path / "model")
    source = text_file(tmp_path / "in.txt", 6000)
    result = _in_small_fs(tmp_path, f"""
        patch = ("import elmo.embed_file as m, elmo.io.parts as p; m.check_free_space = lambda *a, **k: None; "
                 "p.LINE_OVERHEAD = p.FILE_OVERHEAD = 0; ")
        rc, err = elmo("embed", "{source}", DISK / "out.hdf5", "--top", "--model", "{model}", "--quiet", patch=patch)
        parts = sorted(p.name for p in (DISK / "out.hdf5.parts").iterdir())
        remount(40)
        rc2, err2 = elmo("embed", "{source}", DISK / "out.hdf5", "--top", "--model", "{model}", "--quiet", "--resume")
        print(json.dumps({{"rc": rc, "err": err, "parts": parts, "rc2": rc2, "err2": err2,
                          "left": sorted(p.name for p in DISK.iterdir())}}))
    """, mb=5)
    assert result["rc"] == 1, result
    one_error_line(result["err"], "out.hdf5: the merged file needs about", "free")
    assert [n for n in result["parts"] if n.endswith(".h5")] == [f"part-{i:08d}.h5" for i in range(6)]
    assert not [name for name in result["parts"] if name.endswith(".tmp")]
    assert result["rc2"] == 0 and "wrote 6000 sentences" in result["err2"] and result["left"] == ["out.hdf5"]


def test_embed_enospc_while_writing_a_part_is_one_line_and_resume_works(tmp_path, capsys, monkeypatch):
    model = tiny_model(tmp_path / "model")
    source = text_file(tmp_path / "in.txt", 2500)
    original, calls = parts_module.PartStore._write_part, []

    def full(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(*args, **kwargs)

    monkeypatch.setattr(parts_module.PartStore, "_write_part", staticmethod(full))
    args = ["embed", source, tmp_path / "out.hdf5", "--top", "--model", model, "--quiet"]
    rc, err = cli(capsys, *args)
    assert rc == 1
    one_error_line(err, "part-00000001.h5: the disk is full", "free")
    assert litter(tmp_path / "out.hdf5.parts") == ["manifest.json", "part-00000000.h5", "part-00000000.h5.record.json"]
    monkeypatch.undo()
    rc, err = cli(capsys, *args, "--resume")
    assert rc == 0 and "wrote 2500 sentences" in err
    assert litter(tmp_path) == ["in.txt", "model", "out.hdf5"]


def test_embed_enospc_during_the_merge_keeps_the_parts(tmp_path, capsys, monkeypatch):
    model = tiny_model(tmp_path / "model")
    source = text_file(tmp_path / "in.txt", 50)

    def full(path, arrays, *rest):
        with h5py.File(path, "w") as out:
            for key, array in arrays:
                out.create_dataset(key, data=array)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(parts_module, "_write_hdf5", full)
    args = ["embed", source, tmp_path / "out.hdf5", "--top", "--model", model, "--quiet"]
    rc, err = cli(capsys, *args)
    assert rc == 1
    one_error_line(err, "out.hdf5: the disk is full")
    assert litter(tmp_path) == ["in.txt", "model", "out.hdf5.parts"]
    assert litter(tmp_path / "out.hdf5.parts") == ["manifest.json", "part-00000000.h5", "part-00000000.h5.record.json"]
    monkeypatch.undo()
    assert cli(capsys, *args, "--resume")[0] == 0
    assert litter(tmp_path) == ["in.txt", "model", "out.hdf5"]


def test_training_checkpoint_on_a_full_disk_from_safetensors_is_one_line(tmp_path, monkeypatch):
    """safetensors reports a full disk as its own error type, not an OSError: still one line, the previous
    checkpoint intact, no temporary directory."""
    import elmo.training.checkpoint as checkpoint_module
    from elmo.data.vocab import Vocabulary
    from elmo.io.atomic import DiskWriteError
    from elmo.io.checkpoint import list_checkpoints
    from elmo.training.trainer import Trainer
    from tests.conftest import micro_train_config

    corpus = text_file(tmp_path / "train.txt", 300)
    vocab = Vocabulary.build(line.split() for line in corpus.read_text(encoding="utf-8").splitlines())
    trainer = Trainer(micro_train_config(max_steps=4), [corpus], tmp_path / "run", vocab=vocab, progress=False)
    trainer.train_step()
    good = trainer.save()

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "
                              "\"No space left on device\" })")

    monkeypatch.setattr(checkpoint_module, "save_file", full)
    trainer.train_step()
    with pytest.raises(DiskWriteError, match=f"not written to .*No space left on device.*{good.name} is intact"):
        trainer.save()
    assert list_checkpoints(tmp_path / "run") == [good]
    assert litter(tmp_path / "run") == [".lock", good.name]  # the lock: this process holds the run
    trainer.close()


@SMALL_FS
def test_training_on_a_small_file_system_refuses_the_checkpoint_in_one_line(tmp_path):
    corpus = text_file(tmp_path / "train.txt", 300)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("<S>\n</S>\n<UNK>\n" + "".join(f"w{i}\n" for i in range(97)), encoding="utf-8")
    result = _in_small_fs(tmp_path, f"""
        remount(1)
        rc, err = elmo("train", "{corpus}", "--vocab", "{vocab}", "--out", DISK / "run", "--max-steps", "2",
                       "--quiet")
        print(json.dumps({{"rc": rc, "err": err, "left": sorted(p.name for p in DISK.rglob("*"))}}))
    """)
    assert result["rc"] == 1, result
    one_error_line(result["err"], "checkpoint at step 2 not written", "needs about", "no earlier checkpoint")
    assert result["left"] == ["run", "metrics.jsonl"] or result["left"] == ["metrics.jsonl", "run"]


@SMALL_FS
@pytest.mark.parametrize("to", ["ours", "official"])
def test_convert_onto_a_small_file_system_is_one_line_and_leaves_nothing(tmp_path, to):
    model = tiny_model(tmp_path / "model", dim=512, projection_dim=128)  # 2.1 M parameters: 8 MB in float32
    result = _in_small_fs(tmp_path, f"""
        rc, err = elmo("convert", "--model", "{model}", "--to", "{to}", DISK / "out")
        print(json.dumps({{"rc": rc, "err": err, "left": sorted(p.name for p in DISK.rglob("*"))}}))
    """, mb=1)
    assert result["rc"] == 1 and result["left"] == []
    one_error_line(result["err"], "needs about", "free")


@SMALL_FS
def test_dump_token_embeddings_onto_a_small_file_system_is_one_line(tmp_path):
    model = tiny_model(tmp_path / "model", dim=64, projection_dim=128)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("<S>\n</S>\n<UNK>\n" + "".join(f"w{i}\n" for i in range(5000)), encoding="utf-8")  # 2.6 MB
    result = _in_small_fs(tmp_path, f"""
        rc, err = elmo("dump-token-embeddings", "{vocab}", DISK / "tokens.hdf5", "--model", "{model}")
        print(json.dumps({{"rc": rc, "err": err, "left": sorted(p.name for p in DISK.rglob("*"))}}))
    """, mb=1)
    assert result["rc"] == 1 and result["left"] == []
    one_error_line(result["err"], "tokens.hdf5: 5,003 token vectors needs about", "free")


def test_a_write_refused_during_the_merge_is_one_line_and_the_parts_stay(tmp_path):
    """The merged HDF5 was written by libhdf5 itself: a write refused under it (a file size limit here; a disk
    filled by another process after the space check) crashed the process (exit 139, ~1,800 lines of errors), left
    the parts and the lock. It goes through Python now: one line, exit 1, the parts kept for --resume."""
    from tests.conftest import OPTIONS, WEIGHTS

    words = ["the", "bank", "closed", "river", "money", "a", "it", "he"]
    (tmp_path / "in.txt").write_text("\n".join(" ".join(words[(i + j) % 8] for j in range(3 + i % 5))
                                               for i in range(200)) + "\n", encoding="utf-8")
    script = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_FSIZE, (400 * 1024, 400 * 1024))  # parts fit, the merged file does not
        from elmo.cli import main
        sys.exit(main(["embed", "in.txt", "out.hdf5", "--all", "--stateful", "--batch-size", "7", "--quiet",
                       "--options", {str(OPTIONS)!r}, "--weights", {str(WEIGHTS)!r}]))
    """)
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT), "ELMO_CONVERT_CACHE": "0"})
    assert run.returncode == 1, (run.returncode, run.stderr[-500:])
    one_error_line(run.stderr, "out.hdf5: cannot write", "File too large")
    assert not (tmp_path / "out.hdf5").exists() and (tmp_path / "out.hdf5.parts").is_dir()
    assert not [p for p in (tmp_path / "out.hdf5.parts").iterdir() if p.name.endswith(".tmp")]
