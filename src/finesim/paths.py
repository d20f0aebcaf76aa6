"""Where finesim finds its data.

The data root comes from, in order: an explicit argument, the ``FINESIM_DATA`` environment variable, and
``../shared/data`` relative to the current directory when that folder exists.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV_VAR = "FINESIM_DATA"

# The files of a ``finesim train`` output folder (docs/csts-training.md) that other layers read, beside its ``model/``
RUN_CONFIG_FILE = "config.json"  # the resolved recipe
RUN_FILE = "run.json"  # the run's fingerprint (recipe, data files' SHA-256) and code
RUN_METRICS_FILE = "metrics.json"  # validation metrics, best checkpoint, throughput, log history
DEFAULT_DATA_ROOT = Path("..") / "shared" / "data"


class DataRootNotFound(FileNotFoundError):
    """Raised when no data root can be found."""


def data_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Return the data root folder, checking that it exists.

    Args:
        explicit: a path given by the caller; wins over the environment.

    Raises:
        DataRootNotFound: with a message that says how to point finesim at the data.
    """
    root, source = _root_and_source(explicit)
    if not root.is_dir():
        raise DataRootNotFound(
            f"Data folder {str(root)!r} (from {source}) does not exist. Pass the data root (--data PATH; data= in "
            f"Python) or set {DATA_ENV_VAR} to the folder that holds csts/, sts/ and nli/ (see README, 'Data layout')."
        )
    return root.resolve()


def data_root_source(explicit: str | os.PathLike[str] | None = None) -> str:
    """Where :func:`data_root` takes the root from, in words (``$FINESIM_DATA``, ``the default location``, ...)."""
    return _root_and_source(explicit)[1]


def _root_and_source(explicit: str | os.PathLike[str] | None) -> tuple[Path, str]:
    if explicit is not None:
        return Path(explicit).expanduser(), "the data root given: --data or a recipe's data.root, or data= in Python"
    if os.environ.get(DATA_ENV_VAR):
        return Path(os.environ[DATA_ENV_VAR]).expanduser(), f"${DATA_ENV_VAR}"
    return DEFAULT_DATA_ROOT, "the default location"
