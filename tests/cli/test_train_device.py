"""``finesim train --device``: a CUDA device that torch cannot see is an error naming it (never a silent CPU run),
and ``cuda:N`` counts within an existing ``CUDA_VISIBLE_DEVICES`` (as a job scheduler sets it)."""

from __future__ import annotations

import os

import pytest
import torch

from finesim.cli.common import UsageError
from finesim.cli.train import select_device

ENV = "CUDA_VISIBLE_DEVICES"


@pytest.fixture(autouse=True)
def _restore_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """select_device writes CUDA_VISIBLE_DEVICES; setting it through monkeypatch first restores it (or its absence)."""
    monkeypatch.setenv(ENV, os.environ.get(ENV, ""))


@pytest.fixture()
def gpus_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: bool(os.environ.get(ENV)))


def test_cuda_n_counts_within_the_schedulers_visible_devices(monkeypatch, gpus_visible):
    monkeypatch.setenv(ENV, "2,3")
    select_device("cuda:1")
    assert os.environ[ENV] == "3"


def test_cuda_n_without_visible_devices_selects_gpu_n(monkeypatch, gpus_visible):
    monkeypatch.delenv(ENV, raising=False)
    select_device("cuda:1")
    assert os.environ[ENV] == "1"


def test_cuda_n_past_the_visible_devices_is_refused(monkeypatch, gpus_visible):
    monkeypatch.setenv(ENV, "2,3")
    with pytest.raises(UsageError, match=r"--device cuda:2: CUDA_VISIBLE_DEVICES='2,3' shows 2 GPU\(s\)"):
        select_device("cuda:2")


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "cuda:", "cuda:\u00b2", "mps"])
def test_other_devices_are_refused(device, monkeypatch):
    monkeypatch.setenv(ENV, "0")
    with pytest.raises(UsageError, match="finesim train takes cpu, cuda or cuda:N"):
        select_device(device)


def test_cpu_hides_the_gpus(monkeypatch):
    monkeypatch.setenv(ENV, "0")
    select_device("cpu")
    assert os.environ[ENV] == ""


def test_cuda_where_torch_sees_no_gpu_is_an_error_not_a_cpu_run(monkeypatch):
    monkeypatch.setenv(ENV, "0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UsageError, match=r"--device cuda: torch sees no CUDA GPU here .*train with --device cpu"):
        select_device("cuda")


def test_a_gpu_number_that_does_not_exist_is_named(monkeypatch):
    monkeypatch.delenv(ENV)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UsageError, match=r"--device cuda:3: torch sees no GPU number 3 here"):
        select_device("cuda:3")


def test_a_dry_run_checks_the_spelling_but_not_the_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    select_device("cuda", dry_run=True)  # a GPU recipe can be checked on a machine without one
    with pytest.raises(UsageError, match="finesim train takes cpu, cuda or cuda:N"):
        select_device("gpu", dry_run=True)
