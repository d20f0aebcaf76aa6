"""benchmarks/first_stage_scan.py end to end on a tiny index and its float16 copy: a JSON with its settings and
each setting's figures, and its refusal of indexes in the wrong order."""

from __future__ import annotations

import json
import sys

import pytest
from claims_scripts import load_benchmark

from finesim import ConditionalIndex
from finesim.index.convert import convert_index

scan = load_benchmark("first_stage_scan.py")


def test_the_scan_benchmark_writes_its_settings_and_each_setting_s_figures(tiny_bert_dir, tmp_path, monkeypatch):
    from conftest import WORDS

    texts = [f"{a} {b} {c}" for a, b, c in zip(WORDS, WORDS[1:], WORDS[2:])]  # 56 distinct texts
    ConditionalIndex.build(str(tiny_bert_dir), texts, tmp_path / "full", encoder="bi")
    convert_index(tmp_path / "full", tmp_path / "half", "float16")
    out = tmp_path / "scan.json"
    argv = ["first_stage_scan.py", "--index", str(tmp_path / "full"), "--half", str(tmp_path / "half"), "--scans",
            "4", "--wanted", "5", "--output", str(out)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    scan.main()
    d = json.loads(out.read_text(encoding="utf-8"))
    assert d["settings"]["rows"] == 56 and d["settings"]["wanted"] == 5 and d["settings"]["scans"] == 4
    results = d["results"]["scan"]
    assert set(results) == {"float32", "float16", "float16 converted to float32"}
    assert results["float32"]["kept_share_of_float32_top"] == 1.0  # the float32 scan is the reference
    for figures in results.values():
        assert 0 < figures["p50_ms"] <= figures["p95_ms"]
        assert 0.0 <= figures["kept_min"] <= figures["kept_share_of_float32_top"] <= 1.0
    assert str(tmp_path) not in json.dumps(d)  # no machine path left
    monkeypatch.setattr(sys, "argv", [*argv[:2], str(tmp_path / "half"), "--half", str(tmp_path / "full")])
    with pytest.raises(SystemExit, match="--index must be float32 and --half float16"):
        scan.main()
