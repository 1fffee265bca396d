"""The (mg, eg) pair kernels of a packed operand list, the pair as one two-lane vector.

A linear combination of pairs does the same arithmetic on mg and on eg, and the two halves of a
pair slot are next to each other in the arena (``pair_val[j]``, ``pair_grad[j]``: one row of a
C-ordered (n, 2) array). Numba turns off LLVM's SLP vectoriser, the pass that would do both halves
with one instruction, so these kernels are written in LLVM IR with ``<2 x double>`` operations:
one load, one multiply and one add (forward), or one load, multiply, add and store (backward) per
operand instead of two of each. Each lane is the same IEEE operation in the same order as the
scalar loops of `tuner.tape.ops`, so the results are the same bits; only the instruction count
changes.

A dot product is summed in `ACCUMULATORS` = 4 partial sums: operand ``first + k`` is added into
sum ``k % 4`` (each from 0.0, in operand order), and the result is ``(s0 + s1) + (s2 + s3)``.
One running sum is a chain of dependent adds (about 4 cycles each) that the loads and products
of a short list cannot hide; four chains run side by side. The order is fixed by the operand
count alone, so the bits do not depend on the machine or the thread count. The last ``n % 4``
operands are added without branches: three adds whose term is a select (the product, or -0.0,
which leaves a sum as it is, for the operands past the list), since the count of a randomly
chosen position is not predictable and a mispredicted branch costs more than the three adds.

Operands are packed words (see `tuner.tape.ops.operand`): ``slot << bits | coefficient +
2^(bits - 1)``, bits > 0. A coefficient of at most `TABLE_BITS` bits is read from a table of the
(exact, small integer) values rather than converted: one load and broadcast instead of three
instructions.
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

#: The number of partial sums of a dot product (see the module docstring).
ACCUMULATORS = 4


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
        word = self.words.data.type.pointee
        self.zero_word = cgutils.alloca_once_value(builder, ir.Constant(word, 0))
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

    def operand(self, builder, i, row, live=None):
        """Operand ``i``'s coefficient splat and a pointer to its pair in the array of `row`
        (base address, row stride); where `live` (an i1) is false, those of a word of slot 0
        instead of ``words[i]``, which is not read (it may lie past the array)."""
        ptr = builder.gep(self.words.data, [i])
        if live is not None:
            ptr = builder.select(live, ptr, self.zero_word)
        w = builder.load(ptr)
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


def _dot(builder, ops, row, first, n):
    """The pair dot product of the operands ``first .. first + n - 1`` of `row`
    (`_Operands.row`): operand ``first + k`` added into partial sum ``k % 4``, each sum from 0.0
    in operand order, then ``(s0 + s1) + (s2 + s3)``. Returns an alloca of the pair."""
    zero = ir.Constant(_V2, [0.0, 0.0])
    sums = [cgutils.alloca_once(builder, _V2) for _ in range(ACCUMULATORS)]
    out = cgutils.alloca_once(builder, _V2)  # (mem2reg makes them registers)

    def add(k, i, live=None):  # sums[k] += c * pair (or -0.0, x + -0.0 being x, if not live)
        splat, ptr = ops.operand(builder, i, row, live)
        term = builder.fmul(splat, builder.load(ptr, align=8))
        if live is not None:
            term = builder.select(live, term, ir.Constant(_V2, [-0.0, -0.0]))
        builder.store(builder.fadd(builder.load(sums[k]), term), sums[k])

    def group(g):  # operands first + 4g .. first + 4g + 3
        i = builder.add(first, builder.mul(g, ir.Constant(_I64, ACCUMULATORS)))
        for k in range(ACCUMULATORS):
            add(k, builder.add(i, ir.Constant(_I64, k)))

    def loops():
        for acc in sums:
            builder.store(zero, acc)
        groups = builder.sdiv(n, ir.Constant(_I64, ACCUMULATORS))
        _loop(builder, ir.Constant(_I64, 0), groups, group)
        tail = builder.add(first, builder.mul(groups, ir.Constant(_I64, ACCUMULATORS)))
        left = builder.srem(n, ir.Constant(_I64, ACCUMULATORS))
        for k in range(ACCUMULATORS - 1):  # the last n % 4 operands into sums 0, 1, 2
            add(k, builder.add(tail, ir.Constant(_I64, k)),
                builder.icmp_signed(">", left, ir.Constant(_I64, k)))
        s = [builder.load(acc) for acc in sums]
        builder.store(builder.fadd(builder.fadd(s[0], s[1]), builder.fadd(s[2], s[3])), out)

    ops.versions(builder, loops)
    return out


def _axpy(builder, ops, row, first, n, g):
    """``pair += c * g`` for the operands ``first .. first + n - 1`` of `row`, in order."""
    def step(i):
        splat, ptr = ops.operand(builder, i, row)
        builder.store(builder.fadd(builder.load(ptr, align=8), builder.fmul(splat, g)),
                      ptr, align=8)

    ops.versions(builder, lambda: _loop(builder, first, builder.add(first, n), step))


def _int64(context, builder, signature, args, k):
    return context.cast(builder, args[k], signature.args[k], types.int64)


def _pair_tuple(context, builder, signature, slot):
    pair = builder.load(slot)
    return context.make_tuple(builder, signature.return_type,
                              [builder.extract_element(pair, _I32(k)) for k in range(2)])


def _ints(*xs) -> bool:
    return all(isinstance(x, types.Integer) for x in xs)


@intrinsic
def pair_dot(typingctx, pv, idx, first, n, bits):
    """``(sum c * pv[j, 0], sum c * pv[j, 1])`` over the packed operands ``idx[first:first +
    n]``, in four partial sums (see the module docstring)."""
    if not (_pair_array(pv) and _word_array(idx) and _ints(first, n, bits)):
        return None

    def codegen(context, builder, signature, args):
        ops = _Operands(context, builder, signature, args, 1, 4)
        row = ops.row(context, builder, signature.args[0], args[0])
        first, n = (_int64(context, builder, signature, args, k) for k in (2, 3))
        return _pair_tuple(context, builder, signature, _dot(builder, ops, row, first, n))

    return types.UniTuple(types.float64, 2)(pv, idx, first, n, bits), codegen


@intrinsic
def pair_axpy(typingctx, pg, idx, first, n, bits, g0, g1):
    """``pg[j] += c * (g0, g1)`` for the packed operands ``idx[first:first + n]`` in order."""
    if not (_pair_array(pg) and _word_array(idx) and _ints(first, n, bits)
            and all(isinstance(g, types.Float) for g in (g0, g1))):
        return None

    def codegen(context, builder, signature, args):
        ops = _Operands(context, builder, signature, args, 1, 4)
        row = ops.row(context, builder, signature.args[0], args[0])
        first, n = (_int64(context, builder, signature, args, k) for k in (2, 3))
        g = ir.Constant(_V2, ir.Undefined)
        for k in range(2):
            x = context.cast(builder, args[5 + k], signature.args[5 + k], types.float64)
            g = builder.insert_element(g, x, _I32(k))
        _axpy(builder, ops, row, first, n, g)
        return context.get_dummy_value()

    return types.void(pg, idx, first, n, bits, g0, g1), codegen
