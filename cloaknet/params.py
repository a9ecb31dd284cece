"""Protocol parameters of the invisibility cloak, validated once at construction.

A :class:`CloakParams` is what an encoder and an analyzer need: the modulus N, the precision
k, the number of messages per user m, the largest round it may analyze (``max_users``; the
analyzer of Algorithm 2 needs odd N > 3·n·k), and, in single-user mode, the pre-randomizer
noise (:class:`NoiseParams`). The planner (:mod:`cloaknet.planner`) produces them.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from cloaknet.errors import ParameterError
from cloaknet.noise import noise_p

__all__ = ["CloakParams", "Mode", "NoiseParams", "share_width"]

Mode = Literal["single-user", "sum-preserving"]
MODES: tuple[Mode, ...] = ("single-user", "sum-preserving")


def share_width(modulus: int) -> int:
    """Bytes needed to carry one share in {0..N−1} as a fixed-width big-endian integer."""
    return max(1, ((modulus - 1).bit_length() + 7) // 8)


@dataclass(frozen=True)
class NoiseParams:
    """The single-user pre-randomizer (paper Section 2.4): with probability ``q`` a user adds
    w ~ D_{N,p} (truncated discrete Laplace) to floor(x·k).

    ``scale`` is the rational t with p = exp(−1/t); keeping t rational lets the sampler be
    exact (:mod:`cloaknet.noise`). ``q`` is rational for the same reason.
    """

    scale: Fraction
    q: Fraction

    def __post_init__(self) -> None:
        if not isinstance(self.scale, Fraction) or self.scale <= 0:
            raise ParameterError(f"noise scale t must be a positive Fraction, got {self.scale!r}")
        if not isinstance(self.q, Fraction) or not 0 < self.q <= 1:
            raise ParameterError(f"noise q must be a Fraction in (0, 1], got {self.q!r}")

    @property
    def p(self) -> float:
        """p = exp(−1/t), the ratio of D_{N,p}'s probability mass between neighbours."""
        return noise_p(self.scale)


@dataclass(frozen=True)
class CloakParams:
    """Parameters of Algorithms 1 and 2.

    Invariants (checked here, :class:`ParameterError` otherwise): m >= 4 (Algorithm 1);
    k >= 1; N odd and N > 3·max_users·k (Algorithm 2); ``noise`` present iff
    mode is "single-user". N may exceed 2^64.
    """

    modulus: int
    precision: int
    messages: int
    max_users: int
    mode: Mode = "sum-preserving"
    noise: NoiseParams | None = None

    def __post_init__(self) -> None:
        for name in ("modulus", "precision", "messages", "max_users"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ParameterError(f"{name} must be an integer, got {value!r}")
        if self.messages < 4:
            raise ParameterError(
                f"messages per user m must be >= 4 (Algorithm 1), got {self.messages}"
            )
        if self.precision < 1:
            raise ParameterError(f"precision k must be >= 1, got {self.precision}")
        if self.max_users < 1:
            raise ParameterError(f"max_users must be >= 1, got {self.max_users}")
        if self.modulus % 2 == 0:
            raise ParameterError(f"modulus N must be odd, got {self.modulus}")
        bound = 3 * self.max_users * self.precision
        if self.modulus <= bound:
            raise ParameterError(
                f"modulus N = {self.modulus} must exceed 3·n·k = {bound} "
                f"(n = {self.max_users}, k = {self.precision}; Algorithm 2)"
            )
        if self.mode not in MODES:
            raise ParameterError(f"mode must be one of {MODES}, got {self.mode!r}")
        if (self.mode == "single-user") != (self.noise is not None):
            raise ParameterError("noise parameters are required in single-user mode only")

    @property
    def share_bytes(self) -> int:
        """Fixed width of one share on the wire, in bytes."""
        return share_width(self.modulus)

    @property
    def bits_per_message(self) -> int:
        """ceil(log2 N): bits needed for one share."""
        return (self.modulus - 1).bit_length()
