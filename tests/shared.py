"""Where the tests' reference data lives: in the repository (tests/data/spec, a copy of the
engine's specification data, see tests/data/README.md; the sample sets shipped in the package,
tuner/samples/, and tiny.txt beside them, for the positions), so a plain clone runs every test. Set $TUNER_SHARED to a
folder with spec/ and datasets/ to test against another copy. Tests that need the data fail,
never skip, when it is missing."""
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_OTHER = os.environ.get("TUNER_SHARED")
SPEC = Path(_OTHER) / "spec" if _OTHER else REPO / "tests" / "data" / "spec"
DATASETS = Path(_OTHER) / "datasets" if _OTHER else REPO / "tuner" / "samples"

if not SPEC.is_dir() or not DATASETS.is_dir():
    raise RuntimeError(f"reference data not found: expected {SPEC} and {DATASETS}"
                       + (" (from $TUNER_SHARED)" if _OTHER else ""))
