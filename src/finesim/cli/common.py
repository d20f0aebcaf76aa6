"""What every ``finesim`` command shares: its parser (help with defaults, ``-v``/``-q`` after the command name), the
option conventions, argument types, and the error boundary that turns known failures into one line.

Conventions (docs/errors.md): ``--output FILE`` is a results file, ``--output-dir DIR`` a folder; every command that
loads a model takes ``--device`` and ``--no-progress``. Exit codes: 0 success, 1 an error (one line naming the file,
key or row; ``-v`` prints the traceback too), 2 a usage error, 130 interrupted.
This module imports only the standard library: ``finesim --help`` must stay fast.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
LIBRARY_LOGGERS = ("transformers", "sentence_transformers", "datasets", "huggingface_hub", "accelerate")


class UsageError(Exception):
    """A problem with the command line found after parsing (exit code 2, like argparse's own errors)."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions keep their line breaks; every option's help ends with its default (unless it has none)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        # 0 is a real default; a store_false flag's True is the value it turns off, not a default worth printing
        hidden = default is None or default is False or default is argparse.SUPPRESS
        hidden = hidden or isinstance(action, argparse._StoreFalseAction)
        empty = isinstance(default, (list, tuple)) and not default
        if "(default" in text or hidden or empty or not action.option_strings:  # "(default" covers "%(default)"
            return text
        return f"{text} (default: %(default)s)"


VERBOSE_DEST = "command_verbose"  # + the command's depth: -v after `finesim index` and after `finesim index search`
QUIET_DEST = "command_quiet"


def _add_verbosity(parser: argparse.ArgumentParser) -> None:
    """``-v``/``-q`` after a command's name. Each nesting level has its own destination (``command_verbose_1`` after
    ``finesim index``, ``_2`` after ``finesim index search``): argparse copies every value a sub-command's parser sets
    over its parent's, so one shared name let the action's default 0 erase a ``-v`` given after the group's name."""
    depth = len(parser.prog.split()) - 1
    group = parser.add_argument_group("output")
    group.add_argument(
        "-v",
        "--verbose",
        dest=f"{VERBOSE_DEST}_{depth}",
        action="count",
        default=0,
        help="more logging: -v library INFO lines and tracebacks on errors, -vv debug",
    )
    group.add_argument(
        "-q",
        "--quiet",
        dest=f"{QUIET_DEST}_{depth}",
        action="store_true",
        help="only errors: no progress lines or bars",
    )


def command_parser(subparsers: Any, name: str, *, help: str, description: str) -> argparse.ArgumentParser:
    """A sub-command's parser: help with defaults, ``-v``/``-q`` accepted after the command name."""
    parser = subparsers.add_parser(name, help=help, description=description, formatter_class=HelpFormatter)
    _add_verbosity(parser)
    # the innermost command's win: its usage errors, its name, its parser (for options misspelt on its line)
    parser.set_defaults(usage_error=parser.error, command_prog=parser.prog, command_parser=parser)
    return parser


def add_runtime_options(
    p: argparse.ArgumentParser,
    *,
    check_device: bool = True,
    device_help: str = "torch device, e.g. cpu or cuda:0 (default: automatic)",
) -> None:
    """``--device`` and ``--no-progress``, for every command that loads a model. ``check_device``: a name torch
    cannot read is a usage error when the command line is read, and a device this machine lacks when the command
    starts (:func:`run_command`), unless the model loads on Ray's workers (``--ray``, ``--ray-address``), which may
    have one; ``finesim train`` and ``finesim export`` check theirs themselves (a dry run takes a GPU device on a CPU
    machine; export builds CPU runtimes). ``device_help``: the flag's help where it differs."""
    p.add_argument("--device", default=None, type=device_name if check_device else str, help=device_help)
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(device_checked_here=check_device)


def device_name(text: str) -> str:
    """``--device``: a torch device name (``cpu``, ``cuda``, ``cuda:1``, ``mps``, ...), else an error saying why."""
    import torch

    try:
        torch.device(text)
    except (RuntimeError, ValueError) as err:
        raise argparse.ArgumentTypeError(f"{text!r} is not a torch device ({err}); e.g. cpu, cuda or cuda:0") from None
    return text


def device_here(text: str) -> str | None:
    """Why this machine cannot run on the torch device ``text`` (torch sees no such device), or None when it can."""
    import torch

    device = torch.device(text)
    if device.type == "cpu":
        return None
    backend = getattr(torch, device.type, None)
    available = getattr(backend, "is_available", None)
    if device.type == "mps":
        available = torch.backends.mps.is_available
    if available is not None and not available():
        return f"torch {torch.__version__} sees no {device.type} device here; use cpu or leave --device out"
    count = getattr(backend, "device_count", None)
    if device.index is not None and count is not None and device.index >= count():
        return f"torch sees {count()} {device.type} device(s) here, numbered from 0"
    return None


def _check_device(args: argparse.Namespace) -> None:
    """The ``--device`` of a command that loads its model here (not on Ray's workers): one this machine has."""
    device = getattr(args, "device", None)
    on_ray = bool(getattr(args, "ray", False) or getattr(args, "ray_address", None))
    if device and getattr(args, "device_checked_here", False) and not on_ray:
        problem = device_here(str(device))
        if problem is not None:
            raise UsageError(f"--device {device}: {problem}")


# ---------------------------------------------------------------- argument types


def add_ray_options(p: argparse.ArgumentParser, *, ray_help: str, actors: str) -> None:
    """``--ray``, ``--ray-address`` and ``--ray-workers`` (``finesim score`` and ``finesim index build|add``);
    ``actors`` names what each worker runs."""
    group = p.add_argument_group("Ray (scale-out; needs finesim[ray])")
    group.add_argument("--ray", action="store_true", help=ray_help)
    group.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="the Ray cluster to use, e.g. ray://head:10001 or auto (implies --ray; default: $RAY_ADDRESS if set)",
    )
    group.add_argument(
        "--ray-workers", type=positive_int, default=None, help=f"{actors} (default: one per CPU Ray offers)"
    )


def ray_wanted(args: argparse.Namespace) -> bool:
    """Whether the command runs on Ray: ``--ray`` or an address."""
    return bool(args.ray or args.ray_address)


def _int_at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    return _int_at_least(text, 1)


def map_fit_yield(text: str) -> float:
    """An argparse type: a background map fit's longest wait per step, in seconds
    (:func:`finesim.index.two_stage.check_map_fit_yield`)."""
    from finesim.index.two_stage import MAP_FIT_YIELD_MAX, check_map_fit_yield

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    try:
        return check_map_fit_yield(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds from 0 to {MAP_FIT_YIELD_MAX:g}, got {text!r}"
        ) from None


def _as_written(parse: Any, text: str) -> str:
    """``text`` stripped, once ``parse`` accepts it; its ValueError as argparse's usage error."""
    try:
        parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text.strip()


def rerank_feedback(text: str) -> str:
    """An argparse type: a two-stage search's feedback, ``none``, ``local-map`` or
    ``local-map:ROUNDS,RIDGE,POOL[,earlier|own]`` (:func:`finesim.index.feedback.parse_rerank_feedback`), checked and
    returned as written."""
    from finesim.index.feedback import parse_rerank_feedback

    return _as_written(parse_rerank_feedback, text)


def rerank_depth(text: str) -> str:
    """An argparse type: a two-stage search's re-ranking depth, ``all`` or ``FIRST,STEP,PATIENCE``
    (:func:`finesim.index.rerank_depth.parse_rerank_depth`), checked and returned as written."""
    from finesim.index.rerank_depth import parse_rerank_depth

    return _as_written(parse_rerank_depth, text)


def override(text: str) -> str:
    """An argparse type: a recipe override ``section.key=value``."""
    key = text.split("=", 1)[0].strip()
    if "=" not in text or not key:
        raise argparse.ArgumentTypeError(f"{text!r} must look like section.key=value, e.g. train.epochs=1")
    return text


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


# ---------------------------------------------------------------- outputs checked before any work


def check_output_file(path: str | None, option: str = "--output") -> None:
    """Fail now (not after the work) when a results file cannot be written at ``path``."""
    if path is None:
        return
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{option} {path}: is a folder; {option} takes a file name (e.g. {target / 'results.json'})")
    _check_writable(option, path, target.absolute().parent)


def check_output_dir(path: str | None, option: str = "--output-dir") -> None:
    """Fail now when a folder cannot be created or written at ``path``."""
    if path is None:
        return
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise UsageError(f"{option} {path}: is a file; {option} takes a folder")
    _check_writable(option, path, target if target.is_dir() else target.absolute().parent)


def _check_writable(option: str, path: str, folder: Path) -> None:
    """``folder``, or its nearest existing parent, is a folder this process can write to."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"{option} {path}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"{option} {path}: the folder {folder} is not writable")


# ---------------------------------------------------------------- logging, progress bars, the error boundary


def verbosity(args: argparse.Namespace) -> tuple[int, bool]:
    """``(verbose count, quiet)`` from the options before and after the command name."""
    given = vars(args)
    verbose = int(given.get("verbose") or 0) + sum(int(v or 0) for k, v in given.items() if _is_dest(k, VERBOSE_DEST))
    quiet = bool(given.get("quiet")) or any(bool(v) for k, v in given.items() if _is_dest(k, QUIET_DEST))
    return verbose, quiet


def _is_dest(name: str, dest: str) -> bool:
    """Whether ``name`` is one of the per-level destinations of ``dest`` (``command_verbose_1``, ...)."""
    return name.startswith(dest + "_") and name[len(dest) + 1 :].isdigit()


def log_level(args: argparse.Namespace) -> int:
    """WARNING, ``-v`` INFO, ``-vv`` DEBUG, ``-q`` ERROR."""
    verbose, quiet = verbosity(args)
    return logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]


def configure_output(args: argparse.Namespace) -> None:
    """Logging at :func:`log_level` for finesim and the libraries it uses; with ``--no-progress`` or ``-q`` no
    progress bars (tqdm, transformers, datasets, huggingface_hub)."""
    level = log_level(args)
    root = logging.getLogger()
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
        root.addHandler(handler)
    root.setLevel(level)
    for name in ("finesim", *LIBRARY_LOGGERS):
        logging.getLogger(name).setLevel(level)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", logging.getLevelName(level).lower())
    if verbosity(args)[1] or getattr(args, "no_progress", False):
        args.no_progress = True
        for variable in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
            os.environ[variable] = "1"
        _disable_loaded_progress_bars()


def _disable_loaded_progress_bars() -> None:
    """Turn off the progress bars of libraries already imported (they read the variables above at import time; the
    command line imports them later, a program calling :func:`configure_output` may have imported them already).
    Imports nothing. tqdm itself reads ``TQDM_DISABLE`` only at import; finesim passes its own switch to every
    encode call."""
    hub = sys.modules.get("huggingface_hub.utils")
    if hub is not None:
        hub.disable_progress_bars()
    transformers_logging = sys.modules.get("transformers.utils.logging")
    if transformers_logging is not None:
        transformers_logging.disable_progress_bar()
    datasets = sys.modules.get("datasets")
    if datasets is not None and hasattr(datasets, "disable_progress_bars"):
        datasets.disable_progress_bars()


class _StderrHandler(logging.StreamHandler):
    """Log records go to whatever ``sys.stderr`` is when they are emitted (not the stream at set-up time)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def show_help(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """The command function of a command group run without a subcommand: print the group's help, exit status 2."""

    def run(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    return run


def dry_run_device_note(device: Any) -> str | None:
    """What a dry run says of a CUDA device (``--device``, or a CASE recipe's ``case.device``): a dry run may run where
    the GPU is not (a login node), so it checks the device's spelling only. None for another device."""
    if device is None or not str(device).startswith("cuda"):
        return None
    return f"device {device}: its spelling is checked, not that torch sees the GPU (the run checks that)"


def say(args: argparse.Namespace) -> Callable[[str], None]:
    """A printer of ``[finesim] ...`` progress lines on stderr (silent under ``-q``)."""
    _, quiet = verbosity(args)
    if quiet:
        return lambda line: None
    return lambda line: print(f"[finesim] {line}", file=sys.stderr, flush=True)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


# failures with a message meant for the user: bad input, recipes, files, models, backends; KeyError and IndexError
# are not among them (BUG_ERRORS): they are bugs, reported as internal errors
KNOWN_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, LookupError, ImportError, RuntimeError)
BUG_ERRORS: tuple[type[BaseException], ...] = (KeyError, IndexError, AssertionError, AttributeError, TypeError)


def run_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run ``args.func`` inside the error boundary; returns the exit code. Error lines start with the command as
    typed, sub-command included (``finesim case train: error: ...``)."""
    prog = getattr(args, "command_prog", None) or f"finesim {getattr(args, 'command', None) or ''}".strip()
    verbose, _ = verbosity(args)
    try:
        _check_device(args)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_OK
    except UsageError as err:
        usage = getattr(args, "usage_error", None)
        if usage is not None:
            usage(str(err))  # prints the command's usage and exits with 2
        print(f"{prog}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except BUG_ERRORS as err:
        return _internal_error(prog, err, verbose)
    except KNOWN_ERRORS as err:
        if verbose:
            traceback.print_exc()
        print(f"{prog}: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as err:  # a bug: still one line, the traceback with -v
        from finesim.models.weights import is_unreadable_weights_error  # here: `--help` imports no torch

        if is_unreadable_weights_error(err):  # a weights file read outside finesim's loaders (which name it)
            if verbose:
                traceback.print_exc()
            print(
                f"{prog}: error: a model's weights cannot be read ({_one_line(err)}): a damaged or incomplete "
                "weights file; copy or download the model again",
                file=sys.stderr,
            )
            return EXIT_ERROR
        return _internal_error(prog, err, verbose)


def _internal_error(prog: str, err: BaseException, verbose: int) -> int:
    if verbose:
        traceback.print_exc()
    print(
        f"{prog}: internal error: {type(err).__name__}: {_one_line(err)} (run with -v for the "
        "traceback and please report it)",
        file=sys.stderr,
    )
    return EXIT_ERROR


def _silence_stdout() -> None:
    """After a broken pipe (``finesim ... | head``): point stdout at /dev/null so the interpreter's final flush
    does not print an error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def pooling_arg(text: str) -> str:
    """``--pooling`` (an argparse ``type``): a sentence-transformers pooling mode or an alias such as
    ``last-token``, checked as the command line is read (sentence-transformers is imported only when the option is
    given), so a typo is a usage error naming the modes, not a failure after the data has been read."""
    from sentence_transformers.sentence_transformer.modules import Pooling

    from finesim.models.io import POOLING_ALIASES
    from finesim.options import did_you_mean

    if text in Pooling.POOLING_MODES or text in POOLING_ALIASES:
        return text
    hint = did_you_mean(text, Pooling.POOLING_MODES)
    raise argparse.ArgumentTypeError(f"{text!r} is not a pooling mode{hint}; choose from {list(Pooling.POOLING_MODES)}")
