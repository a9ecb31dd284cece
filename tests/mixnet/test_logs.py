"""Tests for mixnet.logs: JSON lines, the text format, and INFO from websockets at DEBUG."""

from __future__ import annotations

import io
import json
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from mixnet.logs import JsonFormatter, configure_logging, quiet_logger, round_extra


@pytest.fixture
def root_handlers() -> Iterator[None]:
    """Restore the root logger after a test that reconfigures it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("mixnet", logging.INFO, __file__, 1, message, args, None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_json_lines_have_the_documented_keys() -> None:
    formatter = JsonFormatter("mix1")
    rec = record("round %d: %s", 7, "line one\nline two", **round_extra(7))
    rec.created = 1767323045.678  # 2026-01-02T03:04:05.678Z
    line = formatter.format(rec)
    assert "\n" not in line
    assert json.loads(line) == {
        "time": "2026-01-02T03:04:05.678Z",
        "level": "INFO",
        "logger": "mixnet",
        "message": "round 7: line one\nline two",
        "node": "mix1",
        "round": 7,
    }


def test_json_leaves_out_what_is_unknown_and_keeps_exceptions_on_one_line() -> None:
    plain = json.loads(JsonFormatter().format(record("hello", **round_extra(None))))
    assert set(plain) == {"time", "level", "logger", "message"}
    assert json.loads(JsonFormatter("a").format(record("x", node="b")))["node"] == "b"
    try:
        raise ValueError("boom")
    except ValueError:
        rec = logging.LogRecord("mixnet", logging.ERROR, __file__, 1, "failed", (), None)
        import sys

        rec.exc_info = sys.exc_info()
    line = JsonFormatter("n").format(rec)
    assert "\n" not in line
    out = json.loads(line)
    assert out["level"] == "ERROR" and "ValueError: boom" in out["exception"]


@pytest.mark.usefixtures("root_handlers")
def test_configure_logging_text_and_json(tmp_path: Path) -> None:
    stream = io.StringIO()
    configure_logging(node="mix2", level="INFO", fmt="text", stream=stream)
    logging.getLogger("mixnet").info("hello %s", "there")
    logging.getLogger("mixnet").debug("not shown")
    assert stream.getvalue().rstrip().endswith("mix2 INFO hello there")
    assert "not shown" not in stream.getvalue()

    file = tmp_path / "node.log"
    old = os.umask(0o077)
    try:
        configure_logging(node="mix2", level="DEBUG", fmt="json", file=file)
    finally:
        os.umask(old)
    logging.getLogger("mixnet.link").debug("retrying", extra=round_extra(3))
    logging.getLogger().handlers[0].flush()
    out = json.loads(file.read_text().splitlines()[-1])
    assert out["logger"] == "mixnet.link" and out["round"] == 3 and out["node"] == "mix2"
    assert stat.S_IMODE(file.stat().st_mode) == 0o600

    with pytest.raises(ValueError, match="log format"):
        configure_logging(node="x", fmt="xml")
    with pytest.raises(ValueError, match="log level"):
        configure_logging(node="x", level="LOUD")


def test_quiet_logger_turns_info_into_debug_even_when_wrapped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    quiet = quiet_logger("websockets.server")
    wrapped = logging.LoggerAdapter(quiet, {"websocket": None})  # what websockets does
    with caplog.at_level(logging.DEBUG, logger="websockets.server"):
        quiet.info("connection open")
        wrapped.info("connection closed")
        wrapped.warning("still a warning")
    levels = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert levels == [
        ("DEBUG", "connection open"),
        ("DEBUG", "connection closed"),
        ("WARNING", "still a warning"),
    ]
