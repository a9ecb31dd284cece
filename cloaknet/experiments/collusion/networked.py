"""Views captured from a real in-process chain, attacked like the simulated ones.

This is the only part of the collusion experiment that runs the network stack
(:func:`cloaknet.client.connect`, :func:`cloaknet.localchain.local_chain`,
:class:`~cloaknet.protocols.CloakProtocol`, :class:`~cloaknet.params.CloakParams`,
:class:`mixnet.chain.RoundPolicy`). Those APIs are imported inside :func:`networked_rows`, so
the rest of the experiment does not depend on them, and this one function is all that needs
adapting when they change.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from cloaknet.adversary import posterior_sum_preserving, remove_messages, view_stats
from cloaknet.encoding import split
from cloaknet.experiments.collusion.rows import AttackRow
from cloaknet.experiments.collusion.settings import CollusionSettings
from cloaknet.randomness import SYSTEM_RANDOM, DeterministicRandom

__all__ = ["networked_rows"]


def networked_rows(settings: CollusionSettings) -> list[AttackRow]:
    """Run ``networked_rounds`` rounds through a real in-process chain (2 honest users via the
    client library, 8 honest-but-revealing colluders via ``submit_shares``), capture the
    analyzer's input with its ``dump_dir``, and attack it like a simulated view."""
    from cloaknet.client import connect
    from cloaknet.encoding import quantize
    from cloaknet.localchain import local_chain
    from cloaknet.params import CloakParams
    from cloaknet.protocols import CloakProtocol
    from mixnet.chain import RoundPolicy

    users, colluders = 10, 8
    k, m, modulus = settings.precision, settings.networked_m, settings.networked_modulus
    protocol = CloakProtocol(CloakParams(modulus=modulus, precision=k, messages=m, max_users=users))
    policy = RoundPolicy(min_users=users, max_users=users, deadline_seconds=120.0)
    rng = SYSTEM_RANDOM if settings.seed is None else DeterministicRandom(settings.seed)
    rows: list[AttackRow] = []

    async def run(directory: Path) -> None:
        dump = directory / "dump"
        async with (
            local_chain(directory, protocol, policy, mixes=2, dump_dir=dump) as chain,
            connect(chain.chain, connections=2) as net,
        ):
            for _ in range(settings.networked_rounds):
                xs = [rng.randbelow(k + 1) for _ in range(2)]
                colluder_inputs = [rng.randbelow(k + 1) for _ in range(colluders)]
                revealed = [split(x, m, modulus, rng) for x in colluder_inputs]
                receipts = await asyncio.gather(
                    *(net.submit(x / k) for x in xs),
                    *(net.submit_shares(shares) for shares in revealed),
                )
                round_id = receipts[0].round
                await net.result(round_id, timeout=120)
                record = json.loads((dump / f"round-{round_id}.json").read_text())
                residual = remove_messages(record["shares"], revealed)
                stats = view_stats(residual, m, modulus)
                total = sum(quantize(x / k, k) for x in xs)
                post = posterior_sum_preserving(residual, m, modulus, k, total)
                rows.append(
                    AttackRow(
                        sweep="networked",
                        source="networked",
                        mode="sum-preserving",
                        m=m,
                        modulus=modulus,
                        precision=k,
                        users=users,
                        colluders=colluders,
                        honest=2,
                        behaviour="honest",
                        gamma=stats.gamma,
                        distinct=stats.distinct,
                        privacy_loss=post.privacy_loss(),
                        guess_correct=post.map_guess == quantize(xs[0] / k, k),
                        prior_success=1 / len(post.support),
                    )
                )

    with tempfile.TemporaryDirectory(prefix="cloaknet-collusion-") as tmp:
        asyncio.run(run(Path(tmp)))
    return rows
