"""Index checks of the recorders: a wrong parameter index or operand slot handed to `lin_add` or
any ``record_*`` is noted in the tape's error word (never read or written out of bounds), and
`tuner eval` / `tuner train` stop with one line naming the evaluation, the position, the index and
the parameter group it falls past (tuner/tape/recording.py, "Index checks")."""
from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
from click.testing import CliRunner

import index_eval
from shared import REPO
from tuner.chess.fen import parse_fen, to_fen
from tuner.cli import main
from tuner.evals import Evaluation, ScratchError
from tuner.tape import (FreezeError, LinearAccumulator, freeze_tape, lin_add, lin_record_pair,
                        new_accumulator)
from tuner.tape import new_tape, reset
from tuner.tape import ops
from tuner.tape.ops import index_error, operand_mark, push_operand
from tuner.tape.recording import (E_OPERAND_LIST, E_PAIR_SLOT, E_PARAM_INDEX, E_VALUE_SLOT,
                                  OPERAND_LHS, OPERAND_LIST, OPERAND_RHS)
from tuner.train.record import record_store
from tuner.train.warmup import WARM_FENS

N_VALUES, N_PAIRS = 2, 3
#: How each recorder's arguments are named (tuner/tape/ops.py): value slots, pair slots, the
#: start of an operand list; every other argument is a scalar.
VALUE_ARGS, PAIR_ARGS, LIST_ARGS = {"a", "b", "v"}, {"p", "q"}, {"first"}
#: A form number (`record_loss`'s loss): given a valid one, the mean squared error's.
FORM_ARGS = {"loss": ops.LOSS_BY_NAME["mse"]}
RECORDERS = sorted(n for n in dir(ops) if n.startswith("record_"))
SLOT_ARGS = [(name, arg) for name in RECORDERS
             for arg in inspect.signature(getattr(ops, name).py_func).parameters
             if arg in VALUE_ARGS | PAIR_ARGS]


def _bad_indices(top: int):
    """Negative, one past the slots in use, far beyond the arrays."""
    return (-1, top, top + 100_000)


def _call(name: str, **given):
    """`name` on a fresh tape of N_VALUES value and N_PAIRS pair parameters: slot 0 for every
    slot argument not given, 0.5 for every scalar."""
    t = new_tape(N_VALUES, N_PAIRS, records=8)
    args = [given.get(a, FORM_ARGS[a] if a in FORM_ARGS
                      else 0 if a in VALUE_ARGS | PAIR_ARGS | LIST_ARGS else 0.5)
            for a in list(inspect.signature(getattr(ops, name).py_func).parameters)[1:]]
    getattr(ops, name)(t, *args)
    return t


def test_the_slot_arguments_are_known():
    """Every recorder's arguments are slots, a list start or scalars by their names, so the test
    below reaches every operand of every recorder."""
    scalars = {"s", "x", "k", "target", "alpha", "s_pos", "s_nonpos", "mg", "eg"}
    for name in RECORDERS:
        args = list(inspect.signature(getattr(ops, name).py_func).parameters)[1:]
        assert set(args) <= VALUE_ARGS | PAIR_ARGS | LIST_ARGS | set(FORM_ARGS) | scalars, \
            (name, args)
    assert len(SLOT_ARGS) > 40


@pytest.mark.parametrize("name, arg", SLOT_ARGS)
def test_every_operand_of_every_recorder_is_checked(name, arg):
    assert index_error(_call(name).rec) is None  # slot 0 of each kind is in use
    kind_top, code = (N_VALUES, E_VALUE_SLOT) if arg in VALUE_ARGS else (N_PAIRS, E_PAIR_SLOT)
    form = None
    for bad in _bad_indices(kind_top):
        t = _call(name, **{arg: bad})
        err = index_error(t.rec)
        assert err is not None, (name, arg, bad)
        assert (err.code, err.index, err.limit, err.record) == (code, bad, kind_top, 0)
        assert err.tag == t.rec.op[0]
        form = err.tag >> ops.KERNEL_BITS
        assert t.rec.lhs[0] >= 0 and t.rec.rhs[0] >= 0  # recorded with slot 0 instead
        assert (ops.FORM_LHS[form], ops.FORM_RHS[form])[err.operand] == \
            (ops.S_VALUE if arg in VALUE_ARGS else ops.S_PAIR)
        assert err.operand in (OPERAND_LHS, OPERAND_RHS)
        assert f"{err.kind} slot {bad} " in err.describe()
        with pytest.raises(FreezeError, match=f"index out of range was recorded: record 0 "
                                              rf"\(op {ops.tag_name(err.tag)}\)"):
            freeze_tape(t)


@pytest.mark.parametrize("name, kind_top, code", [("record_sum", N_VALUES, E_VALUE_SLOT),
                                                  ("record_lincomb_value", N_VALUES, E_VALUE_SLOT),
                                                  ("record_lincomb_pair", N_PAIRS, E_PAIR_SLOT)])
def test_every_operand_of_a_list_is_checked(name, kind_top, code):
    for bad in _bad_indices(kind_top):
        t = new_tape(N_VALUES, N_PAIRS, records=8)
        first = operand_mark(t)
        push_operand(t, 1, 2.0)
        push_operand(t, bad, 3.0)
        getattr(ops, name)(t, first)
        err = index_error(t.rec)
        assert (err.code, err.index, err.limit, err.operand) == (code, bad, kind_top,
                                                                 OPERAND_LIST + 1)
        assert list(t.rec.opnd_index[:2]) == [1, 0]  # the bad one replaced, never read
        assert "as operand 1 of its list" in err.describe()
    for first in (-1, 3):  # a list start outside the operands pushed (2 of them)
        t = new_tape(N_VALUES, N_PAIRS, records=8)
        push_operand(t, 0, 1.0)
        push_operand(t, 0, 1.0)
        getattr(ops, name)(t, first)
        err = index_error(t.rec)
        assert (err.code, err.index, err.limit) == (E_OPERAND_LIST, first, 3)
        assert t.rec.rhs[0] == 0  # an empty list


def test_lin_add_out_of_range_is_not_added_and_reported_by_the_record():
    for bad in (-1, N_PAIRS, N_PAIRS + 100_000):
        t = new_tape(N_VALUES, N_PAIRS, records=8)
        acc = new_accumulator(N_PAIRS)
        lin_add(acc, 1, 2)
        lin_add(acc, bad, 5)
        lin_add(acc, N_PAIRS + 7, 1)  # a second violation: the first is the one reported
        # nothing written outside the accumulator: a zero is added to index 0 instead
        assert list(acc.coef) == [0, 2, 0] and list(acc.touched[:acc.count[0]]) == [1, 0]
        o = lin_record_pair(t, acc)
        err = index_error(t.rec)
        assert (err.code, err.index, err.limit, err.record) == (E_PARAM_INDEX, bad, N_PAIRS, 0)
        assert ops.tag_name(err.tag) == "lincomb_pair" and t.rec.out[0] == o
        assert err.describe().startswith(f"lin_add index {bad} is not a pair parameter (0..2)")
        reset(t)  # a new recording starts clean; the accumulator's report was passed on
        assert index_error(t.rec) is None
        lin_record_pair(t, acc)
        assert index_error(t.rec) is None


def test_an_accumulator_wider_than_the_parameters_is_caught_by_the_record():
    t = new_tape(N_VALUES, N_PAIRS, records=8)
    ops.record_const_pair(t, 1.0, 2.0)  # pair slot 3: in use, but not a parameter
    acc = new_accumulator(N_PAIRS + 2)
    lin_add(acc, N_PAIRS, 1)
    lin_record_pair(t, acc)
    err = index_error(t.rec)
    assert (err.code, err.index, err.limit, err.record) == (E_PARAM_INDEX, N_PAIRS, N_PAIRS, 1)


# -- tuner eval and tuner train on a user evaluation with a wrong index ---------------------------

N_PARAMS = 6  # MAT[5], TEMPO in tests/index_eval.py; its TEMPO is index 5
CASES = [  # (recorder, offset added to TEMPO, the index handed over, what the message says)
    ("lin_add", 1, N_PARAMS, "lin_add index 6 is not a pair parameter (0..5)",
     "index 6 is 1 past the last pair parameter, TEMPO (index 5)"),
    ("lin_add", 100_001, N_PARAMS + 100_000, "lin_add index 100006 is not a pair parameter",
     "index 100006 is 100001 past the last pair parameter, TEMPO (index 5)"),
    ("lin_add", -6, -1, "lin_add index -1 is not a pair parameter",
     "index -1 is before the first pair parameter, MAT[0] (index 0)"),
    ("op", 100_001, N_PARAMS + 100_000, "(op pp:add) reads pair slot 100006 as its second "
     "operand, but only pair slots 0..6 are in use",
     "index 100006 is 100001 past the last pair parameter, TEMPO (index 5)"),
]
IDS = ["off-by-one", "far-beyond", "negative", "op-operand"]


def _evaluation_file(tmp_path: Path, where: str, offset: int) -> Path:
    text = (REPO / "tests" / "index_eval.py").read_text()
    text = text.replace('WHERE = "lin_add"', f'WHERE = "{where}"')
    text = text.replace("OFFSET = 0 ", f"OFFSET = {offset} ")
    text = text.replace('NAME = "index-test"', f'NAME = "index-test-{where}{offset}"')
    path = tmp_path / f"bad_{where}_{offset}.py".replace("-", "m")
    path.write_text(text)
    return path


def _one_error_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if "Error" in ln or "error" in ln]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def _assert_named(line: str, name: str, fens, says: str, group: str) -> None:
    assert f"evaluation {name!r}" in line, line
    assert says in line and group in line, line
    fen = re.search(r"position '([^']*)'", line)
    assert fen and fen.group(1) in fens, line
    assert to_fen(parse_fen(fen.group(1))) == fen.group(1)


@pytest.mark.parametrize("where, offset, index, says, group", CASES, ids=IDS)
def test_eval_names_the_wrong_index(tmp_path, where, offset, index, says, group):
    path = _evaluation_file(tmp_path, where, offset)
    fens = ["4k3/8/8/8/8/8/8/R3K3 b - - 0 1", "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"]
    for extra in ([], ["--breakdown"]):
        r = CliRunner().invoke(main, ["eval", "-e", str(path), *extra, *fens])
        assert r.exit_code == 1, (r.output, r.exception)
        line = _one_error_line(r.output)
        assert line.startswith("Error: ")
        _assert_named(line, f"index-test-{where}{offset}", fens[:1], says, group)
        assert ";" not in r.stdout  # no evaluation printed


@pytest.mark.parametrize("mode", ["eager", "replay"])
@pytest.mark.parametrize("where, offset, index, says, group", CASES, ids=IDS)
def test_train_names_the_wrong_index_and_writes_nothing(tmp_path, mode, where, offset, index,
                                                         says, group):
    path = _evaluation_file(tmp_path, where, offset)
    config = tmp_path / "run.toml"
    config.write_text(f"""[data]
train = ["tiny"]
[evaluation]
name = "{path.name}"
[loss]
k = 0.0025
[training]
mode = "{mode}"
epochs = 1
batch_size = 512
micro_batch_size = 256
threads = 1
""")
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["train", "--config", str(config), "--out", str(out)])
    assert r.exit_code == 2, (r.output, r.exception)
    line = _one_error_line(r.stderr)
    assert line.startswith("error: ")
    _assert_named(line, f"index-test-{where}{offset}", WARM_FENS, says, group)
    assert not (out / "params.json").exists() and not (out / "checkpoint.npz").exists()


def test_a_scratch_with_an_accumulator_not_made_by_new_accumulator_is_refused_by_name():
    """An evaluation whose ``new_scratch()`` holds a linear accumulator not shaped as
    `new_accumulator` makes it (here its `touched` without the spare entry lin_add writes to) is
    refused when a scratch is made, before any recording could write past it: ScratchError,
    naming the evaluation, the accumulator's place and what is wrong; training stops on it the
    same way. A scratch of new_accumulator's accumulators passes."""
    class Scratch(NamedTuple):
        linear: LinearAccumulator
        ints: np.ndarray

    reg = index_eval.EVALUATION.registry
    n = reg.n_params

    def made(touched: int):
        return lambda: Scratch(new_accumulator(n)._replace(touched=np.zeros(touched, np.int32)),
                               np.zeros(3, np.int64))

    bad = Evaluation("scratch-test", reg, index_eval.record_eval, index_eval.record_batch,
                     new_scratch=made(n))
    text = (f"evaluation 'scratch-test': new_scratch().linear is a LinearAccumulator that "
            f"lin_add cannot use: its touched has {n} entries, not {n + 1} (for {n} "
            f"parameters); make it with tuner.tape.new_accumulator(n_params)")
    with pytest.raises(ScratchError) as e:
        bad.new_scratch()
    assert str(e.value) == text
    positions = np.array([parse_fen(f) for f in WARM_FENS[:3]])
    with pytest.raises(ScratchError) as e:
        record_store(bad, positions, np.full(3, 0.5), 0.0025, 1)
    assert str(e.value) == text
    good = Evaluation("scratch-test", reg, index_eval.record_eval, index_eval.record_batch,
                      new_scratch=made(n + 1))
    assert good.new_scratch().linear.touched.shape == (n + 1,)
