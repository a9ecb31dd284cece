"""Injected randomness for the protocol cores.

Every function in cloaknet that needs randomness takes a :class:`RandomSource`. The default,
:data:`SYSTEM_RANDOM`, draws from the operating system's CSPRNG (``secrets`` / ``os.urandom``);
it is the only source that may be used for real shares, permutations, keys and noise.

:class:`DeterministicRandom` exists for tests and for reproducible *simulations* only: it
expands a seed with SHAKE-256, so runs can be replayed bit for bit. It is never a default.

Uniform integers are drawn by rejection (no modulo bias), both here and in the vectorized
helpers of :mod:`cloaknet.vectorized`.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Protocol, runtime_checkable

__all__ = [
    "SYSTEM_RANDOM",
    "DeterministicRandom",
    "RandomSource",
    "SystemRandom",
    "bernoulli_fraction",
]


@runtime_checkable
class RandomSource(Protocol):
    """A source of uniform random bits.

    Implementations must return uniformly distributed values; ``randbelow`` must be exact
    (rejection sampling, never ``x % n`` on a wider draw).
    """

    def token_bytes(self, nbytes: int) -> bytes:
        """Return ``nbytes`` uniformly random bytes (``nbytes >= 0``)."""
        ...

    def randbelow(self, upper: int) -> int:
        """Return a uniform integer in ``[0, upper)``; raises ``ValueError`` if ``upper <= 0``."""
        ...


class SystemRandom:
    """The OS CSPRNG (``secrets``). Stateless; safe to share between threads."""

    def token_bytes(self, nbytes: int) -> bytes:
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        return secrets.token_bytes(nbytes)

    def randbelow(self, upper: int) -> int:
        if upper <= 0:
            raise ValueError(f"upper bound must be positive, got {upper}")
        return secrets.randbelow(upper)

    def __repr__(self) -> str:
        return "SystemRandom()"


SYSTEM_RANDOM: RandomSource = SystemRandom()


class DeterministicRandom:
    """A seeded, replayable stream (SHAKE-256 in counter mode). **Tests and simulations only.**

    ``randbelow`` uses rejection on ``upper.bit_length()`` bits, so it is exactly uniform
    given uniform bits. Not thread-safe.
    """

    _BLOCK = 1 << 16

    def __init__(self, seed: int | bytes | str) -> None:
        if isinstance(seed, int):
            seed_bytes = seed.to_bytes((seed.bit_length() + 8) // 8, "big", signed=True)
        elif isinstance(seed, str):
            seed_bytes = seed.encode()
        else:
            seed_bytes = bytes(seed)
        self._seed = hashlib.sha256(b"cloaknet-deterministic-random" + seed_bytes).digest()
        self._counter = 0
        self._buffer = bytearray()

    def _refill(self, need: int) -> None:
        while len(self._buffer) < need:
            block = hashlib.shake_256(self._seed + self._counter.to_bytes(8, "big"))
            self._buffer += block.digest(self._BLOCK)
            self._counter += 1

    def token_bytes(self, nbytes: int) -> bytes:
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        self._refill(nbytes)
        out = bytes(self._buffer[:nbytes])
        del self._buffer[:nbytes]
        return out

    def randbelow(self, upper: int) -> int:
        if upper <= 0:
            raise ValueError(f"upper bound must be positive, got {upper}")
        bits = upper.bit_length()
        nbytes = (bits + 7) // 8
        excess = nbytes * 8 - bits
        while True:
            value = int.from_bytes(self.token_bytes(nbytes), "big") >> excess
            if value < upper:
                return value

    def __repr__(self) -> str:
        return f"DeterministicRandom(<seed {self._seed[:4].hex()}…>)"


def bernoulli_fraction(numerator: int, denominator: int, rng: RandomSource) -> bool:
    """Exact Bernoulli(numerator / denominator) trial.

    Requires ``0 <= numerator <= denominator`` and ``denominator > 0``; raises ``ValueError``
    otherwise.
    """
    if denominator <= 0 or numerator < 0 or numerator > denominator:
        raise ValueError(f"not a probability: {numerator}/{denominator}")
    return rng.randbelow(denominator) < numerator
