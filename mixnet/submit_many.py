"""``submit-many``: several submissions in one frame, each accepted or refused on its own.

A client that holds many users' sealed submission boxes — a load generator, an application
server collecting its users' boxes, a simulation — would otherwise pay a websocket frame, a
round trip and the entry mix's per-frame work for every one of them. ``submit-many`` carries
up to ``[limits].max_submissions_per_frame`` of them::

    {"type": "submit-many", "submissions": [S1, S2, ...]}

where every ``Si`` is exactly the map of a ``submit`` frame (``round``, ``client``, ``box``
and, on a chain with admission, ``credential``, ``signature``, ``token``; its ``type`` may be
left out). The entry mix answers with one frame once every submission is decided::

    {"type": "receipts", "results": [R1, R2, ...]}

``Ri`` is exactly what a lone ``submit`` of ``Si`` would have been answered with: an
``accepted`` map (``round``, ``client``) once ``Si`` is stored, or an ``error`` map (``code``,
``reason``). Each submission is all-or-nothing on its own (a malformed or refused one does
not touch the others), and ``Ri`` reports ``accepted`` only after ``Si`` is on disk, as for
``submit``. A frame-level fault — ``submissions`` missing, not a list, empty, longer than the
limit, or an element that is not a map — refuses the whole frame with one error frame, and
nothing of it is processed.

Privacy: the entry mix learns which boxes came in one frame, i.e. from one sender. A
single-box ``submit`` already tells it who sent each box; a sender batching its users' boxes
is in the entry mix's view one more client. The boxes are sealed for the entry mix, so the
sender itself learns nothing from them.

Pure (no I/O): parsing, encoding and the receipt check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mixnet.errors import MalformedFrame, MixnetError, WrongCount
from mixnet.frames import MAX_CLIENT_ID_LENGTH, FrameLimits, Submit, parse_request, to_wire
from mixnet.wire import ERROR_TYPE, error_from_frame, get_int, get_str

__all__ = [
    "RECEIPTS",
    "SUBMISSION_WIRE_SLACK",
    "SUBMIT_MANY",
    "Receipts",
    "parse_receipts",
    "parse_submit_many",
    "receipts_frame",
    "submit_many_frame",
]

SUBMIT_MANY = "submit-many"
RECEIPTS = "receipts"
#: Bytes of one element of ``submissions`` beyond its box, at most: the map and its keys,
#: a round id, a client id of up to 128 characters and the admission fields (32 + 64 + 72).
SUBMISSION_WIRE_SLACK = 512


def parse_submit_many(
    frame: Mapping[str, object], limits: FrameLimits, *, max_count: int
) -> list[Submit | MixnetError]:
    """The submissions of a ``submit-many`` frame, in order: each a :class:`Submit`, or the
    :class:`MixnetError` that parsing it raised (that element is refused, the others go on).

    :raises MalformedFrame: ``submissions`` is missing or not a list, or an element is not a
        map.
    :raises WrongCount: the list is empty or holds more than ``max_count`` elements.
    """
    raw = frame.get("submissions")
    if not isinstance(raw, list):
        raise MalformedFrame("field 'submissions' must be a list")
    if not 1 <= len(raw) <= max_count:
        raise WrongCount(f"field 'submissions' must hold 1..{max_count} submissions")
    out: list[Submit | MixnetError] = []
    for index, element in enumerate(raw):
        if not isinstance(element, dict):
            raise MalformedFrame(f"submission {index} must be a map")
        kind = element.get("type", "submit")
        try:
            if kind != "submit":
                raise MalformedFrame(f"submission {index} must be of type 'submit'")
            parsed = parse_request("submit", element, limits)
            assert isinstance(parsed, Submit)
            out.append(parsed)
        except MixnetError as exc:
            out.append(exc)
    return out


def submit_many_frame(submissions: Sequence[Submit]) -> dict[str, object]:
    """The ``submit-many`` map of ``submissions`` (each element without its ``type``).

    :raises ValueError: ``submissions`` is empty.
    """
    if not submissions:
        raise ValueError("a submit-many frame needs at least one submission")
    elements = []
    for submission in submissions:
        element = to_wire(submission)
        del element["type"]
        elements.append(element)
    return {"type": SUBMIT_MANY, "submissions": elements}


def receipts_frame(results: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """The ``receipts`` reply: one ``accepted`` or ``error`` map per submission, in order."""
    return {"type": RECEIPTS, "results": list(results)}


@dataclass(frozen=True)
class Receipts:
    """A parsed ``receipts`` reply: per submission, ``None`` (accepted and stored) or the
    :class:`MixnetError` that refused it."""

    results: tuple[MixnetError | None, ...]


def parse_receipts(frame: Mapping[str, object], sent: Sequence[Submit]) -> Receipts:
    """Check a ``receipts`` reply against the submissions ``sent`` in that order.

    :raises MalformedFrame: the reply is not a ``receipts`` frame, has another number of
        results, a result that is neither ``accepted`` nor a well-formed error, or an
        ``accepted`` for another round or client than the submission in its place.
    """
    if frame.get("type") != RECEIPTS:
        raise MalformedFrame("expected a 'receipts' reply")
    raw = frame.get("results")
    if not isinstance(raw, list) or len(raw) != len(sent):
        raise MalformedFrame(f"field 'results' must be a list of {len(sent)} results")
    out: list[MixnetError | None] = []
    for index, (result, submission) in enumerate(zip(raw, sent, strict=True)):
        if not isinstance(result, dict):
            raise MalformedFrame(f"result {index} must be a map")
        kind = result.get("type")
        if kind == ERROR_TYPE:
            out.append(error_from_frame(result))
        elif kind == "accepted":
            if (
                get_int(result, "round", min_value=0) != submission.round_id
                or get_str(result, "client", max_length=MAX_CLIENT_ID_LENGTH)
                != submission.client
            ):
                raise MalformedFrame(
                    f"result {index}: the entry mix acknowledged another submission"
                )
            out.append(None)
        else:
            raise MalformedFrame(f"result {index} must be 'accepted' or 'error'")
    return Receipts(tuple(out))

