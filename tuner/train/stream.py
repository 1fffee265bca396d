"""A run's data: every dataset of ``[data] train`` loaded (`load_data`) or streamed
(`DataStream`), and split by game (`split_data`, `tuner.train.split`).

Eager training holds every position in memory: `load_data`. After recording, replay training
needs only the store (it holds every position's evaluation and loss, the targets included), the
split's index sets, the results and the validation positions (for the held-out report at the
end). So a replay run never builds the positions array; `DataStream` reads each dataset in Arrow
batches (`tuner.data.loader.DatasetReader`: the same checks, bad-row reports and errors as
`load_dataset`) in passes that its caller drives (`tuner.train.prepare`), and never calls back:

1. `DataStream.first_pass`: every batch is parsed and checked, its results (and game numbers,
   until the split) kept and handed to a sink (``sink(positions, results, score_cp)``): the
   recorder of the store when K is known, no ``[training] store_cache`` is set and the store
   is in file order (the store is then bitwise the one `record_store` makes of the
   concatenated positions), or the `DataDigest` a store cache's key is made of. Then the
   split by game, exactly as `load_data` makes it.
2. `DataStream.sample`: ``[loss] k = "fit"`` needs K before a position is recorded, and the fit
   sample is a set of training positions, known only after the split. The sample's rows are
   read again (only they are parsed).
3. `DataStream.second_pass`: every batch again, into the recorder (K was fitted, the cache
   missed, or the store is in a blocks run's order).
4. `DataStream.data`: the split, with the validation positions read again (only those rows
   parsed), in file rows or in a blocks run's store rows.

``[training] shuffle = "blocks"`` records the store once in a seeded random order
(`record_order`: the training positions permuted by the shuffle seed, then the validation
positions), so that consecutive rows are a random sample and an epoch shuffles blocks of
``shuffle_block`` consecutive rows (`epoch_batches`): a batch is then read as a few hundred
contiguous runs of the store instead of scattered rows. The order needs the split, so such a
run's first pass records nothing; its second pass gives the positions in file order to a
recorder that puts them in that order (`tuner.train.record.StoreRecorder` with an order), and
`DataStream.data` of the order is the split in store rows. Data in memory is reordered instead
(`in_record_order`).

A second pass over a file checks that it still has the same valid rows (DatasetError if not).

Loaded data keeps every position's game (`Data.groups`), so that `refold` splits it again for
another fold of a cross-validation (`tuner.train.cv`) without reading the datasets again.
"""
from __future__ import annotations

import hashlib
import math
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
from numba import njit

from tuner.jit import JIT

from tuner.data import load_dataset
from tuner.data.loader import DatasetReader
from tuner.data.registry import Resolved, resolve
from tuner.data.trace import concat_positions, position_arrays, take_positions
from .config import FULL_BATCH, Config
from .errors import TrainingError
from .kernels import WORD_BITS, store_order
from .split import Split, fold_of, group_ids, split_by_group
from .targets import fit_sample

#: The spawn key of the random stream that orders a blocks run's store (`in_record_order`):
#: apart from the per-epoch shuffle's, which the seed alone starts.
RECORD_ORDER_STREAM = 1

#: Positions of a position-shuffled epoch mapped to their rows at a time (`epoch_batches`).
ORDER_BLOCK = 1 << 16

#: What the batches of a pass go to: ``sink(positions, results, score_cp)``.
Sink = Callable[[object, np.ndarray, "np.ndarray | None"], None]


@dataclass
class Data:
    """Training and validation positions (indices into one concatenated array), split by game
    (`tuner.train.split`). Streamed into a replay store (`DataStream`), it holds no positions
    and no results but the validation positions' (`val_positions`, `val_results`)."""

    positions: np.ndarray | None  # None: streamed into a replay store
    results: np.ndarray | None    # None where `positions` is
    train: np.ndarray
    val: np.ndarray
    sources: list = field(default_factory=list)
    score_cp: np.ndarray | None = None  # engine scores, loaded for a score blend
    train_games: int = 0
    val_games: int = 0
    val_positions: np.ndarray | None = None  # ``positions[val]`` where `positions` is None
    val_results: np.ndarray | None = None    # ``results[val]`` where `positions` is None
    n_positions: int = 0                     # ``len(positions)`` where `positions` is None
    groups: np.ndarray | None = None  # every position's game (`group_ids`), loaded: `refold`

    def __len__(self) -> int:
        return self.n_positions if self.positions is None else len(self.results)

    @cached_property
    def train_is_identity(self) -> bool:
        """Whether the training rows are ``0..len(train) - 1`` (a blocks run's, `_store_rows`):
        found once, not every epoch (`epoch_batches`)."""
        return _is_identity(self.train)

    def held_out(self) -> np.ndarray:
        """The validation positions, uint64[len(val), 9]."""
        return self.val_positions if self.positions is None else self.positions[self.val]

    def held_out_results(self) -> np.ndarray:
        """The validation positions' results, float64[len(val)]."""
        return self.val_results if self.positions is None else self.results[self.val]

    def fit_sample(self) -> tuple:
        """The positions and results a K fit uses (`fit_sample` of the training positions)."""
        rows = self.train[fit_sample(len(self.train))]
        return self.positions[rows], self.results[rows]


def find_data(cfg: Config) -> list[Resolved]:
    """The files of ``[data] train`` (tuner.data.registry's lookup order: a URI is opened
    through pyarrow's filesystems, `tuner.data.uri`; a path is relative to the configuration's
    folder; checksums checked), found by whichever process calls it (a cluster's workers too)."""
    return [resolve(name, config=cfg.path) for name in cfg["data"]["train"]]


def split_data(groups: np.ndarray, cfg: Config) -> Split:
    """The ``[data]`` split of positions in `groups` (`group_ids`); TrainingError when no
    training position is left."""
    d = cfg["data"]
    split = split_by_group(groups, d["validation_fraction"], d["split_seed"])
    cv = cfg["validation"]  # a cross-validation fold's run: its fold held out (tuner/train/cv.py)
    try:
        split = fold_of(split, groups, cv["folds"], cv["fold"], d["split_seed"])
    except ValueError as e:
        raise TrainingError(f"[validation] folds: {e}") from None
    if len(split.train) < 1:
        raise TrainingError("no training positions left after the validation split")
    return split


def _log_source(log: Callable[[str], None], source: str, kept: int, n_bad: int, by_game: bool,
                block: int) -> None:
    by = "games" if by_game else f"blocks of {block:,} positions"
    log(f"data: {source}: {kept:,} positions" + (f" ({n_bad:,} bad rows skipped)" if n_bad else "")
        + f"; split by {by}")


def load_data(cfg: Config, log: Callable[[str], None]) -> Data:
    """Load every dataset of ``[data] train`` and hold out whole games for validation (every
    position in memory: what eager training and the tests use; a replay run streams its data,
    `DataStream`)."""
    d = cfg["data"]
    blend = cfg["loss"]["score_blend"] > 0
    positions, results, scores, games, sources = [], [], [], [], []
    for found in find_data(cfg):
        ds = load_dataset(found, policy=d["policy"], with_game=True, need_scores=blend)
        _log_source(log, ds.source, len(ds), ds.n_bad, ds.game is not None, d["split_block"])
        positions.append(ds.positions)
        results.append(ds.results)
        scores.append(ds.score_cp)
        games.append(ds.game)
        sources.append(ds.source)
    groups = group_ids([len(r) for r in results], games, d["split_block"])
    if len(positions) > 1:  # one dataset is used as loaded: no copy of it
        positions, results = np.concatenate(positions), np.concatenate(results)
    else:
        positions, results = positions[0], results[0]
    score_cp = np.concatenate(scores) if blend else None
    unsplit = np.empty(0, np.int64)
    return refold(Data(positions, results, unsplit, unsplit, sources, score_cp, groups=groups),
                  cfg)


def refold(data: Data, cfg: Config) -> Data:
    """Loaded `data` (its `groups` kept) split as `cfg` splits it (`split_data`): what
    `load_data` of `cfg` returns, without reading the datasets again (a cross-validation's
    fold runs, `tuner.train.cv`)."""
    split = split_data(data.groups, cfg)
    return Data(data.positions, data.results, split.train, split.val, data.sources,
                data.score_cp, split.train_games, split.val_games, groups=data.groups)


class DataDigest:
    """Digests of positions, results and scores, fed in any pieces: the same for the same data
    however it is cut (what a store cache's key is made of)."""

    def __init__(self):
        self.parts: list | None = None  # one digest per array (a trace's positions are 5)
        self.rows: bytes = b""          # the digest of a recording order (`order`)

    def update(self, positions, results: np.ndarray, score_cp: np.ndarray | None) -> None:
        arrays = position_arrays(positions) + (results, score_cp)
        if self.parts is None:
            self.parts = [hashlib.blake2b(digest_size=16) for _ in arrays]
        for h, arr in zip(self.parts, arrays):
            if arr is not None:
                h.update(np.ascontiguousarray(arr).data)

    def order(self, rows: np.ndarray) -> None:
        """The positions are recorded in the order `rows` (a blocks run's `record_order`, which
        the store depends on too)."""
        h = hashlib.blake2b(rows.dtype.str.encode(), digest_size=16)
        h.update(np.ascontiguousarray(rows).data)
        self.rows = h.digest()

    def digest(self) -> bytes:
        return b"".join(h.digest() for h in self.parts or ()) + self.rows


class _Labels:
    """What the first pass keeps of every dataset: results (as twice their value, one byte
    each: all a streamed run keeps of them, `DataStream.results`) and game numbers (until the
    split)."""

    def __init__(self, readers: list[DatasetReader]):
        self.halves = np.empty(sum(r.n_rows for r in readers), np.uint8)
        self.games: list[np.ndarray | None] = []
        self.sizes: list[int] = []
        self.n = 0

    def add(self, results: np.ndarray, game: np.ndarray | None) -> None:
        self.halves[self.n: self.n + len(results)] = results * 2  # 0, 1 or 2: exact
        if game is not None:
            self.games[-1][self.sizes[-1]: self.sizes[-1] + len(game)] = game
        self.sizes[-1] += len(results)
        self.n += len(results)

    def start(self, reader: DatasetReader) -> None:
        self.sizes.append(0)
        self.games.append(np.empty(reader.n_rows, np.int64) if reader.with_game else None)

    def end(self) -> None:
        game = self.games[-1]
        if game is not None:
            game.resize(self.sizes[-1], refcheck=False)


def _released(batches):
    """`batches`, Arrow's unused memory given back after each one is handled: its allocator
    keeps freed pages otherwise (40 MB at the end of a pass of 6.97 M positions, when a blocks
    run's parts hold the whole store), at the cost of paging its next batch in again (0.2-0.3 s
    of CPU over 6.97 M positions)."""
    for b in batches:
        yield b
        pa.default_memory_pool().release_unused()


class DataStream:
    """The datasets of ``[data] train`` of `cfg` open for reading in passes (see the module
    docstring); a trace evaluation's `trace` layout reads its rows. A context manager: the
    files are closed on leaving it. The first pass logs each dataset with `log`."""

    def __init__(self, cfg: Config, trace, log: Callable[[str], None]):
        self.cfg = cfg
        self.log = log
        d = cfg["data"]
        self.files = ExitStack()
        with self.files:
            self.readers = [self.files.enter_context(DatasetReader(
                found, d["policy"], with_game=True, need_scores=cfg["loss"]["score_blend"] > 0,
                trace=trace)) for found in find_data(cfg)]
            self.files = self.files.pop_all()
        #: Rows of the files (bad ones included): at most the positions there are.
        self.n_rows = sum(r.n_rows for r in self.readers)
        self.sizes: list[int] = []
        self.n_positions = 0
        self.halves: np.ndarray | None = None  # twice every result, uint8 (`_Labels`)
        self.split: Split | None = None

    def __enter__(self) -> "DataStream":
        return self

    def __exit__(self, *exc) -> None:
        self.files.close()

    def first_pass(self, sink: Sink | None) -> Split:
        """Every batch read, checked and given to `sink`; their results and games kept and
        the positions split by game."""
        labels = _Labels(self.readers)
        d = self.cfg["data"]
        for reader in self.readers:
            labels.start(reader)
            for b in reader.batches():
                labels.add(b.results, b.game)
                if sink is not None:
                    sink(b.positions, b.results, b.score_cp)
            pa.default_memory_pool().release_unused()  # Arrow's allocator keeps freed pages
            labels.end()
            _log_source(self.log, reader.source, reader.kept, reader.n_bad, reader.with_game,
                        d["split_block"])
        self.n_positions, self.sizes = labels.n, labels.sizes
        self.halves = labels.halves
        self.halves.resize(labels.n, refcheck=False)
        groups = group_ids(labels.sizes, labels.games, d["split_block"])
        labels.games = []
        self.split = split_data(groups, self.cfg)
        return self.split

    def results(self, rows: np.ndarray) -> np.ndarray:
        """The results (float64) of positions `rows` (after `first_pass`)."""
        return self.halves[rows] * 0.5

    def second_pass(self, sink: Sink) -> None:
        """Every batch again, to `sink` (after `first_pass`), Arrow's unused memory given back
        after each (`_released`: the pass that records a blocks run's store, whose peak is at
        its end; the first pass gives it back after each file)."""
        for reader in self.readers:
            for b in _released(reader.batches()):
                sink(b.positions, b.results, b.score_cp)

    def positions(self, rows: np.ndarray):
        """The positions of `rows` (sorted indices into the datasets' valid rows,
        concatenated), read again."""
        parts, offset = [], 0
        for reader, n in zip(self.readers, self.sizes):
            lo, hi = np.searchsorted(rows, [offset, offset + n])
            if hi > lo:
                parts.append(reader.positions(rows[lo:hi] - offset))
            offset += n
        return concat_positions(parts) if parts else self.readers[0].no_positions()

    def sample(self) -> tuple:
        """The positions and results a K fit uses (`fit_sample` of the training positions)."""
        rows = self.split.train[fit_sample(len(self.split.train))]
        return self.positions(rows), self.results(rows)

    def store_order(self, shuffle_seed: int) -> np.ndarray:
        """A blocks run's store order (`record_order` of the split; after `sample`, which needs
        the split's sorted rows). The split's training rows become the order's first ones (the
        same rows in the store's order: all `data` of the order needs is their number), so that
        they are not held twice while the store is recorded (4 bytes a position)."""
        order = record_order(self.split.train, self.split.val, shuffle_seed)
        self.split = replace(self.split, train=order[: len(self.split.train)])
        return order

    def data(self, order: np.ndarray | None = None) -> Data:
        """The split data: no positions and no results but the validation positions' (after
        the passes: the results' bytes are freed). With a blocks run's `order` (`record_order`
        of the split), the split is in the store's rows: the training rows first, then the
        validation rows (as `in_record_order` makes it)."""
        split = self.split
        train, val, n = split.train, split.val, self.n_positions
        if order is not None:
            (train, val), n = _store_rows(len(train), len(val), order.dtype), len(order)
        data = Data(None, None, train, val, [r.source for r in self.readers], None,
                    split.train_games, split.val_games, self.positions(split.val),
                    self.results(split.val), n)
        self.halves = None
        return data


def record_order(train: np.ndarray, val: np.ndarray, shuffle_seed: int) -> np.ndarray:
    """The rows a blocks run records, in its store's order (see `in_record_order`)."""
    seq = np.random.SeedSequence(shuffle_seed, spawn_key=(RECORD_ORDER_STREAM,))
    return np.concatenate([train[np.random.default_rng(seq).permutation(len(train))], val])


def _store_rows(n_train: int, n_val: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """The training and validation rows of a store in a blocks run's order (`record_order`:
    ``0..n_train - 1``, then the next `n_val`), of the order's `dtype`."""
    return np.arange(n_train, dtype=dtype), np.arange(n_train, n_train + n_val, dtype=dtype)


def in_record_order(data: Data, shuffle_seed: int) -> Data:
    """`data` (in memory) reordered as a blocks run records its store: the training positions in
    a random order drawn from `shuffle_seed` (rows ``0..len(train) - 1``), then the validation
    positions in their order (the rows after); positions in neither are dropped."""
    rows = record_order(data.train, data.val, shuffle_seed)
    return Data(take_positions(data.positions, rows), data.results[rows],
                *_store_rows(len(data.train), len(data.val), rows.dtype), data.sources,
                None if data.score_cp is None else data.score_cp[rows], data.train_games,
                data.val_games)


def epoch_batches(train: np.ndarray, rng: np.random.Generator, training: dict,
                  identity: bool | None = None) -> Iterator[np.ndarray]:
    """The batches of an epoch over the training positions `train` under the ``[training]``
    settings `training`, their shuffle drawn from the run's `rng` now (before the first batch
    is asked for): ``batch_size = "all"`` is one batch of `train` as it is (one step over every
    position in store order; `rng` is not drawn from), ``shuffle = "positions"`` shuffles the
    positions and cuts them into batches of ``batch_size``, ``"blocks"`` shuffles the blocks of
    ``shuffle_block`` consecutive positions of `train` (the last block may be shorter) and cuts
    them into batches, each batch's positions in their order in `train` (`_batch_of_blocks`): a
    blocks run's training rows are its store's first rows in order (`in_record_order`), so its
    batches come in store order and `Workers.loss_grad` has nothing to sort (the same rows in
    the same order as its sort would give, so the same bits). A blocks batch is made when it is
    asked for, in a buffer the next one reuses (a batch is valid until the next is drawn): no
    array of the epoch's order, whose pages each epoch would fault in anew, and the batch is
    still in cache when the workers read it. `identity`: whether `train` is
    ``0..len(train) - 1`` (`Data.train_is_identity`, found here if None)."""
    if training["batch_size"] == FULL_BATCH:
        return iter([train] if len(train) else [])
    batch = batch_positions(training, len(train))
    if training["shuffle"] == "positions":
        # ``train[rng.permutation(len(train))]`` in one array of `train`'s dtype: shuffling
        # 0..n-1 of any dtype draws what `permutation` draws, and the rows replace the
        # permutation in place, block by block.
        order = np.arange(len(train), dtype=train.dtype)
        rng.shuffle(order)
        for lo in range(0, len(order), ORDER_BLOCK):
            block = order[lo: lo + ORDER_BLOCK]
            block[:] = train[block]
        return (order[lo: lo + batch] for lo in range(0, len(order), batch))
    size = training["shuffle_block"]
    starts = rng.permutation(math.ceil(len(train) / size)) * size
    return _blocks_batches(train, starts, size, batch, identity)


def _blocks_batches(train: np.ndarray, starts: np.ndarray, size: int, batch: int,
                    identity: bool | None) -> Iterator[np.ndarray]:
    """The batches of `batch` positions of the blocks of `size` positions of `train` that begin
    at `starts`, one after the other (`_batch_of_blocks`), each in one buffer."""
    out = np.empty(min(batch, len(train)), np.int64)  # (the rows `Workers` take, as they are)
    state = np.zeros(2, np.int64)
    identity = _is_identity(train) if identity is None else identity
    for lo in range(0, len(train), batch):
        n = min(batch, len(train) - lo)
        _batch_of_blocks(train, starts, size, identity, state, out[:n])
        yield out[:n]


@njit(**JIT)
def _is_identity(rows) -> bool:
    """Whether `rows` are ``0, 1, ..., len(rows) - 1`` (a blocks run's training rows,
    `_store_rows`)."""
    for i in range(rows.shape[0]):
        if rows[i] != i:
            return False
    return True


@njit(**JIT)
def _batch_of_blocks(train, starts, size, identity, state, out) -> None:
    """`out` = the next ``len(out)`` positions of the blocks of `size` consecutive positions of
    `train` that begin at the indices `starts` (the last block of `train` may be shorter), taken
    one after the other from block ``starts[state[0]]``, whose first ``state[1]`` positions
    earlier batches took (`state` then says where the next batch begins), and its blocks (or the
    parts of blocks it holds) in increasing order of their place in `train`: the batch's block
    numbers put in order by `store_order`'s bitmap, instead of a sort of its positions (or of
    its block starts).
    `identity`: `train` is ``0..len(train) - 1`` (`_is_identity`), so a position's index is its
    row and `train`, whose blocks are read at random, is not read."""
    n = train.shape[0]
    # A batch holds at most len(out) // size + 2 blocks in part or whole (every block but the
    # first and the last whole), and never more than there are. Only the first and the last
    # parts may be parts of blocks: their blocks and bounds are kept.
    blocks = np.empty(min(starts.shape[0], out.shape[0] // size + 2), np.int64)
    first_block = last_block = -1
    first_lo = first_hi = last_lo = last_hi = 0
    k, taken = state[0], state[1]  # the block the next position comes from, and its part taken
    m = 0
    fill = 0
    while fill < out.shape[0]:  # the batch's parts of blocks, in the shuffled order
        a = starts[k] + taken
        b = min(starts[k] + size, n)
        t = min(b - a, out.shape[0] - fill)
        blocks[m] = starts[k] // size
        if m == 0:
            first_block, first_lo, first_hi = blocks[m], a, a + t
        last_block, last_lo, last_hi = blocks[m], a, a + t
        m += 1
        fill += t
        if a + t == b:
            k += 1
            taken = 0
        else:
            taken += t
    state[0], state[1] = k, taken
    ordered = np.empty(m, np.int64)  # (distinct: `store_order` writes every one)
    store_order(blocks[:m], np.zeros(starts.shape[0] // WORD_BITS + 1, np.uint64), ordered)
    pos = 0
    for block in ordered:
        if block == first_block:
            lo, hi = first_lo, first_hi
        elif block == last_block:
            lo, hi = last_lo, last_hi
        else:
            lo, hi = block * size, min(block * size + size, n)
        if identity:  # (two loops, so that each is one LLVM vectorises)
            for i in range(hi - lo):
                out[pos + i] = lo + i
        else:
            for i in range(hi - lo):
                out[pos + i] = train[lo + i]
        pos += hi - lo


def batch_positions(training: dict, n_train: int) -> int:
    """Positions per optimiser step: ``[training] batch_size``, every training position for
    ``"all"`` (at least 1)."""
    bs = training["batch_size"]
    return max(1, n_train) if bs == FULL_BATCH else bs
