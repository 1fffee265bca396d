"""Where the shared reference data lives: ../shared beside the repository (as in CI), or
$TUNER_SHARED. Tests that need it fail, never skip, when it is missing."""
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TUNER_SHARED") or REPO.parent / "shared")
SPEC = SHARED / "spec"
DATASETS = SHARED / "datasets"

if not SPEC.is_dir() or not DATASETS.is_dir():
    raise RuntimeError(f"shared reference data not found at {SHARED} (expected spec/ and datasets/ "
                       f"there); set TUNER_SHARED to its location")
