"""Where the tests' reference data lives: in the repository (tests/data/spec, a copy of the
engine's specification data, see tests/data/README.md; the sample sets shipped in the package,
tuner/samples/, and tiny.txt beside them, for the positions), so a plain clone runs every test. Set $TUNER_SHARED to a
folder with spec/ and datasets/ to test against another copy. Tests that need the data fail,
never skip, when it is missing.

Also what several test files read the same way: `stderr_lines`, a command's stderr without the
compile announcement."""
import os
from pathlib import Path

from tuner.compiling import COMPILING

REPO = Path(__file__).resolve().parents[1]
_OTHER = os.environ.get("TUNER_SHARED")
SPEC = Path(_OTHER) / "spec" if _OTHER else REPO / "tests" / "data" / "spec"
#: The sample sets shipped in the package (whatever $TUNER_SHARED names), and the tiny one.
SAMPLES = REPO / "tuner" / "samples"
TINY_PARQUET = SAMPLES / "tiny.parquet"
DATASETS = Path(_OTHER) / "datasets" if _OTHER else SAMPLES

if not SPEC.is_dir() or not DATASETS.is_dir():
    raise RuntimeError(f"reference data not found: expected {SPEC} and {DATASETS}"
                       + (" (from $TUNER_SHARED)" if _OTHER else ""))


def stderr_lines(r) -> list[str]:
    """The stderr lines of a CLI result `r`, without a cold cache's compile announcement (the
    `COMPILING` line, there only when Numba had nothing compiled)."""
    return [line for line in r.stderr.splitlines() if not line.startswith(COMPILING)]
