"""The (mg, eg) pair kernels of a packed operand list, the pair as one two-lane vector.

A linear combination of pairs does the same arithmetic on mg and on eg, and the two halves of a
pair slot are next to each other in the arena (``pair_val[j]``, ``pair_grad[j]``: one row of a
C-ordered (n, 2) array). Numba turns off LLVM's SLP vectoriser, the pass that would do both halves
with one instruction, so these kernels are written in LLVM IR with ``<2 x double>`` operations:
one load, one multiply and one add (forward), or one load, multiply, add and store (backward) per
operand instead of two of each. Each lane is the same IEEE operation in the same order as the
scalar loops of `tuner.tape.ops` (``mg += c * pv[j, 0]`` from 0.0 first to last), so the results
are the same bits; only the instruction count changes.

Operands are packed words (see `tuner.tape.ops.operand`): ``slot << bits | coefficient +
2^(bits - 1)``, bits > 0. A coefficient of at most `TABLE_BITS` bits is read from a table of the
(exact, small integer) values rather than converted: one load and broadcast instead of three
instructions. `pair_dot_axpy` runs one list's dot product and another's axpy in one loop: the dot
product is a chain of dependent adds (3 cycles each), and the axpy's independent work fills the
cycles between them.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_I32, _I64, _F64 = ir.IntType(32), ir.IntType(64), ir.DoubleType()
_V2 = ir.VectorType(_F64, 2)


def _pair_array(ty) -> bool:
    """Whether `ty` is an array whose rows are adjacent (mg, eg) float64 pairs."""
    return (isinstance(ty, types.Array) and ty.ndim == 2 and ty.layout == "C"
            and ty.dtype == types.float64)


def _word_array(ty) -> bool:
    return isinstance(ty, types.Array) and ty.ndim == 1 and isinstance(ty.dtype, types.Integer)


#: Coefficients of at most this many bits are read from a table of their values (one load and
#: broadcast instead of a subtraction, a conversion and a broadcast); wider ones are converted.
TABLE_BITS = 8


class _Operands:
    """The emitters of one packed operand list's loops (words ``args[w]``, `bits` ``args[b]``);
    `table`: whether coefficients come from the table (only for bits <= `TABLE_BITS`)."""

    def __init__(self, context, builder, signature, args, w, b):
        self.words = context.make_array(signature.args[w])(context, builder, args[w])
        self.signed = signature.args[w].dtype.signed
        self.bits = context.cast(builder, args[b], signature.args[b], types.int64)
        one = ir.Constant(_I64, 1)
        self.mask = builder.sub(builder.shl(one, self.bits), one)
        self.half = builder.shl(one, builder.sub(self.bits, one))
        # table[TABLE_HALF - half + k] = k - half, for k in [0, 2^bits)
        size = 1 << TABLE_BITS
        values = ir.Constant(ir.ArrayType(_F64, size), [float(k - size // 2) for k in range(size)])
        table = cgutils.global_constant(builder.module, "tuner.pairs.coefficients", values)
        base = builder.sub(ir.Constant(_I64, size // 2), self.half)
        self.table = builder.gep(builder.bitcast(table, _F64.as_pointer()), [base])
        self.use_table = builder.icmp_signed("<=", self.bits, ir.Constant(_I64, TABLE_BITS))
        self.from_table = False

    def row(self, context, builder, ty, value):
        """(base address, row stride) of the pair array `value` of type `ty`."""
        pairs = context.make_array(ty)(context, builder, value)
        return builder.ptrtoint(pairs.data, _I64), builder.extract_value(pairs.strides, 0)

    def versions(self, builder, emit):
        """``emit()`` twice: with coefficients from the table if the bits allow, else
        converted."""
        with builder.if_else(self.use_table) as (small, wide):
            for from_table, branch in ((True, small), (False, wide)):
                with branch:
                    self.from_table = from_table
                    emit()

    def operand(self, builder, i, row):
        """Operand ``i``'s coefficient splat and a pointer to its pair in the array of `row`
        (base address, row stride)."""
        w = builder.load(builder.gep(self.words.data, [i]))
        if w.type.width < 64:
            w = builder.sext(w, _I64) if self.signed else builder.zext(w, _I64)
        slot = builder.ashr(w, self.bits)
        if self.from_table:
            c = builder.load(builder.gep(self.table, [builder.and_(w, self.mask)]))
        else:
            c = builder.sitofp(builder.sub(builder.and_(w, self.mask), self.half), _F64)
        splat = builder.shuffle_vector(
            builder.insert_element(ir.Constant(_V2, ir.Undefined), c, _I32(0)),
            ir.Constant(_V2, ir.Undefined), ir.Constant(ir.VectorType(_I32, 2), [0, 0]))
        base, stride = row
        return splat, builder.inttoptr(builder.add(base, builder.mul(slot, stride)),
                                       _V2.as_pointer())


def _loop(builder, first, end, body):
    """Emit ``for i in range(first, end): body(i)``."""
    pre = builder.basic_block
    head = builder.append_basic_block("pairs.head")
    loop = builder.append_basic_block("pairs.body")
    done = builder.append_basic_block("pairs.done")
    builder.branch(head)
    builder.position_at_end(head)
    i = builder.phi(_I64)
    i.add_incoming(first, pre)
    builder.cbranch(builder.icmp_signed("<", i, end), loop, done)
    builder.position_at_end(loop)
    body(i)
    i.add_incoming(builder.add(i, ir.Constant(_I64, 1)), builder.basic_block)
    builder.branch(head)
    builder.position_at_end(done)


def _lists(builder, ops, dot=None, axpy=None):
    """The loops of a dot product over the list ``dot = (row, first, n)`` (`_Operands.row`) and
    of an axpy over ``axpy = (row, first, n, g)``, either None, interleaved as far as both go;
    each list in its order. Returns the dot product's accumulator (an alloca of a pair)."""
    acc = cgutils.alloca_once(builder, _V2)  # (mem2reg makes it a register)
    builder.store(ir.Constant(_V2, [0.0, 0.0]), acc)

    def dot_step(i):  # acc += c * pair
        splat, ptr = ops.operand(builder, i, dot[0])
        builder.store(builder.fadd(builder.load(acc),
                                   builder.fmul(splat, builder.load(ptr, align=8))), acc)

    def axpy_step(i):  # pair += c * g
        splat, ptr = ops.operand(builder, i, axpy[0])
        builder.store(builder.fadd(builder.load(ptr, align=8), builder.fmul(splat, axpy[3])),
                      ptr, align=8)

    def both(k):
        dot_step(builder.add(dot[1], k))
        axpy_step(builder.add(axpy[1], k))

    def loops():
        m = ir.Constant(_I64, 0)
        if dot and axpy:
            m = builder.select(builder.icmp_signed("<", dot[2], axpy[2]), dot[2], axpy[2])
            _loop(builder, m.type(0), m, both)
        for lst, step in ((dot, dot_step), (axpy, axpy_step)):
            if lst:
                _loop(builder, builder.add(lst[1], m), builder.add(lst[1], lst[2]), step)

    ops.versions(builder, loops)
    return acc


def _int64(context, builder, signature, args, k):
    return context.cast(builder, args[k], signature.args[k], types.int64)


def _pair(context, builder, ty, value):
    """The two-lane vector of a (float, float) tuple."""
    v = ir.Constant(_V2, ir.Undefined)
    for k in range(2):
        x = context.cast(builder, builder.extract_value(value, k), ty[k], types.float64)
        v = builder.insert_element(v, x, _I32(k))
    return v


def _pair_tuple(context, builder, signature, acc_slot):
    acc = builder.load(acc_slot)
    return context.make_tuple(builder, signature.return_type,
                              [builder.extract_element(acc, _I32(k)) for k in range(2)])


_INT_PAIR = (types.UniTuple, types.Tuple)


def _ints(*xs) -> bool:
    return all(isinstance(x, types.Integer) for x in xs)


def _span(x) -> bool:
    """Whether `x` is a (first, n) pair of integers."""
    return isinstance(x, _INT_PAIR) and len(x) == 2 and _ints(*x)


def _floats(x) -> bool:
    return isinstance(x, _INT_PAIR) and len(x) == 2 and all(isinstance(v, types.Float) for v in x)


@intrinsic
def pair_dot(typingctx, pv, idx, first, n, bits):
    """``(sum c * pv[j, 0], sum c * pv[j, 1])`` over the packed operands ``idx[first:first +
    n]``, summed first to last from 0.0."""
    if not (_pair_array(pv) and _word_array(idx) and _ints(first, n, bits)):
        return None

    def codegen(context, builder, signature, args):
        ops = _Operands(context, builder, signature, args, 1, 4)
        dot = (ops.row(context, builder, signature.args[0], args[0]),
               *(_int64(context, builder, signature, args, k) for k in (2, 3)))
        return _pair_tuple(context, builder, signature, _lists(builder, ops, dot=dot))

    return types.UniTuple(types.float64, 2)(pv, idx, first, n, bits), codegen


@intrinsic
def pair_axpy(typingctx, pg, idx, first, n, bits, g0, g1):
    """``pg[j] += c * (g0, g1)`` for the packed operands ``idx[first:first + n]`` in order."""
    if not (_pair_array(pg) and _word_array(idx) and _ints(first, n, bits)
            and all(isinstance(g, types.Float) for g in (g0, g1))):
        return None

    def codegen(context, builder, signature, args):
        ops = _Operands(context, builder, signature, args, 1, 4)
        g = context.make_tuple(builder, types.UniTuple(types.float64, 2), [
            context.cast(builder, args[k], signature.args[k], types.float64) for k in (5, 6)])
        axpy = (ops.row(context, builder, signature.args[0], args[0]),
                *(_int64(context, builder, signature, args, k) for k in (2, 3)),
                _pair(context, builder, types.UniTuple(types.float64, 2), g))
        _lists(builder, ops, axpy=axpy)
        return context.get_dummy_value()

    return types.void(pg, idx, first, n, bits, g0, g1), codegen


@intrinsic
def pair_dot_axpy(typingctx, pv, pg, idx, bits, fwd, bwd, g):
    """`pair_dot` of the operands ``fwd = (first, n)`` of `pv` and `pair_axpy` of the operands
    ``bwd`` into `pg` with ``g = (g0, g1)``, their loops interleaved: the dot product's adds are
    one chain of dependent operations, and the other list's independent loads, products and
    stores fill the time between them. Each keeps its own order (the dot product summed first
    to last, the adds into `pg` made first to last), so the bits are those of the two calls;
    `pv` is not written, so the order between the two lists does not matter."""
    if not (_pair_array(pv) and _pair_array(pg) and _word_array(idx) and _ints(bits)
            and _span(fwd) and _span(bwd) and _floats(g)):
        return None

    def codegen(context, builder, signature, args):
        ops = _Operands(context, builder, signature, args, 2, 3)
        sig = signature.args
        (f0, fn), (b0, bn) = ([context.cast(builder, builder.extract_value(args[k], j), sig[k][j],
                                            types.int64) for j in range(2)] for k in (4, 5))
        dot = (ops.row(context, builder, sig[0], args[0]), f0, fn)
        axpy = (ops.row(context, builder, sig[1], args[1]), b0, bn,
                _pair(context, builder, sig[6], args[6]))
        return _pair_tuple(context, builder, signature, _lists(builder, ops, dot, axpy))

    return types.UniTuple(types.float64, 2)(pv, pg, idx, bits, fwd, bwd, g), codegen
