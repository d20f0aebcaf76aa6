"""The command line's conventions: help for every option, -v/-q after the command, --device/--no-progress where a
model is loaded, --output FILE / --output-dir DIR, a fast help path without torch, a quiet broken pipe."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from finesim.cli.common import HelpFormatter, verbosity
from finesim.cli.main import build_parser, main

LOADS_A_MODEL = {
    ("evaluate",),
    ("train",),
    ("case", "embed"),
    ("case", "train"),
    ("case", "sweep"),
    ("case", "isotropy"),
    ("case", "score"),
    ("serve",),
    ("score",),
    ("index", "build"),
    ("index", "add"),
    ("index", "search"),
    ("export",),
}


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_option_has_help() -> None:
    missing = []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction, argparse._VersionAction)):
                continue
            if not (action.help or "").strip():
                missing.append(f"finesim {' '.join(path)} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, missing


def test_output_options_follow_one_style() -> None:
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            if "--output" in action.option_strings:
                assert action.metavar == "FILE", path
            if "--output-dir" in action.option_strings:
                assert action.metavar == "DIR", path


def test_commands_that_load_a_model_take_device_and_no_progress() -> None:
    found = set()
    for path, parser in _parsers(build_parser()):
        options = {o for a in parser._actions for o in a.option_strings}
        if path in LOADS_A_MODEL:
            assert {"--device", "--no-progress"} <= options, path
            found.add(path)
    assert found == LOADS_A_MODEL


def test_a_device_this_machine_lacks_is_a_usage_error_naming_device(capsys, monkeypatch) -> None:
    """Not a traceback from deep in torch ("Torch not compiled with CUDA enabled", reported as an internal error)
    after the model loaded: a name torch cannot read is refused when the command line is read, a device this machine
    lacks when the command starts, unless Ray's workers load the model (they may have one). train and export check
    theirs themselves (a dry run takes a GPU device on a CPU machine; export builds CPU runtimes and says so)."""
    import torch

    import finesim.cli.score as score_command
    from finesim.cli.common import device_here

    commands = [path for path in sorted(LOADS_A_MODEL) if path not in {("train",), ("export",)}]
    for path in commands:
        with pytest.raises(SystemExit) as stop:
            build_parser().parse_args([*path, "--device", "foo"])
        assert stop.value.code == 2
        assert "argument --device: 'foo' is not a torch device" in capsys.readouterr().err, path
    assert device_here("cpu") is None and device_here("cpu:0") is None
    assert device_here("cuda:99").startswith("torch ")  # no GPU here, or not 100 of them
    if torch.cuda.is_available():
        return
    assert device_here("cuda") == f"torch {torch.__version__} sees no cuda device here; use cpu or leave --device out"
    ran = []
    monkeypatch.setattr(score_command, "run", lambda args: ran.append(args.device) or 0)
    argv = ["score", "--model", "m", "--input", "i.csv", "--output", "o.csv", "--device", "cuda"]
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2 and not ran
    assert "finesim score: error: --device cuda: torch " in capsys.readouterr().err
    assert main([*argv, "--ray-address", "ray://head:10001"]) == 0 and ran == ["cuda"]  # the workers may have one


def test_export_help_says_its_device_is_the_cpu() -> None:
    """export refuses any device but the CPU, so its --device help must not offer cuda:0 as the others' does."""
    choices = build_parser()._subparsers._group_actions[0].choices
    export = " ".join(choices["export"].format_help().split())
    assert "--device DEVICE cpu only: the runtimes it builds run on the CPU" in export and "cuda" not in export
    assert "torch device, e.g. cpu or cuda:0" in " ".join(choices["score"].format_help().split())


def test_help_shows_defaults() -> None:
    text = build_parser()._subparsers._group_actions[0].choices["evaluate"].format_help()
    assert "(default: 64)" in text and "(default: cosine)" in text
    assert "others rows (default: 0)" in " ".join(text.split())  # a default of 0 is shown, not taken for "none"
    # a store_false flag's True is what the flag turns off, never shown as its default
    flags = [a for path, p in _parsers(build_parser()) for a in p._actions if isinstance(a, argparse._StoreFalseAction)]
    assert flags and all("(default" not in HelpFormatter(prog="x")._get_help_string(a) for a in flags), (
        "a --no-X flag printed (default: True)"
    )
    serve = " ".join(build_parser()._subparsers._group_actions[0].choices["serve"].format_help().split())
    assert "--no-map-wait" in serve and "(default: True)" not in serve


def test_every_help_line_states_its_default_once_in_one_style() -> None:
    for path, parser in _parsers(build_parser()):
        text = " ".join(parser.format_help().split())
        for action in parser._actions:
            help_text = action.help or ""
            if help_text and help_text != argparse.SUPPRESS:
                formatted = parser.formatter_class(prog="x")._get_help_string(action)
                stated = formatted.count("(default") - formatted.count("%(default)")
                assert stated <= 1, (path, action.option_strings, formatted)
        assert "(default " not in text, (path, "write '(default: X)'")


def test_verbosity_flags_after_the_command(capsys: pytest.CaptureFixture) -> None:
    args = build_parser().parse_args(["bound", "--n", "5", "-v", "-q"])
    assert verbosity(args) == (1, True)
    assert main(["bound", "--n", "5", "-q"]) == 0


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # after a group's name (index, case), before its action: the action's own defaults once erased them
        (["index", "-v", "info", "idx"], (1, False)),
        (["index", "-q", "info", "idx"], (0, True)),
        (["case", "-q", "score", "m", "f.csv"], (0, True)),
        (["case", "-vv", "score", "m", "f.csv"], (2, False)),
        # every place counts: before the command, after the group, after the action
        (["-v", "index", "-v", "info", "idx", "-v"], (3, False)),
        (["index", "info", "idx"], (0, False)),
    ],
)
def test_verbosity_flags_after_a_group_name_are_kept(argv: list[str], expected: tuple[int, bool]) -> None:
    assert verbosity(build_parser().parse_args(argv)) == expected


def test_train_keeps_o_as_an_alias_of_output_dir() -> None:
    parser = build_parser()
    assert parser.parse_args(["train", "r.yaml", "-o", "x"]).output_dir == "x"
    assert parser.parse_args(["train", "r.yaml", "--output-dir", "y"]).output_dir == "y"


def test_help_path_does_not_import_torch() -> None:
    code = (
        "import sys\n"
        "from finesim.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules, 'datasets' in sys.modules, file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "False False"
    assert "COMMAND" in out.stdout and "Exit codes" in out.stdout


def test_broken_pipe_is_quiet(tmp_path) -> None:
    """A command whose reader goes away (``finesim ... | head -1``) ends without an error message."""
    script = tmp_path / "many_lines.py"
    script.write_text(
        "import argparse, sys\n"
        "from finesim.cli.common import run_command\n"
        "def lines(args):\n"
        "    for _ in range(200_000):\n"
        "        print('x' * 80)\n"
        "    return 0\n"
        "sys.exit(run_command(argparse.Namespace(func=lines, command='test'), None))\n",
        encoding="utf-8",
    )
    out = subprocess.run(["bash", "-c", f"{sys.executable} {script} | head -1"], capture_output=True, text=True)
    assert out.stdout.strip() == "x" * 80
    assert out.stderr == "", out.stderr


RST_MARKUP = ("``", ":func:", ":class:", ":mod:", ":meth:", "Args:", "Returns:", "Raises:")


def test_bound_help_is_the_written_description_not_the_docstring(capsys: pytest.CaptureFixture) -> None:
    import finesim.cli.bound as bound

    with pytest.raises(SystemExit) as exit_info:
        main(["bound", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: finesim bound")
    assert bound.DESCRIPTION.splitlines()[0] in text and "examples:" in text
    assert (bound.__doc__ or "").strip() not in text
    assert not [m for m in RST_MARKUP if m in text], text


def test_no_help_shows_docstring_markup() -> None:
    for path, parser in _parsers(build_parser()):
        text = parser.format_help()
        assert not [m for m in RST_MARKUP if m in text], (path, text)


def test_train_help_lists_run_json_and_the_refused_rerun(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "OUT/run.json" in text and "refused before any work" in text and "--no-resume" in text


def test_a_misspelt_option_is_the_commands_usage_error_with_the_closest_option(capsys) -> None:
    """The innermost command's usage and name (not the top-level ones), and the option meant when one is close."""
    with pytest.raises(SystemExit) as stop:
        main(["index", "build", "--model", "m", "--corpus", "c", "-o", "o", "--fist-stage", "none"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: finesim index build ")
    assert err.rstrip().endswith(
        "finesim index build: error: unrecognized arguments: --fist-stage none (--fist-stage: did you mean "
        "--first-stage?)"
    )
    with pytest.raises(SystemExit):
        main(["serve", "--model", "m", "--prot=3", "stray"])
    err = capsys.readouterr().err
    assert err.startswith("usage: finesim serve ")
    assert "finesim serve: error: unrecognized arguments: --prot=3 stray (--prot: did you mean --port?)" in err
    with pytest.raises(SystemExit):
        main(["--bogus"])
    assert capsys.readouterr().err.rstrip().endswith("finesim: error: unrecognized arguments: --bogus")  # nothing close
    with pytest.raises(SystemExit):
        main(["--verbse", "index", "info", "x"])  # before the command's name: the top-level parser's option
    err = capsys.readouterr().err
    assert err.startswith("usage: finesim [")
    assert err.rstrip().endswith("finesim: error: unrecognized arguments: --verbse (--verbse: did you mean --verbose?)")
