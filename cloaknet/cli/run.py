"""``cloaknet demo``, ``cloaknet node`` and ``cloaknet keygen``: running the system."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from cloaknet.cli.args import add_privacy_args, non_negative_int, positive_int
from cloaknet.demo_plan import DEMO_PROTOCOLS
from cloaknet.errors import CloakError
from cloaknet.plans import BOUND_CHOICES

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
        description="Choose parameters exactly as `cloaknet plan` does (default: --bound "
        "auto), write keys and a chain file to a temporary directory, "
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
        choices=DEMO_PROTOCOLS,
        default="plan",
        help="what runs: plan (default) is what `cloaknet plan` selects for these "
        "arguments and --bound; cloak forces the cloak (seed lemmas unless --bound); "
        "blanket, cheu and bbgn are the comparison protocols (single-user)",
    )
    p_demo.add_argument(
        "--bound",
        choices=BOUND_CHOICES,
        default="auto",
        help="as for `cloaknet plan`: auto (default) picks whichever of the seed lemmas "
        "and the BBGN bound needs fewer messages",
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
        description="Serve one node of the chain file on the port of the node's URL: "
        "websockets for the protocol (wss:// with --tls-cert/--tls-key when its URL is "
        "wss://), and HTTP GETs on the same port. Every node serves GET /healthz (200 "
        "'ok'; 503 once its store failed a commit), GET /status (JSON: the node and its "
        "recent rounds) and GET /metrics "
        "(Prometheus text); the analyzer also serves GET / (a status page), GET /rounds "
        "(JSON: the round ids it knows) and GET /rounds/<id> (JSON: the round's result). "
        "The chain file's [limits] bound the connections it keeps and [tls] names the CA "
        "its link trusts. Files it creates are private (umask 077). Runs until SIGINT or "
        "SIGTERM and stops within a few seconds. If its database reports an error on a "
        "commit (a full or failing disk), it stops and exits with code 2: whether that "
        "commit reached the disk is unknown, and started again it recovers from what the "
        "disk holds.",
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
        "--tls-cert",
        type=Path,
        default=None,
        metavar="FILE",
        help="PEM certificate (chain) to serve wss:// with; required when the node's URL is "
        "wss://, refused when it is ws://",
    )
    p_node.add_argument(
        "--tls-key",
        type=Path,
        default=None,
        metavar="FILE",
        help="PEM private key of --tls-cert (default: the key is in the --tls-cert file)",
    )
    p_node.add_argument(
        "--peel-processes",
        type=non_negative_int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="mixes: peel onion layers in N worker processes (default: one per core, here "
        f"{os.cpu_count() or 1}); 0 peels in threads of the node's own process, which costs "
        "about 10%% more CPU per layer (the threads share one interpreter lock). The "
        "analyzer ignores it.",
    )
    p_node.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    p_node.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="text (default: time, node, level, message) or json (one object per line: "
        "time, level, logger, message, node and round where known)",
    )
    p_node.add_argument(
        "--log-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="append the log to FILE, created mode 0600 (default: standard error)",
    )


def add_keygen_parser(sub: Any) -> None:
    """Add the ``keygen`` command to the subparsers ``sub``."""
    p_keygen = sub.add_parser(
        "keygen",
        help="create a node's or a client's Ed25519 key file and print its public key",
        description="Write a new Ed25519 key file (mode 0600) and print its public key line: "
        "a node's identity (--name) for the chain file's [[mix]] entry, or with --client a "
        "client key for the chain file's [admission] clients list (the same command with "
        "--name issuer makes an issuer key for [admission] issuer). With --token-for, "
        "write nothing and print an admission token instead: the issuer's signature "
        "admitting the client key PUBKEY to the chain, for `cloaknet submit --token`.",
    )
    p_keygen.add_argument("--name", default=None, help="the node's name (required for a node)")
    p_keygen.add_argument(
        "--client",
        action="store_true",
        help="a client key for a chain with [admission] (default file: client.key)",
    )
    p_keygen.add_argument(
        "--out",
        type=Path,
        default=None,
        help="key file to write (default: <name>.key, or client.key with --client)",
    )
    p_keygen.add_argument(
        "--token-for",
        default=None,
        metavar="PUBKEY",
        help="print an admission token for this client public key (base64), signed with "
        "--issuer's key for --chain's chain id; writes no key",
    )
    p_keygen.add_argument(
        "--issuer",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --token-for: the issuer's key file (its public key is [admission] issuer)",
    )
    p_keygen.add_argument(
        "--chain",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --token-for: the chain file the token admits to",
    )
    p_keygen.add_argument(
        "--expires",
        type=positive_int,
        default=None,
        metavar="UNIX_SECONDS",
        help="with --token-for: the token is valid until this time (default: no expiry)",
    )


def cmd_demo(args: argparse.Namespace) -> int:
    """``cloaknet demo``: the networked demo (:mod:`cloaknet.netdemo`), or with
    ``--mixes 0`` the ideal shuffler in this process (:mod:`cloaknet.demo`); both run what
    :func:`cloaknet.demo_plan.choose` picks (by default what ``cloaknet plan`` selects)."""
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
            bound=args.bound,
        )
    from cloaknet.demo import run_demo

    return run_demo(
        users=args.users,
        epsilon=args.epsilon,
        delta=args.delta,
        precision=args.precision,
        mode=args.mode,
        data_seed=args.data_seed,
        as_json=args.json,
        bound=args.bound,
        protocol=args.protocol,
    )


def cmd_node(args: argparse.Namespace) -> int:
    """``cloaknet node``: serve one node until SIGINT/SIGTERM. The process's umask is 077
    first, so that every file it creates (database, its -wal and -shm, log, dumps) is
    private."""
    import asyncio
    import os

    from cloaknet.node import run_node
    from mixnet.logs import configure_logging

    os.umask(0o077)
    configure_logging(
        node=args.name, level=args.log_level, fmt=args.log_format, file=args.log_file
    )
    asyncio.run(
        run_node(
            args.chain,
            args.name,
            args.key,
            args.db,
            args.listen,
            args.dump_dir,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            peel_processes=args.peel_processes,
        )
    )
    return 0


def cmd_keygen(args: argparse.Namespace) -> int:
    """``cloaknet keygen``: write a key file, print the public key line (or, with
    ``--token-for``, print an admission token).

    :raises CloakError: the options do not go together.
    :raises KeyFileError: the key file exists or cannot be written; the issuer key cannot
        be read; PUBKEY is not a public key.
    :raises ChainFileError: the chain file is invalid or its ``[admission]`` has another
        issuer (or none).
    """
    from mixnet.keys import generate_identity, public_key_text, write_key_file

    if args.token_for is not None:
        return _issue_token(args)
    if args.issuer is not None or args.chain is not None or args.expires is not None:
        raise CloakError("--issuer, --chain and --expires go with --token-for")
    if args.client:
        name = args.name or "client"
        out = args.out or Path(f"{name}.key")
        key = generate_identity()
        write_key_file(out, key, name=name)
        print(
            f'"{public_key_text(key.verify_key)}",   # client key {name}, secret in {out}; '
            "list it in [admission] clients"
        )
        return 0
    if args.name is None:
        raise CloakError("keygen needs --name for a node key (or --client, or --token-for)")
    out = args.out or Path(f"{args.name}.key")
    key = generate_identity()
    write_key_file(out, key, name=args.name)
    print(f'identity = "{public_key_text(key.verify_key)}"   # {args.name}, secret in {out}')
    return 0


def _issue_token(args: argparse.Namespace) -> int:
    """``cloaknet keygen --token-for PUBKEY --issuer FILE --chain FILE [--expires T]``."""
    from cloaknet.chainfile import ChainFileError, load_chain
    from mixnet.admission import issue_token, token_text
    from mixnet.keys import parse_public_key, read_key_file

    if args.issuer is None or args.chain is None:
        raise CloakError("--token-for needs --issuer (the issuer's key file) and --chain")
    if args.client or args.out is not None or args.name is not None:
        raise CloakError("--token-for writes no key: leave out --client, --name and --out")
    client = parse_public_key(args.token_for)
    issuer = read_key_file(args.issuer)
    config = load_chain(args.chain).config
    admission = config.admission
    if admission is None or admission.issuer != issuer.verify_key:
        raise ChainFileError(
            f"the chain does not admit clients by tokens of the key in {args.issuer}",
            source=str(args.chain),
            field="admission.issuer",
        )
    token = issue_token(
        issuer, chain_id=config.chain_id, credential=client, expires=args.expires
    )
    print(token_text(token))
    return 0
