"""FINESIM_REQUIRE_DATA=1 (set by CI) turns the skips of data- and model-dependent tests into failures."""

from __future__ import annotations

import pytest

from conftest import import_or_skip, skip_unless_required


def test_skips_without_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FINESIM_REQUIRE_DATA", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no data here"):
        skip_unless_required("no data here")
    with pytest.raises(pytest.skip.Exception, match="cannot import finesim_no_such_module_xyz"):
        import_or_skip("finesim_no_such_module_xyz")


def test_fails_with_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FINESIM_REQUIRE_DATA", "1")
    with pytest.raises(pytest.fail.Exception, match=r"no data here \(FINESIM_REQUIRE_DATA=1 makes this a failure"):
        skip_unless_required("no data here")
    with pytest.raises(pytest.fail.Exception, match="cannot import finesim_no_such_module_xyz"):
        import_or_skip("finesim_no_such_module_xyz")
    assert import_or_skip("json").dumps([]) == "[]"
