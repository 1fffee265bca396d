"""Does ``[training] shuffle = "blocks"`` converge as the position shuffle does? On the shipped
sample, for each job and shuffle (the position shuffle, and the block shuffle at each block size
given), 3 shuffle seeds: the final training loss, the best validation
loss (held-out whole games) and the held-out check of the best parameters (the change of the
integer evaluation's mean squared error against the starting parameters), then each shuffle's
mean and spread (min..max over the seeds) and whether the blocks' mean lies within the position
shuffle's spread. Prints a Markdown table.

Jobs: the `clockwork-seed` recipe (from zero, batch 262,144) for 20 epochs on the sample with 5%
of its games held out, and the first fold of the default job (`tuner train --config default`:
5-fold cross-validation by game; fold 1 held out, pull 0, 12 epochs).

    nice .venv/bin/python benchmarks/shuffle_convergence.py [--seeds 0 1 2] [--threads 1]
                                                            [--jobs seed default]
                                                            [--block 64 256]
"""
import argparse
import itertools
import re
import statistics
import tempfile
from pathlib import Path

from tuner.shipped import find_config
from tuner.train.loop import start_run

SAMPLE = ["selfplay-std", "selfplay-dfrc"]
#: Per job: the shipped configuration and the changes made to it (besides the shuffle).
JOBS = {
    "seed": ("clockwork-seed", {"data": {"train": SAMPLE, "validation_fraction": 0.05},
                                "training": {"epochs": 20}}),
    "default": ("default", {"validation": {"folds": 5, "fold": 1, "pulls": []},
                            "training": {"epochs": 12}}),
}
#: Default ``--block``: the block sizes compared with the position shuffle.
BLOCKS = (64, 256)
HELD_OUT = re.compile(r"on held-out games .*\(([-+][0-9.]+)%\)")


def one(job: str, block: int | None, seed: int, threads: int) -> dict:
    """One run: its final training loss, best validation loss and held-out change (%), under
    the position shuffle (`block` None) or the block shuffle of `block` positions per block."""
    name, changes = JOBS[job]
    shuffle = ({"shuffle": "positions"} if block is None
               else {"shuffle": "blocks", "shuffle_block": block})
    changes = {**changes, "training": {**changes["training"], **shuffle, "shuffle_seed": seed}}
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        run = start_run(str(find_config(name)), str(Path(tmp) / "run"), None, None, threads,
                        log=lines.append, changes=changes)
        history = run.run()
    held = [float(m.group(1)) for m in map(HELD_OUT.search, lines) if m]
    return dict(train=float(history["train_loss"][-1]), val=float(min(history["val_loss"])),
                held=held[-1] if held else float("nan"))


def summary(values: list[float]) -> str:
    return f"{statistics.fmean(values):.6f} ({min(values):.6f}..{max(values):.6f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--jobs", nargs="+", default=list(JOBS), choices=list(JOBS))
    ap.add_argument("--block", type=int, nargs="+", default=list(BLOCKS),
                    help="block sizes of the block shuffle to compare with the position shuffle")
    args = ap.parse_args()
    shuffles = {"positions": None, **{f"blocks {b}": b for b in args.block}}
    print("| job | shuffle | seed | train loss | val loss (best) | held-out change % |")
    print("| --- | --- | --- | --- | --- | --- |")
    verdicts = []
    for job in args.jobs:
        by = {}
        for shuffle, block in shuffles.items():
            rows = [one(job, block, seed, args.threads) for seed in args.seeds]
            by[shuffle] = rows
            for seed, r in zip(args.seeds, rows):
                print(f"| {job} | {shuffle} | {seed} | {r['train']:.6f} | {r['val']:.6f} | "
                      f"{r['held']:+.2f} |", flush=True)
            print(f"| {job} | {shuffle} | mean (min..max) | "
                  f"{summary([r['train'] for r in rows])} | {summary([r['val'] for r in rows])} | "
                  f"{statistics.fmean(r['held'] for r in rows):+.2f} "
                  f"({min(r['held'] for r in rows):+.2f}..{max(r['held'] for r in rows):+.2f}) |",
                  flush=True)
        for shuffle, key in itertools.product(list(shuffles)[1:], ("train", "val", "held")):
            ref = [r[key] for r in by["positions"]]
            mean = statistics.fmean(r[key] for r in by[shuffle])
            verdicts.append(f"{job} {key}: {shuffle} mean {mean:.6g} "
                            f"{'within' if min(ref) <= mean <= max(ref) else 'OUTSIDE'} the "
                            f"position shuffle's spread {min(ref):.6g}..{max(ref):.6g}")
    print()
    for v in verdicts:
        print(v)


if __name__ == "__main__":
    main()
