"""The analyzer's status page in a real headless browser, after real rounds through a chain.

The browser is the system Chromium (``chromium`` or ``chromium-browser`` on PATH; ``.ci/run``
installs it from the OS packages). It loads ``GET /`` from the analyzer of an in-process
chain, runs the page's inline script (``--virtual-time-budget`` lets its refresh fetch
complete) and prints the DOM; the test reads the text a person would see. No browser is ever
downloaded: without one on PATH the test is skipped.

``CLOAKNET_STATUS_SCREENSHOT=docs/status-page.png`` also saves the screenshot there (that is
how the one in ``docs/`` is made).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import struct
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from cloaknet.client import connect
from cloaknet.localchain import HOST, local_chain
from cloaknet.planner import plan
from cloaknet.protocols import CloakProtocol
from mixnet.chain import RoundPolicy
from mixnet.status_page import format_value

BROWSERS = ("chromium", "chromium-browser")
USERS = 12
ROUNDS = 2
#: Seconds one browser run may take.
BROWSER_TIMEOUT = 90.0
WINDOW = (1280, 1040)


def find_browser() -> str | None:
    """The system Chromium's path, or ``None``."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path is not None:
            return path
    return None


#: Tags that start a new line or box when rendered.
BREAKS = frozenset({"br", "div", "p", "li", "tr", "td", "th", "h1", "h2", "section", "footer"})


class VisibleText(HTMLParser):
    """The page's tables as cell texts, and all text outside scripts and styles."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self.text: list[str] = []
        self.body: dict[str, str | None] = {}
        self._skip = 0
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in BREAKS:  # rendered on a line of its own: words do not run together
            self.handle_data(" ")
        if tag in ("script", "style"):
            self._skip += 1
        elif tag == "body":
            self.body = dict(attrs)
        elif tag == "table":
            self._table = dict(attrs).get("id") or "?"
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._skip -= 1
        elif tag == "table":
            self._table = None
        elif tag in ("td", "th") and self._table is not None and self._cell is not None:
            self.tables[self._table][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


async def run_browser(browser: str, profile: Path, *args: str) -> bytes:
    """Run headless Chromium with ``args`` (without blocking the chain's event loop) and
    return what it printed."""
    process = await asyncio.create_subprocess_exec(
        browser,
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-extensions",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), BROWSER_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode == 0, err.decode(errors="replace")[-2000:]
    return out


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


async def test_a_person_sees_the_rounds_results_and_guarantee(tmp_path: Path) -> None:
    browser = find_browser()
    if browser is None:
        pytest.skip(
            "no Chromium on PATH (chromium or chromium-browser); install it from the OS "
            "packages, e.g. apt-get install chromium (.ci/run does)"
        )
    chosen = plan(USERS, 1.0, 1e-6, mode="sum-preserving")
    protocol = CloakProtocol.from_plan(chosen)
    policy = RoundPolicy(min_users=USERS, max_users=USERS, deadline_seconds=60.0)
    rng = np.random.default_rng(5)
    rounds: list[int] = []
    (tmp_path / "chain").mkdir()
    async with (
        local_chain(tmp_path / "chain", protocol, policy, mixes=3) as chain,
        connect(chain.chain) as net,
    ):
        chain.analyzer.show_chain(chain.chain.config)
        for _ in range(ROUNDS):
            receipts = await net.submit_many(rng.random(USERS).tolist(), concurrency=6)
            (round_id,) = {r.round for r in receipts}
            result = await net.result(round_id, timeout=60)
            assert result.users == USERS
            rounds.append(round_id)
        url = f"http://{HOST}:{chain.analyzer.port}/"
        dom = await run_browser(
            browser, tmp_path / "profile", "--virtual-time-budget=5000", "--dump-dom", url
        )
        shot = tmp_path / "status-page.png"
        await run_browser(
            browser,
            tmp_path / "profile",
            "--virtual-time-budget=5000",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            f"--screenshot={shot}",
            url,
        )

    page = VisibleText()
    page.feed(dom.decode())
    text = " ".join("".join(page.text).split())
    # the inline script ran under the page's CSP and refreshed the content at least once
    assert int(page.body.get("data-refreshes") or 0) >= 1, page.body
    assert "refresh failed" not in text
    # the chain, in order, every node answering
    for name in ("mix1", "mix2", "mix3", "analyzer"):
        assert name in text
    assert "not answering" not in text
    # the next round is open at the entry mix
    assert f"Round {rounds[-1] + 1} is open at mix1" in text

    header, *rows = page.tables["results-table"]
    for label in ("round", "users", "excluded", "protocol", "ε", "δ"):
        assert label in header
    by_round = {row[header.index("round")]: dict(zip(header, row, strict=True)) for row in rows}
    for round_id in rounds:
        row = by_round[str(round_id)]
        assert row["status"] == "ok"
        assert row["users"] == str(USERS)
        assert row["excluded"] == "0"
        assert row["protocol"] == protocol.name
        assert row["ε"] == format_value(protocol.epsilon) == "1"
        assert row["δ"] == format_value(protocol.delta) == "1e-06"

    timing_header, *timing_rows = page.tables["timings-table"]
    assert timing_header[1:] == ["hop 0 mix1", "hop 1 mix2", "hop 2 mix3", "hop 3 analyzer"]
    done = next(r for r in timing_rows if r[0] == str(rounds[-1]))
    *mix_cells, sink_cell = done[1:]
    assert sink_cell.split()[0] == "done"
    assert "analyze" in sink_cell.split() and "hop" in sink_cell.split()
    for cell in mix_cells:  # each mix mixed the round and handed it on
        words = cell.split()
        assert words[0] not in ("opening", "open", "closed", "aborted", "failed"), cell
        assert "mix" in words and "open" in words, cell

    data = shot.read_bytes()
    assert png_size(data) == WINDOW
    target = os.environ.get("CLOAKNET_STATUS_SCREENSHOT")
    if target:
        Path(target).write_bytes(data)
