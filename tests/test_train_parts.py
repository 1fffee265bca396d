"""The training run's parts (tuner/train): calls go one way, and the batch gradient is the
ordered sum of micro-batch gradients, whoever computes them.

* The parts the loop calls (data, preparation, store cache, outputs, warm-up, workers) never
  import the loop, and no function of tuner/train takes more than `MAX_PARAMETERS` parameters.
* A source of micro-batch gradients that computes the chunks of a batch in another order and
  split otherwise (as a pool of remote workers would) gives the same bits as the threads.
"""
from __future__ import annotations

import ast
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from numba import njit

from tuner.evals import get_evaluation
from tuner.train.record import record_store
from tuner.train.kernels import take_chunk
from tuner.train.workers import ReplaySource, Workers

TRAIN = Path(__file__).resolve().parents[1] / "tuner" / "train"
#: The most parameters a function of tuner/train takes (self and cls not counted).
MAX_PARAMETERS = 8
#: The modules the loop calls, which must not call it back.
PARTS = ("stream", "prepare", "storecache", "outputs", "warmup", "workers", "checkpoint",
         "optimizer", "kernels", "record")
K = 0.0025


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> int:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + (a.vararg is not None) + (a.kwarg is not None)


def test_no_function_of_train_takes_more_than_eight_parameters():
    counts = {}
    for path in sorted(TRAIN.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                counts[f"{path.name}:{node.lineno}"] = _parameters(node)
    assert len(counts) > 100  # every module was read
    assert {where: n for where, n in counts.items() if n > MAX_PARAMETERS} == {}


def test_the_parts_of_a_run_never_import_the_loop():
    for name in PARTS:
        tree = ast.parse((TRAIN / f"{name}.py").read_text(encoding="utf-8"))
        imported = {node.module for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module}
        assert imported, name
        assert not {m for m in imported if m in ("loop", "tuner.train.loop", "cv", "bench")}, name


class _Reordered:
    """`inner`'s micro-batch gradients, every chunk computed alone and the chunks taken last to
    first: what another kind of worker (another process) may do."""

    def __init__(self, inner):
        self.inner = inner
        self.n_rows, self.n_pairs, self.n_theta = inner.n_rows, inner.n_pairs, inner.n_theta
        self.specialised = False
        self.seen: list[int] = []

    def scratch(self, micro):
        return self.inner.scratch(micro)

    def compute(self, scratch, theta_views, batch, chunks, taken):
        mine = []
        while (k := take_chunk(taken)) < len(chunks):
            mine.append(int(chunks[k]))
        for c in mine[::-1]:
            self.seen.append(c)
            self.inner.compute(scratch, theta_views, batch, np.array([c], np.int64),
                               np.zeros(1, np.int64))


def test_a_batch_gradient_is_the_same_whoever_computes_its_micro_batches(tiny):
    ev = get_evaluation("clockwork")
    store = record_store(ev, tiny.positions, tiny.results, K, n_threads=1, micro=64)
    reg = ev.registry
    theta = np.concatenate([np.asarray(reg.defaults, float).reshape(-1),
                            np.asarray(reg.value_defaults, float)])
    batch = np.random.default_rng(5).permutation(len(tiny.positions))[:900]
    got = []
    for source, threads in ((ReplaySource(store), 2), (_Reordered(ReplaySource(store)), 3)):
        w = Workers(source, threads, 64, len(batch))
        try:
            sse, grad = w.loss_grad(theta, batch)
            got.append((sse, grad.tobytes()))
        finally:
            w.close()
    assert sorted(source.seen) == list(range(15)) and source.seen != sorted(source.seen)
    assert np.count_nonzero(np.frombuffer(got[0][1])) > 0
    assert got[0] == got[1]


@njit(nogil=True)
def _take_all(taken, n, out):
    """Take indices below `n` from `taken` into `out` until they run out; returns how many."""
    m = 0
    while True:
        k = take_chunk(taken)
        if k >= n:
            return m
        out[m] = k
        m += 1


def test_workers_taking_chunks_at_once_take_each_once():
    """Four threads taking from one counter in compiled loops (the GIL released) get every index
    of 0..n-1 exactly once between them. A thread may take them all before the others wake on a
    loaded machine, which tests nothing: such a run is checked and then run again, until one where
    more than one thread took some (at most ten runs)."""
    n = 2_000_000
    outs = [np.full(n, -1, np.int64) for _ in range(4)]
    _take_all(np.zeros(1, np.int64), 0, outs[0])  # compiled before the threads start
    shared = 0
    for _ in range(10):
        taken = np.zeros(1, np.int64)
        start = threading.Barrier(4)

        def take(out):
            start.wait()
            return _take_all(taken, n, out)

        with ThreadPoolExecutor(4) as pool:
            counts = list(pool.map(take, outs))
        got = np.concatenate([out[:m] for out, m in zip(outs, counts)])
        assert sum(counts) == n and np.array_equal(np.sort(got), np.arange(n))
        shared = sum(m > 0 for m in counts)
        if shared >= 2:
            break
    assert shared >= 2  # (some run had more than one thread taking)
