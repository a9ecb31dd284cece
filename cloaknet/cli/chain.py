"""``cloaknet chain init`` (a consistent chain directory) and ``cloaknet submit`` (values
into a running chain, one user each).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
from pathlib import Path
from typing import Any

from cloaknet.cli.args import add_privacy_args, non_negative_int, positive_float, positive_int
from cloaknet.planner import BOUNDS

__all__ = ["add_chain_parser", "add_submit_parser", "cmd_chain", "cmd_submit"]


def add_chain_parser(sub: Any) -> None:
    """Add the ``chain`` command (``chain init``) to the subparsers ``sub``."""
    p_chain = sub.add_parser(
        "chain",
        help="write a chain directory: chain file, keys, ports, start commands",
        description="Manage chain directories.",
    )
    actions = p_chain.add_subparsers(dest="chain_command", metavar="ACTION")
    actions.required = True
    p_init = actions.add_parser(
        "init",
        help="write DIR/chain.toml and one identity key per mix; print each node's command",
        description="Write a consistent chain directory: DIR/chain.toml with [chain], "
        "[[mix]], [analyzer], [round] and [protocol] tables that are valid together (the "
        "protocol is what `cloaknet plan` prints for the same options, and its guarantee "
        "holds for every round size from --users to --max-users), an identity key per mix "
        "(DIR/<mix>.key, mode 0600) and free ports on --host. Prints the command that "
        "starts each node, one per line. Refuses to overwrite an existing chain file or key.",
    )
    p_init.add_argument("directory", type=Path, metavar="DIR", help="the chain directory")
    p_init.add_argument(
        "--mixes", "-L", type=positive_int, default=3, help="number of mixes (default 3)"
    )
    add_privacy_args(p_init, users_default=None)
    p_init.add_argument(
        "--max-users",
        type=positive_int,
        default=None,
        help="largest round the chain accepts ([round].max_users; default --users)",
    )
    p_init.add_argument(
        "--colluders", "-c", type=non_negative_int, default=0,
        help="users assumed to collude with the analyst (default 0)",
    )  # fmt: skip
    p_init.add_argument(
        "--bound",
        choices=("auto", *BOUNDS),
        default="auto",
        help="which bound plans the protocol, as for `cloaknet plan` (default auto)",
    )
    p_init.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address every node listens on and is reached at (default 127.0.0.1)",
    )
    p_init.add_argument("--id", default="chain", help="the chain id (default 'chain')")
    p_init.add_argument(
        "--deadline",
        type=positive_float,
        default=None,
        help="seconds a round stays open ([round].deadline_seconds; default 600)",
    )
    p_init.add_argument(
        "--below-min",
        choices=("wait", "abort"),
        default="wait",
        help="at the deadline with fewer than --users submissions: keep waiting or abort "
        "the round (default wait)",
    )
    p_init.add_argument(
        "--ownership-proofs",
        action="store_true",
        help="[chain] ownership_proofs = true: every layer after the entry mix's carries a "
        "48-byte proof, so a submission with a layer that does not open is traced and "
        "excluded instead of aborting the round (recommended for chains open to anyone)",
    )


def cmd_chain(args: argparse.Namespace) -> int:
    """Run ``cloaknet chain init``; returns 0 (errors propagate to the CLI's ``main``)."""
    from cloaknet.chain_init import DEFAULT_DEADLINE_SECONDS, init_chain
    from cloaknet.plans import select_plan

    selected = select_plan(
        args.users,
        args.epsilon,
        args.delta,
        bound=args.bound,
        mode=args.mode,
        max_users=args.max_users,
        colluders=args.colluders,
        precision=args.precision,
    )
    made = init_chain(
        args.directory,
        selected,
        mixes=args.mixes,
        host=args.host,
        chain_id=args.id,
        deadline_seconds=args.deadline or DEFAULT_DEADLINE_SECONDS,
        below_min=args.below_min,
        ownership_proofs=args.ownership_proofs,
    )
    print(
        f"# {made.chain_file}: {args.mixes} mixes and an analyzer on {args.host}; rounds of "
        f"{selected.users}..{selected.max_users} users; {selected.protocol_name}, "
        f"{selected.bound} bound, epsilon = {selected.epsilon:.6g}, "
        f"delta = {selected.delta:.4g}, {selected.messages} messages per user"
    )
    print("# start each node (its own terminal, or end each line with &):")
    for command in made.commands:
        print(command)
    return 0


def _unit_value(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def _client_id(text: str) -> str:
    """A ``--client-id``: 1 to 128 printable characters (what the entry mix accepts)."""
    from mixnet.frames import MAX_CLIENT_ID_LENGTH

    if not 0 < len(text) <= MAX_CLIENT_ID_LENGTH or not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"expected 1 to {MAX_CLIENT_ID_LENGTH} printable characters, got {len(text)}"
        )
    return text


def add_submit_parser(sub: Any) -> None:
    """Add the ``submit`` command to the subparsers ``sub``."""
    p_submit = sub.add_parser(
        "submit",
        help="submit values into a running chain, one user per value",
        description="Submit each VALUE (a number in [0, 1]) as one user's input, through the "
        "client library: encoded, wrapped for every mix and acknowledged by the entry mix "
        "(stored) before this returns. Prints one JSON line per value with its round; "
        "with --wait, then waits for each round's result and prints it as JSON. On a chain "
        "with [admission], --key signs the submission with a client key (one VALUE: one "
        "submission per key per round). With --journal and --client-id the submission is "
        "counted once even if this command is killed before the receipt and run again: the "
        "frame is on disk before it is sent, and a rerun with the same id resends it "
        "(docs/protocol.md, 'Exactly once from the client's side').",
    )
    p_submit.add_argument("--chain", type=Path, required=True, help="the chain file (TOML)")
    p_submit.add_argument("values", type=_unit_value, nargs="+", metavar="VALUE")
    p_submit.add_argument(
        "--wait", action="store_true", help="wait for the result of every round used"
    )
    p_submit.add_argument(
        "--timeout",
        type=positive_float,
        default=120.0,
        help="seconds to keep retrying and (with --wait) to wait for a result (default 120)",
    )
    p_submit.add_argument(
        "--key",
        type=Path,
        default=None,
        metavar="FILE",
        help="client key file (cloaknet keygen --client) that signs the submission, for a "
        "chain with [admission]; takes exactly one VALUE",
    )
    p_submit.add_argument(
        "--token",
        default=None,
        metavar="TOKEN",
        help="with --key: the issuer's admission token for the key (base64, from cloaknet "
        "keygen --token-for), when the key is not listed in [admission] clients",
    )
    p_submit.add_argument(
        "--journal",
        type=Path,
        default=None,
        metavar="FILE",
        help="sqlite file (created, mode 0600) that keeps the submission from before it is "
        "sent until it is acknowledged, so that running the same command again after a crash "
        "counts the value once; takes exactly one VALUE and --client-id (or --key)",
    )
    p_submit.add_argument(
        "--client-id",
        type=_client_id,
        default=None,
        metavar="ID",
        help="the client id of the submission (1 to 128 printable characters; default: a random "
        "one, or the key's with --key); with --journal it must stay the same for the value "
        "across reruns, e.g. the report's id",
    )


def cmd_submit(args: argparse.Namespace) -> int:
    """Run ``cloaknet submit``; returns 0 (errors propagate to the CLI's ``main``).

    :raises CloakError: ``--key``, ``--journal`` or ``--client-id`` with more than one value,
        ``--token`` without ``--key``, ``--client-id`` with ``--key``, or ``--journal``
        without a client id.
    """
    from cloaknet.errors import CloakError

    if args.key is not None and len(args.values) != 1:
        raise CloakError("--key submits one VALUE (one submission per client key per round)")
    if args.token is not None and args.key is None:
        raise CloakError("--token needs --key (the client key the token admits)")
    if (args.journal is not None or args.client_id is not None) and len(args.values) != 1:
        raise CloakError("--journal and --client-id submit one VALUE")
    if args.client_id is not None and args.key is not None:
        raise CloakError("--client-id and --key do not go together: the key's text is the id")
    if args.journal is not None and args.client_id is None and args.key is None:
        raise CloakError("--journal needs --client-id (or --key): the id that stays with the value")
    return asyncio.run(
        _submit(
            args.chain,
            args.values,
            wait=args.wait,
            timeout=args.timeout,
            key=args.key,
            token=args.token,
            journal=args.journal,
            client_id=args.client_id,
        )
    )


async def _submit(
    chain: Path,
    values: list[float],
    *,
    wait: bool,
    timeout: float,
    key: Path | None = None,
    token: str | None = None,
    journal: Path | None = None,
    client_id: str | None = None,
) -> int:
    from cloaknet.client import connect

    async with connect(
        chain, retry_for=timeout, credential=key, token=token, journal=journal
    ) as net:
        if journal is not None or client_id is not None or key is not None:
            (value,) = values
            receipts = [await net.submit(value, client_id=client_id)]
        else:
            receipts = await net.submit_many(values)
        for value, receipt in zip(values, receipts, strict=True):
            print(json.dumps({"value": value, "round": receipt.round}))
        if wait:
            for round_id in sorted({receipt.round for receipt in receipts}):
                result = await net.result(round_id, timeout=timeout)
                print(json.dumps(result.raw))
    return 0
