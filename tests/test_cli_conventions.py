"""The command line's conventions: exit codes, one-line errors (tracebacks for bugs), ``-`` for standard input and
output, messages through logging, the version, help for every argument, and README command lines that parse."""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import io
import logging
import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest

import elmo
import elmo.cli.embed as cli_embed
from elmo.cli import build_parser, main
from elmo.cli.common import leaf_parsers
from elmo.errors import UsageError
from tests.conftest import OPTIONS, ROOT, WEIGHTS

MODEL = ["--options", str(OPTIONS), "--weights", str(WEIGHTS)]


def _stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


# ---- version and packaging -------------------------------------------------------------------------------------

def test_the_distribution_name_is_the_one_pyproject_declares():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]
    assert elmo.DISTRIBUTION == declared != "elmo"  # "elmo" on PyPI is an unrelated project


def test_version_comes_from_the_package_metadata_and_is_written_once(capsys):
    try:
        installed = importlib.metadata.version(elmo.DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{elmo.DISTRIBUTION} is not installed here (pip install -e .): elmo is imported from a source tree")
    assert elmo.__version__ == installed
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"elmo {installed}"
    written = [path for path in (ROOT / "elmo").rglob("*.py") if f'"{installed}"' in path.read_text(encoding="utf-8")]
    assert not written, f"the version is written in pyproject.toml only, also found in {written}"


def test_the_package_says_it_is_typed():
    assert (ROOT / "elmo" / "py.typed").is_file()
    assert '"py.typed"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # shipped as package data


# ---- exit codes and what an error shows ------------------------------------------------------------------------

def _patch_info(monkeypatch, error: BaseException) -> None:
    def failing(args):
        raise error
    monkeypatch.setattr(cli_embed, "cmd_info", failing)


def test_our_errors_are_one_line_and_exit_1(monkeypatch, capsys):
    _patch_info(monkeypatch, UsageError("a thing the user can fix"))
    assert main(["info"]) == 1
    assert capsys.readouterr().err == "elmo info: error: a thing the user can fix\n"


def test_file_system_errors_are_one_line_and_exit_1(monkeypatch, capsys, tmp_path):
    assert main(["vocab", "build", str(tmp_path / "absent.txt"), "-o", str(tmp_path / "v.txt")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("elmo vocab build: error: ") and "absent.txt" in err and len(err.splitlines()) == 1
    _patch_info(monkeypatch, PermissionError(13, "Permission denied", "/root/secret.json"))
    assert main(["info"]) == 1
    assert capsys.readouterr().err == "elmo info: error: /root/secret.json: Permission denied\n"
    (tmp_path / "afile").write_text("x")
    (tmp_path / "v.txt").write_text("<S>\n</S>\n<UNK>\nx\n")
    assert main(["train", str(tmp_path / "afile"), "--vocab", str(tmp_path / "v.txt"), "--out",
                 str(tmp_path / "afile" / "run")]) == 2  # the output folder cannot be made: a usage error
    err = capsys.readouterr().err
    assert "afile" in err and "is a file, not a folder" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("bug", [ValueError("a plain ValueError"), ZeroDivisionError("division by zero"),
                                 KeyError("key"), OSError("an OSError with no file")])
def test_a_bug_keeps_its_traceback(monkeypatch, bug):
    _patch_info(monkeypatch, bug)
    with pytest.raises(type(bug)):
        main(["info"])


def test_a_bug_exits_1_with_python_s_traceback():
    code = ("import sys, elmo.cli as c, elmo.cli.embed as e\n"
            "def bug(args): return 1 / 0\n"
            "e.cmd_info = bug\n"
            "sys.exit(c.main(['info']))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "ZeroDivisionError" in result.stderr


def test_debug_shows_the_traceback_of_our_errors_too(monkeypatch):
    _patch_info(monkeypatch, UsageError("ours"))
    for argv in (["--debug", "info"], ["info", "--debug"]):
        with pytest.raises(UsageError):
            main(argv)


def test_usage_errors_exit_2(capsys, tmp_path):
    assert main(["embed", "in.txt"]) == 2  # argparse's own
    assert main(["info", "--no-such-flag"]) == 2
    assert main(["nonsense"]) == 2
    capsys.readouterr()
    assert main(["embed", "--batch-size", "x", "in.txt", "out.hdf5", "--top"]) == 2
    assert capsys.readouterr().err == ("elmo embed: error: argument --batch-size: expected a whole number, got 'x' "
                                       "(usage: elmo embed --help)\n")  # one line: no usage block above it
    assert main(["task", "train"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("elmo task train: error: the following arguments are required")
    assert main(["info", "--model", "en", *MODEL]) == 2  # options that do not go together
    assert capsys.readouterr().err == "elmo info: error: give either --model or --options and --weights, not both\n"
    assert main(["info", "--options", str(OPTIONS)]) == 2
    assert "--weights" in capsys.readouterr().err
    assert main(["embed", "in.txt", "out.hdf5", "--top", "--device", "gpu"]) == 2
    assert "not a device name" in capsys.readouterr().err
    assert main(["train", "a.txt", "--out", str(tmp_path / "r"), "--resume", "x", "--init-from", "y"]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["vocab", "build", "a.txt", "-o", "v.txt", "--max-size", "3"]) == 2
    assert "no room for words" in capsys.readouterr().err


def test_interrupt_exits_130(monkeypatch, capsys):
    _patch_info(monkeypatch, KeyboardInterrupt())
    assert main(["info"]) == 130
    assert capsys.readouterr().err == "elmo info: interrupted\n"


# ---- "-": standard input and output ----------------------------------------------------------------------------

def test_embed_reads_standard_input(monkeypatch, tmp_path):
    text = b"The bank .\n\nA river bank\n"
    (tmp_path / "in.txt").write_bytes(text)
    assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "file.hdf5"), "--top", "--quiet", *MODEL]) == 0
    _stdin(monkeypatch, text)
    assert main(["embed", "-", str(tmp_path / "stdin.hdf5"), "--top", "--quiet", *MODEL]) == 0
    with h5py.File(tmp_path / "file.hdf5") as a, h5py.File(tmp_path / "stdin.hdf5") as b:
        assert [k for k in a.keys() if k.isdigit()] == [k for k in b.keys() if k.isdigit()] == ["0", "1", "2"]
        assert all(np.array_equal(a[k][()], b[k][()]) for k in ("0", "1", "2"))


def test_a_bad_line_on_standard_input_is_named_as_stdin(monkeypatch, tmp_path, capsys):
    _stdin(monkeypatch, b"good line\nbad \xff byte\n")
    assert main(["embed", "-", str(tmp_path / "o.hdf5"), "--top", "--quiet", *MODEL]) == 1
    err = capsys.readouterr().err
    assert err.startswith("elmo embed: error: <stdin>, line 2: invalid UTF-8") and len(err.splitlines()) == 1


def test_hdf5_is_not_written_to_standard_output(tmp_path, capsys):
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    assert main(["embed", str(tmp_path / "in.txt"), "-", "--top", "--quiet", *MODEL]) == 2
    assert capsys.readouterr().err == ("elmo embed: error: cannot write HDF5 to standard output; give a file name\n")
    assert not Path("-").exists()


def test_vocab_build_reads_stdin_and_writes_stdout(monkeypatch, capsys):
    _stdin(monkeypatch, b"b a b\nc b a\n")
    assert main(["vocab", "build", "-", "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.out.split("\n") == ["<S>", "</S>", "<UNK>", "b", "a", "c", ""]
    assert "to standard output" in captured.err


def test_similar_reads_its_sentences_from_stdin(monkeypatch, capsys):
    _stdin(monkeypatch, "money\tI took money from the bank .\nriver\tThe river bank was muddy .\n".encode())
    assert main(["similar", "bank", "--sentences", "-", "-k", "1", *MODEL]) == 0
    assert "[money] I took money from the bank ." in capsys.readouterr().out


@pytest.mark.parametrize("argv,where", [
    (["embed", "-", "o.hdf5", "--top", "--resume"], "--resume"),
    (["train", "-", "--out", "r"], "standard input"),
    (["plot", "bank", "--sentences", "s.txt", "--out", "-"], "--out"),
    (["info", "--model", "-"], "--model"),
    (["task", "eval", "-", "--data", "d.txt"], "TASK_MODEL"),
    (["embed", "in.txt", "o.hdf5", "--top", "--cache-vocab", "-"], "--cache-vocab"),
])
def test_standard_streams_are_refused_where_they_cannot_work(capsys, argv, where):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert where in err and len(err.splitlines()) == 1, err


# ---- messages through logging ----------------------------------------------------------------------------------

def _library_calls(name: str) -> list[str]:
    """``file:line`` of every call to ``name`` (a function name or ``module.attribute``) in the library."""
    found = []
    for path in sorted((ROOT / "elmo").rglob("*.py")):
        if path.relative_to(ROOT / "elmo").parts[0] == "cli":  # the command line prints: its job
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                called = (func.id if isinstance(func, ast.Name) else
                          f"{getattr(func.value, 'id', '')}.{func.attr}" if isinstance(func, ast.Attribute) else "")
                if called == name:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_the_library_neither_prints_nor_configures_logging():
    assert _library_calls("print") == []
    assert _library_calls("logging.basicConfig") == []


def test_library_messages_and_warnings_reach_stderr_through_logging(monkeypatch, capsys, tmp_path):
    def talkative(args):
        logging.getLogger("elmo.somewhere").info("an information")
        warnings.warn("a warning")
    monkeypatch.setattr(cli_embed, "cmd_embed", talkative)
    assert main(["embed", "in.txt", str(tmp_path / "o.hdf5"), "--top"]) == 0
    assert capsys.readouterr().err == "elmo: an information\nelmo: warning: a warning\n"
    assert main(["embed", "in.txt", str(tmp_path / "o.hdf5"), "--top", "--quiet"]) == 0  # warnings only
    assert capsys.readouterr().err == "elmo: warning: a warning\n"


# ---- the parser and the README ---------------------------------------------------------------------------------

def test_every_positional_argument_has_help():
    missing = [f"{leaf.prog} {action.dest}" for leaf in leaf_parsers(build_parser()) for action in leaf._actions
               if not action.option_strings and not isinstance(action, argparse._SubParsersAction)
               and not action.help]
    assert missing == []


def _code_lines(text: str) -> list[str]:
    """The lines of the fenced code blocks, backslash continuations and indented synopsis continuations joined."""
    lines, inside, python = [], False, False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside, python = not inside, line.strip() == "```python"
            continue
        if not inside or python:
            continue
        if lines and (lines[-1].endswith("\\") or (line[:1].isspace() and lines[-1].startswith("elmo ")
                                                   and line.strip().startswith(("[", "-")))):
            lines[-1] = lines[-1].rstrip("\\").rstrip() + " " + line.strip()
        else:
            lines.append(line)
    return lines


def _readme_commands() -> list[str]:
    """Every ``elmo ...`` command in the code blocks of README.md and docs/*.md, comments and descriptions cut."""
    commands = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in _code_lines(path.read_text(encoding="utf-8")):
            line = re.sub(r"\s#.*$", "", line)  # a shell comment (no README command quotes a '#')
            for piece in re.split(r"\s{2,}|&&|;\s", line):  # descriptions beside a synopsis, chained commands
                if re.match(r"elmo (--\S+ )*[a-z{][\w,{}-]*(\s|$)", piece.strip()):  # not "elmo embed: ..." prose
                    commands.append(piece.strip())
    return commands


def _leaf(parser: argparse.ArgumentParser, words: list[str]) -> tuple[argparse.ArgumentParser, int]:
    """The parser of the command that ``words`` names, and how many words named it."""
    used = 0
    while (subs := [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]):
        name = words[used] if used < len(words) else ""
        choices = name.strip("{}").split(",")
        assert all(c in subs[0].choices for c in choices), f"no command {name!r} under {parser.prog}"
        parser, used = subs[0].choices[choices[0]], used + 1
    return parser, used


def _check_command(command: str) -> None:
    """A README command line against the parser: every option it names exists there, and with its placeholders
    filled in (MODEL: --model en; optional [...] parts left out; (a|b) and {a,b}: the first) it parses."""
    words = shlex.split(command)[1:]
    leaf, used = _leaf(build_parser(), words)
    known = leaf._option_string_actions
    for word in words[used:]:
        for alternative in re.split(r"\|", word.strip("[](){}")):
            option = alternative.split("=")[0]
            if re.fullmatch(r"--?[a-z][a-z0-9-]*", option):
                assert option in known, f"{command!r}: {leaf.prog} has no option {option}"
    if "..." in words:
        return  # the elided arguments are the reader's: the options named are checked above
    argv, depth = words[:used], 0
    for word in words[used:]:
        opened = depth > 0 or word.startswith("[")
        depth += word.count("[") - word.count("]")
        if opened:
            continue
        if word == "MODEL":
            argv += ["--model", "en"]
        elif re.fullmatch(r"\(.*\)|\{.*\}", word):
            argv.append(re.split(r"[|,]", word[1:-1])[0])
        else:
            argv.append(word)
    try:
        build_parser().parse_args(argv)
    except SystemExit:
        raise AssertionError(f"README command does not parse: {command!r} (as {argv})") from None


def test_readme_command_lines_match_the_parser(capsys):
    commands = _readme_commands()
    assert len(commands) > 30 and any(c.startswith("elmo embed INPUT OUTPUT") for c in commands)
    for command in commands:
        _check_command(command)


def test_the_readme_check_catches_a_wrong_synopsis():
    for wrong in ("elmo info en", "elmo embed in.txt --top", "elmo convert --model en out --to theirs",
                  "elmo train ... --no-such-flag 3", "elmo nonsense ..."):
        with pytest.raises(AssertionError):
            _check_command(wrong)


# ---- elmo embed splits lines on whitespace unless asked -------------------------------------------------------

def _vectors(path: Path) -> int:
    with h5py.File(path) as f:
        return f["0"].shape[0]


def test_embed_splits_on_whitespace_unless_a_tokenizer_is_asked_for(monkeypatch, tmp_path):
    (tmp_path / "in.txt").write_text("Don't stop.\n", encoding="utf-8")
    run = lambda name, *flags: main(["embed", str(tmp_path / "in.txt"), str(tmp_path / name), "--top", "--quiet",
                                     *MODEL, *flags])  # noqa: E731
    assert run("default.hdf5") == 0 and _vectors(tmp_path / "default.hdf5") == 2
    assert run("en.hdf5", "--tokenize", "en") == 0 and _vectors(tmp_path / "en.hdf5") == 4  # Do n't stop .
    assert run("none.hdf5", "--tokenize", "model") == 0 and _vectors(tmp_path / "none.hdf5") == 2  # it has none
    load = cli_embed.load_model

    def with_tokenizer(args, stateful=False):
        model = load(args, stateful)
        model.tokenizer_name = "en"
        return model
    monkeypatch.setattr(cli_embed, "load_model", with_tokenizer)
    assert run("model.hdf5", "--tokenize", "model") == 0 and _vectors(tmp_path / "model.hdf5") == 4
    assert run("again.hdf5") == 0 and _vectors(tmp_path / "again.hdf5") == 2  # the default stays whitespace


@pytest.mark.parametrize("argv", [["export", "run", ""], ["task", "eval", "", "--data", "x.tsv"],
                                  ["embed", "in.txt", "", "--top"], ["info", "--model", ""]])
def test_an_empty_path_is_refused_not_read_as_the_current_folder(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text("mine")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "an empty path" in err and len(err.splitlines()) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"] and (tmp_path / "config.json").read_text() == "mine"


def test_an_empty_elmo_cache_means_the_default(monkeypatch):
    from pathlib import Path

    from elmo.io.download import cache_dir

    monkeypatch.setenv("ELMO_CACHE", "")
    assert cache_dir() == Path.home() / ".cache" / "elmo"


def test_plot_refuses_a_suffix_that_is_no_image_format_before_any_work(tmp_path, capsys):
    (tmp_path / "s.txt").write_text("a bank\tx\n")
    assert main(["plot", "bank", "--sentences", str(tmp_path / "s.txt"), "--out", str(tmp_path / "plot.txt"),
                 "--model", str(tmp_path / "no-model")]) == 2
    err = capsys.readouterr().err
    assert ".txt is not an image format" in err and len(err.splitlines()) == 1


def test_standard_input_named_twice_is_refused(capsys):
    assert main(["perplexity", "run", "-", "-"]) == 2
    assert "FILES: - (standard input) is listed 2 times" in capsys.readouterr().err


def test_an_empty_text_argument_is_not_taken_for_an_empty_path(capsys):
    assert main(["score", "/nonexistent-run", ""]) == 1  # the run is missing; the empty sentence is fine
    assert "empty path" not in capsys.readouterr().err


def test_an_output_link_that_loops_or_points_nowhere_is_one_line(tmp_path, capsys):
    (tmp_path / "in.txt").write_text("a b\n")
    (tmp_path / "loop.hdf5").symlink_to(tmp_path / "loop.hdf5")
    (tmp_path / "nowhere.hdf5").symlink_to(tmp_path / "missing" / "out.hdf5")
    for link in ("loop.hdf5", "nowhere.hdf5"):
        assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / link), "--top"]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and "symbolic link" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "missing").exists()
