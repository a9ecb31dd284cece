"""Exactly once across a client's restarts (mixnet.journal): a value whose submission was
sent, or only written down, before the client stopped is counted once when the restarted
client submits it again under the same client id — through a real in-process chain."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloaknet.client import ChainClient, SubmissionRejected, connect
from cloaknet.localchain import LocalChain, local_chain
from cloaknet.params import CloakParams
from cloaknet.protocols import CloakProtocol
from mixnet.chain import RoundPolicy
from mixnet.client import send_submission
from mixnet.core.entry import EntryMachine
from mixnet.core.intake import submission_digest
from mixnet.journal import KeptSubmission, SubmissionJournal

USERS = 4
PARAMS = CloakParams(modulus=1_000_003, precision=100, messages=4, max_users=USERS + 1)
VALUES = [0.25, 0.5, 0.125, 0.75]


def policy() -> RoundPolicy:
    return RoundPolicy(min_users=USERS, max_users=USERS, deadline_seconds=60.0)


async def kept_frame(net: ChainClient, value: float, client: str) -> KeptSubmission:
    """The ``submit`` frame a client would keep for ``value`` in the open round."""
    info = await net.mixnet.current_round()
    box = net.mixnet.wrap(net._payloads(value, False), info)
    return KeptSubmission(client, info.round_id, box)


async def run(chain: LocalChain, journal: Path, first: str) -> tuple[int, list[int]]:
    """The first value's client stopped after ``first`` ("sent": the entry mix stored its
    frame; "written": only the journal has it); a restarted client with the same journal
    submits it again under the same id, then three more users submit. Returns the first
    value's round and the others'."""
    async with connect(chain.chain) as net:
        kept = await kept_frame(net, VALUES[0], "user-0")
        with SubmissionJournal(journal) as book:
            book.keep(kept)
        if first == "sent":
            link = net.mixnet._pick()
            await send_submission(link, kept.frame(), round_id=kept.round_id,
                                  client="user-0", give_up=1e18)  # fmt: skip
    async with connect(chain.chain, journal=journal) as restarted:
        receipt = await restarted.submit(VALUES[0], client_id="user-0")
        assert receipt.round == kept.round_id
        others = [await restarted.submit(v, client_id=f"user-{i}")
                  for i, v in enumerate(VALUES[1:], 1)]  # fmt: skip
        assert SubmissionJournal(journal).kept() == []
        result = await restarted.result(receipt.round, timeout=60)
    assert result.users == USERS  # the first value once, not twice
    return receipt.round, [r.round for r in others]


@pytest.mark.parametrize("first", ["sent", "written"])
async def test_a_value_kept_before_a_restart_is_counted_once(tmp_path: Path, first: str) -> None:
    async with local_chain(tmp_path, CloakProtocol(PARAMS), policy()) as chain:
        first_round, others = await run(chain, tmp_path / "journal.db", first)
    assert set(others) == {first_round}


async def test_a_value_whose_round_closed_without_it_is_submitted_afresh(tmp_path: Path) -> None:
    journal = tmp_path / "journal.db"
    async with local_chain(tmp_path, CloakProtocol(PARAMS), policy()) as chain:
        async with connect(chain.chain) as net:
            kept = await kept_frame(net, VALUES[0], "late")
            with SubmissionJournal(journal) as book:
                book.keep(kept)
            # the round fills up and closes without it
            await net.submit_many(VALUES)
        async with connect(chain.chain, journal=journal) as restarted:
            receipt = await restarted.submit(VALUES[0], client_id="late")
            assert receipt.round > kept.round_id
            assert SubmissionJournal(journal).kept() == []
            assert (await restarted.result(kept.round_id, timeout=60)).users == USERS


async def test_a_kept_round_the_entry_mix_no_longer_knows_is_reported(tmp_path: Path) -> None:
    """The outcome cannot be told: the client says so, sends nothing new and keeps the frame
    (resubmitting could count the value twice)."""
    journal = tmp_path / "journal.db"
    async with local_chain(tmp_path, CloakProtocol(PARAMS), policy()) as chain:
        async with connect(chain.chain) as net:
            kept = await kept_frame(net, VALUES[0], "lost")
        forgotten = KeptSubmission("lost", kept.round_id + 1000, kept.box)
        with SubmissionJournal(journal) as book:
            book.keep(forgotten)
        async with connect(chain.chain, journal=journal) as restarted:
            with pytest.raises(SubmissionRejected) as raised:
                await restarted.submit(VALUES[0], client_id="lost")
            assert raised.value.code == "outcome-unknown"
            assert restarted.journal is not None
            assert restarted.journal.kept() == [forgotten]  # what the application sees
            assert (await restarted.mixnet.current_round()).round_id == kept.round_id
            entry = chain.mixes[0].machine
            assert isinstance(entry, EntryMachine)
            offer = entry.offer()
            assert offer is not None and offer.clients == 0  # nothing new was sent
        assert SubmissionJournal(journal).kept() == [forgotten]


async def test_a_journal_needs_a_client_id_per_value(tmp_path: Path) -> None:
    async with (
        local_chain(tmp_path, CloakProtocol(PARAMS), policy()) as chain,
        connect(chain.chain, journal=tmp_path / "journal.db") as net,
    ):
        with pytest.raises(ValueError, match="stable client_id"):
            await net.submit(0.5)
        with pytest.raises(ValueError, match="with a journal"):
            await net.submit_many([0.5])


async def test_a_value_stored_in_a_round_that_closed_since_is_not_sent_again(
    tmp_path: Path,
) -> None:
    """The case a journal exists for: the entry mix stored the value, its round closed while
    the client was down, and a client that submitted afresh would put it into the next round
    as well. The restarted client resends the kept frame, which the entry mix acknowledges
    again from its receipts: the receipt of the first round, nothing new sent."""
    journal = tmp_path / "journal.db"
    async with local_chain(tmp_path, CloakProtocol(PARAMS), policy()) as chain:
        async with connect(chain.chain) as net:
            kept = await kept_frame(net, VALUES[0], "early")
            with SubmissionJournal(journal) as book:
                book.keep(kept)
            await send_submission(net.mixnet._pick(), kept.frame(), round_id=kept.round_id,
                                  client="early", give_up=1e18)  # fmt: skip
            await net.submit_many(VALUES[1:])  # the round fills up and closes
            assert (await net.result(kept.round_id, timeout=60)).users == USERS
        async with connect(chain.chain, journal=journal) as restarted:
            receipt = await restarted.submit(VALUES[0], client_id="early")
            assert receipt.round == kept.round_id
            entry = chain.mixes[0].machine
            assert isinstance(entry, EntryMachine)
            offer = entry.offer()
            assert offer is None or offer.clients == 0  # the next round got nothing
        assert SubmissionJournal(journal).kept() == []


async def test_the_command_line_counts_a_rerun_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cloaknet submit --journal F --client-id ID VALUE`` run twice (a cron job rerun after
    a crash that left the frame kept): the second run resends the kept frame and prints the
    same round; the round counts one user, not two."""
    import asyncio
    import json

    from cloaknet.chainfile import write_chain_file
    from cloaknet.cli import main

    journal, chain_file = tmp_path / "journal.db", tmp_path / "chain.toml"
    pol = RoundPolicy(min_users=2, max_users=2, deadline_seconds=60.0)
    async with local_chain(tmp_path, CloakProtocol(PARAMS), pol) as chain:
        write_chain_file(chain_file, chain.chain.config, PARAMS)
        async with connect(chain.chain) as net:
            kept = await kept_frame(net, 0.25, "report-7")
            with SubmissionJournal(journal) as book:
                book.keep(kept)
            await send_submission(net.mixnet._pick(), kept.frame(), round_id=kept.round_id,
                                  client="report-7", give_up=1e18)  # fmt: skip
        argv = ["submit", "--chain", str(chain_file), "--journal", str(journal),
                "--client-id", "report-7", "--timeout", "30", "0.25"]  # fmt: skip
        capsys.readouterr()
        assert await asyncio.to_thread(main, argv) == 0
        assert json.loads(capsys.readouterr().out) == {"value": 0.25, "round": kept.round_id}
        async with connect(chain.chain) as net:
            await net.submit(0.5)  # the second user closes the round
            assert (await net.result(kept.round_id, timeout=60)).users == 2
    assert main(["submit", "--chain", str(chain_file), "--journal", str(journal), "0.1"]) == 2
    assert "--journal needs --client-id" in capsys.readouterr().err
    argv = ["submit", "--chain", str(chain_file), "--client-id", "x", "0.1", "0.2"]
    assert main(argv) == 2
    assert "one VALUE" in capsys.readouterr().err
    argv = ["submit", "--chain", str(chain_file), "--client-id", "x", "--key", "k.key", "0.1"]
    assert main(argv) == 2
    assert "do not go together" in capsys.readouterr().err
    with pytest.raises(SystemExit) as bad_id:  # argparse: usage error
        main(["submit", "--chain", str(chain_file), "--client-id", "x" * 129, "0.1"])
    assert bad_id.value.code == 2
    assert "printable characters" in capsys.readouterr().err
    argv = ["submit", "--chain", str(chain_file), "--journal", str(tmp_path / "no" / "j.db"),
            "--client-id", "x", "0.1"]  # fmt: skip
    assert await asyncio.to_thread(main, argv) == 4  # a file error (EXIT_OS), in one line
    assert "directory of the journal does not exist" in capsys.readouterr().err


async def test_a_signed_submission_is_resent_signed_as_it_was(tmp_path: Path) -> None:
    """On a chain with admission the client id is the key's credential and the kept frame
    carries the credential and the signature: the restarted client resends it as it was
    and gets the first receipt back, in a round that has closed since."""
    from nacl.signing import SigningKey

    from mixnet.admission import Admission, credential_client_id

    keys = [SigningKey.generate() for _ in range(USERS)]
    admission = Admission(tuple(bytes(k.verify_key) for k in keys))
    journal = tmp_path / "journal.db"
    async with local_chain(tmp_path, CloakProtocol(PARAMS), policy(),
                           admission=admission) as chain:  # fmt: skip
        first_key = keys[0]
        client = credential_client_id(bytes(first_key.verify_key))
        async with connect(chain.chain, credential=first_key, journal=journal) as net:
            info = await net.mixnet.current_round()
            payloads = net._payloads(VALUES[0], False)
            box, _, signature = net.mixnet._seal(payloads, info)
            assert signature is not None
            kept = KeptSubmission(client, info.round_id, box, bytes(first_key.verify_key),
                                  signature)  # fmt: skip
            assert net.mixnet.journal is not None
            net.mixnet.journal.keep(kept)
            await send_submission(net.mixnet._pick(), kept.frame(), round_id=kept.round_id,
                                  client=client, give_up=1e18)  # fmt: skip
        for key, value in zip(keys[1:], VALUES[1:], strict=True):  # the round fills up
            async with connect(chain.chain, credential=key) as other:
                await other.submit(value)
        async with connect(chain.chain, credential=first_key, journal=journal) as restarted:
            receipt = await restarted.submit(VALUES[0])
            assert (receipt.round, receipt.client) == (kept.round_id, client)
            assert receipt.digest == submission_digest(kept.box)
            assert (await restarted.result(kept.round_id, timeout=60)).users == USERS
        assert SubmissionJournal(journal).kept() == []
