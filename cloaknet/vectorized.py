"""Vectorized invisibility-cloak encoding for many users at once.

This is the bulk path used by simulations, experiments and the benchmark. It implements the
encoder of Ghazi, Pagh and Velingker (arXiv 1906.08320), Algorithm 1, for a whole population:
user ``i`` with quantized value ``v_i`` sends ``m`` shares, the first ``m - 1`` uniform in
``{0..N-1}`` and the last one chosen so that the row sums to ``v_i`` modulo ``N``. The
analyzer sums all shares modulo ``N`` (:func:`sum_mod`).

Two representations are used, chosen by the modulus alone:

* ``N < FAST_MODULUS_LIMIT`` (``2**63``): arrays of dtype ``uint64``. Every residue is below
  ``2**63``, so the sum of two residues is below ``2**64`` and never wraps; modular addition
  is ``acc = acc + y; acc -= N where acc >= N``. Longer sums are grouped so that a group's
  plain ``uint64`` sum provably cannot overflow before it is reduced.
* ``N >= FAST_MODULUS_LIMIT`` (the paper allows ``N`` beyond ``2**64``): arrays of dtype
  ``object`` holding Python ``int`` values. Exact but slow (about 2 * 10**6 shares/s against
  3-5 * 10**7 on the ``uint64`` path); meant for small populations and for tests.

Randomness comes only from the injected :class:`~cloaknet.randomness.RandomSource`
(``rng.token_bytes`` for bulk bits, ``rng.randbelow`` for the rare tie-breaks of
:func:`shuffle`); the default is :data:`~cloaknet.randomness.SYSTEM_RANDOM`, the OS CSPRNG.
Uniform residues are drawn by rejection: each value takes the low ``(N - 1).bit_length()``
bits of ``ceil(bits / 8)`` fresh bytes, values ``>= N`` are rejected, and only the rejected
positions are redrawn, so there is no modulo bias. (``(N - 1).bit_length()`` equals
``N.bit_length()`` except for ``N`` a power of two, where it needs no rejection at all.)
With :class:`~cloaknet.randomness.DeterministicRandom` every function here is reproducible
bit for bit, given the same arguments (including ``chunk_users``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator, Sequence
from typing import Any, Final, TypeAlias, TypeVar

import numpy as np
from numpy.typing import NDArray

from cloaknet.errors import InputRangeError, ParameterError
from cloaknet.randomness import SYSTEM_RANDOM, RandomSource
from cloaknet.validation import check_int

__all__ = [
    "FAST_MODULUS_LIMIT",
    "ResidueArray",
    "encode_many",
    "encode_many_chunks",
    "exact_sum",
    "quantize",
    "shuffle",
    "sum_mod",
    "uniform_residues",
]

FAST_MODULUS_LIMIT: Final[int] = 2**63
"""Moduli strictly below this use ``uint64`` arrays; larger ones use ``object`` arrays."""

ResidueArray: TypeAlias = NDArray[np.uint64] | NDArray[np.object_]
"""Residues in ``[0, N)``: ``uint64`` if ``N < FAST_MODULUS_LIMIT``, else Python ints."""

_ScalarT = TypeVar("_ScalarT", bound=np.generic)

_U64_MAX: Final[int] = 2**64 - 1
_LOW32: Final = np.uint64(0xFFFF_FFFF)
_SHIFT32: Final = np.uint64(32)
# Block length of _exact_sum_u64: any block below 2**32 elements sums its 32-bit halves in
# uint64 without wrapping; 2**22 keeps the temporaries small.
_EXACT_SUM_BLOCK: Final[int] = 2**22
# Values drawn per token_bytes call when filling a large array (bounds transient memory).
_DRAW_BLOCK: Final[int] = 2**22
# Dekker/Veltkamp splitting constant for binary64: 2**27 + 1.
_SPLITTER: Final[float] = 134217729.0
_MAX_PRECISION: Final[int] = 2**53
# shuffle() needs at least this many random key bits next to the index bits.
_MIN_SHUFFLE_KEY_BITS: Final[int] = 24


# --------------------------------------------------------------------------------------
# validation helpers


def _check_modulus(modulus: object, minimum: int) -> int:
    return check_int("modulus", modulus, minimum)


# --------------------------------------------------------------------------------------
# uniform residues


def _draw_raw(count: int, bits: int, rng: RandomSource) -> NDArray[np.unsignedinteger[Any]]:
    """``count`` fresh unsigned words whose low ``8 * ceil(bits / 8)`` bits are random.

    Requires ``1 <= bits <= 64``. Value ``i`` is bytes ``[i * w, (i + 1) * w)`` of one
    ``rng.token_bytes(count * w)`` call, ``w = ceil(bits / 8)``, read little-endian (so results
    do not depend on the platform's byte order). For ``w`` in ``{1, 2, 4, 8}`` this is a plain
    ``<u{w}`` view. Otherwise it is a zero-copy strided view of overlapping, unaligned 8-byte
    reads at stride ``w`` (the buffer padded with ``8 - w`` zero bytes): the bits above
    ``8 * w`` then come from the next value's bytes, and callers must mask them away (as
    :func:`_mask` does). The returned array is read-only.
    """
    width = (bits + 7) // 8
    data = rng.token_bytes(count * width)
    if width in (1, 2, 4, 8):
        return np.frombuffer(data, dtype=np.dtype(f"<u{width}"))
    padded = data + bytes(8 - width)
    return np.ndarray(shape=(count,), dtype=np.dtype("<u8"), buffer=padded, strides=(width,))


def _mask(bits: int) -> np.uint64:
    """The uint64 mask of the low ``bits`` bits (``1 <= bits <= 64``)."""
    return np.uint64(_U64_MAX >> (64 - bits))


def _draw_masked_u64(count: int, bits: int, rng: RandomSource) -> NDArray[np.uint64]:
    """``count`` values, each the low ``bits`` bits of fresh bytes (see :func:`_draw_raw`)."""
    drawn: NDArray[np.uint64] = np.bitwise_and(
        _draw_raw(count, bits, rng), _mask(bits), dtype=np.uint64
    )
    return drawn


def _fill_masked(target: NDArray[np.uint64], bits: int, rng: RandomSource) -> None:
    """Overwrite ``target`` (any shape, may be a strided view) with uniform ``bits``-bit
    values, consuming ``ceil(bits / 8)`` bytes per entry in C order."""
    raw = _draw_raw(target.size, bits, rng).reshape(target.shape)
    np.bitwise_and(raw, _mask(bits), out=target, dtype=np.uint64)


def _redraw_rejected(flat: NDArray[np.uint64], modulus: int, bits: int, rng: RandomSource) -> None:
    """Rejection step: redraw (only) the entries of the 1-D array ``flat`` that are
    ``>= modulus`` with fresh ``bits``-bit values, until every entry is ``< modulus``.

    Requires ``bits = (modulus - 1).bit_length() >= 1``. A fresh draw is accepted with
    probability ``modulus / 2**bits > 1/2``, so a handful of rounds suffice; the accepted
    value is uniform on ``[0, modulus)`` and independent of everything else.
    """
    if modulus == 1 << bits:
        return  # every bit pattern is a residue: nothing can be rejected
    limit = np.uint64(modulus)
    pending = np.flatnonzero(flat >= limit)
    while pending.size:
        fresh = _draw_masked_u64(pending.size, bits, rng)
        accepted = fresh < limit
        flat[pending[accepted]] = fresh[accepted]
        pending = pending[~accepted]


def _uniform_ints(count: int, modulus: int, rng: RandomSource) -> list[int]:
    """``count`` uniform Python ints in ``[0, modulus)`` by rejection (any ``modulus >= 1``).

    Each value consumes ``ceil(bits / 8)`` bytes (little-endian), masked to
    ``bits = (modulus - 1).bit_length()`` bits.
    """
    bits = (modulus - 1).bit_length()
    if bits == 0:
        return [0] * count
    nbytes = (bits + 7) // 8
    mask = (1 << bits) - 1
    result: list[int] = [0] * count
    pending = list(range(count))
    while pending:
        raw = rng.token_bytes(len(pending) * nbytes)
        still: list[int] = []
        for slot, pos in enumerate(pending):
            value = int.from_bytes(raw[slot * nbytes : (slot + 1) * nbytes], "little") & mask
            if value < modulus:
                result[pos] = value
            else:
                still.append(pos)
        pending = still
    return result


def _object_array(values: list[int], shape: tuple[int, ...]) -> NDArray[np.object_]:
    out: NDArray[np.object_] = np.empty(len(values), dtype=object)
    out[:] = values
    return out.reshape(shape)


def uniform_residues(
    modulus: int, shape: tuple[int, ...], rng: RandomSource = SYSTEM_RANDOM
) -> ResidueArray:
    """Draw an array of independent uniform residues in ``[0, modulus)``.

    Contract:
      * ``modulus``: an ``int >= 1``; otherwise :class:`~cloaknet.errors.ParameterError`.
      * ``shape``: a tuple of non-negative ints; otherwise ``ParameterError``.
      * Returns an array of exactly ``shape``; dtype ``uint64`` if
        ``modulus < FAST_MODULUS_LIMIT``, else dtype ``object`` holding Python ints (slow
        path, ``ceil(bits / 8)`` bytes per value).
      * Every entry is uniform on ``[0, modulus)`` and independent, given uniform bytes from
        ``rng.token_bytes``: values are the low ``(modulus - 1).bit_length()`` bits of fresh
        bytes, and values ``>= modulus`` are rejected and redrawn (no modulo bias). Each draw
        consumes ``ceil(bits / 8)`` bytes (little-endian), so the byte stream and hence the
        result is reproducible for a deterministic ``rng``.
    """
    n_mod = _check_modulus(modulus, 1)
    if not isinstance(shape, tuple) or not all(
        isinstance(d, int | np.integer) and not isinstance(d, bool) and int(d) >= 0
        for d in shape
    ):
        raise ParameterError(f"shape must be a tuple of non-negative ints, got {shape!r}")
    dims = tuple(int(d) for d in shape)
    count = math.prod(dims)
    if n_mod >= FAST_MODULUS_LIMIT:
        return _object_array(_uniform_ints(count, n_mod, rng), dims)
    flat: NDArray[np.uint64] = np.zeros(count, dtype=np.uint64)
    bits = (n_mod - 1).bit_length()
    if bits:
        for start in range(0, count, _DRAW_BLOCK):
            block = flat[start : start + _DRAW_BLOCK]
            _fill_masked(block, bits, rng)
            _redraw_rejected(block, n_mod, bits, rng)
    return flat.reshape(dims)


# --------------------------------------------------------------------------------------
# quantization


def _veltkamp_split(a: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Split ``a`` into ``hi + lo == a`` with at most 26 significant bits each (no overflow
    for ``|a| < 2**996``)."""
    c = _SPLITTER * a
    hi = c - (c - a)
    return hi, a - hi


def _first_index(mask: NDArray[np.bool_]) -> int | tuple[int, ...]:
    flat_pos = int(np.argmax(mask.reshape(-1)))
    if mask.ndim == 1:
        return flat_pos
    return tuple(int(i) for i in np.unravel_index(flat_pos, mask.shape))


def quantize(
    x: NDArray[np.float64] | Sequence[float], precision: int, *, clip: bool = False
) -> NDArray[np.int64]:
    """Exact ``floor(x * precision)`` of each input, as the encoder's ``x̄ = floor(x k)``.

    Contract:
      * ``x``: array-like of reals convertible to ``float64`` without loss (Python floats,
        float32/float64 arrays, small ints); any shape. Each value must lie in ``[0, 1]``.
        A NaN, an infinity or a value outside ``[0, 1]`` raises
        :class:`~cloaknet.errors.InputRangeError` naming the first offending index (an int
        for 1-D input, a tuple otherwise) and its value -- unless ``clip=True``, in which
        case values (including ``±inf``) are clipped into ``[0, 1]``. NaN is always an error.
        Input that numpy cannot convert to ``float64`` also raises ``InputRangeError``.
      * ``precision`` (``k``): an ``int`` with ``1 <= k < 2**53``; otherwise
        :class:`~cloaknet.errors.ParameterError`.
      * Returns ``int64`` of the same shape with values in ``[0, k]``. The result is the floor
        of the *real* product of the binary64 value ``x`` and ``k`` (as
        ``math.floor(fractions.Fraction(x) * k)``), not of the rounded float product.
    """
    k = check_int("precision", precision, 1)
    if k >= _MAX_PRECISION:
        raise ParameterError(f"precision must be < 2**53, got {k}")
    try:
        xs = np.array(x, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InputRangeError(f"inputs must be real numbers: {exc}") from exc

    nan = np.isnan(xs)
    if nan.any():
        raise InputRangeError(f"input at index {_first_index(nan)} is NaN")
    if clip:
        np.clip(xs, 0.0, 1.0, out=xs)
    else:
        bad = ~((xs >= 0.0) & (xs <= 1.0))
        if bad.any():
            where = _first_index(bad)
            raise InputRangeError(
                f"input at index {where} is {xs[where]!r}, outside [0, 1] "
                "(pass clip=True to clip)"
            )

    # Error-free product (Dekker's TwoProduct via Veltkamp splitting; round-to-nearest
    # binary64, no FMA): p = fl(x*k) and e = x*k - p exactly, so the real product is p + e.
    kf = float(k)  # exact: k < 2**53
    p = xs * kf
    x_hi, x_lo = _veltkamp_split(xs)
    k_hi, k_lo = _veltkamp_split(np.array(kf))
    e = ((x_hi * k_hi - p) + x_hi * k_lo + x_lo * k_hi) + x_lo * k_lo

    # Why floor(p), corrected only where p is an integer and e < 0, is floor(x*k):
    # let r = x*k (real) with 0 <= r <= k < 2**53, and p = fl(r). Every integer up to 2**53
    # is a binary64 value and rounding is monotone, so p <= k as well.
    # * p not an integer: let a = floor(p), so a < p < a + 1 with a, a + 1 representable.
    #   If r <= a, monotonicity gives p = fl(r) <= fl(a) = a; if r >= a + 1 it gives
    #   p >= a + 1. Both contradict, so a < r < a + 1 and floor(r) = floor(p) = a.
    # * p an integer: |e| <= ulp(p)/2 <= 1/2 because p <= 2**53. If e >= 0 then
    #   p <= r < p + 1 and floor(r) = p; if e < 0 then p - 1 < r < p and floor(r) = p - 1.
    # Exactness of e: TwoProduct is exact unless partial products underflow. e is only used
    # where p is an integer; p = 0 happens only for x = 0 (then e = 0), and p >= 1 forces
    # x >= 1/(2k) > 2**-54, so every partial product is >= 2**-106, far from underflow.
    floor_p = np.floor(p)
    result = floor_p.astype(np.int64)
    result -= ((floor_p == p) & (e < 0.0)).astype(np.int64)
    return result


# --------------------------------------------------------------------------------------
# encoding


def _residues_u64(values: object, modulus: int) -> NDArray[np.uint64]:
    """Values reduced into ``[0, modulus)`` as ``uint64`` (requires ``modulus < 2**63``)."""
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ParameterError(f"values must be 1-D, got shape {values.shape}")
        kind = values.dtype.kind
        if kind == "i":
            reduced = np.mod(values.astype(np.int64, copy=False), np.int64(modulus))
            return reduced.astype(np.uint64)
        if kind == "u":
            return np.mod(values.astype(np.uint64, copy=False), np.uint64(modulus))
        if kind != "O":
            raise ParameterError(f"values must be integers, got dtype {values.dtype}")
    return np.array(_residues_int(values, modulus), dtype=np.uint64)


def _residues_int(values: object, modulus: int) -> list[int]:
    """Values reduced into ``[0, modulus)`` as Python ints (any ``modulus >= 1``)."""
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ParameterError(f"values must be 1-D, got shape {values.shape}")
        if values.dtype.kind not in "iuO":
            raise ParameterError(f"values must be integers, got dtype {values.dtype}")
        items: Sequence[Any] = values.tolist()
    elif isinstance(values, Sequence) and not isinstance(values, str | bytes):
        items = values
    else:
        raise ParameterError(f"values must be a sequence of ints, got {type(values).__name__}")
    try:
        return [operator.index(v) % modulus for v in items]
    except TypeError as exc:
        raise ParameterError(f"values must be integers: {exc}") from exc


def _row_sums_mod(body: NDArray[np.uint64], modulus: int) -> NDArray[np.uint64]:
    """Row sums of a 2-D array of residues in ``[0, modulus)``, reduced mod ``modulus``.

    Requires ``2 <= modulus < 2**63`` and at least one column. Columns are summed in groups
    of ``per = (2**64 - 1) // (modulus - 1) >= 2`` so no plain uint64 sum can wrap; each
    group sum is reduced before the next level (one level suffices unless ``modulus`` is
    within a factor ``m`` of ``2**64``).
    """
    limit = np.uint64(modulus)
    per = _U64_MAX // (modulus - 1)
    acc = body
    while acc.shape[1] > per:
        starts = np.arange(0, acc.shape[1], per)
        acc = np.add.reduceat(acc, starts, axis=1, dtype=np.uint64)
        acc %= limit
    sums: NDArray[np.uint64] = acc.sum(axis=1, dtype=np.uint64)
    sums %= limit
    return sums


def _encode_chunk_u64(
    residues: NDArray[np.uint64], messages: int, modulus: int, rng: RandomSource
) -> NDArray[np.uint64]:
    users = residues.shape[0]
    out: NDArray[np.uint64] = np.empty((users, messages), dtype=np.uint64)
    if messages == 1:
        out[:, 0] = residues
        return out
    body = out[:, : messages - 1]
    bits = (modulus - 1).bit_length()
    _fill_masked(body, bits, rng)
    # Rejection on the contiguous flat view of the whole chunk (cheaper than 2-D indexing);
    # the last column is zeroed first so that only body entries can be rejected.
    out[:, messages - 1] = 0
    _redraw_rejected(out.reshape(-1), modulus, bits, rng)
    limit = np.uint64(modulus)
    # last = (v - s) mod N computed as v + (N - s), then one conditional subtraction:
    # v < N and N - s in [1, N], so the sum is < 2N <= 2**64 and never wraps.
    last = residues + (limit - _row_sums_mod(body, modulus))
    np.subtract(last, limit, out=last, where=last >= limit)
    out[:, messages - 1] = last
    return out


def _encode_chunk_int(
    residues: list[int], messages: int, modulus: int, rng: RandomSource
) -> NDArray[np.object_]:
    users = len(residues)
    body = _uniform_ints(users * (messages - 1), modulus, rng)
    rows: list[int] = []
    width = messages - 1
    for i, v in enumerate(residues):
        shares = body[i * width : (i + 1) * width]
        rows.extend(shares)
        rows.append((v - sum(shares)) % modulus)
    return _object_array(rows, (users, messages))


def encode_many_chunks(
    values: NDArray[np.int64] | Sequence[int],
    messages: int,
    modulus: int,
    rng: RandomSource = SYSTEM_RANDOM,
    *,
    chunk_users: int = 65536,
) -> Iterator[ResidueArray]:
    """Encode many users' values, yielding the share matrix in row blocks.

    Contract:
      * ``values``: 1-D integer array (any signed/unsigned integer dtype or ``object`` of
        ints) or a sequence of ints, length ``n``; entries may be negative or exceed ``N``
        (e.g. ``x̄ + noise``) and are reduced modulo ``N`` exactly (the Python ``%``
        convention). Non-integers (floats, bools arrays, strings) or a non-1-D array raise
        :class:`~cloaknet.errors.ParameterError`.
      * ``messages`` (``m``): int ``>= 1`` (``m = 1`` sends ``x̄ mod N`` in the clear; the
        paper's privacy analysis needs ``m >= 4``). ``modulus`` (``N``): int ``>= 2``; oddness
        and ``N > 3nk`` are the caller's concern. ``chunk_users``: int ``>= 1``. Violations
        raise ``ParameterError`` when this function is called, not at the first ``next``.
      * Yields arrays of shape ``(c, m)`` with ``1 <= c <= chunk_users`` (no chunk if
        ``n = 0``), covering users ``0..n-1`` in order; dtype ``uint64`` if
        ``N < FAST_MODULUS_LIMIT``, else ``object`` (Python ints). In each row the first
        ``m - 1`` shares are independent and uniform on ``[0, N)`` and the row sums to the
        user's value modulo ``N``. Each yielded array is freshly allocated.
      * Memory is ``O(chunk_users * m)`` beyond the ``O(n)`` reduced values.
    """
    m, n_mod, chunk = _check_encode_params(messages, modulus, chunk_users)
    if n_mod < FAST_MODULUS_LIMIT:
        return _chunks_u64(_residues_u64(values, n_mod), m, n_mod, rng, chunk)
    return _chunks_int(_residues_int(values, n_mod), m, n_mod, rng, chunk)


def _check_encode_params(messages: int, modulus: int, chunk_users: int) -> tuple[int, int, int]:
    return (
        check_int("messages", messages, 1),
        _check_modulus(modulus, 2),
        check_int("chunk_users", chunk_users, 1),
    )


def _chunks_u64(
    residues: NDArray[np.uint64], messages: int, modulus: int, rng: RandomSource, chunk: int
) -> Iterator[NDArray[np.uint64]]:
    for start in range(0, residues.shape[0], chunk):
        yield _encode_chunk_u64(residues[start : start + chunk], messages, modulus, rng)


def _chunks_int(
    residues: list[int], messages: int, modulus: int, rng: RandomSource, chunk: int
) -> Iterator[NDArray[np.object_]]:
    for start in range(0, len(residues), chunk):
        yield _encode_chunk_int(residues[start : start + chunk], messages, modulus, rng)


def encode_many(
    values: NDArray[np.int64] | Sequence[int],
    messages: int,
    modulus: int,
    rng: RandomSource = SYSTEM_RANDOM,
    *,
    chunk_users: int = 65536,
) -> ResidueArray:
    """Encode many users' values into one ``(n, m)`` share matrix.

    Same contract as :func:`encode_many_chunks` (whose chunks are concatenated, so with a
    deterministic ``rng`` the result depends on ``chunk_users``); returns shape ``(n, m)``,
    dtype ``uint64`` if ``N < FAST_MODULUS_LIMIT`` else ``object``. Row ``i`` holds ``m``
    shares in ``[0, N)`` summing to ``values[i]`` modulo ``N``.
    """
    m, n_mod, chunk = _check_encode_params(messages, modulus, chunk_users)
    if n_mod < FAST_MODULUS_LIMIT:
        fast = list(_chunks_u64(_residues_u64(values, n_mod), m, n_mod, rng, chunk))
        if not fast:
            return np.empty((0, m), dtype=np.uint64)
        return np.concatenate(fast, axis=0)
    slow = list(_chunks_int(_residues_int(values, n_mod), m, n_mod, rng, chunk))
    if not slow:
        return np.empty((0, m), dtype=np.object_)
    return np.concatenate(slow, axis=0)


# --------------------------------------------------------------------------------------
# analysis helpers


def _exact_sum_u64(flat: NDArray[np.uint64]) -> int:
    """Exact integer sum of a 1-D ``uint64`` array.

    Each value is split into 32-bit halves; a block of at most ``2**22`` elements sums
    each half to less than ``2**54``, so the uint64 block sums are exact.
    """
    total = 0
    for start in range(0, flat.shape[0], _EXACT_SUM_BLOCK):
        block = flat[start : start + _EXACT_SUM_BLOCK]
        low = int(np.bitwise_and(block, _LOW32).sum(dtype=np.uint64))
        high = int(np.right_shift(block, _SHIFT32).sum(dtype=np.uint64))
        total += (high << 32) + low
    return total


def exact_sum(values: NDArray[Any]) -> int:
    """Exact sum of all entries of ``values``, as a Python int.

    Contract: ``values`` is an array of any shape with an integer dtype (signed or
    unsigned, any width) or ``object`` dtype holding ints (``bool`` is not rejected there,
    as ``operator.index`` accepts it); other dtypes raise
    :class:`~cloaknet.errors.ParameterError`. Integer arrays are summed in vectorized
    32-bit halves (no wrap-around at any length); ``object`` arrays with Python ints.
    """
    arr = np.asarray(values)
    kind = arr.dtype.kind
    if kind == "u":
        return _exact_sum_u64(arr.reshape(-1).astype(np.uint64, copy=False))
    if kind == "i":
        # x + 2**63 maps int64 onto uint64 (flipping the sign bit); undo the offset after.
        flat = arr.reshape(-1).astype(np.int64, copy=False)
        shifted = flat.view(np.uint64) ^ np.uint64(1 << 63)
        return _exact_sum_u64(shifted) - flat.shape[0] * (1 << 63)
    if kind == "O":
        try:
            return sum(operator.index(v) for v in arr.reshape(-1).tolist())
        except TypeError as exc:
            raise ParameterError(f"shares must be integers: {exc}") from exc
    raise ParameterError(f"shares must have an integer or object dtype, got {arr.dtype}")


def sum_mod(shares: NDArray[Any], modulus: int) -> int:
    """Exact sum of all entries of ``shares`` modulo ``modulus``, as a Python int in ``[0, N)``.

    Contract:
      * ``shares``: array of any shape with an integer dtype (signed or unsigned, any
        width) or ``object`` dtype holding ints. Entries need not be reduced; negative
        entries are handled exactly. Other dtypes raise
        :class:`~cloaknet.errors.ParameterError`.
      * ``modulus``: int ``>= 1``, any size (``ParameterError`` otherwise).
      * Integer arrays are summed exactly in vectorized 32-bit halves (about 0.2 s per
        ``5 * 10**7`` entries); ``object`` arrays are summed with Python ints
        (:func:`exact_sum`).
    """
    n_mod = _check_modulus(modulus, 1)
    return exact_sum(shares) % n_mod


def shuffle(shares: NDArray[_ScalarT], rng: RandomSource = SYSTEM_RANDOM) -> NDArray[_ScalarT]:
    """Flatten ``shares`` (C order) and return its entries in uniformly random order.

    Contract:
      * ``shares``: array of any shape and dtype with at most ``2**40`` entries
        (:class:`~cloaknet.errors.ParameterError` otherwise). The input is not modified.
      * Returns a new 1-D array of the same dtype and size holding the same multiset.

    Method (exactly uniform given uniform bytes): with ``b = (n - 1).bit_length()`` index
    bits, each entry ``i`` gets a 64-bit key whose top ``64 - b`` bits are fresh random bits
    (8 bytes from ``rng.token_bytes`` per entry) and whose low ``b`` bits are ``i``; one
    vectorized ``np.sort`` of the keys orders entries by their random part. Entries whose
    random parts tie (about ``n**2 / 2**(65 - b)`` pairs, e.g. a few thousand for
    ``n = 5 * 10**7``) form runs, and each run is put in uniformly random order by a
    Fisher-Yates shuffle with ``rng.randbelow`` (exact rejection). This is sorting by i.i.d.
    uniform real keys in ``[0, 1)`` whose leading bits are the random part and whose
    remaining bits are only consulted, lazily, to break ties; such keys are distinct with
    probability 1 and exchangeable, so every one of the ``n!`` orders has probability
    exactly ``1/n!``.
    """
    flat = np.asarray(shares).reshape(-1)
    n = flat.shape[0]
    if n <= 1:
        return flat.copy()
    index_bits = (n - 1).bit_length()
    if 64 - index_bits < _MIN_SHUFFLE_KEY_BITS:
        raise ParameterError(f"shuffle supports at most 2**40 entries, got {n}")
    index_mask = np.uint64((1 << index_bits) - 1)
    raw = np.frombuffer(rng.token_bytes(8 * n), dtype=np.dtype("<u8"))
    keys: NDArray[np.uint64] = np.bitwise_and(raw, ~index_mask, dtype=np.uint64)
    del raw
    shift = np.uint64(index_bits)
    for start in range(0, n, _DRAW_BLOCK):  # blockwise: small temporaries only
        stop = min(start + _DRAW_BLOCK, n)
        keys[start:stop] |= np.arange(start, stop, dtype=np.uint64)
    keys.sort()
    # ``tied`` lists the sorted positions i whose random part equals that of position i + 1.
    tied_parts: list[NDArray[np.intp]] = []
    for start in range(0, n - 1, _DRAW_BLOCK):
        stop = min(start + _DRAW_BLOCK, n - 1)
        same = (keys[start:stop] >> shift) == (keys[start + 1 : stop + 1] >> shift)
        tied_parts.append(np.flatnonzero(same) + start)
    tied = np.concatenate(tied_parts)
    keys &= index_mask
    order = keys.view(np.int64)  # the entry indices, in key order (in place, no copy)
    if tied.size:
        # Break each maximal run of equal random parts into a uniformly random order.
        run_starts = tied[np.r_[True, tied[1:] != tied[:-1] + 1]]
        run_ends = tied[np.r_[tied[1:] != tied[:-1] + 1, True]] + 1  # inclusive
        for start, end in zip(run_starts.tolist(), run_ends.tolist(), strict=True):
            run = order[start : end + 1]
            for i in range(run.shape[0] - 1, 0, -1):
                j = rng.randbelow(i + 1)
                run[i], run[j] = run[j], run[i]
    result: NDArray[_ScalarT] = flat[order]
    return result
