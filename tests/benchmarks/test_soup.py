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
