"""Peer benchmark: this tuner beside texel-tuner and Clockwork's C++ tuners, one after another on
the same positions (the shipped sample tiled to --positions, default 6.97 M).

Runs, where built, texel-tuner with its `fourku` evaluation (one full-batch step per epoch, in
file order; 1 and 2 threads), Clockwork's own tuners at its seed (cde2ced) and at 10d79e6 (their
fixed thread count), then this tuner with each evaluation in each mode it offers (replay with the
default shuffle, eager, and where the configuration accepts them the shuffle by positions, by
blocks and the full batch) on every thread count asked for. Prints for each: s/epoch (median of
the epochs), ns per term (wall time over positions x terms per position: ours, operands and
records per position of the recorded store; texel-tuner, its average non-zero coefficients per
position, from its output),
positions/s, and our ratios to texel-tuner (same thread count) and to the Clockwork tuner of the
same evaluation (same thread count); plus the load average at the start and the end. A peer not
built is skipped with the command that builds it. Not part of CI (the peers are C++ builds).

    .venv/bin/python benchmarks/peers.py [--positions N] [--epochs E] [--threads 1 2]
        [--peers texel-tuner clockwork-seed clockwork-head] [--evaluations clockwork ...]
        [--modes replay eager positions blocks full-batch] [--dir DIR] [--tools TOOLS]

DIR holds the builds: DIR/texel-tuner (the OUT of build-texel-tuner.sh) and DIR/clockwork (the
OUT_DIR of build-clockwork.sh); TOOLS holds those scripts (default: ../build/peers and
../shared/tools beside the repository).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from roofline import terms_per_position
from scaling import BATCH, K, MICRO, load, machine

from tuner.evals import get_evaluation
from tuner.train.bench import CPP_BENCH_POSITIONS, sample_table, tiled_data
from tuner.train.config import ConfigError, validate
from tuner.train.loop import Run
from tuner.train.record import record_store

REPO = Path(__file__).resolve().parent.parent
TEXEL_TUNER = "texel-tuner"
#: Clockwork's two tuners: build-clockwork.sh's mode -> the evaluation of ours they compare with.
CLOCKWORK = {"seed": "clockwork", "head": "clockwork-10d79e6"}
#: Our modes: the [training] settings each adds to the base run ("replay": the default shuffle;
#: "full-batch" in file order, as texel-tuner; a mode equal to another is run once). The last
#: three exist once the configuration accepts them (`our_modes`).
MODES = {"replay": {"mode": "replay"}, "eager": {"mode": "eager"},
         "positions": {"mode": "replay", "shuffle": "positions"},
         "blocks": {"mode": "replay", "shuffle": "blocks"},
         "full-batch": {"mode": "replay", "batch_size": "all", "shuffle": "positions"}}
RESULT_CHAR = {1.0: "w", 0.5: "d", 0.0: "b"}  # Clockwork's result field (white's view)


@dataclass
class Row:
    """One timed tuner: its epochs' wall seconds and terms per position (None: not known)."""

    tuner: str
    evaluation: str
    setting: str
    threads: int
    seconds: list[float]
    terms: float | None = None
    compares: str = ""  # a Clockwork tuner's row: the evaluation of ours it is compared with

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def write_tiled(path: Path, lines: list[str], start: int, stop: int) -> None:
    """Rows `start`..`stop` of `lines` repeated without end (the sample's tiling), one a line."""
    with open(path, "w", encoding="ascii") as f:
        pos = start
        while pos < stop:
            j = pos % len(lines)
            m = min(len(lines) - j, stop - pos)
            f.write("\n".join(lines[j:j + m]) + "\n")
            pos += m


def sample_lines(fmt) -> list[str]:
    """The shipped sample's positions, one text line each: `fmt(fen, result)`."""
    t = sample_table()
    return [fmt(f, r) for f, r in zip(t.column("fen").to_pylist(), t.column("result").to_pylist())]


def commit(clone: Path) -> str:
    """The short commit a peer's clone is built at."""
    return subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()


def run_peer(name: str, cmd: list[str], cwd: Path, env: dict | None = None,
             stop=lambda line: False) -> list[str]:
    """The output lines of a peer's run (ended as soon as `stop(line)`); a failure exits with
    one line naming the peer and its last output."""
    lines: list[str] = []
    with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=dict(os.environ, **(env or {}))) as p:
        for line in p.stdout:
            lines.append(line.rstrip("\n"))
            if stop(line):
                p.terminate()
                p.wait()
                return lines
        rc = p.wait()
    if rc:
        last = next((x for x in reversed(lines) if x.strip()), "(no output)")
        sys.exit(f"peers.py: {name} failed (exit {rc}) running {' '.join(cmd)} in {cwd}: {last}")
    return lines


def expect(name: str, pattern: str, lines: list[str]) -> list[re.Match]:
    """Every match of `pattern` in a peer's output; none exits with one line saying so."""
    found = [m for m in map(re.compile(pattern).search, lines) if m]
    if not found:
        sys.exit(f"peers.py: {name} printed no line matching {pattern!r} (last: "
                 f"{lines[-1] if lines else '(no output)'})")
    return found


def texel_tuner(out: Path, tmp: Path, n: int, epochs: int, threads: int) -> Row:
    """texel-tuner (`fourku`) for `epochs` on the tiled sample, from an EPD file."""
    name = f"texel-tuner, {threads} thread(s)"
    epd, csv = tmp / "positions.epd", tmp / "positions.csv"
    if not epd.exists():
        write_tiled(epd, sample_lines(lambda f, r: f"{f} [{r:.1f}]"), 0, n)
        csv.write_text(f"# path, wdl from side to move, limit\n{epd},0,0\n", encoding="ascii")
    lines = run_peer(name, [str(out / "bin" / f"tuner_fourku_t{threads}"), str(csv)], tmp,
                     {"TT_EPOCHS": str(epochs)})
    got = int(expect(name, r"^Total positions: (\d+)", lines)[0][1])
    if got != n:
        sys.exit(f"peers.py: {name} loaded {got:,} of the {n:,} positions of {epd}")
    coeffs = float(expect(name, r"^Parameters avg: ([\d.]+)", lines)[0][1])
    secs = [float(m[1]) for m in expect(name, r"^TT_EPOCH \d+ ([\d.e+-]+)", lines)]
    return Row(f"texel-tuner {commit(out / 'texel-tuner')}", "fourku",
               "full batch, file order", threads, secs, coeffs)


def clockwork(out: Path, mode: str, tmp: Path, n: int, epochs: int) -> Row:
    """Clockwork's tuner (`mode`: seed or head) for `epochs` (its profile build stops at 8) on
    the tiled sample, split over the data files its source reads."""
    clone = out / mode
    name = f"Clockwork {mode}"
    src = (clone / "src" / "evaltune_main.cpp").read_text(encoding="utf-8")
    files = re.findall(r'"(data/[^"]+\.txt)"', src)
    if not files:
        sys.exit(f"peers.py: no data file names (\"data/....txt\") in {clone}/src/evaltune_main.cpp")
    run_dir = tmp / f"clockwork-{mode}"
    (run_dir / "data").mkdir(parents=True)
    lines = sample_lines(lambda f, r: f"{f};{RESULT_CHAR[r]}")
    part = -(-n // len(files))
    for i, f in enumerate(files):
        write_tiled(run_dir / f, lines, min(n, i * part), min(n, (i + 1) * part))
    done = []

    def stop(line: str) -> bool:
        done.extend(re.findall(r"Epoch duration: ([\d.e+-]+)", line))
        return len(done) >= epochs

    out_lines = run_peer(name, [str(clone / "build-evaltune" / "clockwork-evaltune")], run_dir,
                         stop=stop)
    got = int(expect(name, r"Loaded (\d+) FENs", out_lines)[0][1])
    if got != n:
        sys.exit(f"peers.py: {name} loaded {got:,} of the {n:,} positions in {run_dir}/data")
    threads = int(expect(name, r"Running on (\d+) threads", out_lines)[0][1])
    for f in files:
        (run_dir / f).unlink()
    if len(done) < epochs:
        print(f"{name}: its profile build stops after {len(done)} epoch(s)")
    return Row(f"Clockwork {commit(clone)}", "its own", "batch 262,144, shuffled", threads,
               [float(s) for s in done], compares=CLOCKWORK[mode])


def our_modes(wanted: list[str]) -> dict[str, dict]:
    """The modes of `wanted` that the configuration accepts, by name: their [training] keys."""
    modes = {}
    for name in wanted:
        try:
            validate({"data": {"train": ["unused"]}, "training": MODES[name]}, "peers")
        except ConfigError:
            print(f"ours, {name}: not offered by this version ([training] "
                  + ", ".join(f"{k} = {v!r}" for k, v in MODES[name].items())
                  + " is not accepted); skipped")
            continue
        modes[name] = MODES[name]
    return modes


def ours(data, evaluation: str, modes: dict[str, dict], epochs: int,
         threads: list[int]) -> list[Row]:
    """This tuner on `data` in every mode and thread count; terms from a store recorded once."""
    store = record_store(get_evaluation(evaluation), data.positions, data.results, K,
                         max(threads))
    terms = terms_per_position(store)
    del store
    rows, seen = [], []
    for name, keys in modes.items():
        for t in threads:
            cfg = validate({"data": {"train": ["unused"], "validation_fraction": 0.0},
                            "loss": {"k": K}, "evaluation": {"name": evaluation, "init": "zero"},
                            "optimizer": {"lr": 10.0},
                            "training": {"epochs": epochs, "batch_size": BATCH,
                                         "micro_batch_size": MICRO, "threads": t, **keys}},
                           "peers")
            tr = cfg["training"]
            if tr in seen:  # the default's settings given again: the same run as `replay`
                continue
            seen.append(tr)
            bs = tr["batch_size"]
            setting = f"{name}, batch {bs:,}" if isinstance(bs, int) else f"{name}, batch {bs}"
            if "shuffle" in tr:
                setting += f", shuffle {tr['shuffle']}"
            with tempfile.TemporaryDirectory() as tmp:
                hist = Run(cfg, Path(tmp), log=lambda line: None).run(data)
            row = Row("ours", evaluation, setting, t, hist["seconds"], terms)
            rows.append(row)
            report(row)
    return rows


def report(row: Row) -> None:
    print(f"{row.tuner}, {row.evaluation}, {row.setting}, {row.threads} thread(s): s/epoch "
          + ", ".join(f"{s:.3f}" for s in row.seconds) + f" (median {row.median:.3f}); "
          f"load {load()}", flush=True)


def table(rows: list[Row], n: int) -> str:
    """The Markdown table of every row, with our ratios to the peers of the same threads."""
    cols = ("tuner", "evaluation", "setting", "threads", "terms/position", "s/epoch",
            "ns/term", "positions/s", "ns/term / texel-tuner's", "s/epoch / texel-tuner's",
            "s/epoch / Clockwork's")
    tt = {r.threads: r for r in rows if r.tuner.startswith("texel-tuner")}
    cw = {(r.compares, r.threads): r for r in rows if r.compares}
    out = ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for r in rows:
        ns = r.median / (n * r.terms) * 1e9 if r.terms else None
        peer = tt.get(r.threads) if r.tuner == "ours" else None
        c = cw.get((r.evaluation, r.threads)) if r.tuner == "ours" else None
        cells = [r.tuner, r.evaluation, r.setting, str(r.threads),
                 f"{r.terms:.2f}" if r.terms else "-", f"{r.median:.3f}",
                 f"{ns:.2f}" if ns else "-", f"{n / r.median:,.0f}",
                 f"{ns / (peer.median / (n * peer.terms) * 1e9):.2f}" if peer and ns else "-",
                 f"{r.median / peer.median:.2f}" if peer else "-",
                 f"{r.median / c.median:.3f}" if c else "-"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--positions", type=int, default=CPP_BENCH_POSITIONS)
    ap.add_argument("--epochs", type=int, default=5, help="epochs of each run (default 5)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--peers", nargs="+", default=[TEXEL_TUNER, "clockwork-seed",
                                                   "clockwork-head"],
                    choices=[TEXEL_TUNER, "clockwork-seed", "clockwork-head"])
    ap.add_argument("--evaluations", nargs="+", default=list(CLOCKWORK.values()))
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--dir", type=Path, default=REPO.parent / "build" / "peers",
                    help="the peers' builds: DIR/texel-tuner, DIR/clockwork")
    ap.add_argument("--tools", type=Path, default=REPO.parent / "shared" / "tools",
                    help="build-texel-tuner.sh and build-clockwork.sh (for the messages)")
    a = ap.parse_args()
    if a.positions < 1 or a.epochs < 1 or min(a.threads) < 1:
        sys.exit("peers.py: --positions, --epochs and --threads must be at least 1")
    tt_out, cw_out = a.dir / TEXEL_TUNER, a.dir / "clockwork"
    tt_bins = {t: tt_out / "bin" / f"tuner_fourku_t{t}" for t in a.threads}
    tt_bins = {t: b for t, b in tt_bins.items() if b.exists()}
    cw_modes = [m for m in CLOCKWORK if f"clockwork-{m}" in a.peers
                and (cw_out / m / "build-evaltune" / "clockwork-evaltune").exists()]
    if TEXEL_TUNER in a.peers and len(tt_bins) < len(a.threads):
        print(f"{TEXEL_TUNER}: not built in {tt_out} for threads "
              + ", ".join(str(t) for t in a.threads if t not in tt_bins) + "; skipped. Build it "
              f"with: {a.tools}/build-texel-tuner.sh CLONE {tt_out}  (CLONE: git clone "
              f"https://github.com/GediminasMasaitis/texel-tuner; it builds 1 and 2 threads)")
    for m in CLOCKWORK:
        if f"clockwork-{m}" in a.peers and m not in cw_modes:
            print(f"clockwork-{m}: not built in {cw_out}; skipped. Build it with: "
                  f"{a.tools}/build-clockwork.sh {m} CLOCKWORK_CLONE ROSE_CLONE {cw_out}  (clones "
                  f"of https://github.com/official-clockwork/Clockwork and "
                  f"https://github.com/87flowers/Rose; needs clang++-19 and cmake)")
    if TEXEL_TUNER not in a.peers:
        tt_bins = {}
    if not tt_bins and not cw_modes:
        print("peers.py: no peer built: nothing to compare with")
        return
    n = a.positions
    loads = [load()]
    print(f"Machine: {machine()}; {n:,} positions (the shipped sample tiled), {a.epochs} "
          f"epoch(s) each; load average at the start {loads[0]}", flush=True)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        for t in tt_bins:
            rows.append(texel_tuner(tt_out, Path(tmp), n, a.epochs, t))
            report(rows[-1])
        for m in cw_modes:
            rows.append(clockwork(cw_out, m, Path(tmp), n, a.epochs))
            report(rows[-1])
    data = tiled_data(n)
    modes = our_modes(a.modes)
    for ev in a.evaluations:
        rows += ours(data, ev, modes, a.epochs, a.threads)
    loads.append(load())
    print(f"\nPositions: {n:,} (the shipped sample tiled); median of {a.epochs} epoch(s); ns/term "
          f"is wall time over positions x terms per position; ratios: ours over the peer with "
          f"the same threads (Clockwork: the tuner of the same evaluation).\n")
    print(table(rows, n))
    print(f"\nload average (1, 5, 15 min) at the start: {loads[0]}; at the end: {loads[1]}")


if __name__ == "__main__":
    main()
