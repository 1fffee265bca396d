"""The train/validation split, by game.

Positions of one game share its result, so a split by position puts the same game on both sides
and the validation loss then rewards remembering games rather than evaluating well: parameters
can "improve" on such a validation set and get worse on games the tuner never saw. The split here
holds out whole games.

A game is what the data says it is: the positions of a dataset with one number in its ``game``
column. (A file that joins sources numbered independently may give two games one number; they are
then held out together, which keeps every game on one side all the same.) A dataset without it
(Clockwork's text sets, most engines' data) is cut into
blocks of ``block`` consecutive positions in file order, and a block counts as a game: a game's
positions are adjacent in such files, so only the games that straddle a block boundary (at most
one per boundary) can have positions on both sides.

Games are drawn in a seeded random order until the held-out positions reach the requested
fraction, so the split depends only on the data, the fraction and the seed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

#: Positions per pseudo-game when a dataset has no ``game`` column (``[data] split_block``).
DEFAULT_BLOCK = 1024
#: Group numbers counted at a time (`_numbered`).
COUNT_BLOCK = 1 << 20


@dataclass(frozen=True)
class Split:
    """Sorted position indices of each side (int32 when every position's fits: 4 bytes each),
    and how many games each side holds."""

    train: np.ndarray
    val: np.ndarray
    train_games: int
    val_games: int


def group_ids(sizes: Sequence[int], games: Sequence[np.ndarray | None],
              block: int = DEFAULT_BLOCK) -> np.ndarray:
    """One group (game) number per position of datasets concatenated in order: dataset d's
    ``games[d]`` (any integers, renumbered so that no two datasets share a group) or, where that
    is None, blocks of `block` consecutive positions. The numbers are 0, 1, ... with none left
    out, int32 when every position could be a group of its own in that type (4 bytes each)."""
    if block < 1:
        raise ValueError(f"block must be at least 1, got {block}")
    total = int(sum(sizes))
    out = np.empty(total, np.int32 if total <= np.iinfo(np.int32).max else np.int64)
    start = offset = 0
    for n, game in zip(sizes, games):
        ids = out[start: start + n]
        if game is None:
            np.floor_divide(np.arange(n, dtype=out.dtype), block, out=ids)
        else:
            if len(game) != n:
                raise ValueError(f"{len(game)} game numbers for {n} positions")
            ids[:] = np.unique(game, return_inverse=True)[1]
        top = int(ids.max()) + 1 if n else 0
        ids += offset
        start += n
        offset += top
    return out


def split_by_group(groups: np.ndarray, fraction: float, seed: int) -> Split:
    """Hold out whole groups, drawn in a seeded random order, until at least ``fraction`` of the
    positions are held out (none for 0). Every group lies entirely on one side."""
    n = len(groups)
    inverse, counts = _numbered(groups)
    want = int(round(fraction * n))
    order = np.random.default_rng(seed).permutation(len(counts))
    # The fewest groups, in drawing order, whose positions reach `want`.
    n_val_groups = 0 if want == 0 else int(np.searchsorted(np.cumsum(counts[order]), want) + 1)
    held = np.zeros(len(counts), bool)
    held[order[:n_val_groups]] = True
    rows = np.arange(n, dtype=np.int32 if n <= np.iinfo(np.int32).max else np.int64)
    if not n_val_groups:  # (no mask, no copy)
        return Split(rows, rows[:0].copy(), len(counts), 0)
    is_val = held[inverse]
    return Split(rows[~is_val], rows[is_val], len(counts) - n_val_groups, n_val_groups)


def _numbered(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each position's group as its rank among the distinct groups, and each group's size:
    `groups` itself and a count when they are 0, 1, ... with none left out (what `group_ids`
    makes: no sort, no copy), else from `np.unique`."""
    if len(groups) and groups.min() >= 0:
        counts = np.zeros(int(groups.max()) + 1, np.int64)
        for lo in range(0, len(groups), COUNT_BLOCK):  # (bincount copies to int64 first)
            counts += np.bincount(groups[lo: lo + COUNT_BLOCK], minlength=len(counts))
        if counts.all():
            return groups, counts
    _, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    return inverse, counts


def fold_of(split: Split, groups: np.ndarray, folds: int, fold: int, seed: int) -> Split:
    """Cross-validation fold `fold` (1..`folds`) of the training side of `split`: its training
    games cut into `folds` folds of about equal positions (games drawn in a seeded random order,
    each fold a run of consecutive games of that order), fold `fold` held out and the others
    trained on. The games `split` holds out are on neither side. `fold` 0 is `split` itself."""
    if fold == 0:
        return split
    if not 1 <= fold <= folds:
        raise ValueError(f"fold {fold} is not one of 1..{folds}")
    inverse, counts = _numbered(groups)
    in_train = np.zeros(len(counts), bool)
    in_train[inverse[split.train]] = True
    games = np.flatnonzero(in_train)
    games = games[np.random.default_rng([seed, folds]).permutation(len(games))]
    before = np.cumsum(counts[games]) - counts[games]  # positions ahead of each game
    which = before * folds // max(1, int(counts[games].sum())) + 1
    if len(np.unique(which)) < folds:
        raise ValueError(f"{len(games):,} training game(s) cannot make {folds} folds that each "
                         f"hold out a game")
    held = np.zeros(len(counts), bool)
    held[games[which == fold]] = True
    is_val = held[inverse[split.train]]
    n_held = int((which == fold).sum())
    return Split(split.train[~is_val], split.train[is_val], len(games) - n_held, n_held)
