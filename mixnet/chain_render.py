"""Writing a chain file: :func:`render_chain_config` (TOML text that
:func:`mixnet.chain.load_chain_config` loads back equal), :func:`render_table` (one table)
and :func:`write_chain_config` (to a file, never overwriting by accident)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mixnet.chain import ChainConfig, ChainConfigError, NodeInfo
from mixnet.chain_toml import dumps
from mixnet.keys import public_key_text
from mixnet.limits import DEFAULT_LIMITS

__all__ = ["render_chain_config", "render_table", "write_chain_config"]


def _node_table(node: NodeInfo) -> dict[str, str]:
    """The keys of a ``[[mix]]`` or the sink's table for ``node``."""
    table = {"name": node.name, "url": node.url}
    if node.identity is not None:
        table["identity"] = public_key_text(node.identity)
    return table


def _ca_text(ca: Path, base: Path | None) -> str:
    """``ca`` as written in ``[tls]``: relative to ``base`` when it lies under it."""
    if base is not None:
        absolute, folder = Path(os.path.abspath(ca)), Path(os.path.abspath(base))
        if absolute.is_relative_to(folder):
            return absolute.relative_to(folder).as_posix()
    return os.fspath(ca)


def render_chain_config(config: ChainConfig, *, base: Path | None = None) -> str:
    """Return TOML text for ``config`` that :func:`load_chain_config` loads back equal
    (when ``[tls].ca`` is absolute, or the file is loaded from the directory ``base``).

    Tables are written in the order ``[chain]``, ``[[mix]]``..., the sink's table,
    ``[round]`` (every key, ``chunk_size`` included), ``[tls]`` if ``config.tls`` is set
    (``ca`` relative to ``base`` when the file lies under it), ``[limits]`` (every key)
    unless the limits are the defaults, ``[admission]`` if ``config.admission`` is set
    (``clients`` in their order, then ``issuer``), then each section of
    :attr:`ChainConfig.sections` in its order, one blank line between tables, by
    :mod:`tomli_w`: within a section, plain keys come first, then nested tables as
    ``[section.sub]`` tables and arrays of tables as ``[[section.key]]`` (or inline when
    short), and arrays one item per line. Section values may be str, int (signed 64-bit),
    float, bool, date/time, arrays and tables of those. Raises ``TypeError`` if ``config``
    is not a :class:`ChainConfig` and ``ValueError`` for a section value TOML cannot hold.
    """
    if not isinstance(config, ChainConfig):
        raise TypeError(f"config must be a ChainConfig, not {type(config).__name__}")
    policy = config.policy
    chain: dict[str, object] = {"id": config.chain_id}
    if config.ownership_proofs:
        chain["ownership_proofs"] = True
    blocks = [dumps({"chain": chain})]
    # Written by hand: tomli_w would put short [[mix]] tables inline, as mix = [{...}].
    blocks.extend("[[mix]]\n" + dumps(_node_table(mix)) for mix in config.mixes)
    rest: dict[str, Any] = {
        config.sink_table: _node_table(config.sink),
        "round": {
            "min_users": policy.min_users,
            "max_users": policy.max_users,
            "deadline_seconds": float(policy.deadline_seconds),
            "below_min": policy.below_min,
            "chunk_size": policy.chunk_size,
        },
    }
    if config.tls is not None:
        rest["tls"] = {"ca": _ca_text(config.tls.ca, base)}
    if config.limits != DEFAULT_LIMITS:
        rest["limits"] = config.limits.table()
    if config.admission is not None:
        rest["admission"] = config.admission.table()
    rest.update(config.sections)
    blocks.append(dumps(rest))
    return "\n".join(blocks)


def render_table(name: str, table: Mapping[str, Any]) -> str:
    """One TOML table ``[name]`` (written by :mod:`tomli_w`, as a section is by
    :func:`render_chain_config`), which loads back as ``{name: table}``.

    Raises ``TypeError`` if ``table`` is not a mapping and ``ValueError`` for a name, key
    or value TOML cannot hold.
    """
    if not isinstance(table, Mapping):
        raise TypeError(f"table must be a mapping, not {type(table).__name__}")
    return dumps({name: table})


def write_chain_config(
    path: str | os.PathLike[str], config: ChainConfig, *, overwrite: bool = False
) -> None:
    """Write ``render_chain_config(config, base=<path's directory>)`` to ``path`` (mode
    0644 less the umask, fsynced).

    Without ``overwrite`` an existing file is never touched; with it the old file is
    replaced atomically (temporary file in the same directory, then rename). Raises
    :class:`ChainConfigError` (naming ``path``) if the file exists and ``overwrite`` is
    false or if it cannot be written, and ``ValueError`` if ``config`` cannot be rendered.
    """
    base = Path(os.path.abspath(os.fspath(path))).parent
    text = render_chain_config(config, base=base).encode("utf-8")
    target = Path(path)
    source = os.fspath(path)
    if not overwrite:
        _write_new_file(target, text, source)
        return
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
    _write_new_file(temporary, text, source)
    try:
        os.replace(temporary, target)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise ChainConfigError(f"cannot write chain file: {exc.strerror}", source=source) from None


def _write_new_file(path: Path, data: bytes, source: str) -> None:
    """Create ``path`` (which must not exist; mode 0644 less the umask), write ``data``,
    fsync; on failure remove the partial file and raise :class:`ChainConfigError`."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:
        raise ChainConfigError(
            "chain file already exists; refusing to overwrite it", source=source
        ) from None
    except OSError as exc:
        raise ChainConfigError(f"cannot create chain file: {exc.strerror}", source=source) from None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise ChainConfigError(f"cannot write chain file: {exc.strerror}", source=source) from None
    os.close(fd)
