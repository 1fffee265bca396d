"""``[training] store_cache``: replay stores kept between runs, named after what they depend on.

A replay store holds every position's recording with its loss, so it depends on the positions,
results and scores (digests of them as they were read, `tuner.train.stream.DataDigest`), K, the
loss (form and score blend) and the evaluation's code: `StoreCache.key` hashes all of them, and
the store is kept as ``store-<key>.npz`` in the cache's folder. The folder is private
(`tuner.cachedir.private_folder`: made 0700, refused if another user could write to it); a
loaded store must pass the validation of a fresh one (`tuner.tape.player.load_store`); a store
that cannot be used or kept is logged and recorded instead, never an error. After each write
all but the newest ``store_cache_keep`` stores are removed (loading one makes it the newest).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import time
from pathlib import Path
from typing import Callable

from tuner import cachedir
from tuner.fileio import remove_stale_temps
from tuner.tape.player import FreezeError, Store, load_store, save_store, store_len
from .config import Config
from .record import LOSS

#: A replay store in the cache, and the temporary files of its writes
#: (`tuner.fileio.remove_stale_temps`).
STORE_NAME = "store-{key}.npz"
STORE_GLOB = STORE_NAME.format(key="*")


def evict_stores(folder: Path, keep: int) -> list[Path]:
    """Remove all but the `keep` newest (by modification time) stores in `folder`; 0 keeps all.
    Returns what was removed."""
    def mtime(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except FileNotFoundError:  # removed meanwhile by another run
            return -1.0
    stores = sorted(folder.glob(STORE_GLOB), key=mtime, reverse=True)
    old = stores[keep:] if keep else []
    for p in old:
        p.unlink(missing_ok=True)
    return old


def store_cache(cfg: Config, evaluation, log: Callable[[str], None]) -> "StoreCache | None":
    """The store cache of `cfg` for `evaluation` (logging with `log`), or None without
    ``[training] store_cache``."""
    return StoreCache(cfg, evaluation, log) if cfg["training"]["store_cache"] else None


class StoreCache:
    """The store cache of configuration `cfg` (``[training] store_cache``, which must be set)
    for `evaluation`'s stores; what it does is logged with `log`."""

    def __init__(self, cfg: Config, evaluation, log: Callable[[str], None]):
        tr = cfg["training"]
        self.name = tr["store_cache"]   # as the configuration gives it, for messages
        self.path = cfg.resolve_path(self.name)
        self.keep_newest = tr["store_cache_keep"]
        self.evaluation = evaluation
        self.log = log

    def key(self, digest: bytes, k: float, loss: tuple) -> str:
        """What a store depends on: the data's `digest`, K, the `loss` (its form and score
        blend) and the evaluation's code."""
        import tuner

        h = hashlib.blake2b(digest_size=16)
        h.update(digest)
        h.update(repr((k, *loss)).encode())
        module = sys.modules[self.evaluation.record_batch.py_func.__module__]
        h.update(Path(module.__file__).read_bytes())
        h.update(tuner.layer_digest("train").encode())  # the recording code and all below it
        return h.hexdigest()

    def folder(self) -> Path:
        """The cache's private folder, rid of the temporary files that killed writes left."""
        folder = cachedir.private_folder(self.path)
        remove_stale_temps(folder, STORE_GLOB)
        return folder

    def load(self, key: str, n_positions: int) -> Store | None:
        """The store of `n_positions` positions kept for `key`, or None (missing, or unusable:
        logged)."""
        t0 = time.perf_counter()
        try:
            cache = self.folder() / STORE_NAME.format(key=key)
            cachedir.open_private(cache).close()
        except FileNotFoundError:
            return None
        except OSError as e:
            self.log(f"replay: store cache {cachedir.describe(e)}; recording")
            return None
        reg = self.evaluation.registry
        try:
            store = load_store(cache, key, reg.n_values, reg.n_params, n_positions, LOSS + 1)
        except FreezeError as e:
            self.log(f"replay: store cache {e}; recording again")
            return None
        with contextlib.suppress(OSError):
            os.utime(cache)  # now the newest: the last one evicted
        self.log(f"replay: loaded the store of {store_len(store):,} positions from {cache} in "
                 f"{time.perf_counter() - t0:.2f} s")
        return store

    def keep(self, store: Store, key: str) -> None:
        """Save `store` for `key`, then remove all but the newest ``store_cache_keep`` stores (a
        failure is only logged)."""
        try:
            folder = self.folder()
            cache = folder / STORE_NAME.format(key=key)
            save_store(store, cache, key)
            os.chmod(cache, cachedir.FILE_MODE)
            self.log(f"replay: store kept in {cache}")
            for old in evict_stores(folder, self.keep_newest):
                self.log(f"replay: removed the older store {old}")
        except OSError as e:
            self.log(f"replay: could not keep the store in {self.name}: "
                     f"{cachedir.describe(e)}")
