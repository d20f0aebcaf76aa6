"""How many Ray workers score or index, what each reserves and where its model loads (``worker_plan``): no Ray
needed, the cluster's resources are a dict as ``ray.cluster_resources()`` returns them."""

from __future__ import annotations

import pytest

from finesim.evaluation.ray_scoring import worker_plan

CLUSTER = {"CPU": 16.0, "GPU": 2.0}


@pytest.mark.parametrize(
    ("device", "workers", "expected"),
    [
        (None, None, (16, 0, "cpu")),  # no device: one worker per CPU, none on a GPU Ray did not reserve
        ("cpu", 3, (3, 0, "cpu")),
        ("cuda", None, (2, 1, "cuda")),  # one worker per GPU, each loading on the one GPU Ray shows it
        ("cuda:1", 2, (2, 1, "cuda")),
    ],
)
def test_the_plan(device, workers, expected):
    assert worker_plan(device, workers, CLUSTER) == expected


def test_a_cuda_device_on_a_cluster_without_gpus_defaults_to_the_cpu_count_and_is_refused():
    with pytest.raises(
        ValueError, match=r"--device cuda: each of the 4 Ray workers takes a GPU, but the Ray cluster offers 0"
    ):
        worker_plan("cuda", None, {"CPU": 4.0})


def test_more_gpu_workers_than_gpus_is_refused():
    with pytest.raises(
        ValueError, match=r"each of the 3 Ray workers takes a GPU, but the Ray cluster offers 2: use fewer"
    ):
        worker_plan("cuda", 3, CLUSTER)
