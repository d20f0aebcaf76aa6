"""Results files: written atomically with the mode a plain open() would give them."""

from __future__ import annotations

import json
import os
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
