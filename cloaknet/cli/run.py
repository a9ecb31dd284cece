"""``cloaknet demo``, ``cloaknet node`` and ``cloaknet keygen``: running the system."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cloaknet.cli.args import add_privacy_args, non_negative_int, positive_int
from cloaknet.errors import ParameterError

__all__ = [
    "add_demo_parser",
    "add_keygen_parser",
    "add_node_parser",
    "cmd_demo",
    "cmd_keygen",
    "cmd_node",
]


def add_demo_parser(sub: Any) -> None:
    """Add the ``demo`` command to the subparsers ``sub``."""
    p_demo = sub.add_parser(
        "demo",
        help="run n users through a local multi-process chain and print the result",
        description="Plan parameters, write keys and a chain file to a temporary directory, "
        "start every mix and the analyzer as separate processes on 127.0.0.1, "
        "submit random inputs for every user through the websocket client "
        "library, wait for the analyzer's result and compare it with the true "
        "sum; then stop every process. --mixes 0 runs the ideal shuffler in one "
        "process instead.",
    )
    add_privacy_args(p_demo, users_default=1000)
    p_demo.add_argument(
        "--mixes",
        type=non_negative_int,
        default=3,
        help="mix nodes, each a separate OS process (default 3); 0 runs the "
        "ideal shuffler in this process instead of the network",
    )
    p_demo.add_argument(
        "--protocol",
        choices=["cloak", "blanket", "cheu", "bbgn"],
        default="cloak",
        help="what the chain carries: the cloak (default; --mode applies) or a "
        "comparison protocol (privacy blanket, Cheu et al., split-and-mix "
        "with the BBGN bound); those are single-user protocols",
    )
    p_demo.add_argument(
        "--data-seed",
        type=int,
        default=None,
        help="seed for the demo's input data only (protocol randomness "
        "always comes from the OS CSPRNG)",
    )
    p_demo.add_argument(
        "--concurrency",
        type=positive_int,
        default=32,
        help="users submitting at the same time (default 32)",
    )
    p_demo.add_argument(
        "--keep",
        action="store_true",
        help="keep the temporary directory (keys, chain file, databases, logs)",
    )
    p_demo.add_argument("--json", action="store_true", help="print one JSON object")


def add_node_parser(sub: Any) -> None:
    """Add the ``node`` command to the subparsers ``sub``."""
    p_node = sub.add_parser(
        "node",
        help="run one node (mix or analyzer) of a chain",
        description="Serve one node of the chain file: websockets for the protocol and HTTP "
        "GETs (/healthz, /status, and /rounds/<id> on the analyzer) on the port of "
        "the node's URL. Runs until SIGINT or SIGTERM.",
    )
    p_node.add_argument("--chain", type=Path, required=True, help="the chain file (TOML)")
    p_node.add_argument("--name", required=True, help="this node's name in the chain file")
    p_node.add_argument(
        "--key", type=Path, default=None, help="this node's identity key file (required for mixes)"
    )
    p_node.add_argument(
        "--db",
        type=Path,
        default=None,
        help="sqlite database (default: <name>.db next to the chain file)",
    )
    p_node.add_argument(
        "--listen",
        default=None,
        help="address to bind (default: the host of the node's URL; use 0.0.0.0 behind NAT)",
    )
    p_node.add_argument(
        "--dump-dir",
        type=Path,
        default=None,
        help="analyzer only, for experiments: write each round's shuffled "
        "shares to DIR/round-<id>.json (off by default)",
    )
    p_node.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )


def add_keygen_parser(sub: Any) -> None:
    """Add the ``keygen`` command to the subparsers ``sub``."""
    p_keygen = sub.add_parser(
        "keygen",
        help="create a node's Ed25519 identity key file and print its public key",
        description="Write a new identity key file (mode 0600) and print the public key line "
        "to paste into the chain file's [[mix]] entry.",
    )
    p_keygen.add_argument("--name", required=True, help="the node's name")
    p_keygen.add_argument(
        "--out", type=Path, default=None, help="key file to write (default: <name>.key)"
    )


def cmd_demo(args: argparse.Namespace) -> int:
    """``cloaknet demo``: the networked demo (:mod:`cloaknet.netdemo`), or with
    ``--mixes 0`` the cloak with the ideal shuffler in this process (:mod:`cloaknet.demo`)."""
    if args.mixes > 0:
        from cloaknet.netdemo import run_network_demo

        return run_network_demo(
            users=args.users,
            mixes=args.mixes,
            epsilon=args.epsilon,
            delta=args.delta,
            precision=args.precision,
            mode=args.mode,
            data_seed=args.data_seed,
            as_json=args.json,
            keep=args.keep,
            concurrency=args.concurrency,
            protocol=args.protocol,
        )
    if args.protocol != "cloak":
        raise ParameterError("--mixes 0 (the ideal shuffler) runs the cloak only")
    from cloaknet.demo import run_demo

    return run_demo(
        users=args.users,
        epsilon=args.epsilon,
        delta=args.delta,
        precision=args.precision,
        mode=args.mode,
        data_seed=args.data_seed,
        as_json=args.json,
    )


def cmd_node(args: argparse.Namespace) -> int:
    """``cloaknet node``: serve one node until SIGINT/SIGTERM."""
    import asyncio
    import logging

    from cloaknet.node import run_node

    logging.basicConfig(
        level=args.log_level, format=f"%(asctime)s {args.name} %(levelname)s %(message)s"
    )
    asyncio.run(run_node(args.chain, args.name, args.key, args.db, args.listen, args.dump_dir))
    return 0


def cmd_keygen(args: argparse.Namespace) -> int:
    """``cloaknet keygen``: write a key file, print the public key line."""
    from mixnet.keys import generate_identity, public_key_text, write_key_file

    out = args.out or Path(f"{args.name}.key")
    key = generate_identity()
    write_key_file(out, key, name=args.name)
    print(f'identity = "{public_key_text(key.verify_key)}"   # {args.name}, secret in {out}')
    return 0
