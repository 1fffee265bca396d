"""A cluster worker's call (tuner/train/cluster.py): the job `pack_job` makes of a batch's rows and
cuts, computed by a `Share` (in this process), gives bitwise the losses and gradient of the
batch on one machine, for any span of its micro-batches and any offset of the share's rows, and
a job larger than the share's buffers (a validation batch of more micro-batches than its
training batches) is computed too; a local Ray a run starts is given the inline size."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tuner.train import cluster as cluster_mod
from tuner.train.cluster import (INLINE_BYTES, ClusterWorkers, Layout, Share, ShareSpec,
                                 pack_job)
from tuner.train.config import validate
from tuner.train.errors import TrainingError
from tuner.train.kernels import cut_chunks, reduce_chunks

pytest.importorskip("ray", reason="Ray is installed by `make` (pip install 'tuner[ray]')")

MICRO = 128
SEGMENT = 500
TINY = 4000  # positions of the shipped sample, none of them bad
K = 1 / 400


def _spec(max_batch: int) -> ShareSpec:
    cfg = validate({"data": {"train": ["tiny"]}, "evaluation": {"name": "clockwork"},
                    "loss": {"k": K}}, "test")
    theta = np.zeros(0)
    return ShareSpec(cfg.values, None, K, theta, 1, MICRO, max_batch, SEGMENT)


@pytest.fixture(scope="module")
def share():
    """A worker holding all of `tiny`, sized for batches of 1,024."""
    return Share(_spec(1024), range(TINY), [(TINY, np.zeros(0, np.int64))])


def _batch(n: int, seed: int = 1):
    """Rows of a batch of `n` (store order) and its cuts."""
    order = np.sort(np.random.default_rng(seed).choice(TINY, n, replace=False))
    starts = np.empty(n + 1, np.int64)
    return order, starts[: cut_chunks(order, MICRO, SEGMENT, starts) + 1]


def _theta(share) -> np.ndarray:
    return np.random.default_rng(2).normal(0, 20, share.workers.source.n_theta)


def _compute(share, theta: np.ndarray, job: bytes) -> np.ndarray:
    """`Share.compute`'s result as the driver reads it."""
    return np.frombuffer(share.compute(theta.tobytes(), job), np.float64)


def test_a_job_gives_the_bits_of_the_batch_on_one_machine(share):
    order, starts = _batch(1024)
    c = len(starts) - 1
    theta = _theta(share)
    out = _compute(share, theta, pack_job(order, 0, starts, len(order), True))
    assert out.shape == (c * (1 + len(theta)),)
    total, grad = share.workers.loss_grad(theta, order)
    assert math.fsum(out[:c]) == total
    summed = np.zeros(len(theta))
    reduce_chunks(out[c:].reshape(c, -1), c, summed)
    assert np.array_equal(summed, grad)
    # chunks 2..5 alone, their rows as another worker's (less its first row) and cuts from 0
    a, b, offset = 2, 5, 1000
    part = _compute(share, theta, pack_job(order[starts[a]:starts[b]] + offset, offset,
                                         starts[a:b + 1], len(order), True))
    assert np.array_equal(part[: b - a], out[a:b])
    assert np.array_equal(part[b - a:], out[c + a * len(theta): c + b * len(theta)])


def test_a_job_larger_than_the_share_was_sized_for_is_computed_without_gradients(share):
    order, starts = _batch(3000)
    c = len(starts) - 1
    assert c > share.workers.max_chunks
    theta = _theta(share)
    out = _compute(share, theta, pack_job(order, 0, starts, len(order), False))
    assert out.shape == (c,)
    assert math.fsum(out) == share.workers.loss_grad(theta, order, with_grad=False)[0]
    assert _compute(share, theta, pack_job(np.zeros(0, np.int64), 0, np.zeros(1, np.int64),
                                         1, True)).shape == (0,)  # an empty job


def test_a_local_ray_the_run_starts_is_given_the_inline_size(monkeypatch):
    given = {}

    def init(**kwargs):
        given.update(kwargs)
        raise RuntimeError("not started by this test")

    monkeypatch.setattr(cluster_mod.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(cluster_mod.ray, "init", init)
    layout = Layout(TINY, 1, 2, None, [])
    with pytest.raises(TrainingError, match="cannot start or reach Ray"):
        ClusterWorkers(layout, np.arange(TINY), _spec(1024), ("local", 2), print)
    assert given["_system_config"]["max_direct_call_object_size"] == INLINE_BYTES
    given.clear()
    with pytest.raises(TrainingError):
        ClusterWorkers(layout, np.arange(TINY), _spec(1024), ("auto", 2), print)
    assert given["_system_config"] is None  # a running Ray keeps its own settings
