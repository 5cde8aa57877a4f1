"""Nothing we load can run code: no pickle anywhere, torch.load only with weights_only=True."""

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "elmo"


def test_no_pickle_and_no_unsafe_torch_load():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if re.search(r"^\s*(import|from)\s+(c?pickle|dill|joblib|shelve|marshal)\b", text, re.M):
            offenders.append(f"{path}: imports a pickle-like module")
        for call in re.findall(r"torch\.load\([^)]*\)", text):
            if "weights_only=True" not in call:
                offenders.append(f"{path}: {call}")
        if re.search(r"\bnp\.load\([^)]*allow_pickle\s*=\s*True", text):
            offenders.append(f"{path}: np.load(allow_pickle=True)")
    assert offenders == []


def test_our_files_are_safetensors_and_json(tmp_path):
    from elmo.io.native import save_model
    from tests.conftest import random_bilm, small_config

    save_model(random_bilm(small_config()), tmp_path / "m")
    assert (tmp_path / "m" / "model.safetensors").read_bytes()[8:9] == b"{"  # a JSON header, no pickle opcodes
    assert not (tmp_path / "m" / "model.safetensors").read_bytes().startswith(b"\x80")


def test_the_same_model_is_saved_as_the_same_bytes(tmp_path):
    """A model's file is a function of the model: its hash can be compared and recorded (safetensors writes a header
    of several metadata keys in a random order, so only one is given)."""
    from elmo.io.native import save_model
    from tests.conftest import random_bilm, small_config

    model = random_bilm(small_config())
    files = {(save_model(model, tmp_path / f"m{i}") / "model.safetensors").read_bytes() for i in range(8)}
    assert len(files) == 1
