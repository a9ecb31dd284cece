"""The status page's own assets: its stylesheet, its script, and the Content-Security-Policy
that lets exactly those run (each response carries a fresh nonce). No asset is loaded from
anywhere else. See :mod:`mixnet.status_page` for the page itself."""

from __future__ import annotations

import re
import secrets

__all__ = ["CSS", "SCRIPT", "check_nonce", "content_security_policy", "new_nonce"]

_NONCE = re.compile(r"[A-Za-z0-9_-]{16,64}")


def new_nonce() -> str:
    """A fresh random nonce for one response's script and style elements."""
    return secrets.token_urlsafe(18)


def content_security_policy(nonce: str) -> str:
    """The ``Content-Security-Policy`` header value that lets the page run its own script
    and style (those carrying ``nonce``), fetch only from its own origin, and nothing else.

    :raises ValueError: ``nonce`` is not 16–64 URL-safe base64 characters.
    """
    check_nonce(nonce)
    return (
        "default-src 'none'; "
        f"script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
        "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )


def check_nonce(nonce: str) -> None:
    if not isinstance(nonce, str) or _NONCE.fullmatch(nonce) is None:
        raise ValueError("the nonce must be 16-64 URL-safe base64 characters")



CSS = """
:root{color-scheme:light;--fg:#1d2430;--muted:#667085;--line:#d9dee7;--bg:#f6f7f9;
--card:#fff;--ok:#0f7b4a;--bad:#b42318;--warn:#9a6700;--info:#1f5fbf}
*{box-sizing:border-box}
body{margin:0;padding:1.2rem 1.6rem;font:14px/1.45 system-ui,-apple-system,"Segoe UI",
Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{display:flex;align-items:baseline;gap:1rem;flex-wrap:wrap}
h1{font-size:1.35rem;margin:0 0 .6rem}h2{font-size:1.05rem;margin:0 0 .5rem}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;
padding:.8rem 1rem;margin:0 0 .9rem}
.muted{color:var(--muted)}.stale{color:var(--bad)}
ol.hops{list-style:none;display:flex;flex-wrap:wrap;gap:.4rem;margin:0;padding:0}
ol.hops li{border:1px solid var(--line);border-radius:6px;padding:.45rem .7rem;
min-width:11rem;display:flex;flex-direction:column;position:relative}
ol.hops li+li{margin-left:1.1rem}
ol.hops li+li:before{content:"→";position:absolute;left:-1.25rem;top:40%;color:var(--muted)}
li.node.up{border-left:4px solid var(--ok)}li.node.down{border-left:4px solid var(--bad)}
.hop{color:var(--muted);font-size:12px}.name{font-size:15px}.url{color:var(--muted)}
.up{color:var(--ok)}.down{color:var(--bad)}
table{border-collapse:collapse;width:100%}.scroll{overflow-x:auto}
th,td{border-bottom:1px solid var(--line);padding:.3rem .55rem;text-align:left;
vertical-align:top;white-space:nowrap}
thead th{font-weight:600;color:var(--muted);font-size:12.5px}
td[data-key=round],tbody th{font-weight:600}
.st{display:inline-block;padding:0 .4rem;border-radius:4px;background:#eef0f4;font-size:12.5px}
.st-ok,.st-done,.st-confirmed{background:#e3f4ea;color:var(--ok)}
.st-error,.st-failed{background:#fde7e5;color:var(--bad)}
.st-aborted{background:#f1f1f1;color:var(--muted)}
.st-open,.st-opening,.st-pending{background:#e6efff;color:var(--info)}
.st-closed,.st-mixed,.st-forwarded,.st-released{background:#fff4d6;color:var(--warn)}
.t{font-size:12.5px;color:var(--muted)}.t b{color:var(--fg);font-weight:500}
ul.busy{margin:.2rem 0 0;padding-left:1.2rem}
footer{font-size:12.5px}
"""

SCRIPT = """
(() => {
  "use strict";
  const body = document.body;
  const seconds = Number(body.dataset.refreshSeconds) || 3;
  const state = document.getElementById("refresh-state");
  let busy = false;
  async function refresh() {
    if (busy) return;
    busy = true;
    try {
      const response = await fetch(window.location.pathname,
        {cache: "no-store", credentials: "same-origin"});
      if (!response.ok) throw new Error("HTTP " + response.status);
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById("content");
      const current = document.getElementById("content");
      if (!fresh || !current) throw new Error("unexpected page");
      current.replaceWith(document.importNode(fresh, true));
      body.dataset.refreshes = String(Number(body.dataset.refreshes || "0") + 1);
      state.textContent = "refreshes every " + seconds + " s";
      state.classList.remove("stale");
    } catch (error) {
      state.textContent = "refresh failed (" + String(error) + "); showing older data";
      state.classList.add("stale");
    } finally {
      busy = false;
    }
  }
  setInterval(refresh, seconds * 1000);
})();
"""
