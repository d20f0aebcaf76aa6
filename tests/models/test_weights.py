"""A damaged weights file is named in the error (``finesim.models.weights.readable_weights``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from finesim.models.io import load_conditional_model, load_sentence_model, save_model
from finesim.models.weights import damaged_weights_files


def _cut(file: Path) -> None:
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def test_a_truncated_safetensors_is_named(tiny_model, tmp_path: Path) -> None:
    folder = tmp_path / "m"
    tiny_model.save(str(folder))
    assert damaged_weights_files(folder) == []
    _cut(folder / "model.safetensors")
    assert damaged_weights_files(folder) == [folder / "model.safetensors"]
    with pytest.raises(ValueError, match=rf"^{folder}/model\.safetensors: the model's weights cannot be read \("):
        load_sentence_model(str(folder))


def test_a_saved_finesim_model_names_its_damaged_file(tiny_model, tmp_path: Path) -> None:
    folder = save_model(tiny_model, tmp_path / "bi", encoder="bi")
    _cut(folder / "model.safetensors")
    with pytest.raises(ValueError, match=r"model\.safetensors: the model's weights cannot be read.*download the model"):
        load_conditional_model(folder)


def test_a_bin_that_is_not_a_whole_archive_is_named(tiny_bert_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "raw"
    shutil.copytree(tiny_bert_dir, folder)
    (folder / "pytorch_model.bin").write_bytes(b"PK\x03\x04 not the rest of an archive")
    assert damaged_weights_files(folder) == [folder / "pytorch_model.bin"]


def test_a_half_cut_pytorch_model_bin_is_named(tiny_bert_dir: Path, tmp_path: Path) -> None:
    """torch reads a cut pytorch_model.bin with "[Errno 22] Invalid argument", which named no file."""
    import torch
    from transformers import AutoModel

    folder = tmp_path / "bin"
    shutil.copytree(tiny_bert_dir, folder)
    for weights in folder.glob("*.safetensors"):
        weights.unlink()
    torch.save(AutoModel.from_pretrained(str(tiny_bert_dir)).state_dict(), folder / "pytorch_model.bin")
    _cut(folder / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"pytorch_model\.bin: the model's weights cannot be read"):
        load_sentence_model(str(folder))


def test_other_load_errors_pass_through(tmp_path: Path) -> None:
    (tmp_path / "modules.json").write_text("[]")  # an empty pipeline: not a weights problem
    with pytest.raises(Exception) as caught:
        load_sentence_model(str(tmp_path))
    assert "weights cannot be read" not in str(caught.value)
