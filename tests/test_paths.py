"""Where the data root comes from: argument > $FINESIM_DATA > ../shared/data."""

from __future__ import annotations

from pathlib import Path

import pytest

from finesim.paths import DataRootNotFound, data_root


@pytest.fixture()
def three_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    roots = {name: tmp_path / name for name in ("arg", "env")}
    default = tmp_path / "shared" / "data"
    for folder in (*roots.values(), default):
        folder.mkdir(parents=True)
    work = tmp_path / "repo"
    work.mkdir()
    monkeypatch.chdir(work)  # ../shared/data is the default relative to the working folder
    return {**roots, "default": default}


def test_argument_wins_over_environment_and_default(three_roots, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FINESIM_DATA", str(three_roots["env"]))
    assert data_root(three_roots["arg"]) == three_roots["arg"].resolve()


def test_environment_wins_over_default(three_roots, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FINESIM_DATA", str(three_roots["env"]))
    assert data_root() == three_roots["env"].resolve()


def test_default_is_shared_data_beside_the_working_folder(three_roots, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FINESIM_DATA", raising=False)
    assert data_root() == three_roots["default"].resolve()
    monkeypatch.setenv("FINESIM_DATA", "")  # empty counts as unset
    assert data_root() == three_roots["default"].resolve()


def test_missing_root_names_its_source(three_roots, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FINESIM_DATA", str(three_roots["env"] / "absent"))
    with pytest.raises(DataRootNotFound, match=r"absent'.*\$FINESIM_DATA.*Pass the data root \(--data PATH; data="):
        data_root()
    with pytest.raises(DataRootNotFound, match=r"from the data root given: --data or a recipe's data\.root, or data="):
        data_root(three_roots["arg"] / "absent")
