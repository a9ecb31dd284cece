"""Admission on a real in-process chain: websockets, onions, sqlite, the analyzer, the
client library and the ``cloaknet`` command line, with an ``[admission]`` table."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
from collections.abc import AsyncIterator, Mapping
from fractions import Fraction
from pathlib import Path

import pytest
from nacl.signing import SigningKey

from cloaknet.analyzer_node import analyzer_node
from cloaknet.chainfile import SINK_TABLE, CloakChain, write_chain_file
from cloaknet.cli import main
from cloaknet.client import SubmissionRejected, connect
from cloaknet.encoding import encode_share, quantize
from cloaknet.params import CloakParams
from cloaknet.protocols import CloakProtocol
from cloaknet.randomness import SYSTEM_RANDOM
from cloaknet.validator import payload_validator
from mixnet.admission import Admission, credential_client_id, sign_submission
from mixnet.chain import ChainConfig, NodeInfo, RoundPolicy
from mixnet.client import send_submissions
from mixnet.core.intake import submission_digest
from mixnet.errors import BadSignature, Unauthorized
from mixnet.frames import Submit
from mixnet.keys import generate_identity, read_key_file, write_key_file
from mixnet.link import Link
from mixnet.mix import MixNode
from mixnet.node import BaseNode
from mixnet.settings import node_settings
from mixnet.store import NodeStore

HOST = "127.0.0.1"
PARAMS = CloakParams(modulus=91, precision=10, messages=4, max_users=3)


@contextlib.asynccontextmanager
async def admission_chain(
    directory: Path, protocol: CloakProtocol, policy: RoundPolicy, admission: Admission
) -> AsyncIterator[CloakChain]:
    """Two mixes and the analyzer on 127.0.0.1 (ephemeral ports), the chain's
    ``[admission]`` = ``admission``; started from the analyzer backwards, as
    :func:`mixnet.localchain.run_local_chain` does (which has no admission parameter)."""
    names = ["mix1", "mix2", "analyzer"]
    identities = [generate_identity() for _ in range(2)]
    urls: dict[str, str] = {}

    def config() -> ChainConfig:
        def url(hop: int) -> str:
            return urls.get(names[hop], f"ws://unstarted.invalid:{hop + 1}")

        return ChainConfig(
            chain_id="admitted",
            mixes=tuple(NodeInfo(names[h], url(h), identities[h].verify_key) for h in range(2)),
            sink=NodeInfo("analyzer", url(2), None),
            policy=policy,
            sink_table=SINK_TABLE,
            admission=admission,
        )

    stores: list[NodeStore] = []
    started: list[BaseNode] = []
    try:
        for hop in (2, 1, 0):
            settings = node_settings(
                config(),
                names[hop],
                messages=protocol.message_count,
                payload_length=protocol.bytes_per_message,
            )
            store = NodeStore(directory / f"{names[hop]}.db")
            stores.append(store)
            node: BaseNode = (
                analyzer_node(settings, store, protocol)
                if hop == 2
                else MixNode(
                    settings, store, identities[hop], validator=payload_validator(protocol)
                )
            )
            port = await node.start(HOST, 0)
            started.append(node)
            urls[names[hop]] = f"ws://{HOST}:{port}"
        yield CloakChain(config(), protocol)
    finally:
        for node in started:
            await node.stop()
        for store in stores:
            store.close()


async def test_admitted_clients_complete_a_round_and_others_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alice, bob, issuer = (SigningKey.generate() for _ in range(3))
    admission = Admission(
        clients=(bytes(alice.verify_key), bytes(bob.verify_key)), issuer=issuer.verify_key
    )
    policy = RoundPolicy(min_users=3, max_users=3, deadline_seconds=60.0)
    protocol = CloakProtocol(PARAMS)
    async with admission_chain(tmp_path, protocol, policy, admission) as chain:
        # Alice, listed, with her key object
        async with connect(chain, credential=alice, retry_for=20) as net:
            first = await net.submit(0.3)
            assert first.client == credential_client_id(bytes(alice.verify_key))
            # a second submission under her credential in the same round
            with pytest.raises(SubmissionRejected) as refused:
                await net.submit(0.9)
            assert refused.value.code == "duplicate-client"

        # Mallory, not admitted
        async with connect(chain, credential=SigningKey.generate(), retry_for=20) as net:
            with pytest.raises(SubmissionRejected) as refused:
                await net.submit(1.0)
            assert refused.value.code == "unauthorized"

        # no credential at all
        async with connect(chain, retry_for=20) as net:
            with pytest.raises(SubmissionRejected) as refused:
                await net.submit(1.0)
            assert refused.value.code == "unauthorized"

        # Bob's credential under someone else's signature
        async with connect(chain, retry_for=20) as net:
            info = await net.mixnet.current_round()
            values = chain.protocol.encode_value(1.0, SYSTEM_RANDOM)
            payloads = [encode_share(v, chain.message_modulus) for v in values]
            box = net.mixnet.wrap(payloads, info)
            forged = sign_submission(
                SigningKey.generate(),
                chain_id=chain.config.chain_id,
                round_id=info.round_id,
                digest=submission_digest(box),
            )
            link = Link(chain.config.mixes[0].url, max_size=1 << 20, name="forger")
            try:
                with pytest.raises(BadSignature):
                    await link.request(
                        {
                            "type": "submit",
                            "round": info.round_id,
                            "client": credential_client_id(bytes(bob.verify_key)),
                            "box": box,
                            "credential": bytes(bob.verify_key),
                            "signature": forged,
                        },
                        expect="accepted",
                    )
            finally:
                await link.close()

        # Bob, listed, with a key file
        write_key_file(tmp_path / "bob.key", bob, name="bob")
        async with connect(chain, credential=tmp_path / "bob.key", retry_for=20) as net:
            second = await net.submit(0.5)
        assert second.round == first.round

        # Carol, admitted by the issuer's token, through the command line
        chain_file = tmp_path / "chain.toml"
        write_chain_file(chain_file, chain.config, PARAMS)
        write_key_file(tmp_path / "issuer.key", issuer, name="issuer")
        carol_key = tmp_path / "carol.key"
        capsys.readouterr()
        assert main(["keygen", "--client", "--out", str(carol_key)]) == 0
        printed = capsys.readouterr().out
        assert stat.S_IMODE(os.stat(carol_key).st_mode) == 0o600
        carol = read_key_file(carol_key)
        carol_text = credential_client_id(bytes(carol.verify_key))
        assert printed.startswith(f'"{carol_text}",')
        assert main(
            ["keygen", "--token-for", carol_text, "--issuer", str(tmp_path / "issuer.key"),
             "--chain", str(chain_file)]
        ) == 0  # fmt: skip
        token = capsys.readouterr().out.strip()
        code = await asyncio.to_thread(
            main,
            ["submit", "--chain", str(chain_file), "--key", str(carol_key), "--token", token,
             "--wait", "--timeout", "30", "0.7"],
        )  # fmt: skip
        assert code == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert lines[0] == {"value": 0.7, "round": first.round}
        result: Mapping[str, object] = lines[1]
    assert result["status"] == "ok"
    assert result["users"] == 3
    rounded = sum(quantize(v, PARAMS.precision) for v in (0.3, 0.5, 0.7))
    assert Fraction(str(result["estimate_exact"])) == Fraction(rounded, PARAMS.precision)


def test_admission_options_that_do_not_go_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["submit", "--chain", str(tmp_path / "c.toml"), "--key", "k", "0.1", "0.2"]) == 2
    assert "one VALUE" in capsys.readouterr().err
    assert main(["submit", "--chain", str(tmp_path / "c.toml"), "--token", "t", "0.1"]) == 2
    assert "--token needs --key" in capsys.readouterr().err
    assert main(["keygen"]) == 2
    assert "--name" in capsys.readouterr().err
    assert main(["keygen", "--client", "--expires", "5"]) == 2
    assert "go with --token-for" in capsys.readouterr().err
    assert main(["keygen", "--token-for", "x", "--chain", "c.toml"]) == 2
    assert "--issuer" in capsys.readouterr().err


async def test_a_submit_many_frame_is_admitted_element_by_element(tmp_path: Path) -> None:
    """On a chain with admission each element of a ``submit-many`` is checked as a lone
    ``submit``: alice's and bob's signed submissions are stored, mallory's (not admitted), a
    forged signature for carol's credential and an element without a credential are refused
    with their own codes; the round counts exactly alice and bob."""
    alice, bob, carol, mallory = (SigningKey.generate() for _ in range(4))
    admission = Admission(clients=tuple(bytes(k.verify_key) for k in (alice, bob, carol)))
    policy = RoundPolicy(min_users=2, max_users=2, deadline_seconds=60.0)
    protocol = CloakProtocol(PARAMS)
    async with (
        admission_chain(tmp_path, protocol, policy, admission) as chain,
        connect(chain, retry_for=20) as net,
    ):
        info = await net.mixnet.current_round()

        def box(x: float) -> bytes:
            values = chain.protocol.encode_value(x, SYSTEM_RANDOM)
            return net.mixnet.wrap([encode_share(v, chain.message_modulus) for v in values],
                                   info)  # fmt: skip

        def signed(key: SigningKey, x: float, signer: SigningKey | None = None) -> Submit:
            b = box(x)
            signature = sign_submission(
                signer or key, chain_id=chain.config.chain_id, round_id=info.round_id,
                digest=submission_digest(b),
            )  # fmt: skip
            credential = bytes(key.verify_key)
            return Submit(info.round_id, credential_client_id(credential), b,
                          credential=credential, signature=signature)  # fmt: skip

        frame = [
            signed(alice, 0.3),
            signed(mallory, 0.9),
            signed(carol, 0.9, signer=mallory),
            Submit(info.round_id, "anonymous", box(0.9)),
            signed(bob, 0.5),
        ]
        link = Link(chain.config.mixes[0].url, max_size=1 << 20, name="batcher")
        try:
            give_up = asyncio.get_running_loop().time() + 20
            out = await send_submissions(link, frame, give_up=give_up)
        finally:
            await link.close()
        assert out[0] is None and out[4] is None
        assert isinstance(out[1], Unauthorized)
        assert isinstance(out[2], BadSignature)
        assert isinstance(out[3], Unauthorized)
        result = await net.result(info.round_id, timeout=60)
    assert result.users == 2
    rounded = sum(quantize(v, PARAMS.precision) for v in (0.3, 0.5))
    assert Fraction(str(result.raw["estimate_exact"])) == Fraction(rounded, PARAMS.precision)
