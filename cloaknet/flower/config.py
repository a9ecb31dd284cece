"""Build the protocol and the transport from a Flower run config (``[tool.flwr.app.config]``
of the app's ``pyproject.toml``, overridden with ``flwr run --run-config``).

Keys (all optional except where a transport needs them):

======================  ==========================================================
``transport``           ``"shuffler"`` (default) or ``"chain"``
``spool``               the shuffler's spool directory (``""``: pool in memory, for a
                        ServerApp and ClientApps in one process only)
``chain``               the chain file (``transport = "chain"``); its ``[protocol]`` then
                        fixes everything below
``clients``             users per round the protocol is planned for (default 3)
``num-server-rounds``   T, the rounds the privacy plan covers (default 3)
``clip``                C, the L2 norm every update is clipped to (default 1.0)
``privacy``             ``"dp"`` (default): :func:`cloaknet.fl_accounting.plan_fl` at
                        (``epsilon``, ``delta``) for the whole run; ``"none"``: the noiseless
                        protocol (exact sums, no differential privacy)
``epsilon``, ``delta``  the target for the whole training (defaults 3.0 and 1e-5)
``scale``               the noiseless protocol's scale s (default 2^16 / C)
======================  ==========================================================

The client side and the server side each build their protocol from the same values; the
strategy sends :func:`~cloaknet.flower.records.protocol_digest` and the mod refuses to submit
if its own differs. The run config is chosen by whoever starts the run (``flwr run``), i.e.
the server side; :func:`transport_from_context` lets a SuperNode's operator pin any of these
keys in the node config (``flower-supernode --node-config 'privacy="dp" epsilon=3.0'``), which
then win over the run config — a server that plans with other parameters is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from flwr.app import Context, UserConfigValue

from cloaknet.errors import ParameterError
from cloaknet.flower.transport import ShufflerTransport, Transport
from cloaknet.protocols.vector import VectorParams, VectorSumProtocol

__all__ = ["protocol_from_run_config", "transport_from_context", "transport_from_run_config"]

_DEFAULTS: Final[dict[str, UserConfigValue]] = {
    "transport": "shuffler",
    "spool": "",
    "chain": "",
    "clients": 3,
    "num-server-rounds": 3,
    "clip": 1.0,
    "privacy": "dp",
    "epsilon": 3.0,
    "delta": 1e-5,
    "scale": 0.0,
}


def _get(config: Mapping[str, UserConfigValue], key: str, kind: type) -> UserConfigValue:
    value = config.get(key, _DEFAULTS[key])
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ParameterError(f"run config {key!r} must be a {kind.__name__}, got {value!r}")
    return value


def protocol_from_run_config(
    config: Mapping[str, UserConfigValue], dimension: int
) -> VectorSumProtocol:
    """The vector protocol the run config asks for, for models of ``dimension`` parameters
    (module doc): planned with (ε, δ) over the rounds, or noiseless.

    :raises ParameterError: a value of the wrong type, an unknown ``privacy``, or parameters
        the planner rejects.
    :raises InfeasiblePlanError: no plan meets the target.
    """
    clients = int(_get(config, "clients", int))
    rounds = int(_get(config, "num-server-rounds", int))
    clip = float(_get(config, "clip", float))
    privacy = _get(config, "privacy", str)
    if privacy == "none":
        scale = float(_get(config, "scale", float)) or float(1 << 16) / clip
        return VectorSumProtocol(
            VectorParams.noiseless(dimension, clip, scale, users=clients, messages=3)
        )
    if privacy != "dp":
        raise ParameterError(f"run config 'privacy' must be 'dp' or 'none', got {privacy!r}")
    epsilon = float(_get(config, "epsilon", float))
    delta = float(_get(config, "delta", float))
    return VectorSumProtocol.planned(dimension, clip, rounds, epsilon, delta, clients)


def transport_from_run_config(
    config: Mapping[str, UserConfigValue], dimension: int
) -> Transport:
    """The transport the run config asks for (module doc).

    :raises ParameterError: as :func:`protocol_from_run_config`, an unknown ``transport``,
        a chain transport without ``chain``, or a chain whose protocol has another dimension.
    :raises ChainFileError, TransportError: the chain file cannot be used.
    """
    kind = _get(config, "transport", str)
    if kind == "shuffler":
        spool = str(_get(config, "spool", str))
        return ShufflerTransport(protocol_from_run_config(config, dimension), spool or None)
    if kind == "chain":
        path = str(_get(config, "chain", str))
        if not path:
            raise ParameterError("run config 'chain' must name the chain file")
        from cloaknet.flower.chain import ChainTransport

        made = ChainTransport(path)
        if made.protocol.dimension != dimension:
            raise ParameterError(
                f"the chain sums vectors of dimension {made.protocol.dimension}, the model "
                f"has {dimension} parameters"
            )
        return made
    raise ParameterError(f"run config 'transport' must be 'shuffler' or 'chain', got {kind!r}")


def transport_from_context(context: Context, dimension: int) -> Transport:
    """The client side's transport: :func:`transport_from_run_config` of the run config with
    every key of the module doc that the node config also has taken from the node config
    (the SuperNode operator's choice wins).

    :raises: as :func:`transport_from_run_config`.
    """
    merged: dict[str, UserConfigValue] = dict(context.run_config)
    merged.update({k: v for k, v in context.node_config.items() if k in _DEFAULTS})
    return transport_from_run_config(merged, dimension)
