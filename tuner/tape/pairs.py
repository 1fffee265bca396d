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
2^(bits - 1)``, bits > 0.
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


def _operand_loop(context, builder, signature, args, step):
    """Emit ``for i in range(first, first + n): step(builder, pair pointer, coefficient splat)``
    over the packed words of ``args[1]``, the pairs of ``args[0]`` (first, n, bits: args 2-4)."""
    pairs = context.make_array(signature.args[0])(context, builder, args[0])
    words = context.make_array(signature.args[1])(context, builder, args[1])
    signed = signature.args[1].dtype.signed
    first, n, bits = (context.cast(builder, v, t, types.int64)
                      for v, t in zip(args[2:5], signature.args[2:5]))
    one = ir.Constant(_I64, 1)
    mask = builder.sub(builder.shl(one, bits), one)
    half = builder.shl(one, builder.sub(bits, one))
    row = builder.extract_value(pairs.strides, 0)
    base = builder.ptrtoint(pairs.data, _I64)
    pre = builder.basic_block
    head = builder.append_basic_block("pairs.head")
    body = builder.append_basic_block("pairs.body")
    done = builder.append_basic_block("pairs.done")
    end = builder.add(first, n)
    builder.branch(head)
    builder.position_at_end(head)
    i = builder.phi(_I64)
    i.add_incoming(first, pre)
    builder.cbranch(builder.icmp_signed("<", i, end), body, done)
    builder.position_at_end(body)
    w = builder.load(builder.gep(words.data, [i]))
    if w.type.width < 64:
        w = builder.sext(w, _I64) if signed else builder.zext(w, _I64)
    slot = builder.ashr(w, bits)
    c = builder.sitofp(builder.sub(builder.and_(w, mask), half), _F64)
    splat = builder.shuffle_vector(builder.insert_element(ir.Constant(_V2, ir.Undefined), c,
                                                          _I32(0)),
                                   ir.Constant(_V2, ir.Undefined),
                                   ir.Constant(ir.VectorType(_I32, 2), [0, 0]))
    ptr = builder.inttoptr(builder.add(base, builder.mul(slot, row)), _V2.as_pointer())
    step(builder, ptr, splat)
    i.add_incoming(builder.add(i, one), builder.basic_block)
    builder.branch(head)
    builder.position_at_end(done)


@intrinsic
def pair_dot(typingctx, pv, idx, first, n, bits):
    """``(sum c * pv[j, 0], sum c * pv[j, 1])`` over the packed operands ``idx[first:first +
    n]``, summed first to last from 0.0."""
    if not (_pair_array(pv) and _word_array(idx) and all(
            isinstance(x, types.Integer) for x in (first, n, bits))):
        return None

    def codegen(context, builder, signature, args):
        acc_slot = cgutils.alloca_once(builder, _V2)  # (mem2reg makes it a register)
        builder.store(ir.Constant(_V2, [0.0, 0.0]), acc_slot)

        def step(b, ptr, splat):
            x = b.load(ptr, align=8)
            b.store(b.fadd(b.load(acc_slot), b.fmul(splat, x)), acc_slot)

        _operand_loop(context, builder, signature, args, step)
        acc = builder.load(acc_slot)
        return context.make_tuple(builder, signature.return_type,
                                  [builder.extract_element(acc, _I32(k)) for k in range(2)])

    return types.UniTuple(types.float64, 2)(pv, idx, first, n, bits), codegen


@intrinsic
def pair_axpy(typingctx, pg, idx, first, n, bits, g0, g1):
    """``pg[j] += c * (g0, g1)`` for the packed operands ``idx[first:first + n]`` in order."""
    if not (_pair_array(pg) and _word_array(idx) and all(
            isinstance(x, types.Integer) for x in (first, n, bits))
            and all(isinstance(g, types.Float) for g in (g0, g1))):
        return None

    def codegen(context, builder, signature, args):
        g = builder.insert_element(ir.Constant(_V2, ir.Undefined),
                                   context.cast(builder, args[5], signature.args[5], types.float64),
                                   _I32(0))
        g = builder.insert_element(g, context.cast(builder, args[6], signature.args[6],
                                                   types.float64), _I32(1))

        def step(b, ptr, splat):
            b.store(b.fadd(b.load(ptr, align=8), b.fmul(splat, g)), ptr, align=8)

        _operand_loop(context, builder, signature, args, step)
        return context.get_dummy_value()

    return types.void(pg, idx, first, n, bits, g0, g1), codegen

