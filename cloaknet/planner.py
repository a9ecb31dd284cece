"""Parameter planner: from (n users, ε, δ, precision) to the cloak's m, N, k, γ, p, q.

:func:`plan` returns a :class:`Plan` for one bound: ``optimized`` (a numeric search over the
free choices of the lemmas of arXiv 1906.08320, minimising m, then the share's byte width,
then the predicted RMSE, then N's bits), ``theorem`` (the constants of the proofs of
Theorems 1 and 2, for comparison; they need not meet the target, see
:attr:`Plan.meets_target`) or ``bbgn`` (sum-preserving mode only: the Balle–Bell–Gascón–
Nissim statistical-distance bound for the same encoder). The reported (ε, δ) are always
recomputed by :mod:`cloaknet.accounting` from the final, rounded parameters. Choosing between
bounds and protocols (``cloaknet plan --bound auto``) is :func:`cloaknet.plans.select_plan`.
Parameters serve rounds of ``users`` to ``max_users`` users, and each bound is planned and
reported where it is weakest (:mod:`cloaknet.guarantee`): the sum-preserving lemmas (6, 12) at
``max_users``, the single-user lemmas (11, 13) and BBGN at ``users``.
How the search works: ``docs/accounting.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from cloaknet import accounting, certified
from cloaknet.errors import InfeasiblePlanError, ParameterError
from cloaknet.guarantee import guarantee_at, weakest_round_size
from cloaknet.params import MODES, CloakParams, Mode, NoiseParams, share_width

__all__ = ["BOUNDS", "DEFAULT_MAX_MESSAGES", "Bound", "Plan", "plan"]

Bound = Literal["optimized", "theorem", "bbgn"]
BOUNDS: tuple[Bound, ...] = ("optimized", "theorem", "bbgn")

#: The search never proposes more messages per user than this.
DEFAULT_MAX_MESSAGES = 4096
#: Relative safety margin on the targets inside the search (float rounding).
_MARGIN = 1e-9
#: Denominators used to make q and the noise scale t rational (rounded in the safe direction).
_Q_DENOMINATOR = 1 << 40
_SCALE_DENOMINATOR = 1 << 20
_LN2 = math.log(2.0)


@dataclass(frozen=True)
class Plan:
    """A complete parameter choice and what it achieves.

    ``epsilon``/``delta`` are recomputed from the lemma's bound with the final parameters,
    at :attr:`evaluated_at_users`: the worst case over rounds of ``users`` to
    ``params.max_users`` users. Error figures are in units of the input (each x_i in
    [0, 1]), for a round of ``users`` users.
    """

    mode: Mode
    bound: Bound
    users: int
    colluders: int
    target_epsilon: float
    target_delta: float
    params: CloakParams
    gamma: float
    guarantee: accounting.PrivacyBound
    expected_rmse: float
    rounding_error_worst: float
    noise_std: float
    notes: tuple[str, ...] = field(default=())

    @property
    def epsilon(self) -> float:
        return self.guarantee.epsilon

    @property
    def delta(self) -> float:
        return self.guarantee.delta

    @property
    def evaluated_at_users(self) -> int:
        """The round size the guarantee is evaluated at, where it is weakest: ``max_users``
        for the sum-preserving lemmas (Lemmas 6, 12), ``users`` for the single-user lemmas
        (Lemmas 11, 13) and BBGN (:func:`cloaknet.guarantee.weakest_round_size`)."""
        return weakest_round_size(self.mode, self.bound, self.users, self.params.max_users)

    @property
    def epsilon_exact(self) -> Fraction:
        """ε exactly, or a certified upper bound within 10^−48 of it
        (:attr:`cloaknet.accounting.PrivacyBound.epsilon_exact`)."""
        exact = self.guarantee.epsilon_exact
        return exact if exact is not None else Fraction(self.epsilon)

    @property
    def noise_name(self) -> str:
        """The noise the plan adds: ``"truncated-laplace"`` (D_{N,p}, single-user) or
        ``"none"`` (sum-preserving)."""
        return "truncated-laplace" if self.params.noise is not None else "none"

    @property
    def meets_target(self) -> bool:
        """ε (exact, :attr:`epsilon_exact`) and δ within the target."""
        return (
            self.epsilon_exact <= Fraction(self.target_epsilon)
            and self.delta <= self.target_delta
        )

    @property
    def bytes_per_user(self) -> int:
        return self.params.messages * self.params.share_bytes

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the ``cloaknet plan --json`` object)."""
        noise = self.params.noise
        return {
            "protocol": "cloak",
            "mode": self.mode,
            "bound": self.bound,
            "users": self.users,
            "max_users": self.params.max_users,
            "colluders": self.colluders,
            "target_epsilon": self.target_epsilon,
            "target_delta": self.target_delta,
            "messages_per_user": self.params.messages,
            "modulus": self.params.modulus,
            "precision": self.params.precision,
            "gamma": self.gamma if self.bound != "bbgn" else None,
            "noise": self.noise_name,
            "noise_p": noise.p if noise else None,
            "noise_q": float(noise.q) if noise else None,
            "noise_scale": str(noise.scale) if noise else None,
            "noise_q_exact": str(noise.q) if noise else None,
            "epsilon": self.epsilon,
            "epsilon_exact": certified.decimal_up(self.epsilon_exact),
            "delta": self.delta,
            "evaluated_at_users": self.evaluated_at_users,
            "log_delta": (
                self.guarantee.log_delta if math.isfinite(self.guarantee.log_delta) else None
            ),
            "meets_target": self.meets_target,
            "lemma": self.guarantee.lemma,
            "terms": self.guarantee.terms,
            "bits_per_message": self.params.bits_per_message,
            "bytes_per_message": self.params.share_bytes,
            "bytes_per_user": self.bytes_per_user,
            "expected_rmse": self.expected_rmse,
            "rounding_error_worst": self.rounding_error_worst,
            "noise_std": self.noise_std,
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------- validation


def _validate(
    users: int,
    epsilon: float,
    delta: float,
    precision: int | None,
    mode: str,
    colluders: int,
    bound: str,
    max_users: int | None,
) -> tuple[int, int]:
    if isinstance(users, bool) or not isinstance(users, int) or users < 1:
        raise ParameterError(f"users must be a positive integer, got {users!r}")
    if not isinstance(epsilon, (int, float)) or not math.isfinite(epsilon) or epsilon <= 0:
        raise ParameterError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if not isinstance(delta, (int, float)) or not 0.0 < delta < 1.0:
        raise ParameterError(f"delta must lie in (0, 1), got {delta!r}")
    if mode not in MODES:
        raise ParameterError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if bound not in BOUNDS:
        raise ParameterError(f"bound must be one of {', '.join(BOUNDS)}, got {bound!r}")
    if isinstance(colluders, bool) or not isinstance(colluders, int) or colluders < 0:
        raise ParameterError(f"colluders must be a non-negative integer, got {colluders!r}")
    if colluders >= users:
        raise ParameterError(f"colluders ({colluders}) must be fewer than users ({users})")
    if mode == "single-user" and colluders > accounting.MAX_COLLUDER_FRACTION * users:
        raise ParameterError(
            f"colluders ({colluders}) exceed 0.9·users = {0.9 * users:g}; "
            "Lemma 13 (single-user changes with colluders) does not apply"
        )
    k = 10 * users if precision is None else precision
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ParameterError(f"precision must be a positive integer, got {precision!r}")
    n_max = users if max_users is None else max_users
    if isinstance(n_max, bool) or not isinstance(n_max, int) or n_max < users:
        raise ParameterError(f"max_users must be an integer >= users ({users}), got {max_users!r}")
    return k, n_max


def _first_odd_above(value: int) -> int:
    """Smallest odd integer strictly greater than ``value``."""
    candidate = value + 1
    return candidate if candidate % 2 else candidate + 1


def _odd_at_least(value: int) -> int:
    return value if value % 2 else value + 1


def _ceil_fraction(value: float, denominator: int) -> Fraction:
    return Fraction(math.ceil(value * denominator), denominator)


# --------------------------------------------------------------------------- the search


@dataclass(frozen=True)
class _Grid:
    """Candidate splits, one entry per grid point (all arrays have equal length)."""

    log_gamma: NDArray[np.float64]
    log_delta_eta: NDArray[np.float64]  # ln of the δ budget left for η (per unit of series)
    rmse: NDArray[np.float64]
    index: NDArray[np.int64]


def _log_eta(
    m: int, log_n: NDArray[np.float64], log_gamma: NDArray[np.float64]
) -> NDArray[np.float64]:
    """ln η(m, N, γ) of Lemma 1, vectorized over ln N and ln γ."""
    a = math.log(2.0 * m * m) - log_n
    b = math.log(18.0) + 0.5 * math.log(m) + 2.0 * log_n - 2.0 * log_gamma - 2.0 * m * _LN2
    return np.logaddexp(a, b)


def _min_messages(
    grid: _Grid, n_min: int, max_messages: int
) -> tuple[int, NDArray[np.bool_], NDArray[np.float64]]:
    """Smallest m for which some grid point admits an N >= n_min with η <= its budget.

    Returns (m, feasible mask, ln N at which η is smallest, clipped to >= ln n_min).
    """
    log_n_min = math.log(n_min)
    for m in range(4, max_messages + 1):
        log_threshold = math.log(6.0) + 0.5 * math.log(m) - 2 * m * _LN2
        valid = grid.log_gamma > log_threshold + 1e-12
        # η = A/N + B N² is smallest at N* = (A / 2B)^(1/3).
        log_a = math.log(2.0 * m * m)
        log_b = math.log(18.0) + 0.5 * math.log(m) - 2.0 * grid.log_gamma - 2.0 * m * _LN2
        log_opt = np.maximum((log_a - _LN2 - log_b) / 3.0, log_n_min)
        feasible = valid & (_log_eta(m, log_opt, grid.log_gamma) <= grid.log_delta_eta)
        if feasible.any():
            return m, feasible, log_opt
    raise InfeasiblePlanError(
        f"no parameters with at most {max_messages} messages per user meet the target; "
        "raise --max-messages, epsilon or delta"
    )


def _smallest_modulus(
    m: int,
    log_gamma: NDArray[np.float64],
    log_budget: NDArray[np.float64],
    n_min: int,
    log_opt: NDArray[np.float64],
) -> NDArray[np.float64]:
    """ln of the smallest N in [n_min, N_opt] with ln η <= budget (η decreases there)."""
    log_lo = np.full_like(log_gamma, math.log(n_min))
    ok_at_min = _log_eta(m, log_lo, log_gamma) <= log_budget
    lo, hi = log_lo.copy(), log_opt.copy()
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        good = _log_eta(m, mid, log_gamma) <= log_budget
        hi = np.where(good, mid, hi)
        lo = np.where(good, lo, mid)
    return np.where(ok_at_min, log_lo, hi)


def _candidates(
    grid: _Grid, n_min: int, max_messages: int
) -> tuple[int, list[tuple[int, float, int, int, int]]]:
    """Minimal m, then the feasible grid points as (bytes per share, rmse, bits, modulus, grid
    index), sorted — the planner's lexicographic objective after m. Shares travel in whole
    bytes, so a modulus one bit narrower that fits the same bytes is not worth more error."""
    m, feasible, log_opt = _min_messages(grid, n_min, max_messages)
    idx = np.flatnonzero(feasible)
    log_n = _smallest_modulus(
        m, grid.log_gamma[idx], grid.log_delta_eta[idx], n_min, log_opt[idx]
    )
    out: list[tuple[int, float, int, int, int]] = []
    for j, ln_n in zip(idx, log_n, strict=True):
        # exp() is only accurate to ~1e-15 relatively; pad and verify exactly afterwards.
        approx = int(math.exp(float(ln_n)) * (1.0 + 1e-12)) + 1
        modulus = _odd_at_least(max(approx, n_min))
        bits = (modulus - 1).bit_length()
        out.append((share_width(modulus), float(grid.rmse[j]), bits, modulus, int(j)))
    out.sort()
    return m, out


# --------------------------------------------------------------------------- modes


def _plan_sum_preserving(
    users: int, k: int, n_max: int, colluders: int, epsilon: float, delta: float,
    max_messages: int,
) -> Plan:
    swaps = n_max - 1  # Lemma 6's ε = (n − 1)·ln β is largest in the largest round
    n_min = _first_odd_above(3 * n_max * k)
    eps_t = epsilon * (1 - _MARGIN)
    log_delta_t = math.log(delta * (1 - _MARGIN))
    fractions_ = np.linspace(0.02, 1.0, 400)
    eps_swap = fractions_ * eps_t / max(swaps, 1)
    gamma = np.tanh(eps_swap / 2.0)
    if swaps:
        total = swaps * eps_swap
        log_series = total + np.log(-np.expm1(-total)) - (np.log(2.0 * gamma) - np.log1p(-gamma))
    else:
        log_series = np.full_like(gamma, -np.inf)  # no swap: δ = 0 whatever η is
    rmse = accounting.expected_rmse(users, k)
    grid = _Grid(
        log_gamma=np.log(gamma),
        log_delta_eta=log_delta_t - log_series,
        rmse=np.full_like(gamma, rmse),
        index=np.arange(gamma.size),
    )
    m, candidates = _candidates(grid, n_min, max_messages)
    best: Plan | None = None
    for width, _rmse, _bits, modulus, j in candidates:
        if best is not None and width > best.params.share_bytes:
            break
        params = CloakParams(modulus, k, m, n_max, "sum-preserving", None)
        result = _finish_sum_preserving(params, float(gamma[j]), users, colluders, epsilon, delta)
        if result.meets_target and (best is None or _sp_key(result) < _sp_key(best)):
            best = result
    if best is None:
        raise InfeasiblePlanError("rounding left no candidate within the target (report this)")
    return best


def _sp_key(p: Plan) -> tuple[int, int, float]:
    return p.params.share_bytes, p.params.bits_per_message, p.guarantee.log_delta


def _finish_sum_preserving(
    params: CloakParams, gamma: float, users: int, colluders: int,
    epsilon: float, delta: float, bound: Bound = "optimized", notes: tuple[str, ...] = (),
) -> Plan:
    """The plan with Lemma 6 (12 with colluders) at the largest round, ``params.max_users``."""
    guarantee = guarantee_at(params, gamma, bound, params.max_users, colluders)
    return Plan(
        mode="sum-preserving",
        bound=bound,
        users=users,
        colluders=colluders,
        target_epsilon=epsilon,
        target_delta=delta,
        params=params,
        gamma=gamma,
        guarantee=guarantee,
        expected_rmse=accounting.expected_rmse(users, params.precision),
        rounding_error_worst=accounting.rounding_error_worst(users, params.precision),
        noise_std=0.0,
        notes=notes,
    )


def _plan_single_user(
    users: int, k: int, n_max: int, colluders: int, epsilon: float, delta: float,
    max_messages: int, max_rmse: float | None,
) -> Plan:
    honest = users - colluders
    n_min = _first_odd_above(3 * n_max * k)
    eps_t = epsilon * (1 - _MARGIN)
    delta_t = delta * (1 - _MARGIN)
    # Grid over the share of δ spent on the tail e^(−qh) and the share of ε spent on noise.
    share_grid = np.linspace(0.01, 0.99, 99)
    a = np.repeat(share_grid, share_grid.size)  # share of δ for the tail
    b = np.tile(share_grid, share_grid.size)  # share of the remaining ε for the noise
    q_real = np.log(1.0 / (a * delta_t)) / honest
    q = np.array([float(_ceil_fraction(min(v, 1.0), _Q_DENOMINATOR)) for v in q_real])
    log_tail = -q * honest
    delta_tail = np.exp(log_tail)
    eps_tail = -np.log(-np.expm1(log_tail))
    eps_noise_max = b * (eps_t - eps_tail)
    scale = np.array(
        [
            _ceil_fraction(k / e, _SCALE_DENOMINATOR) if e > 0 else Fraction(0)
            for e in eps_noise_max
        ],
        dtype=object,
    )
    ok = (eps_noise_max > 0) & (delta_tail < delta_t)
    eps_noise = np.array([k / float(s) if s > 0 else np.inf for s in scale])
    eps_swap = eps_t - eps_tail - eps_noise
    ok &= eps_swap > 0
    gamma = np.where(ok, np.tanh(np.where(ok, eps_swap, 1.0) / 2.0), 0.5)
    p = np.exp(-eps_noise / k)
    var_bound = 2.0 * p * (1.0 + p) / ((-np.expm1(-eps_noise / k)) ** 2 * (1.0 + p))
    noise_sd = np.sqrt(users * q * var_bound) / k
    rmse = np.sqrt(accounting.expected_rmse(users, k) ** 2 + noise_sd**2)
    if max_rmse is not None:
        ok &= rmse <= max_rmse
        if not ok.any():
            floor = _noise_floor(users, honest, k, epsilon, delta)
            raise InfeasiblePlanError(
                f"no plan has expected RMSE <= {max_rmse:g}; the least-noise limit at this "
                f"epsilon and delta is about {floor:.4g}"
            )
    keep = np.flatnonzero(ok)
    if keep.size == 0:
        raise InfeasiblePlanError(
            f"single-user privacy needs the pre-randomizer's tail e^(-q·h) <= delta with q <= 1, "
            f"i.e. at least ln(1/delta) = {math.log(1 / delta):.1f} honest users; "
            f"there are {honest}"
        )
    budget = np.log(np.maximum(delta_t - delta_tail, 1e-300))
    grid = _Grid(
        log_gamma=np.log(gamma[keep]),
        log_delta_eta=budget[keep],
        rmse=rmse[keep],
        index=keep,
    )
    m, candidates = _candidates(grid, n_min, max_messages)
    best_width: int | None = None
    for width, _rmse, _bits, modulus, j in candidates:
        if best_width is not None and width > best_width:
            break
        g = int(grid.index[j])
        noise = NoiseParams(scale=scale[g], q=_ceil_fraction(float(q[g]), _Q_DENOMINATOR))
        params = CloakParams(modulus, k, m, n_max, "single-user", noise)
        result = _finish_single_user(
            params, float(gamma[g]), users, colluders, epsilon, delta
        )
        if result.meets_target:
            return result
        best_width = width
    raise InfeasiblePlanError("rounding left no candidate within the target (report this)")


def _noise_floor(users: int, honest: int, k: int, epsilon: float, delta: float) -> float:
    """RMSE if all of ε and δ went to the noise (unattainable limit; for error messages)."""
    q = min(1.0, math.log(1.0 / delta) / honest)
    p = math.exp(-epsilon / k)
    var = 2.0 * p * (1.0 + p) / ((-math.expm1(-epsilon / k)) ** 2 * (1.0 + p))
    return math.sqrt(accounting.expected_rmse(users, k) ** 2 + users * q * var / k**2)


def _finish_single_user(
    params: CloakParams, gamma: float, users: int, colluders: int,
    epsilon: float, delta: float, bound: Bound = "optimized", notes: tuple[str, ...] = (),
) -> Plan:
    """The plan with Lemma 11 (13 with colluders) at the smallest round, ``users``."""
    noise = params.noise
    assert noise is not None
    guarantee = guarantee_at(params, gamma, bound, users, colluders)
    sd = accounting.noise_std(users, params.precision, params.modulus, noise.p, float(noise.q))
    return Plan(
        mode="single-user",
        bound=bound,
        users=users,
        colluders=colluders,
        target_epsilon=epsilon,
        target_delta=delta,
        params=params,
        gamma=gamma,
        guarantee=guarantee,
        expected_rmse=accounting.expected_rmse(users, params.precision, sd),
        rounding_error_worst=accounting.rounding_error_worst(users, params.precision),
        noise_std=sd,
        notes=notes,
    )


def _plan_theorem(
    mode: Mode, users: int, k: int, n_max: int, colluders: int, epsilon: float, delta: float
) -> Plan:
    """The constants of the proofs of Theorems 1 and 2 (log read as log₂), with n the round
    size each is checked at: ``n_max`` for Theorem 2 (sum-preserving), ``users`` for Theorem 1."""
    n = n_max if mode == "sum-preserving" else users
    log_term = math.log2(n * k / (epsilon * delta))
    threshold = 3 * k * users + 10 / delta + 10 / epsilon
    modulus = _first_odd_above(max(math.floor(threshold), 3 * n_max * k))
    notes = ["constants of the paper's proof (log = log2); not optimized"]
    if mode == "sum-preserving":
        m = math.floor(10 * log_term) + 1  # m > 10 log(nk/(εδ))
        gamma = epsilon / (10 * n)
        params = CloakParams(modulus, k, max(m, 4), n_max, "sum-preserving", None)
        plan_ = _finish_sum_preserving(
            params, gamma, users, colluders, epsilon, delta, "theorem", tuple(notes)
        )
    else:
        m = math.ceil(10 * log_term)
        gamma = epsilon / 10
        p = 1 - epsilon / (10 * k)
        q_real = 10 * math.log2(1 / delta) / users
        if q_real > 1:
            notes.append(f"q = 10·log(1/δ)/n = {q_real:.3g} > 1 was capped at 1")
        scale = _ceil_fraction(-1.0 / math.log(p), _SCALE_DENOMINATOR)
        noise = NoiseParams(scale=scale, q=_ceil_fraction(min(q_real, 1.0), _Q_DENOMINATOR))
        params = CloakParams(modulus, k, max(m, 4), n_max, "single-user", noise)
        plan_ = _finish_single_user(
            params, gamma, users, colluders, epsilon, delta, "theorem", tuple(notes)
        )
    if not plan_.meets_target:
        plan_ = replace(
            plan_,
            notes=(*plan_.notes, "the theorem's constants do not meet the target under the lemmas"),
        )
    return plan_


def _plan_bbgn_sum_preserving(
    users: int, k: int, n_max: int, colluders: int, epsilon: float, delta: float
) -> Plan:
    """Sum-preserving changes with the Balle–Bell–Gascón–Nissim bound: the cloak's encoder
    *is* split-and-mix (Ishai et al.); views of inputs with the same sum are within statistical
    distance 2^−σ, i.e. (0, 2^−σ)-DP under sum-preserving changes, for σ = log2(1/δ) and the
    n − |C| honest users. The modulus is the cloak's (odd, > 3·max_users·k)."""
    honest = users - colluders
    if honest < 3:
        raise ParameterError(f"the BBGN bound needs at least 3 honest users, got {honest}")
    modulus = _first_odd_above(3 * n_max * k)
    sigma_target = -math.log2(delta * (1 - _MARGIN))
    messages = max(4, accounting.bbgn_messages(honest, sigma_target, modulus))
    params = CloakParams(modulus, k, messages, n_max, "sum-preserving", None)
    guarantee = guarantee_at(params, 0.0, "bbgn", users, colluders)  # weakest at fewest honest
    return Plan(
        mode="sum-preserving", bound="bbgn", users=users, colluders=colluders,
        target_epsilon=float(epsilon), target_delta=delta, params=params, gamma=0.0,
        guarantee=guarantee,
        expected_rmse=accounting.expected_rmse(users, k),
        rounding_error_worst=accounting.rounding_error_worst(users, k), noise_std=0.0,
        notes=("statistical-distance bound of Balle, Bell, Gascón and Nissim for the "
               "cloak's own encoder (split-and-mix): (0, 2^-sigma)-DP under sum-preserving "
               "changes", accounting.BBGN_UNVERIFIED),
    )


def plan(
    users: int,
    epsilon: float,
    delta: float,
    precision: int | None = None,
    mode: str = "single-user",
    colluders: int = 0,
    *,
    bound: str = "optimized",
    max_users: int | None = None,
    max_messages: int = DEFAULT_MAX_MESSAGES,
    max_rmse: float | None = None,
) -> Plan:
    """Plan the cloak's parameters for ``users`` honest-or-colluding users.

    :param users: n, the smallest round privacy is planned for (a round's ``min_users``).
    :param epsilon: target ε > 0.
    :param delta: target δ in (0, 1).
    :param precision: k; defaults to 10·n as in the paper's theorems.
    :param mode: ``"single-user"`` or ``"sum-preserving"`` neighbouring datasets.
    :param colluders: |C|, users assumed to reveal inputs and messages to the analyst;
        at most 0.9·n in single-user mode (Lemma 13).
    :param bound: ``"optimized"`` (numeric search over the paper's lemmas), ``"theorem"`` (the
        paper's constants) or ``"bbgn"`` (sum-preserving mode only: the Balle–Bell–Gascón–
        Nissim statistical-distance bound for the same split-and-mix encoder).
    :param max_users: largest round the parameters must analyze (N > 3·max_users·k) and,
        in sum-preserving mode, be private for (Lemma 6's ε = (n − 1)·ln β grows with n, so
        the optimized and theorem bounds are planned and reported at ``max_users``; the
        single-user lemmas and BBGN are weakest at ``users``); defaults to ``users``.
    :param max_messages: search limit on m.
    :param max_rmse: single-user mode only: discard splits whose predicted RMSE exceeds this.
    :raises ParameterError: on invalid arguments.
    :raises InfeasiblePlanError: when no parameters within the limits meet the target.
    """
    k, n_max = _validate(users, epsilon, delta, precision, mode, colluders, bound, max_users)
    mode_: Mode = "single-user" if mode == "single-user" else "sum-preserving"
    if isinstance(max_messages, bool) or not isinstance(max_messages, int) or max_messages < 4:
        raise ParameterError(f"max_messages must be an integer >= 4, got {max_messages!r}")
    if max_rmse is not None and not (math.isfinite(max_rmse) and max_rmse > 0):
        raise ParameterError(f"max_rmse must be a positive number, got {max_rmse!r}")
    if bound == "theorem":
        return _plan_theorem(mode_, users, k, n_max, colluders, epsilon, delta)
    if bound == "bbgn":
        if mode_ != "sum-preserving":
            raise ParameterError(
                "single-user changes with the BBGN bound use Pólya noise, not the cloak's "
                "pre-randomizer: see cloaknet.protocols.bbgn_plan (cloaknet plan --bound bbgn)"
            )
        return _plan_bbgn_sum_preserving(users, k, n_max, colluders, epsilon, delta)
    if mode_ == "sum-preserving":
        return _plan_sum_preserving(users, k, n_max, colluders, epsilon, delta, max_messages)
    return _plan_single_user(
        users, k, n_max, colluders, epsilon, delta, max_messages, max_rmse
    )
