"""Fused CPU kernels: the proxy's stand-ins for Primus's fused Triton kernels, compiled by numba.

A Triton kernel runs a whole elementwise chain in one launch. The proxy's torch stand-ins still
dispatched two ops per Sinkhorn half-iteration (80 forward, 160 backward per call), so on the CPU
the fusion removed half of the chain's dispatches where the GPU removes all but one. Each kernel
here is one call, as the Triton pair is: Sinkhorn, RMSNorm, and MegaMoE's (clamped) SwiGLU, its
dispatch layout and its gathers and scatters (the stages of the real op's one persistent kernel).

Each kernel is compiled for its signatures (float32; float64 too for MegaMoE's data movement, which
the tests run in float64) when this module is imported, and numba caches it
on disk (`cache=True`): ~6.5 s once per checkout (`make setup` does it), then ~0.8 s to import
numba (0.3 s) and load them. The warm launcher imports this module before it forks, so no warm run pays
that. No kernel starts a thread (no `parallel=True`): a proxy rank keeps its one compute thread,
which `metric: cpu` times.

Layout: arrays come in and go out as torch holds them (Sinkhorn [T, n, n], the others [rows, H]).
Inside, Sinkhorn works on [n, n, T], so every inner loop runs over tokens and vectorises. Its
column and row halves share one loop nest (`_normalise`, `_normalise_backward`), which picks the
(row, column) of each member outside the token loop: bit-identical to separate nests, and within
3% of their time (0.114 against 0.111 ms a call, forward and backward, [512, 4, 4], 20 iterations).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

Array = np.ndarray  # float32, C-contiguous, shaped as each signature says
_FORWARD = "void(float32[:, :, ::1], int64, float32[:, :, ::1], float32[:, :, :, ::1], float32[:, :, ::1])"
_BACKWARD = "void(float32[:, :, ::1], float32[:, :, :, ::1], float32[:, :, ::1], float32[:, :, ::1])"


@njit(inline="always", nogil=True, fastmath=True, error_model="numpy")
def _line(a: int, b: int, columns: bool) -> tuple[int, int]:
    """Member b of line a as (row, column): lines are columns or rows of each n x n matrix. The
    choice is made per member, outside the token loop, so that loop stays unit-stride."""
    return (b, a) if columns else (a, b)


@njit(inline="always", nogil=True, fastmath=True, error_model="numpy")
def _normalise(src: Array, dst: Array, s: Array, columns: bool) -> None:
    """dst = src divided by its sums along each line (columns or rows), keeping the sums in s."""
    n, n_tok = src.shape[0], src.shape[2]
    for a in range(n):
        i, j = _line(a, 0, columns)
        for t in range(n_tok):
            s[a, t] = src[i, j, t]
        for b in range(1, n):
            i, j = _line(a, b, columns)
            for t in range(n_tok):
                s[a, t] += src[i, j, t]
        for b in range(n):
            i, j = _line(a, b, columns)
            for t in range(n_tok):
                dst[i, j, t] = src[i, j, t] / s[a, t]


@njit(inline="always", nogil=True, fastmath=True, error_model="numpy")
def _normalise_backward(g: Array, y: Array, s: Array, columns: bool, dot: Array) -> None:
    """y = x / s along each line gives dx = (dy - sum(dy * y)) / s, in place in g."""
    n, n_tok = g.shape[0], g.shape[2]
    for a in range(n):
        dot[:] = 0
        for b in range(n):
            i, j = _line(a, b, columns)
            for t in range(n_tok):
                dot[t] += g[i, j, t] * y[i, j, t]
        for b in range(n):
            i, j = _line(a, b, columns)
            for t in range(n_tok):
                g[i, j, t] = (g[i, j, t] - dot[t]) / s[a, t]


@njit(_FORWARD, cache=True, nogil=True, fastmath=True, error_model="numpy")
def sinkhorn_forward(logits: Array, iters: int, out: Array, iterates: Array, sums: Array) -> None:
    """Row softmax, then `iters` times a column and a row normalisation of each token's n x n
    matrix. Keeps what the backward needs: `iterates[k]` [n, n, T] is the matrix after k
    half-iterations (k = 0 is the softmax), `sums[k]` [n, T] the sums that half-iteration k+1
    divided by."""
    n_tok, n = logits.shape[0], logits.shape[1]
    p = iterates[0]
    for t in range(n_tok):
        for i in range(n):
            for j in range(n):
                p[i, j, t] = logits[t, i, j]
    top = np.empty(n_tok, np.float32)
    row_sum = np.empty(n_tok, np.float32)
    for i in range(n):
        for t in range(n_tok):
            top[t] = p[i, 0, t]
            row_sum[t] = 0
        for j in range(1, n):
            for t in range(n_tok):
                top[t] = max(top[t], p[i, j, t])
        for j in range(n):
            for t in range(n_tok):
                p[i, j, t] = math.exp(p[i, j, t] - top[t])
                row_sum[t] += p[i, j, t]
        for j in range(n):
            for t in range(n_tok):
                p[i, j, t] /= row_sum[t]
    for k in range(2 * iters):  # columns first, then rows
        _normalise(iterates[k], iterates[k + 1], sums[k], k % 2 == 0)
    last = iterates[2 * iters]
    for t in range(n_tok):
        for i in range(n):
            for j in range(n):
                out[t, i, j] = last[i, j, t]


@njit(_BACKWARD, cache=True, nogil=True, fastmath=True, error_model="numpy")
def sinkhorn_backward(grad: Array, iterates: Array, sums: Array, dlogits: Array) -> None:
    """The reverse pass over the kept iterates: y = x / s gives dx = (dy - sum(dy * y)) / s
    along the normalised axis; then the row softmax's backward."""
    n_tok, n = grad.shape[0], grad.shape[1]
    g = np.empty((n, n, n_tok), np.float32)
    for t in range(n_tok):
        for i in range(n):
            for j in range(n):
                g[i, j, t] = grad[t, i, j]
    dot = np.empty(n_tok, np.float32)
    for k in range(iterates.shape[0] - 2, -1, -1):  # even k: a column normalisation
        _normalise_backward(g, iterates[k + 1], sums[k], k % 2 == 0, dot)
    p = iterates[0]
    for i in range(n):
        dot[:] = 0
        for j in range(n):
            for t in range(n_tok):
                dot[t] += g[i, j, t] * p[i, j, t]
        for t in range(n_tok):
            for j in range(n):
                dlogits[t, i, j] = p[i, j, t] * (g[i, j, t] - dot[t])


_NORM_FORWARD = "void(float32[:, ::1], float32[::1], float32, float32[:, ::1], float32[::1])"
_NORM_BACKWARD = "void(float32[:, ::1], float32[:, ::1], float32[::1], float32[::1], float32[:, ::1], float32[::1])"


@njit(_NORM_FORWARD, cache=True, nogil=True, fastmath=True, error_model="numpy")
def rms_norm_forward(x: Array, weight: Array, eps: float, out: Array, inv_rms: Array) -> None:
    """out = x / sqrt(mean(x**2) + eps) * weight over each row of x [R, H]; keeps 1/rms per row."""
    n_rows, width = x.shape
    for r in range(n_rows):
        total = np.float32(0.0)
        for h in range(width):
            total += x[r, h] * x[r, h]
        inv = 1 / math.sqrt(total / width + eps)
        inv_rms[r] = inv
        for h in range(width):
            out[r, h] = x[r, h] * inv * weight[h]


@njit(_NORM_BACKWARD, cache=True, nogil=True, fastmath=True, error_model="numpy")
def rms_norm_backward(grad: Array, x: Array, inv_rms: Array, weight: Array, dx: Array, dweight: Array) -> None:
    """With xhat = x / rms: dweight = sum over rows of grad * xhat, and
    dx = (grad * weight - xhat * mean(grad * weight * xhat)) / rms."""
    n_rows, width = x.shape
    for h in range(width):
        dweight[h] = 0
    for r in range(n_rows):
        inv = inv_rms[r]
        dot = np.float32(0.0)
        for h in range(width):
            xhat = x[r, h] * inv
            dweight[h] += grad[r, h] * xhat
            dot += grad[r, h] * weight[h] * xhat
        dot /= width
        for h in range(width):
            dx[r, h] = inv * (grad[r, h] * weight[h] - x[r, h] * inv * dot)


_SWIGLU_FORWARD = "void(float32[:, ::1], float32, float32[:, ::1])"
_SWIGLU_BACKWARD = "void(float32[:, ::1], float32[:, ::1], float32, float32[:, ::1], float32[:, ::1])"


# exp(x) = p(z) * 2**n, n = round(x / ln 2), z = x - n ln 2 (ln 2 in two parts, so z is exact):
# Cephes' single-precision expf. numba's math.exp is a scalar libm call (pip's llvmlite has no
# SVML), which keeps a loop from vectorising; a fused GPU kernel's exp is the hardware's fast
# exp2, and torch's own silu a vectorised (Sleef) exp. Written out, in float32 throughout, the
# SwiGLU kernels below take 31 against 237 us forward and 52 against 264 us backward on
# [3072, 64] (one thread; 41 and 61 us compiled for haswell), within 1e-6 of float64 torch
# forward and 1e-5 backward (tests/unit/workload/test_train.py).
_EXP_LO, _EXP_HI = np.float32(-87.0), np.float32(88.0)  # 2**n stays a normal float32
_ONE, _ZERO = np.float32(1), np.float32(0)  # a Python 1 or 0 would widen float32 arithmetic to float64
_LOG2E, _LN2_HI, _LN2_LO = np.float32(1.4426950408889634), np.float32(0.693359375), np.float32(-2.12194440e-4)
_EXP_POLY = tuple(
    np.float32(c)
    for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
)


@njit(inline="always", nogil=True, fastmath=True, error_model="numpy")
def _exp_parts(x: np.float32) -> tuple[np.float32, np.int32]:
    """exp(x) as (p(z), the float32 bits of 2**n): their product is exp(x), x clamped to the
    float32 range. All float32 (a Python int or math.floor would widen it to float64 and int64,
    whose conversions AVX2 cannot vectorise)."""
    x = min(max(x, _EXP_LO), _EXP_HI)
    n = np.floor(x * _LOG2E + np.float32(0.5))
    z = x - n * _LN2_HI - n * _LN2_LO
    p = _EXP_POLY[0]
    for c in _EXP_POLY[1:]:
        p = p * z + c
    # the bits of 2**n, (n + 127) << 23, made in float32 (exact: below 2**31) and converted once
    return p * z * z + z + _ONE, np.int32((n + np.float32(127)) * np.float32(8388608))


@njit(inline="always", nogil=True, fastmath=True, error_model="numpy")
def _gate_exps(h: Array, r: int, limit: float, mant: Array, bits: Array) -> None:
    """exp(-gate) for row r's gates as mant * bits.view(float32): the 2**n factor goes through
    an int32 array because numba has no scalar bit cast; both loops vectorise."""
    for f in range(mant.shape[0]):
        gate = min(h[r, f], limit) if limit > 0 else h[r, f]
        mant[f], bits[f] = _exp_parts(-gate)


@njit(inline="always", nogil=True, fastmath=True, error_model="numpy")
def _exp_buffers(width: int) -> tuple[Array, Array, Array]:
    """A row's exp(-gate) parts for _gate_exps: mantissas, 2**n bits, and those bits as float32."""
    mant, bits = np.empty(width, np.float32), np.empty(width, np.int32)
    return mant, bits, bits.view(np.float32)


@njit(inline="always", nogil=True, fastmath=True, error_model="numpy")
def _gate_up(h: Array, r: int, f: int, width: int, limit: float) -> tuple[np.float32, np.float32, bool, bool]:
    """Row r's gate and up at f, clamped as V4 clamps them when limit > 0 (gate above, up on both
    sides), and whether each passed its clamp (the backward stops the grad where one bit)."""
    gate, up = h[r, f], h[r, width + f]
    if limit > 0:
        return min(gate, limit), min(max(up, -limit), limit), gate < limit, -limit < up < limit
    return gate, up, True, True


@njit(_SWIGLU_FORWARD, cache=True, nogil=True, fastmath=True, error_model="numpy")
def swiglu_forward(h: Array, limit: float, act: Array) -> None:
    """act = silu(gate) * up over rows h = [gate | up] [R, 2F]; with limit > 0, V4's clamped form
    (gate clamped above, up on both sides)."""
    n_rows, width = act.shape
    mant, bits, scale = _exp_buffers(width)
    for r in range(n_rows):
        _gate_exps(h, r, limit, mant, bits)
        for f in range(width):
            gate, up, _, _ = _gate_up(h, r, f, width, limit)
            act[r, f] = gate * (_ONE / (_ONE + mant[f] * scale[f])) * up  # as the backward writes it


@njit(_SWIGLU_BACKWARD, cache=True, nogil=True, fastmath=True, error_model="numpy")
def swiglu_backward(dact: Array, h: Array, limit: float, dh: Array, act: Array) -> None:
    """dh = [d gate | d up] from dact; the grad stops where a clamp bit, as clamp's backward.
    Also writes act again (the wgrad of the second GEMM needs it; recomputing beats keeping it)."""
    n_rows, width = act.shape
    mant, bits, scale = _exp_buffers(width)
    for r in range(n_rows):
        _gate_exps(h, r, limit, mant, bits)
        for f in range(width):
            gate, up, gate_on, up_on = _gate_up(h, r, f, width, limit)
            sig = _ONE / (_ONE + mant[f] * scale[f])
            silu = gate * sig
            act[r, f] = silu * up
            dh[r, f] = dact[r, f] * up * sig * (_ONE + gate * (_ONE - sig)) if gate_on else _ZERO
            dh[r, width + f] = dact[r, f] * silu if up_on else _ZERO


# ---------------------------------------------------------------- MegaMoE's layout and data movement
# The real MegaMoE computes its dispatch layout, gathers the routed tokens, buckets them per expert
# and scatters the weighted outputs home inside its one persistent kernel. The proxy's torch
# spelling took ~25 dispatches a layer for the same (a stable argsort alone is ~70 us here); each
# kernel below is one call. Float kernels take float32 (training) or float64 (the tests' reference
# comparison): every float array of a call has the one type.
def _float_sigs(template: str) -> list[str]:
    return [template.replace("F", dtype) for dtype in ("float32", "float64")]


@njit(
    "void(int64[::1], int64, int64, int64, int64[::1], int64[::1], int64[::1], int64[:, ::1])",
    cache=True,
    nogil=True,
    error_model="numpy",
)
def moe_plan(
    expert: Array, k: int, per_chunk: int, n_local: int, order: Array, token: Array, local_id: Array, send: Array
) -> None:
    """The routed (token, slot) pairs (`expert`: each pair's global expert, token-major) ordered
    chunk-major, then by expert, hence by destination rank: a stable counting sort. Writes each
    placed pair's index (`order`), token and destination-local expert id, and the pairs each chunk
    sends to each rank (`send` [chunks, world])."""
    world = send.shape[1]
    n_exp = n_local * world
    if expert.shape[0] and (expert.shape[0] - 1) // k // per_chunk >= send.shape[0]:
        raise ValueError("moe_plan: more chunks than send has rows")
    start = np.zeros(send.shape[0] * n_exp + 1, np.int64)
    for p in range(expert.shape[0]):
        if expert[p] < 0 or expert[p] >= n_exp:
            raise ValueError("moe_plan: an expert id out of range")
        start[(p // k // per_chunk) * n_exp + expert[p] + 1] += 1
    for key in range(start.shape[0] - 1):
        start[key + 1] += start[key]
    send[:, :] = 0
    for p in range(expert.shape[0]):
        chunk, e = p // k // per_chunk, expert[p]
        key = chunk * n_exp + e
        at = start[key]
        start[key] = at + 1
        order[at], token[at], local_id[at] = p, p // k, e % n_local
        send[chunk, e // n_local] += 1


@njit(_float_sigs("void(F[:, ::1], int64[::1], int64[::1], F[:, ::1])"), cache=True, nogil=True, error_model="numpy")
def gather_payload(x: Array, token: Array, local_id: Array, out: Array) -> None:
    """Dispatch payload rows: each pair's token row, then its destination-local expert id as one
    more column (exact in float32 below 2**24)."""
    hid = x.shape[1]
    for i in range(token.shape[0]):
        t = token[i]
        for c in range(hid):
            out[i, c] = x[t, c]
        out[i, hid] = local_id[i]


@njit(_float_sigs("int64(F[:, ::1], int64, int64[::1])"), cache=True, nogil=True, error_model="numpy")
def payload_slots(payload: Array, n_local: int, slot: Array) -> int:
    """Each received row's slot in [n_local * cap] per-expert buckets, read from its id column (the
    last), arrival order kept within an expert; returns cap, the largest expert's row count."""
    counts = np.zeros(n_local, np.int64)
    last = payload.shape[1] - 1
    for r in range(payload.shape[0]):
        e = np.int64(payload[r, last])
        if e < 0 or e >= n_local:
            raise ValueError("payload_slots: an expert id out of range")
        counts[e] += 1
    cap = counts.max() if n_local else 0
    counts[:] = 0
    for r in range(payload.shape[0]):
        e = np.int64(payload[r, last])
        slot[r] = e * cap + counts[e]
        counts[e] += 1
    return cap


@njit(_float_sigs("void(F[:, ::1], int64[::1], F[:, ::1])"), cache=True, nogil=True, error_model="numpy")
def scatter_rows(rows: Array, slot: Array, out: Array) -> None:
    """out[slot[r]] = the first out.shape[1] columns of rows[r] (a payload's id column stays behind)."""
    width = out.shape[1]
    for r in range(slot.shape[0]):
        s = slot[r]
        for c in range(width):
            out[s, c] = rows[r, c]


@njit(_float_sigs("void(F[:, ::1], F[::1], int64[::1], F[:, ::1])"), cache=True, nogil=True, error_model="numpy")
def scatter_add_rows(rows: Array, weight: Array, index: Array, out: Array) -> None:
    """out = 0, then out[index[r]] += rows[r] * weight[r], in row order (index_add_'s order); an
    empty `weight` adds the rows as they are."""
    if rows.shape[0] < index.shape[0] or 0 < weight.shape[0] < index.shape[0]:
        raise ValueError("scatter_add_rows: fewer rows or weights than indices")
    out[:, :] = 0
    if weight.shape[0] == 0:
        for r in range(index.shape[0]):
            t = index[r]
            for c in range(out.shape[1]):
                out[t, c] += rows[r, c]
        return
    for r in range(index.shape[0]):
        t, w = index[r], weight[r]
        for c in range(out.shape[1]):
            out[t, c] += rows[r, c] * w


@njit(
    _float_sigs("void(F[:, ::1], int64[::1], F[::1], F[:, ::1], F[:, ::1], F[::1])"),
    cache=True,
    nogil=True,
    error_model="numpy",
)
def gather_scale_dot(
    grad: Array, index: Array, weight: Array, rows: Array, grad_rows: Array, grad_weight: Array
) -> None:
    """The weighted scatter-add's backward in one pass: grad_rows[r] = grad[index[r]] * weight[r],
    grad_weight[r] = grad[index[r]] . rows[r] (summed in float64: a float32 running sum over a wide
    row would lose what torch's pairwise sum keeps)."""
    if weight.shape[0] < index.shape[0] or rows.shape[0] < index.shape[0] or grad_rows.shape[0] < index.shape[0]:
        raise ValueError("gather_scale_dot: fewer rows or weights than indices")
    for r in range(index.shape[0]):
        t, w = index[r], weight[r]
        dot = 0.0
        for c in range(rows.shape[1]):
            dot += grad[t, c] * rows[r, c]
            grad_rows[r, c] = grad[t, c] * w
        grad_weight[r] = dot
