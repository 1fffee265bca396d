"""Run a script so that `perf` can name the compiled (Numba) functions it samples.

Linux `perf` shows samples in JIT-compiled code as ``[JIT] tid N`` addresses unless the process
leaves a ``/tmp/perf-PID.map`` naming them. This runs a script (with its arguments) and, when it
exits, writes that map: every compiled overload of every Numba dispatcher in the process, by its
Python module and name (a function inlined into its caller is counted as the caller), its size
taken as the distance to the next one. Software sampling works where the machine has no
hardware counters (these machines):

    perf record -e cpu-clock -F 2000 -o /tmp/p.data \\
        .venv/bin/python benchmarks/perf_map.py benchmarks/store_record_bench.py -e clockwork
    perf report -i /tmp/p.data --no-children --sort dso,symbol

The report must be read before the map is removed (it lives in /tmp, one per process id).
"""
import atexit
import gc
import os
import runpy
import sys

from numba.core.dispatcher import Dispatcher

#: Size given to the last function of the map (its end is not known).
LAST_SIZE = 1 << 12


def compiled_functions() -> dict[int, str]:
    """{entry address: name} of every compiled overload of every Numba dispatcher alive: the
    native function and its Python wrapper (marked ``[wrapper]``)."""
    names = {}
    for obj in gc.get_objects():
        try:
            if not isinstance(obj, Dispatcher):
                continue
        except ReferenceError:  # (a weak proxy whose object is gone)
            continue
        name = f"{obj.py_func.__module__}.{obj.py_func.__qualname__}"
        for cres in obj.overloads.values():
            fndesc = cres.fndesc
            for symbol, label in ((fndesc.llvm_func_name, name),
                                  (fndesc.llvm_cpython_wrapper_name, name + " [wrapper]")):
                address = cres.library.get_pointer_to_function(symbol)
                if address:
                    names[address] = label
    return names


def write_perf_map(path: str | None = None) -> str:
    """Write the perf map of this process (default ``/tmp/perf-PID.map``); its path."""
    path = path or f"/tmp/perf-{os.getpid()}.map"
    names = compiled_functions()
    starts = sorted(names)
    with open(path, "w") as f:
        for start, end in zip(starts, starts[1:] + [starts[-1] + LAST_SIZE] if starts else []):
            f.write(f"{start:x} {end - start:x} {names[start]}\n")
    print(f"perf_map.py: {len(starts)} compiled functions named in {path}", file=sys.stderr)
    return path


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    atexit.register(write_perf_map)
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
