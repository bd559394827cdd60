"""The GPU suite in parts (``pytest -m gpu --gpu-part=K/N``, tests/conftest.py): each test in
exactly one part, the parts contiguous and of near-equal length."""

from __future__ import annotations

import argparse

import pytest

from tests.conftest import gpu_part, part_of, why_skipped


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("count", [0, 1, 7, 285])
def test_the_parts_cover_each_gpu_test_once(count: int, n: int) -> None:
    parts = [[i for i in range(count) if part_of(i, count, (k, n))] for k in range(1, n + 1)]
    assert sorted(i for p in parts for i in p) == list(range(count))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert all(p == list(range(p[0], p[-1] + 1)) for p in parts if p)


@pytest.mark.parametrize(("text", "error"), [("2", "is not K/N"), ("a/b", "is not K/N"), ("0/3", "K must be"),
                                             ("4/3", "K must be")])
def test_a_part_that_is_not_k_of_n_is_one_line(text: str, error: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=error):
        gpu_part(text)
    assert gpu_part("2/3") == (2, 3)


@pytest.mark.parametrize(("markers", "gpu", "worker", "reason"), [
    ({"gpu"}, False, None, "needs an NVIDIA GPU"),
    ({"gpu", "timing"}, False, "gw0", "needs an NVIDIA GPU"),
    ({"gpu"}, True, None, None),
    ({"gpu"}, True, "gw3", None),  # correctness tests share the GPU under -n
    ({"gpu", "timing"}, True, None, None),
    ({"gpu", "timing"}, True, "gw0", "wants the GPU to itself"),
])
def test_a_timing_test_runs_only_with_the_gpu_to_itself(markers: set[str], gpu: bool, worker: str | None,
                                                         reason: str | None) -> None:
    got = why_skipped(markers, gpu, worker)
    assert got == reason if reason is None else reason in got

