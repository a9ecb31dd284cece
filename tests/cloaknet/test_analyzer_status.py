"""The analyzer's part of the status page: each published estimate states its privacy
guarantee, and the page shows it (ε, δ, protocol, users, excluded) in the analyzer's
columns."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import numpy as np

from cloaknet.analyzer_node import RESULT_COLUMNS, AnalyzerApp
from cloaknet.encoding import encode_share
from cloaknet.params import CloakParams
from cloaknet.planner import plan
from cloaknet.protocols import CloakProtocol, SummationProtocol, make_protocol
from cloaknet.randomness import DeterministicRandom
from mixnet.core.actions import DeliveredBatch
from mixnet.status_page import ChainNode, DescribesResults, NodeView, PageData, render_page

USERS = 20
NONCE = "a" * 24


def batch(protocol: SummationProtocol, users: int = USERS) -> DeliveredBatch:
    """Every user's messages as the analyzer receives them (order does not matter)."""
    x = np.random.default_rng(2).random(users)  # test data only
    messages = protocol.encode_many(x, DeterministicRandom("analyzer-status"))
    payloads = [encode_share(int(v), protocol.message_modulus) for v in messages.reshape(-1)]
    return DeliveredBatch(clients=users, count=len(payloads), payloads=payloads)


class Cells(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def results_table(results: list[dict[str, object]], app: AnalyzerApp) -> list[dict[str, str]]:
    """The results table a person sees for ``results``, one dict per row by header."""
    sink = NodeView(ChainNode("analyzer", 1, None), {"rounds": []})
    page = render_page(
        PageData("c", [sink], results, app.result_columns(), now=0.0), nonce=NONCE
    )
    match = re.search(r'<table id="results-table">.*?</table>', page, re.S)
    assert match is not None
    cells = Cells()
    cells.feed(match.group(0))
    header, *rows = cells.rows
    return [dict(zip(header, row, strict=True)) for row in rows]


def test_a_published_estimate_states_the_chains_guarantee() -> None:
    protocol = CloakProtocol.from_plan(plan(USERS, 0.8, 1e-7, mode="sum-preserving"))
    app = AnalyzerApp(protocol, clock=lambda: 1000.0)
    result = app.analyze(4, batch(protocol))
    assert result["status"] == "ok"
    assert result["epsilon"] == protocol.epsilon == 0.8
    assert result["delta"] == protocol.delta == 1e-7
    (row,) = results_table([result], app)
    assert row["round"] == "4"
    assert row["status"] == "ok"
    assert row["users"] == str(USERS)
    assert row["excluded"] == "0"
    assert row["protocol"] == "cloak-sum-preserving"
    assert row["ε"] == "0.8"
    assert row["δ"] == "1e-07"
    assert row["completed"] == "00:16:40 UTC"
    assert row["error"] == ""


def test_every_protocol_states_its_guarantee_and_an_error_states_none() -> None:
    protocol = make_protocol("bbgn", 300, 1.0, 1e-6)
    app = AnalyzerApp(protocol)
    ok = app.analyze(1, batch(protocol, 300))
    assert (ok["epsilon"], ok["delta"]) == (1.0, 1e-6)
    short = batch(protocol, 300)
    wrong = app.analyze(2, DeliveredBatch(301, short.count, short.payloads))
    assert wrong["status"] == "error" and "epsilon" not in wrong
    rows = results_table([ok, wrong], app)
    assert rows[1]["ε"] == "—" and rows[1]["error"].startswith("expected n·m")


def test_a_cloak_without_a_stated_guarantee_shows_none() -> None:
    params = CloakParams(modulus=91, precision=1, messages=4, max_users=10)
    protocol = CloakProtocol(params)
    app = AnalyzerApp(protocol)
    result = app.analyze(1, batch(protocol, 10))
    assert result["status"] == "ok"
    assert result["epsilon"] is None and result["delta"] is None
    (row,) = results_table([result], app)
    assert row["ε"] == row["δ"] == "—"


def test_excluded_users_are_shown_when_a_result_has_them() -> None:
    protocol = make_protocol("bbgn", 300, 1.0, 1e-6)
    app = AnalyzerApp(protocol)
    result = {**app.analyze(1, batch(protocol, 300)), "excluded": 3}
    assert results_table([result], app)[0]["excluded"] == "3"


def test_the_analyzer_chooses_the_columns() -> None:
    app = AnalyzerApp(make_protocol("bbgn", 300, 1.0, 1e-6))
    assert isinstance(app, DescribesResults)
    labels = [c.label for c in app.result_columns()]
    assert app.result_columns() == RESULT_COLUMNS
    for label in ("round", "users", "excluded", "protocol", "ε", "δ"):
        assert label in labels
