"""Template players: a store's record structures compiled into straight-line code.

`tuner.tape.player.play` interprets: for every record of every position it loads the record's
tag, slots and scalar columns and branches on its form. Most stores hold a handful of record
structures (*templates*; both reference evaluations have exactly one), and the player then spends
most of its time deciding again what it decided for the previous position. `specialise` writes,
for the templates of one store, a Python module in which each template is a block of calls with
its slots, kernels and template constants written in as literals, compiles it with Numba (cached
on disk like every other kernel: the file is named after its contents) and returns it.

The calls are the interpreter's, from one table (`CALLS`, form by form, forward and backward): the
same op functions with the same arguments in the same order. A specialised player therefore gives
the interpreter's results bit for bit (a test runs every form through both); it only skips the
decoding. A store with more than `MAX_TEMPLATES` templates is not specialised
(`specialisable`): the interpreter plays it.

Callers that drive `play` from compiled code (`tuner.train.kernels.replay_chunks`) pass those
drivers to `specialise`: their source is copied into the generated module, where the name `play`
is the specialised player, so a driver is written once and there is no call through a function
pointer per chunk.
"""
from __future__ import annotations

import hashlib
import inspect
import os
import sys
from pathlib import Path
from types import ModuleType

import numpy as np

from tuner import cachedir
from tuner.fileio import atomic_write, remove_stale_temps

from .ops import (F_ADD_CLAMPED_EG, F_ADD_WINNABLE_EG, F_CONST, F_CONST_PAIR, F_EG_SCALE,
                  F_EG_SCALE_BY_SIGN, F_LINCOMB_PAIR, F_LINCOMB_VALUE, F_P, F_PHASE, F_PP, F_PS,
                  F_PV, F_SIGMOID_SQ_ERR, F_SIGMOID_XENT, F_SP, F_SUM, F_SV, F_V, F_VP, F_VS, F_VV,
                  FORM_NAMES, FORM_NARY, KERNEL_BITS, N_FORMS, S_NONE)
from .player import Store

#: Per form: the forward and the backward call of `tuner.tape.player.play` (None: no backward, a
#: leaf). ``{o} {a} {b}`` are the output and operand slots (n-ary: first operand, count), ``{k}``
#: the kernel, ``{s0} {s1}`` the scalars, ``{r}`` the record's number in its template, ``{bits}``
#: the store's packing of operands (`tuner.tape.ops.operand`).
CALLS = {
    F_VV: ("_vv_fwd(val, {o}, {a}, {b}, {k})", "_vv_bwd(val, vg, {o}, {a}, {b}, {k})"),
    F_VS: ("_vs_fwd(val, {o}, {a}, {s0}, {k})", "_vs_bwd(val, vg, {o}, {a}, {s0}, {k})"),
    F_SV: ("_sv_fwd(val, {o}, {a}, {s0}, {k})", "_sv_bwd(val, vg, {o}, {a}, {s0}, {k})"),
    F_V: ("_vs_fwd(val, {o}, {a}, 0.0, {k})", "_vs_bwd(val, vg, {o}, {a}, 0.0, {k})"),
    F_PP: ("_pp_fwd(pv, {o}, {a}, {b}, {k})", "_pp_bwd(pv, pg, {o}, {a}, {b}, {k})"),
    F_PS: ("_ps_fwd(pv, {o}, {a}, {s0}, {k})", "_ps_bwd(pv, pg, {o}, {a}, {s0}, {k})"),
    F_SP: ("_sp_fwd(pv, {o}, {a}, {s0}, {k})", "_sp_bwd(pv, pg, {o}, {a}, {s0}, {k})"),
    F_PV: ("_pv_fwd(val, pv, {o}, {a}, {b}, {k})", "_pv_bwd(val, vg, pv, pg, {o}, {a}, {b}, {k})"),
    F_VP: ("_vp_fwd(val, pv, {o}, {a}, {b}, {k})", "_vp_bwd(val, vg, pv, pg, {o}, {a}, {b}, {k})"),
    F_P: ("_ps_fwd(pv, {o}, {a}, 0.0, {k})", "_ps_bwd(pv, pg, {o}, {a}, 0.0, {k})"),
    F_EG_SCALE: ("_eg_scale_fwd(pv, {o}, {a}, {s0})", "_eg_scale_bwd(pg, {o}, {a}, {s0})"),
    F_ADD_CLAMPED_EG: ("_clamped_add_eg_fwd(val, pv, {o}, {a}, {b}, False)",
                       "_clamped_add_eg_bwd(val, vg, pv, pg, {o}, {a}, {b}, False)"),
    F_PHASE: ("_phase_fwd(val, pv, {o}, {a}, {s0})", "_phase_bwd(vg, pg, {o}, {a}, {s0})"),
    F_SUM: ("_sum_fwd(val, idx, {o}, {a}, {b}, {bits})",
            "_sum_bwd(vg, idx, {o}, {a}, {b}, {bits})"),
    F_LINCOMB_PAIR: ("_lincomb_pair_fwd(pv, idx, coef, {o}, {a}, {b}, {bits})",
                     "_lincomb_pair_bwd(pg, idx, coef, {o}, {a}, {b}, {bits})"),
    F_LINCOMB_VALUE: ("_lincomb_value_fwd(val, idx, coef, {o}, {a}, {b}, {bits})",
                      "_lincomb_value_bwd(vg, idx, coef, {o}, {a}, {b}, {bits})"),
    F_ADD_WINNABLE_EG: ("_clamped_add_eg_fwd(val, pv, {o}, {a}, {b}, True)",
                        "_clamped_add_eg_bwd(val, vg, pv, pg, {o}, {a}, {b}, True)"),
    F_EG_SCALE_BY_SIGN: ("_eg_scale_by_sign_fwd(pv, {o}, {a}, {s0}, {s1})",
                         "_eg_scale_by_sign_bwd(pv, pg, {o}, {a}, {s0}, {s1})"),
    F_CONST: ("_const_fwd(val, {o}, {s0})", None),
    F_CONST_PAIR: ("_const_pair_fwd(pv, {o}, {s0}, {s1})", None),
    # The losses' forwards return their partial: the backward reuses it (``{r}``: the record).
    F_SIGMOID_SQ_ERR: ("partial{r} = _sigmoid_sq_err_fwd(val, {o}, {a}, {s0}, {s1})",
                       "_loss_bwd(vg, {o}, {a}, partial{r})"),
    F_SIGMOID_XENT: ("partial{r} = _sigmoid_xent_fwd(val, {o}, {a}, {s0}, {s1})",
                     "_loss_bwd(vg, {o}, {a}, partial{r})"),
}
assert sorted(CALLS) == list(range(N_FORMS)), "every form needs its calls"

#: Stores with more templates than this are left to the interpreter (a block per template makes
#: the generated function, and its compilation, grow with their number).
MAX_TEMPLATES = 8
#: What the specialised ``play`` returns for a position of a template it has no block for (a
#: record tag is below it).
NO_BLOCK = 1 << 16

_HEADER = '''\
"""Generated by tuner.tape.specialise for {n_templates} template(s) and the tuner sources
{sources} (so that a new version never loads this one's machine code); do not edit."""
import numpy as np
from numba import njit
from tuner.tape.ops import ({ops})
from tuner.jit import JIT
from tuner.tape.player import prefetch_ahead
'''


def _literal(x: float) -> str:
    """Python source for the float `x`, exactly (repr round-trips every finite double)."""
    if np.isnan(x):
        return "np.nan"
    if np.isinf(x):
        return "np.inf" if x > 0 else "-np.inf"
    return repr(float(x))


def nary_records(st: Store, t: int) -> list[int]:
    """The records of template `t` that read an operand list."""
    return [r for r in range(int(st.t_first[t]), int(st.t_first[t + 1]))
            if FORM_NARY[int(st.t_op[r]) >> KERNEL_BITS] != S_NONE]


def template_lines(st: Store, t: int) -> list[str]:
    """The body of template `t`'s block: forward calls, outputs, then (with gradients) the
    temporaries' gradients cleared, the seed and the backward calls in reverse."""
    r0, r1 = int(st.t_first[t]), int(st.t_first[t + 1])
    v0, p0 = int(st.params[0]), int(st.params[1])
    fwd, bwd = [], []
    last_nary = max(nary_records(st, t), default=-1)
    for r in range(r0, r1):
        op = int(st.t_op[r])
        form, k = op >> KERNEL_BITS, op & 15
        if form >= N_FORMS:
            raise ValueError(f"template {t}, record {r - r0}: unknown record tag {op}")
        s = [f"scalars[p, {int(st.t_scol[r, j])}]" if st.t_scol[r, j] >= 0
             else _literal(st.t_sconst[r, j]) for j in range(2)]
        a, b = int(st.t_lhs[r]), int(st.t_rhs[r])
        if FORM_NARY[form] != S_NONE:  # operands from the position's list, in record order
            fwd.append(f"a{r - r0} = q")
            # The last list ends where the position's operands end: its count is not read.
            fwd.append(f"n{r - r0} = " + ("opnd_off[p + 1] - q" if r == last_nary
                                           else f"nary[p, {b}]"))
            fwd.append(f"q += n{r - r0}")
            a, b = f"a{r - r0}", f"n{r - r0}"
        f_call, b_call = CALLS[form]
        args = dict(o=int(st.t_out[r]), a=a, b=b, k=k, s0=s[0], s1=s[1], r=r - r0,
                    bits=int(st.coef_bits[0]))
        fwd.append(f"{f_call.format(**args)}  # {FORM_NAMES[form]}")
        if b_call is not None:
            bwd.append(b_call.format(**args))
    n_seg = st.t_out_slots.shape[1]
    for seg in range(n_seg):
        o = int(st.t_out_slots[t, seg])
        fwd.append(f"outputs[i, {seg}] = " + (f"val[{o}]" if o >= 0 else "np.nan"))
    grad = ["if with_grad:"]
    nv, npr = int(st.t_temps[t, 0]), int(st.t_temps[t, 1])
    if nv:  # (plain loops: a slice assignment costs more than these few stores)
        grad += [f"    for j in range({v0}, {v0 + nv}):", "        vg[j] = 0.0"]
    if npr:
        grad += [f"    for j in range({p0}, {p0 + npr}):", "        pg[j, 0] = 0.0",
                 "        pg[j, 1] = 0.0"]
    grad.append(f"    vg[{int(st.t_out_slots[t, n_seg - 1])}] += seed")
    grad += ["    " + line for line in reversed(bwd)]
    return fwd + grad


def player_source(st: Store, drivers=()) -> str:
    """The generated module: ``play`` (the interpreter's signature and contract) with a block for
    each template of `st`, and the source of every function of `drivers` (compiled functions
    whose body calls ``play``) rebound to it."""
    imports = set()
    blocks = []
    n_t = len(st.t_temps)
    if n_t == 1:  # every position is of template 0 (the store's numbers are below its count)
        blocks += ["        " + line for line in template_lines(st, 0)]
    else:
        for t in range(n_t):
            blocks.append(f"        {'if' if t == 0 else 'elif'} tmpl[p] == {t}:")
            blocks += ["            " + line for line in template_lines(st, t)]
        blocks += ["        else:" if blocks else "        if True:", f"            return {NO_BLOCK}"]
    body = "\n".join(blocks)
    # What the blocks read of a position's header, and so what is worth prefetching: the
    # template number if there are several, the counts if a template has several lists (the
    # last one's count is not read).
    reads_tmpl = n_t > 1
    reads_nary = any(len(nary_records(st, t)) > 1 for t in range(n_t))
    driver_src = []
    for fn in drivers:
        py = fn.py_func
        for name in py.__code__.co_names:
            if name != "play" and name in py.__globals__ and not name.startswith("__"):
                imports.add((py.__module__, name))
        driver_src.append(inspect.getsource(py))
    import tuner

    lines = [_HEADER.format(n_templates=len(st.t_temps), sources=tuner.source_digest(),
                            ops=", ".join(sorted({c.split("(")[0].split(" = ")[-1]
                                                  for pair in CALLS.values()
                                                  for c in pair if c})))]
    lines += [f"from {m} import {n}" for m, n in sorted(imports)]
    lines.append(f'''

@njit(**JIT)
def play(st, arena, rows, seed, with_grad, outputs):
    """`tuner.tape.player.play` with the store's templates written out; {NO_BLOCK} for a
    position of another template."""
    val, vg, pv, pg = arena.val, arena.val_grad, arena.pair_val, arena.pair_grad
    tmpl, opnd_off, nary, scalars, idx, coef = (st.tmpl, st.opnd_off, st.nary, st.scalars,
                                                st.index, st.coef)
    for i in range(rows.shape[0] - 1, -1, -1):
        prefetch_ahead(rows, i, tmpl, opnd_off, nary, scalars, idx, coef, {reads_tmpl},
                       {reads_nary})
        p = rows[i]
        q = opnd_off[p]
{body}
    return -1
''')
    lines += ["\n" + src for src in driver_src]
    return "\n".join(lines)


def specialisable(st: Store) -> bool:
    """Whether `specialise` writes a player for `st` (it has at most `MAX_TEMPLATES` templates)."""
    return len(st.t_temps) <= MAX_TEMPLATES


def _folder() -> Path:
    """Where generated modules live: beside Numba's cache (one folder per version of the package's
    sources, see `tuner`), so a module never outlives the code it was generated for."""
    base = os.environ.get("NUMBA_CACHE_DIR")
    return (Path(base) if base else cachedir.process_folder()) / "players"


def _written(folder: Path, name: str, source: str) -> Path:
    """``folder/name.py`` holding `source`, written (atomically, mode 0600) unless it already
    does; a file that cannot be read, holds anything else or could have been written by another
    user (`tuner.cachedir.open_private`) is replaced."""
    path = folder / f"{name}.py"
    data = source.encode()
    try:
        with cachedir.open_private(path) as f:
            current = f.read()
    except OSError:  # missing, refused or unreadable
        current = None
    if current != data:
        remove_stale_temps(folder)  # those of killed writers
        atomic_write(path, data, mode=cachedir.FILE_MODE)
    return path


def specialise(st: Store, drivers=()) -> ModuleType:
    """The compiled module of `player_source` for `st` (written once, then imported; Numba caches
    its machine code like any other module's). ValueError if not `specialisable`."""
    if not specialisable(st):
        raise ValueError(f"{len(st.t_temps)} templates: more than a specialised player is written "
                         f"for ({MAX_TEMPLATES})")
    source = player_source(st, drivers)
    digest = hashlib.blake2b(source.encode(), digest_size=10).hexdigest()
    name = f"tuner_player_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    try:
        path = _written(cachedir.private_folder(_folder()), name, source)
    except OSError as e:  # unwritable or refused: the folder of this process
        folder = cachedir.private_folder(cachedir.process_folder() / "players")
        sys.stderr.write(f"tuner: {cachedir.describe(e)}; the generated player goes to {folder} "
                         f"for this run only\n")
        path = _written(folder, name, source)
    # Run from `source` itself: Python's loader would run a ``__pycache__`` file instead when its
    # header matches the file's time and size.
    module = ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module
