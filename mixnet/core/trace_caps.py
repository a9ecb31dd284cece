"""How much one trace frame carries (``docs/protocol.md``, "Trace and exclude"): the most
accusations one ``accused`` reply names and the most items one ``exclude`` frame drops.

Pure arithmetic on the round policy, shared by the mixes that build these frames
(:mod:`mixnet.core.tracing`, :mod:`mixnet.core.verdict`) and the node settings that size
the frame limits for them (:mod:`mixnet.settings`).
"""

from __future__ import annotations

__all__ = ["accusation_cap", "exclude_cap"]


def accusation_cap(chunk_size: int, mixes: int) -> int:
    """The most accusations one ``accused`` reply carries: ``chunk_size // (2·mixes)``, but
    never fewer than 2, so that a pair of ``duplicate`` accusations always fits. Bad payloads
    beyond it are reported as untraced (the round then aborts, with the reason). The
    receiver's frame limit holds a reply this long
    (:meth:`mixnet.settings.NodeSettings.accused_reply_length`)."""
    return max(2, chunk_size // (2 * max(1, mixes)))


def exclude_cap(chunk_size: int, messages: int) -> int:
    """The most items one ``exclude`` frame carries (and every mix accepts): all ``messages``
    items of as many submissions as mix 2's ``accused`` reply can name
    (:func:`accusation_cap` with 2 mixes), and never fewer than a chunk's worth. The entry
    mix aborts a round whose exclusion would need more."""
    return max(chunk_size, messages * accusation_cap(chunk_size, 2))
