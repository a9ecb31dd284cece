"""Known-answer tests of cloaknet's part of the wire format (``docs/wire.md``, wire version
2): the share width and byte order, Algorithm 1 with fixed random shares and the payloads it
puts in a submission box, the ``[protocol]`` table, the payload check, D_{N,p}, and the
analyzer's result object.

The vectors are the ``cloaknet`` section of ``tests/mixnet/wire_vectors.json`` (regenerated
deliberately with ``scripts/wire_vectors.py``); the mixnet's vectors are checked in
``tests/mixnet/test_wire_vectors.py``.
"""

from __future__ import annotations

import json
import math
import tomllib
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from cloaknet.analyzer_node import AnalyzerApp
from cloaknet.encoding import decode_share, encode_share, quantize, split
from cloaknet.errors import ShareError
from cloaknet.noise import noise_p, truncated_laplace_pmf
from cloaknet.params import share_width
from cloaknet.protocol_table import read_protocol_table
from cloaknet.protocols import CloakProtocol
from cloaknet.validator import payload_validator
from mixnet.chain import RoundPolicy
from mixnet.core.actions import DeliveredBatch

VECTORS_PATH = Path(__file__).resolve().parents[1] / "mixnet" / "wire_vectors.json"
VECTORS: dict[str, Any] = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))
CLOAK: dict[str, Any] = VECTORS["cloaknet"]
POLICY = RoundPolicy(min_users=1, max_users=5, deadline_seconds=600.0)


class FixedShares:
    """A RandomSource whose ``randbelow`` returns the vector's "random" shares in order."""

    def __init__(self, values: list[int]) -> None:
        self._values = list(values)

    def randbelow(self, upper: int) -> int:
        value = self._values.pop(0)
        assert 0 <= value < upper
        return value

    def token_bytes(self, nbytes: int) -> bytes:
        raise AssertionError("Algorithm 1 draws its shares with randbelow")


def protocol(index: int = 0) -> CloakProtocol:
    table = CLOAK["protocol_tables"][index]
    made, plan = read_protocol_table(tomllib.loads(table["toml"])["protocol"], POLICY)
    assert plan is None and isinstance(made, CloakProtocol)
    return made


@pytest.mark.parametrize("vector", CLOAK["share_widths"], ids=lambda v: v["modulus"])
def test_share_width(vector: dict[str, Any]) -> None:
    modulus = int(vector["modulus"])
    assert share_width(modulus) == vector["width"]
    assert max(1, math.ceil((modulus - 1).bit_length() / 8)) == vector["width"]


@pytest.mark.parametrize(
    "vector", CLOAK["share_encodings"], ids=lambda v: f"{v['value']}-mod-{v['modulus']}"
)
def test_share_encoding_is_fixed_width_big_endian(vector: dict[str, Any]) -> None:
    modulus, value = int(vector["modulus"]), int(vector["value"])
    data = bytes.fromhex(vector["bytes"])
    assert value.to_bytes(share_width(modulus), "big") == data
    assert encode_share(value, modulus) == data
    assert decode_share(data, modulus) == value


def test_shares_at_or_above_the_modulus_are_refused() -> None:
    modulus = int(CLOAK["encoder"]["modulus"])
    with pytest.raises(ShareError):
        decode_share(bytes.fromhex(CLOAK["invalid_payloads"][0]), modulus)
    valid = payload_validator(protocol())
    for payload in CLOAK["invalid_payloads"]:
        assert not valid(bytes.fromhex(payload))
    for payload in CLOAK["encoder"]["payloads"]:
        assert valid(bytes.fromhex(payload))


@pytest.mark.parametrize("index", [0, 1], ids=["sum-preserving", "single-user"])
def test_protocol_table(index: int) -> None:
    vector = CLOAK["protocol_tables"][index]
    made = protocol(index)
    params = made.params
    assert params.mode == vector["mode"]
    assert params.messages == made.message_count == vector["messages"]
    assert str(params.modulus) == vector["modulus"] == str(made.message_modulus)
    assert params.precision == vector["precision"]
    assert params.max_users == vector["max_users"]
    assert made.bytes_per_message == share_width(params.modulus) == vector["payload_length"]
    if params.noise is None:
        assert "noise_scale" not in vector
    else:
        assert params.noise.scale == Fraction(vector["noise_scale"])
        assert params.noise.q == Fraction(vector["noise_q"])
        assert params.noise.p == vector["noise_p"] == math.exp(-1 / params.noise.scale)


def test_algorithm_1_with_fixed_shares() -> None:
    vector = CLOAK["encoder"]
    x, k, modulus = vector["x"], vector["precision"], int(vector["modulus"])
    assert isinstance(x, float)
    # floor of the exact product of x's binary64 value and k: 0.42 gives 41999, not 42000
    assert math.floor(Fraction(x) * k) == quantize(x, k) == vector["quantized"]
    randoms = vector["random_shares"]
    shares = split(vector["quantized"], len(vector["shares"]), modulus, FixedShares(randoms))
    assert shares == vector["shares"]
    assert shares[:-1] == randoms
    assert sum(shares) % modulus == vector["quantized"]
    assert protocol().encode_value(x, FixedShares(randoms)) == shares
    assert [encode_share(y, modulus).hex() for y in shares] == vector["payloads"]


def test_the_submission_box_carries_the_encoded_shares() -> None:
    """Alice's submission box (docs/wire.md § 9.3) holds one inner onion per payload of
    Algorithm 1, in order; mallory's holds the invalid payload the trace excludes."""
    [alice] = [s for s in VECTORS["submissions"] if s["client"] == CLOAK["encoder"]["client"]]
    assert alice["payloads"] == CLOAK["encoder"]["payloads"]
    assert [o["payload"] for o in alice["inner_onions"]] == CLOAK["encoder"]["payloads"]
    [mallory] = [s for s in VECTORS["submissions"] if s["client"] == "mallory"]
    accused = VECTORS["trace"]["accused"]
    assert mallory["payloads"][accused["index"]] == CLOAK["invalid_payloads"][0]
    valid = payload_validator(protocol())
    assert [valid(bytes.fromhex(p)) for p in mallory["payloads"]] == [True, True, False, True]
    # the one-mix chain's box holds valid payloads of the same width
    solo = VECTORS["one_mix"]
    assert solo["payload_length"] == share_width(int(CLOAK["encoder"]["modulus"]))
    assert all(valid(bytes.fromhex(p)) for p in solo["submission"]["payloads"])


def test_truncated_discrete_laplace_pmf() -> None:
    vector = CLOAK["noise_pmf"]
    modulus, scale = vector["modulus"], Fraction(vector["scale"])
    p = noise_p(scale)
    assert p == vector["p"]
    normaliser = 1 + p - 2 * p ** ((modulus + 1) // 2)
    total = 0.0
    for j, mass in vector["pmf"]:
        assert truncated_laplace_pmf(j, modulus, p) == pytest.approx(mass, rel=1e-12)
        assert (1 - p) * p ** abs(j) / normaliser == pytest.approx(mass, rel=1e-12)
        total += mass
    assert total == pytest.approx(1.0, rel=1e-12)


def test_the_analyzers_result() -> None:
    vector = CLOAK["result"]
    payloads = tuple(bytes.fromhex(p) for p in vector["payloads"])
    app = AnalyzerApp(protocol(), clock=lambda: vector["clock"])
    batch = DeliveredBatch(vector["clients"], vector["count"], payloads, vector["excluded"])
    result = app.analyze(vector["round"], batch)
    assert result == vector["result"]
    assert list(result) == list(vector["result"])  # the order of the result frame's keys
    # Algorithm 2 by hand: z = Σ y mod N; here z <= n·k, so the estimate is z / k exactly
    modulus = int(CLOAK["encoder"]["modulus"])
    raw = sum(int.from_bytes(p, "big") for p in payloads) % modulus
    assert str(raw) == result["raw_sum"]
    k = result["precision"]
    assert raw <= result["users"] * k
    exact = Fraction(raw, k)
    assert result["estimate_exact"] == f"{exact.numerator}/{exact.denominator}"
    assert result["estimate"] == float(exact)
    [frame] = [f for f in VECTORS["frames"] if f["name"] == "result"]
    assert frame["fields"] == {"type": "result", **vector["result"]}
