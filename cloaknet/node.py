"""Run one node of a chain: ``cloaknet node --chain chain.toml --name mix1 --key mix1.key``.

The node's :class:`~mixnet.settings.NodeSettings` come from the chain file
(:func:`mixnet.settings.node_settings`, with the protocol's message count and width); a mix
is a :class:`~mixnet.mix.MixNode` with its identity key, the analyzer a
:class:`~mixnet.sink.SinkNode` running :class:`~cloaknet.analyzer_node.AnalyzerApp`. The
node's sqlite store defaults to ``<name>.db`` next to the chain file; it serves until SIGINT
or SIGTERM, and stops within a few seconds of the signal (:meth:`mixnet.node.BaseNode.stop`).

A node listed at a ``wss://`` URL serves TLS with ``--tls-cert``/``--tls-key``
(:func:`mixnet.tls.server_context`); one listed at ``ws://`` refuses a certificate
(:func:`mixnet.tls.check_server_tls`). The chain file's ``[limits]`` bound its connections
(:mod:`mixnet.limits`); the process's open-file limit is raised to fit them when it can be.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import signal
import ssl
from pathlib import Path

from nacl.signing import SigningKey

from cloaknet.analyzer_node import analyzer_node
from cloaknet.chainfile import CloakChain, load_chain
from cloaknet.validator import payload_validator
from mixnet.chain import host_port
from mixnet.collector import settle_after_start
from mixnet.errors import MixnetError
from mixnet.keys import read_key_file
from mixnet.mix import MixNode
from mixnet.node import BaseNode
from mixnet.settings import NodeSettings, node_settings
from mixnet.store import NodeStore
from mixnet.tls import check_server_tls, server_context

__all__ = ["FD_RESERVE", "NodeConfigError", "build_node", "run_node"]

log = logging.getLogger("cloaknet.node")

#: File descriptors a node needs besides its connections (store, log, link, threads, ...).
FD_RESERVE = 64


class NodeConfigError(MixnetError):
    """The node cannot start with these options: a mix without its key file or with a key
    that is not the one the chain file lists, ``--dump-dir`` on a mix, or ``--tls-key``
    without ``--tls-cert`` (one-line reason)."""

    code = "bad-node-config"


def _prepare(
    chain: CloakChain,
    name: str,
    key_path: Path | None,
    dump_dir: Path | None,
    peel_processes: int = 0,
) -> tuple[NodeSettings, SigningKey | None]:
    """Everything that can be checked before the node's store is opened: its settings and,
    for a mix, its identity key (``None`` for the analyzer). Raises as :func:`build_node`."""
    settings = node_settings(
        chain.config,
        name,
        messages=chain.messages,
        payload_length=chain.payload_length,
        peel_processes=peel_processes,
    )
    if settings.hop == settings.hops:
        return settings, None
    if dump_dir is not None:
        raise NodeConfigError("--dump-dir is an analyzer option")
    if key_path is None:
        raise NodeConfigError(f"mix {name!r} needs --key (its identity key file)")
    identity = read_key_file(key_path)
    listed = chain.config.mixes[settings.hop].identity
    if listed is None or bytes(listed) != bytes(identity.verify_key):
        raise NodeConfigError(
            f"{key_path}: this key's public half is not the identity listed for {name!r}"
        )
    return settings, identity


def _make(
    chain: CloakChain,
    settings: NodeSettings,
    identity: SigningKey | None,
    store: NodeStore,
    dump_dir: Path | None,
) -> BaseNode:
    if identity is None:
        tls = chain.config.tls
        return analyzer_node(
            settings,
            store,
            chain.protocol,
            dump_dir=dump_dir,
            chain=chain.config,
            ssl_context=None if tls is None else tls.client_context(),
        )
    return MixNode(settings, store, identity, validator=payload_validator(chain.protocol))


def build_node(
    chain: CloakChain,
    name: str,
    key_path: Path | None,
    store: NodeStore,
    *,
    dump_dir: Path | None = None,
) -> BaseNode:
    """Construct (not start) node ``name`` of ``chain`` on ``store``.

    A mix needs ``key_path``, its identity key file, whose public half must be the identity
    the chain file lists for it; only the analyzer accepts ``dump_dir`` (see
    :class:`~cloaknet.analyzer_node.AnalyzerApp`).

    :raises ChainConfigError: no node is called ``name`` in the chain.
    :raises NodeConfigError: a mix without ``key_path``, with another key, or with
        ``dump_dir``.
    :raises KeyFileError: the key file is unreadable or invalid.
    """
    settings, identity = _prepare(chain, name, key_path, dump_dir)
    return _make(chain, settings, identity, store, dump_dir)


def _server_tls(
    name: str, url: str, cert: Path | None, key: Path | None
) -> ssl.SSLContext | None:
    """The node's TLS server context, checked against its URL (raises as :func:`run_node`)."""
    if key is not None and cert is None:
        raise NodeConfigError("--tls-key needs --tls-cert (the certificate it belongs to)")
    check_server_tls(name, url, has_certificate=cert is not None)
    return None if cert is None else server_context(cert, key)


def _fit_fd_limit(max_connections: int) -> None:
    """Raise the soft open-file limit to ``max_connections + FD_RESERVE`` if it is lower
    (up to the hard limit); warn if it stays too low for ``[limits].max_connections``."""
    wanted = max_connections + FD_RESERVE
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    except (OSError, ValueError) as exc:
        log.warning("cannot read or raise the open-file limit: %s", exc)
        return
    if soft != resource.RLIM_INFINITY and soft < wanted:
        log.warning(
            "the open-file limit (%d) is below [limits].max_connections + %d = %d: "
            "connections beyond it will fail (raise ulimit -n or lower max_connections)",
            soft, FD_RESERVE, wanted,
        )


async def run_node(
    chain_path: Path,
    name: str,
    key_path: Path | None,
    db_path: Path | None,
    listen: str | None,
    dump_dir: Path | None = None,
    *,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    peel_processes: int = 0,
) -> None:
    """Load the chain file, start node ``name`` and serve until SIGINT or SIGTERM.

    A mix peels in ``peel_processes`` worker processes (:mod:`mixnet.peel_processes`; 0: in
    threads of its own process).

    It listens on ``listen`` (default: the host of its URL in the chain file) at the port of
    that URL, and keeps its state in ``db_path`` (default ``<name>.db`` next to the chain
    file), which is opened only once the name, key and TLS files have been checked. A node
    listed at ``wss://`` serves TLS with the certificate ``tls_cert`` and its key
    ``tls_key`` (``None``: in ``tls_cert`` too). The node is stopped and the store closed
    however this ends.

    :raises ChainFileError: the chain file is unreadable or invalid.
    :raises ChainConfigError, NodeConfigError, KeyFileError: as :func:`build_node`;
        :class:`NodeConfigError` also for ``tls_key`` without ``tls_cert``.
    :raises TlsError: the node's URL is ``wss://`` without ``tls_cert``, or ``ws://`` with
        it; or the certificate or key cannot be loaded.
    :raises OSError: the store cannot be opened or the port cannot be bound.
    :raises StoreFailed: the store failed a commit; the node stopped (fail-stop,
        :mod:`mixnet.store`): start it again to recover from what the disk holds.
    """
    chain = load_chain(chain_path)
    settings, identity = _prepare(chain, name, key_path, dump_dir, peel_processes)
    url = chain.config.node(name).url
    tls = _server_tls(name, url, tls_cert, tls_key)
    host, port = host_port(url)
    _fit_fd_limit(chain.config.limits.max_connections)
    store = NodeStore(db_path or chain_path.parent / f"{name}.db")
    try:
        node = _make(chain, settings, identity, store, dump_dir)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        try:
            await node.start(listen or host, port, tls=tls)
            settle_after_start()
            await _until_stopped_or_failed(stop, node)
        finally:
            await node.stop()
    finally:
        store.close()
    if node.failure is not None:
        raise node.failure
    log.info("%s stopped", name)


async def _until_stopped_or_failed(stop: asyncio.Event, node: BaseNode) -> None:
    """Return when ``stop`` is set or ``node``'s store fails a commit (fail-stop)."""
    waits = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(node.wait_failure())}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
