"""Compiled kernels of the epoch loop: one micro-batch on a tape, the ordered reduction, optimisers.

The eager step of DESIGN.md is an evaluation's ``record_batch`` (every position of one micro-batch
recorded on the calling thread's tape) followed by `texel_chunk` (the loss records, the backward
sweep, the parameter gradients copied out); `tuner.train.replay` is the record-once alternative.
The batch is cut into micro-batches ("chunks") whose boundaries do not depend on the thread count,
and `reduce_chunks` adds the chunk gradients in chunk order with compensated sums, so the result is
bitwise identical for any number of threads.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tuner.tape.arena import zero_param_grad
from tuner.tape.ops import (backward, neumaier_add, operand_mark, push_operand, record_mul,
                            record_mul_scalar, record_sigmoid, record_sub_scalar, record_sum)

JIT = dict(cache=True, nogil=True, error_model="numpy")


@njit(**JIT)
def texel_chunk(tape, evals, results, rows, k, scale, grad_out, with_grad):
    """The Texel loss of one recorded micro-batch, and its gradient.

    ``evals[i]`` is the value index of the recorded evaluation of position ``rows[i]`` (it is
    overwritten with the index of its loss). Records ``(sigmoid(k * e_i) - result_i)^2`` for each
    position and their compensated sum; with `with_grad`, sweeps backward from ``scale * sum`` and
    copies the parameter gradients to `grad_out` (then clears them). With `scale` = 1/B the chunk
    gradients of a batch of B positions add up to the gradient of its mean squared error.
    Returns the unscaled sum of squared errors.
    """
    n = rows.shape[0]
    for i in range(n):
        s = record_sigmoid(tape, record_mul_scalar(tape, evals[i], k))
        d = record_sub_scalar(tape, s, results[rows[i]])
        evals[i] = record_mul(tape, d, d)
    first = operand_mark(tape)
    for i in range(n):
        push_operand(tape, evals[i], 1.0)
    total = record_sum(tape, first)
    sse = tape.val[total]
    if with_grad:
        out = record_mul_scalar(tape, total, scale)
        backward(tape, out)
        p = grad_out.shape[0]
        grad_out[:, :] = tape.pair_grad[:p, :]
        zero_param_grad(tape)
    return sse


@njit(**JIT)
def reduce_chunks(chunk_grads, n_chunks, out):
    """out = sum over chunks 0..n_chunks-1 of chunk_grads, in chunk order, compensated."""
    p = out.shape[0]
    for i in range(p):
        for j in range(2):
            s = 0.0
            c = 0.0
            for ch in range(n_chunks):
                s, c = neumaier_add(s, c, chunk_grads[ch, i, j])
            out[i, j] = s + c


@njit(**JIT)
def adamw_step(params, grad, m, v, mask, lr, beta1, beta2, eps, weight_decay, step):
    """One AdamW step (Clockwork's form) on the entries where `mask` is true.

    m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;  theta -= lr (m^ / (sqrt(v^) + eps) + wd theta)
    with bias corrections m^ = m / (1 - b1^step), v^ = v / (1 - b2^step). Masked-out entries keep
    their value and moments.
    """
    c1 = 1.0 - beta1 ** step
    c2 = 1.0 - beta2 ** step
    for i in range(params.shape[0]):
        if not mask[i]:
            continue
        for j in range(2):
            g = grad[i, j]
            m[i, j] = beta1 * m[i, j] + (1.0 - beta1) * g
            v[i, j] = beta2 * v[i, j] + (1.0 - beta2) * g * g
            mhat = m[i, j] / c1
            vhat = v[i, j] / c2
            params[i, j] -= lr * mhat / (np.sqrt(vhat) + eps) + lr * weight_decay * params[i, j]


@njit(**JIT)
def sgd_step(params, grad, velocity, mask, lr, momentum, weight_decay):
    """One SGD step with (heavy-ball) momentum and decoupled weight decay, where `mask` is true."""
    for i in range(params.shape[0]):
        if not mask[i]:
            continue
        for j in range(2):
            velocity[i, j] = momentum * velocity[i, j] + grad[i, j]
            params[i, j] -= lr * velocity[i, j] + lr * weight_decay * params[i, j]
