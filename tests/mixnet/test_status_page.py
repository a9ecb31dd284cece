"""The sink's status page without a browser: what it shows, that data cannot add markup,
the poller's bounds, and ``GET /`` on a real chain whose sink runs a trivial application."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import urllib.request
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest
from websockets.asyncio.server import ServerConnection, serve

from mixnet.client import MixnetClient
from mixnet.core.policy import RoundPolicy
from mixnet.core.status import RoundStatus
from mixnet.status_page import (
    MAX_SHOWN,
    ChainNode,
    ChainPoller,
    NodeView,
    PageData,
    ResultColumn,
    content_security_policy,
    fetch_status,
    format_value,
    generic_columns,
    new_nonce,
    render_page,
)
from mixnet.wire import decode_frame, encode_frame
from tests.mixnet.test_nodes import WIDTH, payloads, result, running_chain

HOST = "127.0.0.1"
NONCE = "n" * 24
EVIL = "<img src=x onerror=alert(1)>\"'&"
#: The only elements the page itself writes.
PAGE_TAGS = frozenset(
    {"html", "head", "meta", "title", "noscript", "style", "body", "header", "h1", "h2", "p",
     "code", "main", "section", "ol", "li", "span", "strong", "ul", "div", "table", "thead",
     "tbody", "tr", "th", "td", "b", "i", "br", "footer", "a"}
)


class Elements(HTMLParser):
    """Every element and attribute of a page, and its text (scripts and styles apart)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._skip += 1
        self.text.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.text.append(data)


def parse(page: str) -> Elements:
    elements = Elements()
    elements.feed(page)
    return elements


def text_of(page: str) -> str:
    return " ".join("".join(parse(page).text).split())


def view(
    name: str, hop: int, rounds: Sequence[Mapping[str, object]], **extra: object
) -> NodeView:
    """A node that answered with these rounds in its status."""
    status = {"node": name, "hop": hop, "rounds": list(rounds), **extra}
    return NodeView(ChainNode(name, hop, f"ws://{HOST}:{9000 + hop}"), status)


def sample(**changes: object) -> PageData:
    """A chain of two mixes and a sink: round 4 open, round 3 done, round 2 aborted."""
    nodes = [
        view("mix1", 0, [
            {"round": 3, "status": "forwarded", "opened": 100.0, "closed": 110.0,
             "mix_seconds": 0.25, "messages": 30},
            {"round": 4, "status": "open", "opened": 111.0},
        ], role="entry"),
        view("mix2", 1, [{"round": 3, "status": "mixed", "opened": 100.1, "closed": 110.4}]),
        view("sink", 2, [
            {"round": 3, "status": "done", "opened": 100.2, "closed": 110.6,
             "analyze_seconds": 0.004, "finished": 110.7},
        ]),
    ]
    data = {
        "chain_id": "demo",
        "nodes": nodes,
        "results": [
            {"round": 3, "status": "ok", "users": 10, "sum": 55, "epsilon": 0.5},
            {"round": 2, "status": "aborted"},
        ],
        "columns": [
            ResultColumn("round", "round"),
            ResultColumn("status", "status"),
            ResultColumn("users", "users"),
            ResultColumn("excluded", "excluded", default=0, format="count"),
            ResultColumn("ε", "epsilon", description="privacy"),
        ],
        "now": 115.0,
    }
    data.update(changes)
    return PageData(**data)  # type: ignore[arg-type]


def table(page: str, table_id: str) -> list[list[str]]:
    """A table's rows as cell texts (header row first)."""
    match = re.search(rf'<table id="{table_id}">(.*?)</table>', page, re.S)
    assert match is not None
    rows = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", match.group(1), re.S):
        cells = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)
        rows.append([text_of(cell) for cell in cells])
    return rows


# ---------------------------------------------------------------------- rendering


def test_the_page_shows_the_chain_the_open_round_results_and_timings() -> None:
    page = render_page(sample(), nonce=NONCE)
    text = text_of(page)
    assert "Chain demo" in text
    assert "hop 0 · entry mix1 ws://127.0.0.1:9000 answering" in text
    assert "hop 2 · sink sink" in text
    assert "Round 4 is open at mix1 since 00:01:51 UTC (4.00 s)" in text
    assert "round 3: mix1 forwarded, mix2 mixed" in text
    results = table(page, "results-table")
    assert results == [
        ["round", "status", "users", "excluded", "ε"],
        ["3", "ok", "10", "0", "0.5"],
        ["2", "aborted", "—", "0", "—"],
    ]
    timings = table(page, "timings-table")
    assert timings[0] == ["round", "hop 0 mix1", "hop 1 mix2", "hop 2 sink"]
    assert timings[1][0] == "4" and timings[1][1] == "open" and timings[1][2] == "—"
    assert timings[2] == [
        "3",
        "forwarded open 10.00 s mix 250 ms messages 30",
        "mixed open 10.30 s",
        "done open 10.40 s analyze 4 ms hop 100 ms",
    ]
    assert 'title="privacy"' in page


def test_the_application_default_and_a_present_excluded_are_shown() -> None:
    data = sample(results=[
        {"round": 5, "status": "ok", "users": 9, "excluded": 2},
        {"round": 4, "status": "ok", "users": 9, "excluded": ["c1", "c2", "c3"]},
        {"round": 3, "status": "ok", "users": 9},
    ])
    rows = table(render_page(data, nonce=NONCE), "results-table")
    assert [row[3] for row in rows[1:]] == ["2", "3", "0"]


def test_a_round_without_a_result_is_pending_not_given_defaults() -> None:
    data = sample(results=[{"round": 6, "status": "open"}], pending=frozenset({6}))
    assert table(render_page(data, nonce=NONCE), "results-table")[1] == [
        "6", "pending", "—", "—", "—"
    ]


def test_nothing_from_the_data_can_add_markup() -> None:
    evil_rounds = [{"round": 1, "status": EVIL, EVIL: EVIL, "x_seconds": 1.0}]
    nodes = [
        NodeView(ChainNode(EVIL, 0, EVIL), None, EVIL),
        NodeView(ChainNode("m2", 1, None), {"rounds": evil_rounds, "role": EVIL}),
        NodeView(ChainNode("s", 2, None), {"rounds": "not a list"}),
    ]
    results: list[Mapping[str, object]] = [
        {"round": EVIL, "status": EVIL, EVIL: EVIL, "nested": {EVIL: [EVIL]}},
    ]
    columns = [*generic_columns(results), ResultColumn(EVIL, "nested", description=EVIL)]
    page = render_page(
        PageData(EVIL, nodes, results, columns, now=0.0, note=EVIL), nonce=NONCE
    )
    elements = parse(page)
    tags = [tag for tag, _ in elements.tags]
    assert set(tags) <= PAGE_TAGS | {"script"}
    assert tags.count("script") == 1 and tags.count("style") == 1
    for tag, attrs in elements.tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        if tag in ("script", "style"):
            assert attrs == {"nonce": NONCE}
    assert "<img" not in page
    assert page.count(EVIL) == 0
    text = "".join(elements.text)
    assert EVIL in text  # shown as text, where a person can read it
    assert "Not known: the entry mix does not answer" in " ".join(text.split())


def test_long_values_are_cut_and_values_are_formatted() -> None:
    assert format_value(None) == "—"
    assert format_value(True) == "yes"
    assert format_value(3) == "3"
    assert format_value(1.0) == "1"
    assert format_value(1e-6) == "1e-06"
    assert format_value(0.123456) == "0.1235"
    assert format_value(float("nan")) == "nan"
    assert format_value(0.0042, "seconds") == "4 ms"
    assert format_value(75.0, "seconds") == "1 min 15 s"
    assert format_value(3600.0, "time") == "01:00:00 UTC"
    assert format_value([1, 2], "count") == "2"
    assert format_value(b"\x01\xff") == "01ff"
    assert format_value({"a": [1]}) == '{"a":[1]}'
    cut = format_value("x" * 500)
    assert len(cut) == MAX_SHOWN and cut.endswith("…")


def test_generic_columns_are_the_scalar_fields_in_order() -> None:
    columns = generic_columns([
        {"round": 1, "status": "ok", "sum": 5, "list": [1]},
        {"round": 2, "error": "x", "sum": 6, "none": None},
    ])
    assert [c.key for c in columns] == ["round", "status", "sum", "error", "none"]


def test_the_nonce_is_checked_and_matches_the_policy() -> None:
    nonce = new_nonce()
    assert nonce != new_nonce()
    page = render_page(sample(), nonce=nonce)
    assert f'<script nonce="{nonce}">' in page and f'<style nonce="{nonce}">' in page
    policy = content_security_policy(nonce)
    assert f"script-src 'nonce-{nonce}'" in policy and "default-src 'none'" in policy
    for bad in ("short", 'x" onload="y' * 3, "a" * 65):
        with pytest.raises(ValueError):
            render_page(sample(), nonce=bad)
        with pytest.raises(ValueError):
            content_security_policy(bad)


def test_the_page_is_self_contained() -> None:
    page = render_page(sample(), nonce=NONCE)
    assert "http://" not in page.replace("ws://", "") and "https://" not in page
    assert "//" not in re.sub(r"ws://[^<\"]*", "", page.split("<script", 1)[0])
    assert "@import" not in page and "url(" not in page
    assert "src=" not in page.split("<script", 1)[0]


def test_no_round_and_no_answer() -> None:
    nodes = [NodeView(ChainNode("mix1", 0, "ws://x:1"), None, "refused"),
             view("sink", 1, [])]
    text = text_of(render_page(sample(nodes=nodes, results=[]), nonce=NONCE))
    assert "not answering: refused" in text
    assert "No round has ended yet." in text
    quiet = [view("mix1", 0, [{"round": 1, "status": RoundStatus.ABORTED.value}]),
             view("sink", 1, [])]
    assert "No round is open." in text_of(render_page(sample(nodes=quiet), nonce=NONCE))


# ---------------------------------------------------------------------- the poller


class StatusServer:
    """A real websocket server answering ``status`` frames (and counting them), or never
    answering."""

    def __init__(self, *, answer: bool = True) -> None:
        self.answer = answer
        self.requests = 0
        self.url = ""

    async def handler(self, conn: ServerConnection) -> None:
        async for message in conn:
            assert isinstance(message, bytes)
            frame = decode_frame(message, max_size=1 << 16)
            self.requests += 1
            if self.answer:
                reply = {"type": "status", "node": "fake", "hop": 0, "rounds": [],
                         "asked": frame["type"]}
                await conn.send(encode_frame(reply))


@contextlib.asynccontextmanager
async def serving(server: StatusServer) -> AsyncIterator[StatusServer]:
    async with serve(server.handler, HOST, 0) as running:
        port = next(iter(running.sockets)).getsockname()[1]
        server.url = f"ws://{HOST}:{port}"
        yield server


async def test_fetch_status_asks_with_a_status_frame() -> None:
    async with serving(StatusServer()) as server:
        status = await fetch_status(server.url, timeout=5)
        assert status == {"node": "fake", "hop": 0, "rounds": [], "asked": "status"}


async def test_the_poller_asks_at_most_once_per_interval() -> None:
    now = [0.0]
    async with serving(StatusServer()) as server:
        poller = ChainPoller(
            [ChainNode("m", 0, server.url), ChainNode("n", 1, None)],
            interval=2.0,
            clock=lambda: now[0],
        )
        views = await asyncio.gather(*(poller.poll() for _ in range(5)))
        assert server.requests == 1
        assert all(v[0].status is not None for v in views)
        assert views[0][1].status is None and views[0][1].error == (
            "address not known to the sink"
        )
        now[0] = 1.9
        await poller.poll()
        assert server.requests == 1
        now[0] = 2.0
        await poller.poll()
        assert server.requests == 2


async def test_a_silent_or_absent_node_is_shown_with_the_reason() -> None:
    async with serving(StatusServer(answer=False)) as server:
        poller = ChainPoller([ChainNode("m", 0, server.url)], timeout=0.3, interval=0)
        (silent,) = await poller.poll()
        assert silent.status is None and silent.error == "no answer within 0.3 s"
    poller = ChainPoller([ChainNode("m", 0, server.url)], timeout=2, interval=0)
    (gone,) = await poller.poll()  # the server is closed: the connection is refused
    assert gone.status is None and gone.error and "refused" in gone.error.lower()


def test_the_poller_refuses_bad_bounds() -> None:
    with pytest.raises(ValueError):
        ChainPoller([], timeout=0)
    with pytest.raises(ValueError):
        ChainPoller([], interval=float("nan"))


# ---------------------------------------------------------------------- GET / on a sink


def get(url: str) -> tuple[int, dict[str, str], str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, dict(response.headers), response.read().decode()


async def test_get_slash_on_a_real_sink_shows_its_results(tmp_path: Path) -> None:
    policy = RoundPolicy(min_users=3, max_users=3, deadline_seconds=30.0, chunk_size=4)
    async with running_chain(tmp_path, mixes=2, messages=1, policy=policy) as chain:
        url = f"http://{HOST}:{chain.sink.port}/"
        status, headers, page = await asyncio.to_thread(get, url)
        # run_local_chain gives the sink the whole chain: every mix is listed at once
        assert "only its predecessor is listed" not in text_of(page)
        assert "hop 0 · entry mix1" in text_of(page)
        chain.sink.show_chain(chain.config)  # afresh: the mixes' statuses are polled anew
        client = MixnetClient(
            chain.config, messages=1, payload_length=WIDTH, sink_url=chain.config.sink.url
        )
        async with client:
            receipts = await asyncio.gather(
                *(client.submit(functools.partial(payloads, [v])) for v in (4, 5, 6))
            )
            round_id = receipts[0].round_id
            await asyncio.wait_for(result(client, round_id), 30)
        status, headers, page = await asyncio.to_thread(get, url + "?x=1")
    assert status == 200
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Cache-Control"] == "no-store"
    nonce = re.search(r'<script nonce="([^"]+)">', page)
    assert nonce is not None
    assert headers["Content-Security-Policy"] == content_security_policy(nonce.group(1))
    text = text_of(page)
    assert "hop 0 · entry mix1" in text and "hop 2 · sink sink" in text
    assert "not answering" not in text
    assert f"Round {round_id + 1} is open at mix1" in text
    rows = table(page, "results-table")
    assert rows[0] == ["round", "status", "clients", "sum"]  # the generic columns
    assert [str(round_id), "ok", "3", "15"] in rows


async def test_show_chain_refuses_another_chain(tmp_path: Path) -> None:
    policy = RoundPolicy(min_users=1, max_users=1, deadline_seconds=30.0)
    async with running_chain(tmp_path, mixes=1, messages=1, policy=policy) as chain:
        with pytest.raises(ValueError, match="is not this node's chain"):
            chain.sink.show_chain(replace(chain.config, chain_id="other"))
