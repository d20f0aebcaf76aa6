"""What the command line does to logging and progress bars (:func:`finesim.cli.common.configure_output`): WARNING by
default (``-v`` INFO, ``-vv`` DEBUG, ``-q`` ERROR) for finesim and the libraries it uses; ``--no-progress`` (or
``-q``) turns off the progress bars of tqdm, transformers, datasets and huggingface_hub."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from finesim.cli.common import LIBRARY_LOGGERS, configure_output
from finesim.cli.main import build_parser

SRC = Path(__file__).resolve().parents[2] / "src"
PROGRESS_VARIABLES = ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")


@pytest.fixture()
def restored_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Put the logging levels, the root handlers and the environment back after ``configure_output``."""
    for variable in (*PROGRESS_VARIABLES, "TRANSFORMERS_VERBOSITY"):
        monkeypatch.delenv(variable, raising=False)
    root = logging.getLogger()
    names = ("finesim", *LIBRARY_LOGGERS)
    saved = (root.level, list(root.handlers), {name: logging.getLogger(name).level for name in names})
    yield
    root.setLevel(saved[0])
    root.handlers[:] = saved[1]
    for name, level in saved[2].items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.parametrize(
    ("flags", "level"),
    [([], logging.WARNING), (["-v"], logging.INFO), (["-vv"], logging.DEBUG), (["-q"], logging.ERROR)],
)
def test_commands_log_at_warning_unless_told(flags: list[str], level: int, restored_logging: None) -> None:
    args = build_parser().parse_args(["bound", "--n", "3", *flags])
    configure_output(args)
    for name in ("finesim", *LIBRARY_LOGGERS):
        assert logging.getLogger(name).level == level, name
    assert os.environ["TRANSFORMERS_VERBOSITY"] == logging.getLevelName(level).lower()


def test_default_leaves_progress_bars_on(restored_logging: None) -> None:
    args = build_parser().parse_args(["evaluate", "--model", "x"])
    configure_output(args)
    assert not args.no_progress
    assert not any(variable in os.environ for variable in PROGRESS_VARIABLES)


PROBE = """
import argparse, json, sys
from finesim.cli.common import configure_output

def libraries():
    import datasets, huggingface_hub.utils, tqdm, transformers.utils.logging
    return datasets, huggingface_hub.utils, tqdm, transformers.utils.logging

if sys.argv[1] == "after":  # a program that imported the libraries before configuring the output
    libraries()
configure_output(argparse.Namespace(no_progress=sys.argv[2] == "1", verbose=0, quiet=False))
datasets, hub, tqdm, transformers_logging = libraries()
state = {
    "transformers": transformers_logging.is_progress_bar_enabled(),
    "datasets": datasets.is_progress_bar_enabled(),
    "huggingface_hub": not hub.are_progress_bars_disabled(),
    "tqdm": not tqdm.tqdm(range(1), file=sys.stdout).disable,
}
print(json.dumps(state))
"""


def _progress_state(order: str, no_progress: bool) -> dict[str, bool]:
    env = {k: v for k, v in os.environ.items() if k not in (*PROGRESS_VARIABLES, "TRANSFORMERS_VERBOSITY")}
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-c", PROBE, order, "1" if no_progress else "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_no_progress_turns_off_every_library_bar() -> None:
    """The command line's order: ``configure_output`` first, the libraries imported by the command afterwards."""
    assert _progress_state("before", no_progress=True) == dict.fromkeys(
        ("transformers", "datasets", "huggingface_hub", "tqdm"), False
    )


def test_no_progress_also_when_the_libraries_were_imported_first() -> None:
    state = _progress_state("after", no_progress=True)
    assert not state["transformers"] and not state["datasets"] and not state["huggingface_hub"]


def test_progress_bars_stay_on_without_no_progress() -> None:
    assert all(_progress_state("before", no_progress=False).values())


def test_prompt_eval_passes_no_progress_to_its_backend() -> None:
    """A backend's own switch wins over ``TQDM_DISABLE`` (tqdm gives an explicit ``disable=`` precedence)."""
    from finesim.cli.prompt_eval import _backend

    args = build_parser().parse_args(
        ["prompt-eval", "--backend", "openai", "--model", "m", "--base-url", "http://x.invalid/v1", "--no-progress"]
    )
    assert _backend(args).show_progress is False
