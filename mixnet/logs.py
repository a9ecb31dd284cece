"""How a node process logs: plain text or one JSON object per line.

:func:`configure_logging` sets up the root logger of a node process (``cloaknet node
--log-format text|json --log-level LEVEL [--log-file FILE]``). The text format is
``<time> <node> <LEVEL> <message>``. The JSON format (:class:`JsonFormatter`) writes one
object per line with the keys

* ``time``: the record's time, ISO 8601 in UTC with milliseconds (``2026-01-02T03:04:05.678Z``);
* ``level``: ``DEBUG``, ``INFO``, ``WARNING``, ``ERROR`` or ``CRITICAL``;
* ``logger``: the logger's name (``mixnet``, ``mixnet.link``, ``cloaknet.node``, ...);
* ``message``: the formatted message;
* ``node``: the node's name (the record's own ``node`` attribute if it has one, else the
  formatter's);
* ``round``: the round id, when the record carries one (``extra={"round": r}``, see
  :func:`round_extra`);
* ``exception``: the formatted traceback, when the record carries one.

JSON escapes every control character, so a message (which may quote a peer's error
reason) can never break a line in two.

Probes (``/healthz``, ``/status``, ``/metrics``) and the websocket library's per-connection
messages are logged at DEBUG (:func:`quiet_logger`), so an INFO log holds what the node
did, not who looked at it.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "LOG_FORMATS",
    "JsonFormatter",
    "QuietLogger",
    "configure_logging",
    "quiet_logger",
    "round_extra",
]

#: The values of ``--log-format``.
LOG_FORMATS: tuple[str, ...] = ("text", "json")


def round_extra(round_id: int | None) -> dict[str, object]:
    """``extra`` for a log call about round ``round_id`` (nothing when ``None``)."""
    return {} if round_id is None else {"round": round_id}


class JsonFormatter(logging.Formatter):
    """Formats each record as one JSON object on one line (keys in the module docstring).
    ``node`` is the default node name (``None``: the key is left out unless the record has
    a ``node`` attribute)."""

    def __init__(self, node: str | None = None) -> None:
        super().__init__()
        self.node = node

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        out: dict[str, object] = {
            "time": when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        node = getattr(record, "node", None) or self.node
        if node is not None:
            out["node"] = str(node)
        round_id = getattr(record, "round", None)
        if isinstance(round_id, int) and not isinstance(round_id, bool):
            out["round"] = round_id
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure_logging(
    *,
    node: str,
    level: str = "INFO",
    fmt: str = "text",
    file: Path | None = None,
    stream: TextIO | None = None,
) -> logging.Handler:
    """Send every log record of the process at ``level`` or above to ``file`` (appended;
    created with the process's umask, 0600 under a node's) or else ``stream`` (default
    stderr), as ``fmt`` (``"text"`` or ``"json"``) with ``node``'s name. Replaces the root
    logger's handlers; returns the handler installed.

    :raises ValueError: ``fmt`` or ``level`` is not one of the known values.
    :raises OSError: ``file`` cannot be opened.
    """
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ValueError(f"unknown log level {level!r}")
    handler: logging.Handler
    if file is not None:
        handler = logging.FileHandler(file, mode="a", encoding="utf-8")
    else:
        handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(node))
    else:
        handler.setFormatter(logging.Formatter(f"%(asctime)s {node} %(levelname)s %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level)
    return handler


class QuietLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger adapter that logs INFO messages at DEBUG (for the websocket library, which
    logs every connection opened and closed — every probe — at INFO). Other levels pass
    through unchanged."""

    def __init__(self, logger: logging.Logger, extra: Mapping[str, object] | None = None):
        super().__init__(logger, extra or {})

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        # LoggerAdapter.info() and an adapter wrapping this one both come here
        super().log(logging.DEBUG if level == logging.INFO else level, msg, *args, **kwargs)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        return msg, kwargs


def quiet_logger(name: str) -> QuietLogger:
    """:class:`QuietLogger` around the logger ``name``."""
    return QuietLogger(logging.getLogger(name))
