"""benchmarks/soup.py: the weight average of a model soup, computed by hand, and its refusals."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from claims_scripts import load_benchmark


@pytest.fixture(scope="module")
def soup() -> ModuleType:
    return load_benchmark("soup.py")


def test_floats_are_averaged_and_integer_buffers_kept(soup: ModuleType) -> None:
    ids = torch.arange(3)
    a = {"w": torch.tensor([1.0, 2.0]), "h": torch.tensor([256.0], dtype=torch.bfloat16), "ids": ids}
    b = {"w": torch.tensor([3.0, 6.0]), "h": torch.tensor([1.0], dtype=torch.bfloat16), "ids": ids.clone()}
    c = {"w": torch.tensor([2.0, 1.0]), "h": torch.tensor([1.0], dtype=torch.bfloat16), "ids": ids.clone()}
    out = soup.average_state([a, b, c])
    assert torch.equal(out["w"], torch.tensor([2.0, 3.0]))  # (1 + 3 + 2) / 3, (2 + 6 + 1) / 3
    # averaged in fp32 (258 / 3 = 86.0, exact in bf16) and cast back; summing in bf16 gives 85.5 (256 + 1 rounds
    # to 256 in bf16's 8-bit mantissa)
    assert out["h"].dtype == torch.bfloat16 and out["h"].item() == 86.0
    assert torch.equal(out["ids"], ids)


def test_members_of_another_architecture_are_refused_by_name(soup: ModuleType) -> None:
    a = {"w": torch.zeros(2), "ids": torch.arange(2)}
    with pytest.raises(ValueError, match=r"member 1: w has shape \(3,\), member 0 \(2,\)"):
        soup.average_state([a, {"w": torch.zeros(3), "ids": torch.arange(2)}])
    with pytest.raises(ValueError, match=r"member 1 has other parameters than member 0: it lacks \['w'\], has \['v'\]"):
        soup.average_state([a, {"v": torch.zeros(2), "ids": torch.arange(2)}])
    with pytest.raises(ValueError, match="member 2: the non-float tensor ids differs"):
        soup.average_state([a, dict(a), {"w": torch.zeros(2), "ids": torch.tensor([1, 0])}])


def test_a_saved_soup_loads_as_a_finesim_model_with_its_card(soup: ModuleType, tiny_model, tmp_path) -> None:
    """--save: the soup's folder opens through finesim's loader with the same embeddings, and its marker's card names
    the members and the soup's scores; an existing folder is refused."""
    from finesim.evaluation.scoring import ConditionalScorer
    from finesim.models.io import read_marker

    member = tmp_path / "member"
    tiny_model.save(str(member))
    folder = soup.save_soup(tiny_model, "bi", [str(member)], {"dev": 71.5, "validation": 69.0}, tmp_path / "soup")
    card = read_marker(folder)["card"]
    assert card["metrics"] == {"dev": {"spearman": 71.5}, "validation": {"spearman": 69.0}}
    assert card["details"]["model soup"] == f"uniform weight average of 1 runs: {member}"
    loaded = ConditionalScorer(folder)
    expected = ConditionalScorer(tiny_model, encoder="bi").embed(["a cat sat"], ["the animal"])
    assert torch.allclose(loaded.embed(["a cat sat"], ["the animal"])[0], expected[0], atol=1e-6)
    with pytest.raises(SystemExit, match="the folder exists"):
        soup.save_soup(tiny_model, "bi", [str(member)], {"dev": 1.0, "validation": 1.0}, tmp_path / "soup")
