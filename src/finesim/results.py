"""Self-describing results files: environment, versions, hashes, portable paths; written atomically."""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import IO, Any

TRACKED_PACKAGES = (
    "finesim",
    "torch",
    "transformers",
    "sentence-transformers",
    "datasets",
    "accelerate",
    "peft",
)


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str | None]:
    """Installed versions of the packages that shape results (None when not installed)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile", "bf16")  # x86 flags; "bf16": an Arm CPU's feature


def _cpuinfo_fields(cpuinfo: str | os.PathLike[str]) -> tuple[set[str], str | None] | None:
    """The instruction-set flags ``cpuinfo`` lists (x86's ``flags`` lines, Arm's ``Features``) and its first
    ``model name``; None where it cannot be read (no ``/proc/cpuinfo``: not Linux)."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    flags: set[str] = set()
    model = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
        elif key.strip() == "model name" and model is None:
            model = value.strip() or None
    return flags, model


def cpu_bf16_flags(cpuinfo: str | os.PathLike[str] = "/proc/cpuinfo") -> list[str] | None:
    """The bfloat16-related instruction-set flags the CPU lists (of ``BF16_CPU_FLAGS``; x86's ``flags`` lines, Arm's
    ``Features``), in that order; ``None`` where they cannot be read (no ``/proc/cpuinfo``: not Linux)."""
    fields = _cpuinfo_fields(cpuinfo)
    return None if fields is None else [flag for flag in BF16_CPU_FLAGS if flag in fields[0]]


def cpu_description(cpuinfo: str | os.PathLike[str] = "/proc/cpuinfo") -> dict[str, Any] | None:
    """The CPU's model name and whether it has AVX-512 (``avx512f``), which moves CPU timings by about 2x between
    otherwise alike 2-core hosts; None where ``cpuinfo`` cannot be read."""
    fields = _cpuinfo_fields(cpuinfo)
    return None if fields is None else {"model": fields[1], "avx512": "avx512f" in fields[0]}


def hardware_info() -> dict[str, Any]:
    """CPU, memory, threads and accelerator facts for a results file."""
    import torch

    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
        # whether bf16 autocast can be fast here: AMX (amx_bf16) sped it up, avx512_bf16 alone did not
        "cpu_bf16_flags": cpu_bf16_flags(),
        "cpu": cpu_description(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        info["memory_gib"] = round(pages / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    return info


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def path_sha256(path: str | Path) -> str:
    """SHA-256 of a file, or of a folder's files (their relative names and contents, in sorted order)."""
    path = Path(path)
    if path.is_file():
        return file_sha256(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode("utf-8"))
        digest.update(file_sha256(file).encode("ascii"))
    return digest.hexdigest()


def environment_record() -> dict[str, Any]:
    """The block every results file carries: when, versions, the code (:func:`code_record`) and hardware."""
    return {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": package_versions(),
        "code": code_record(),
        "hardware": hardware_info(),
    }


@functools.lru_cache(maxsize=1)
def code_record() -> dict[str, Any]:
    """The finesim code that ran: the git commit of the checkout it was imported from and whether its ``src/`` or
    ``recipes/`` had uncommitted changes (the version number alone stays 0.1.0 across many commits); both null for an
    installed copy, or where git cannot tell. Read once a process: a long run calls it when it starts (training,
    evaluation), so commits made meanwhile are not taken for the code that ran."""
    import subprocess

    checkout = Path(__file__).resolve().parents[2]
    record: dict[str, Any] = {"git_commit": None, "uncommitted_changes": None}
    if not (checkout / ".git").exists():
        return record
    try:
        head = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        )
        status = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(checkout), "status", "--porcelain", "--", "src", "recipes"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return record
    return {"git_commit": head.stdout.strip() or None, "uncommitted_changes": bool(status.stdout.strip())}


DATA_ROOT_NAME = "$FINESIM_DATA"


def path_roots(
    data_root: str | os.PathLike[str] | None = None, extra: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """The folders :func:`portable_path` rewrites, each with its portable name, most specific first: ``extra``
    ({folder: name}); the data root (``data_root``, else ``$FINESIM_DATA``, else ``../shared/data``) as
    ``$FINESIM_DATA``; the virtual environment as ``<venv>``; the finesim checkout (else the current folder) as
    ``.``, i.e. paths relative to it; the temporary folder as ``<tmp>``; the home folder as ``~``."""
    from finesim.paths import DATA_ENV_VAR, DEFAULT_DATA_ROOT

    checkout = Path(__file__).resolve().parents[2]
    pairs = [
        *(extra or {}).items(),
        (data_root or os.environ.get(DATA_ENV_VAR) or DEFAULT_DATA_ROOT, DATA_ROOT_NAME),
        *([(sys.prefix, "<venv>")] if sys.prefix != sys.base_prefix else []),
        (checkout if (checkout / "pyproject.toml").is_file() else Path.cwd(), "."),
        (tempfile.gettempdir(), "<tmp>"),
        (Path.home(), "~"),
    ]
    roots: dict[str, str] = {}
    for folder, name in pairs:
        folder = os.path.expanduser(folder)
        for form in (os.path.abspath(folder), os.path.realpath(folder)):
            if form != os.sep:
                roots.setdefault(form, name)
    return sorted(roots.items(), key=lambda root: -len(root[0]))


def portable_path(path: str | os.PathLike[str], roots: Sequence[tuple[str, str]] | None = None) -> str:
    """``path`` as a results file records it, so that the file names no folder of the machine that made it: an
    absolute path under a folder of :func:`path_roots` is written relative to it (``<checkout>/runs/x`` ->
    ``runs/x``, ``<data root>/csts/train.csv`` -> ``$FINESIM_DATA/csts/train.csv``, ``/tmp/r`` -> ``<tmp>/r``).
    Every such path in a text is rewritten (a command line too); relative paths, Hub ids and other text are kept."""
    text = os.fspath(path)
    if "/" not in text:
        return text
    for folder, name in path_roots() if roots is None else roots:
        # a whole path or its start (not inside another path or word), then "/" or the end of the path
        pattern = r"(?<![\w.~$<>/-])" + re.escape(folder) + r"(?:(/)|(?![\w.-]))"

        def replace(m: re.Match[str], n: str = name) -> str:
            return ("" if n == "." else f"{n}/") if m.group(1) else n

        text = re.sub(pattern, replace, text)
    return text


def portable(record: Any, roots: Sequence[tuple[str, str]] | None = None) -> Any:
    """A results record (dicts, lists, strings, numbers) with every string, key and path through
    :func:`portable_path`; numbers and the structure are unchanged (tuples become lists, as in JSON)."""
    roots = path_roots() if roots is None else roots
    if isinstance(record, (str, os.PathLike)):
        return portable_path(record, roots)
    if isinstance(record, Mapping):
        return {portable(k, roots) if isinstance(k, str) else k: portable(v, roots) for k, v in record.items()}
    if isinstance(record, (list, tuple)):
        return [portable(v, roots) for v in record]
    return record


def current_umask() -> int:
    """The process umask: from ``/proc/self/status`` where Linux gives it (read-only, so no other thread sees the
    mask change), else read by setting it and putting it back."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _temp_name(suffix: str) -> re.Pattern[str]:
    """``.<target name>.<pid>-<random><suffix>``: a temporary file or folder of this finesim."""
    return re.compile(rf"^\.(?P<name>.+)\.(?P<pid>\d+)-[0-9a-f]{{8}}{re.escape(suffix)}$")


TEMP_NAME = _temp_name(".tmp")
"""A temporary file of :func:`atomic_temp_file`: ``.<target name>.<pid>-<random>.tmp``."""
OLD_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp$")
"""A temporary file of an older finesim (``tempfile.mkstemp``'s ``.<target name>.<random>.tmp``, no pid)."""
STALE_TEMP_SECONDS = 24 * 3600
"""A temporary file without a pid is a leftover once it is this old (its writer cannot be asked)."""


def atomic_temp_file(path: str | Path) -> Path:
    """A new, empty temporary file in the folder of ``path`` (created if needed), to be written and then moved over
    ``path`` with :func:`atomic_commit`. Being in the same folder, the rename is atomic.

    Its name, ``.<name>.<pid>-<random>.tmp``, carries this process's id, so that a later writer of the same target
    can tell a leftover of a killed run from a file being written (:func:`remove_dead_temp_files`)."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a file where a folder is needed, no permission: named by the file asked for
        raise OSError(err.errno, f"cannot write {target}: {err.strerror}") from None
    while True:
        tmp = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # pragma: no cover - 32 random bits
            continue
        except OSError as err:  # named by the file asked for, not the temporary file beside it
            raise OSError(err.errno, f"cannot write {target}: {err.strerror}") from None
        os.close(fd)
        return tmp


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (``os.kill(pid, 0)``; a process of another user counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, another user's
        return True
    return True


def atomic_temp_dir(path: str | Path, suffix: str) -> Path:
    """A new, private temporary folder beside ``path``, named as :func:`atomic_temp_file` names its files but ending
    in ``suffix`` (``.<name>.<pid>-<random><suffix>``), to be filled and then renamed to ``path``; a killed run's is
    removed by :func:`remove_dead_temp_files` with that suffix."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    while True:
        folder = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}{suffix}")
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:  # pragma: no cover - 32 random bits
            continue
        return folder


def remove_dead_temp_files(path: str | Path, suffix: str = ".tmp") -> list[Path]:
    """Delete the temporary files of ``path`` (:func:`atomic_temp_file`; folders of :func:`atomic_temp_dir` for
    another ``suffix``) that a killed or crashed run left beside it: those whose pid is no longer running on this
    machine, and those of an older finesim (no pid in the name: ``.tmp`` files) once they are a day old. One of a
    running process (another run writing the same target) is kept. Returns what was removed."""
    target = Path(path)
    if not target.parent.is_dir():
        return []
    stale = time.time() - STALE_TEMP_SECONDS
    named = _temp_name(suffix)
    removed = []
    for tmp in target.parent.glob(f".{glob.escape(target.name)}.*{glob.escape(suffix)}"):
        found = named.match(tmp.name)
        try:
            if found is not None and found["name"] == target.name:
                dead = not pid_alive(int(found["pid"]))
            else:
                old = OLD_TEMP_NAME.match(tmp.name) if suffix == ".tmp" else None
                dead = old is not None and old["name"] == target.name and tmp.stat().st_mtime < stale
            if dead and tmp.is_file():
                tmp.unlink()
                removed.append(tmp)
            elif dead and tmp.is_dir():
                shutil.rmtree(tmp)
                removed.append(tmp)
        except OSError:  # gone meanwhile, or not ours to delete
            continue
    return removed


def atomic_commit(tmp: str | Path, path: str | Path) -> Path:
    """Give the finished temporary file ``tmp`` the mode a plain ``open(path, "w")`` would give it (``0o666`` less
    the umask, normally ``0o644``; ``tempfile.mkstemp`` alone leaves it ``0o600``) and rename it over ``path``."""
    os.chmod(tmp, 0o666 & ~current_umask())
    os.replace(tmp, path)
    return Path(path)


def atomic_write(
    path: str | Path, writer: Callable[[IO[Any]], object], mode: str = "wb", *, fsync: bool = False
) -> Path:
    """Write a file through a temporary file in the same folder, then rename it over ``path``: a reader never
    sees a half-written file, and a failure (or Ctrl-C) leaves the old file, if any, in place.

    ``writer(fh)`` writes the content into the open temporary file (``mode`` ``"wb"`` or ``"w"``, UTF-8). The file
    gets the mode a plain ``open(path, "w")`` would give it (:func:`atomic_commit`). ``fsync``: the content reaches
    the disk before the rename (an index's manifest and checksums). A file written piece by piece over time uses
    :func:`atomic_temp_file` and :func:`atomic_commit` itself (``finesim.data.writers``).
    """
    tmp = atomic_temp_file(path)
    try:
        with open(tmp, mode, encoding=None if "b" in mode else "utf-8") as fh:
            writer(fh)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        return atomic_commit(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | Path, payload: Any, *, fsync: bool = False) -> Path:
    """Write ``payload`` as indented UTF-8 JSON, atomically (:func:`atomic_write`, ``fsync`` as there)."""

    def write(fh: IO[Any]) -> None:
        json.dump(payload, fh, indent=2, ensure_ascii=False, default=str)
        fh.write("\n")

    return atomic_write(path, write, mode="w", fsync=fsync)
