# `make run` and `make test` create .venv and install the project on first use; later calls reuse it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,ray]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/tuner train --config default

# Two pytest-xdist workers (one per core), a test file per worker at a time (module fixtures
# built once); the controller first compiles the shared kernels (tests/conftest.py).
# The suite writes Python's bytecode (__pycache__, ignored by git) even where the environment
# sets PYTHONDONTWRITEBYTECODE: each of its workers, subprocesses and Ray actors imports the
# package, and would compile every module again, and pytest rewrite every test file again
# (collecting took each worker 9.4 s of CPU without the bytecode, 3.9 s with it).
test: $(STAMP)
	$(BIN)/ruff check tuner tests benchmarks examples
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q -n 2 --dist loadfile

# The tape, the fixed `tuner bench` run, the roofline at 6.97 M positions and the scaling table
# (benchmarks/scaling.md): about 15 minutes on 2 cores, up to 10 GB of memory.
bench: $(STAMP)
	$(BIN)/python benchmarks/tape_bench.py
	$(BIN)/python benchmarks/kernel_bench.py
	$(BIN)/tuner bench
	$(BIN)/python benchmarks/roofline.py --repeat 2
	$(BIN)/python benchmarks/scaling.py
	$(BIN)/python benchmarks/peers.py

clean:
	rm -rf $(VENV) build *.egg-info
