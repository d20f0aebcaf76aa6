"""Results files: written atomically with the mode a plain open() would give them; paths in them portable."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from finesim.results import write_json_atomic


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_write_json_atomic_mode_follows_umask(tmp_path: Path, umask: int, mode: int) -> None:
    old = os.umask(umask)
    try:
        out = write_json_atomic(tmp_path / "sub" / "r.json", {"a": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == mode
    assert json.loads(out.read_text()) == {"a": 1}
    assert [p.name for p in out.parent.iterdir()] == ["r.json"]  # no temporary file left behind


def test_write_json_atomic_replaces_and_cleans_up_on_error(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    write_json_atomic(target, {"v": 1})
    with pytest.raises(TypeError):
        write_json_atomic(target, {1j: 2})  # a complex key cannot be written: the old file stays
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_file_written_over_time_commits_with_a_plain_mode(tmp_path: Path) -> None:
    from finesim.results import atomic_commit, atomic_temp_file

    target = tmp_path / "new" / "table.csv"
    tmp = atomic_temp_file(target)
    assert tmp.parent == target.parent and tmp.is_file() and not target.exists()
    tmp.write_text("a,b\n", encoding="utf-8")
    old = os.umask(0o027)
    try:
        assert atomic_commit(tmp, target) == target
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o640 and not tmp.exists()


def _dead_pid() -> int:
    """The pid of a process that has ended."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_temp_files_carry_the_pid_and_a_dead_runs_are_removed(tmp_path: Path) -> None:
    from finesim.results import atomic_temp_file, remove_dead_temp_files

    target = tmp_path / "out.csv"
    mine = atomic_temp_file(target)
    assert re.fullmatch(rf"\.out\.csv\.{os.getpid()}-[0-9a-f]{{8}}\.tmp", mine.name), mine.name
    dead = tmp_path / f".out.csv.{_dead_pid()}-0123abcd.tmp"
    old = tmp_path / ".out.csv.k2_x9q0z.tmp"  # an older finesim's mkstemp name, no pid
    recent_old = tmp_path / ".out.csv.ab12cd34.tmp"
    other = tmp_path / f".other.csv.{_dead_pid()}-0123abcd.tmp"  # another target's: not ours to touch
    for file in (dead, old, recent_old, other):
        file.write_text("x")
    os.utime(old, (0, 0))  # a day old and more
    assert set(remove_dead_temp_files(target)) == {dead, old}
    assert not dead.exists() and not old.exists()
    assert mine.exists() and recent_old.exists() and other.exists()  # a live run's, a recent one's, another's


# Portable paths (docs/DEVELOPING.md, "Paths in results files")

REPO = Path(__file__).resolve().parents[1]
# an absolute path of the machine that made a file: at the start of a string or after a space, "=", "'", ...
MACHINE_PATH = re.compile(r"(?<![\w.~$<>/-])/(?:work|tmp|root|home|Users|private|usr/lib|usr/local)/")


def test_committed_results_record_no_absolute_paths() -> None:
    offending = {}
    for file in sorted((REPO / "benchmarks" / "results").rglob("*.json")):
        hits = MACHINE_PATH.findall(file.read_text(encoding="utf-8"))
        if hits:
            offending[str(file.relative_to(REPO))] = len(hits)
    assert not offending, f"absolute paths (run scripts/relativize_results.py): {offending}"


ROOTS = [
    ("/tmp/x/data", "$FINESIM_DATA"),
    ("/home/u/finesim/.venv", "<venv>"),
    ("/home/u/finesim", "."),
    ("/tmp", "<tmp>"),
    ("/home/u", "~"),
]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/home/u/finesim/runs/claims/a/seed1", "runs/claims/a/seed1"),
        ("/home/u/finesim", "."),
        ("/tmp/x/data/csts/train.csv", "$FINESIM_DATA/csts/train.csv"),  # the data root, though under /tmp
        ("/tmp/x/data", "$FINESIM_DATA"),
        ("/tmp/q/run", "<tmp>/q/run"),
        ("/home/u/finesim/.venv/lib/site-packages/m", "<venv>/lib/site-packages/m"),
        ("/home/u/.cache/finesim", "~/.cache/finesim"),
        (
            "finesim train r.yaml -o /home/u/finesim/runs/a --data=/tmp/x/data",
            "finesim train r.yaml -o runs/a --data=$FINESIM_DATA",
        ),
        ("ensemble of ['/home/u/finesim/a', '/tmp/b']", "ensemble of ['a', '<tmp>/b']"),
        ("/home/u/finesimx/a", "~/finesimx/a"),  # a sibling whose name starts like the checkout
        ("/tmpfile", "/tmpfile"),
        ("runs/x/home/u/finesim", "runs/x/home/u/finesim"),  # inside another path: kept
        ("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"),
        ("/usr/bin/time -v", "/usr/bin/time -v"),
    ],
)
def test_portable_path(path: str, expected: str) -> None:
    from finesim.results import portable_path

    assert portable_path(path, ROOTS) == expected


def test_portable_record_keeps_numbers_and_structure() -> None:
    from finesim.results import portable

    record = {"n": 3, "x": 0.1, "ok": True, "none": None, "files": {"/tmp/x/data/a.txt": "ab12"}, "l": ("/tmp/r", 2)}
    assert portable(record, ROOTS) == {
        "n": 3,
        "x": 0.1,
        "ok": True,
        "none": None,
        "files": {"$FINESIM_DATA/a.txt": "ab12"},
        "l": ["<tmp>/r", 2],
    }


def test_path_roots_follow_the_data_root_and_put_the_most_specific_first(tmp_path: Path, monkeypatch) -> None:
    from finesim.results import path_roots, portable_path

    monkeypatch.setenv("FINESIM_DATA", str(tmp_path / "data"))
    roots = path_roots()
    assert (str(tmp_path / "data"), "$FINESIM_DATA") in roots
    assert [len(folder) for folder, _ in roots] == sorted((len(folder) for folder, _ in roots), reverse=True)
    assert portable_path(tmp_path / "data" / "csts" / "train.csv") == "$FINESIM_DATA/csts/train.csv"
    assert portable_path(REPO / "runs" / "x") == "runs/x"
    assert portable_path(tmp_path / "other", path_roots(data_root=tmp_path / "other")) == "$FINESIM_DATA"


def test_relativize_script_rewrites_paths_only(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("relativize", REPO / "scripts" / "relativize_results.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    text = '{\n  "p": "/tmp/q/r",\n  "x": 1.50,\n  "e": 1e-05,\n  "k": {"/tmp/q/k": [1, 2]}\n}\n'
    (tmp_path / "r.json").write_text(text, encoding="utf-8")
    assert script.main([str(tmp_path / "r.json"), "--check", "--map", "/tmp/q=<tmp>/q"]) == 1
    assert script.main([str(tmp_path / "r.json"), "--map", "/tmp/q=<tmp>/q"]) == 0
    assert (tmp_path / "r.json").read_text() == text.replace("/tmp/q", "<tmp>/q")  # numbers spelled as before
    with pytest.raises(ValueError, match=r"1\.5 became 2\.5"):
        script.compare({"x": 1.5}, {"x": 2.5}, ROOTS)
    with pytest.raises(ValueError, match="not its portable form"):
        script.compare({"p": "/tmp/a"}, {"p": "/tmp/b"}, ROOTS)


def test_an_extra_root_outside_the_checkout_gets_its_name(tmp_path: Path) -> None:
    """A benchmark's work folder outside the checkout (``--work-dir /work/idx``) is recorded by name, in a command
    line too, and wins over the broader temporary folder that holds it."""
    from finesim.results import path_roots, portable

    work = tmp_path / "idx"
    roots = path_roots(extra={str(work): "<work-dir>"})
    record = {"command": f"bench.py --work-dir {work} --reuse", "index": f"{work}/a.faiss", "other": f"{tmp_path}/b"}
    assert portable(record, roots) == {
        "command": "bench.py --work-dir <work-dir> --reuse",
        "index": "<work-dir>/a.faiss",
        "other": portable(str(tmp_path / "b"), path_roots()),
    }


def test_results_files_name_the_code_that_made_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """finesim's version stays 0.1.0 across commits: the environment block names the checkout's commit."""
    import shutil
    import subprocess

    import finesim.results as results

    checkout = Path(results.__file__).resolve().parents[2]
    record = results.environment_record()["code"]
    if (checkout / ".git").exists() and shutil.which("git"):
        head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
        assert record["git_commit"] == head.stdout.strip() and isinstance(record["uncommitted_changes"], bool)
    # read once a process: a run's record names the code it started with, not a commit made while it ran
    assert results.code_record() is results.code_record()
    # an installed copy (no .git beside it): both unknown, never a guess
    monkeypatch.setattr(results, "__file__", str(tmp_path / "a" / "b" / "results.py"))
    results.code_record.cache_clear()
    try:
        assert results.code_record() == {"git_commit": None, "uncommitted_changes": None}
    finally:
        results.code_record.cache_clear()


def test_an_unwritable_target_is_named_not_its_temporary_file(tmp_path: Path) -> None:
    """An output that cannot be written was reported by the temporary file beside it ('/proc/.t.parquet.19986-...
    .tmp'), which the user never named."""
    from finesim.results import write_json_atomic

    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    with pytest.raises(OSError, match=rf"cannot write {re.escape(str(blocker / 'out.json'))}: ") as err:
        write_json_atomic(blocker / "out.json", {})  # its folder is a file
    assert ".tmp" not in str(err.value)
