"""A trace against the evaluation it was written from, at the scale of Clockwork's data.

The shipped sample is tiled to --positions rows (default 6.97 M, the C++ tuner's benchmark) and
written as Parquet; examples/write_trace.py writes the trace of `clockwork`'s features of it.
Both are then trained from their Parquet files one after the other in this process, as
`tuner train` does (streamed into the replay store; zero init, K 0.0025, AdamW lr 10, batch
262,144, no validation): the bytes per position of both files on disk, each run's load and
record time, s/epoch (median of --epochs), and whether both reach the same parameters.

    .venv/bin/python benchmarks/trace_bench.py [--positions N] [--epochs E] [--threads T]
                                               [--trace-first]
"""
import argparse
import importlib.util
import os
import statistics
import tempfile
import time
from pathlib import Path

from tuner.train.bench import CPP_BENCH_POSITIONS, write_tiled_parquet
from tuner.train.config import validate
from tuner.train.loop import Run

ROOT = Path(__file__).resolve().parents[1]


def _writer():
    spec = importlib.util.spec_from_file_location("write_trace",
                                                  ROOT / "examples" / "write_trace.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _train(evaluation: str, data: Path, epochs: int, threads: int, out: Path):
    cfg = validate({"data": {"train": [str(data)], "validation_fraction": 0.0},
                    "evaluation": {"name": evaluation, "init": "zero"},
                    "loss": {"k": 0.0025}, "optimizer": {"lr": 10.0},
                    "training": {"epochs": epochs, "batch_size": 262_144,
                                 "micro_batch_size": 1024, "threads": threads}},
                   str(out / "bench.toml"))
    lines = []
    run = Run(cfg, out, log=lines.append)
    t0 = time.perf_counter()
    hist = run.run()
    return run, hist, time.perf_counter() - t0, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--positions", type=int, default=CPP_BENCH_POSITIONS)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--trace-first", action="store_true",
                    help="train the trace first (to see the order's part in the figures)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        fens, trace = tmp / "tiled.parquet", tmp / "tiled-trace.parquet"
        write_tiled_parquet(fens, a.positions)
        t0 = time.perf_counter()
        _writer().write_trace(str(fens), trace)
        print(f"{a.positions:,} positions (the shipped sample tiled); trace written in "
              f"{time.perf_counter() - t0:.1f} s")
        for name, path in (("FEN", fens), ("trace", trace)):
            size = path.stat().st_size
            print(f"  {name} Parquet: {size / 1e6:.1f} MB, {size / a.positions:.1f} bytes/position")
        thetas = []
        runs = [("clockwork", fens), (str(trace.with_suffix(".json")), trace)]
        for evaluation, data in runs[::-1] if a.trace_first else runs:
            out = tmp / f"run-{len(thetas)}"
            out.mkdir()
            print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            run, hist, total, lines = _train(evaluation, data, a.epochs, a.threads, out)
            thetas.append(run.theta.tobytes())
            med = statistics.median(hist["seconds"])
            rec = [line for line in lines if line.startswith("replay: recorded")]
            print(f"{run.evaluation.name}: {med:.3f} s/epoch (median of {a.epochs}: "
                  f"{', '.join(f'{s:.3f}' for s in hist['seconds'])}), {a.threads} thread(s); "
                  f"run {total:.1f} s\n    {rec[0] if rec else ''}")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print("identical parameters:", thetas[0] == thetas[1])


if __name__ == "__main__":
    main()
