"""Native TLS: a whole round over wss:// with trustme certificates, a client that does not
trust the chain's CA, and `cloaknet node` refusing a URL and certificate that disagree."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
import time
import urllib.request
from fractions import Fraction
from pathlib import Path

import pytest
import trustme

from cloaknet.client import connect
from cloaknet.encoding import quantize
from cloaknet.localchain import LocalTls, local_chain
from cloaknet.protocols import CloakProtocol
from mixnet.chain import RoundPolicy, TlsConfig
from mixnet.tls import TlsError
from tests.integration.node_process import HOST, PARAMS, cloaknet, write_chain


@dataclasses.dataclass
class Pki:
    """A CA (``ca.pem``) and a certificate for 127.0.0.1 it signed (``cert.pem``,
    ``key.pem``), written to a directory; and a second, unrelated CA (``other-ca.pem``)."""

    ca: Path
    cert: Path
    key: Path
    other_ca: Path

    def server(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = trustme.CA()
    issued = ca.issue_cert(HOST)
    folder = tmp_path / "pki"
    folder.mkdir()
    pki = Pki(folder / "ca.pem", folder / "cert.pem", folder / "key.pem", folder / "other-ca.pem")
    ca.cert_pem.write_to_path(str(pki.ca))
    issued.cert_chain_pems[0].write_to_path(str(pki.cert))
    issued.private_key_pem.write_to_path(str(pki.key))
    trustme.CA().cert_pem.write_to_path(str(pki.other_ca))
    return pki


async def test_a_round_over_wss(tmp_path: Path, pki: Pki) -> None:
    users = 5
    policy = RoundPolicy(min_users=users, max_users=users, deadline_seconds=60.0)
    values = [0.1, 0.25, 0.5, 0.75, 1.0]
    tls = LocalTls(pki.ca, pki.server())
    async with local_chain(tmp_path, CloakProtocol(PARAMS), policy, mixes=2, tls=tls) as chain:
        config = chain.chain.config
        assert all(node.url.startswith("wss://") for node in config.nodes)
        assert config.tls == TlsConfig(pki.ca)
        async with connect(chain.chain, connections=2, retry_for=30) as net:
            receipts = await asyncio.gather(*(net.submit(v) for v in values))
            assert len({r.round for r in receipts}) == 1
            result = await net.result(receipts[0].round, timeout=60)
        # the HTTP routes are served over TLS too
        context = ssl.create_default_context(cafile=str(pki.ca))
        port = chain.analyzer.port

        def healthz() -> bytes:
            url = f"https://{HOST}:{port}/healthz"
            with urllib.request.urlopen(url, timeout=5, context=context) as response:
                return bytes(response.read())

        assert await asyncio.to_thread(healthz) == b"ok\n"
    precision = PARAMS.precision
    assert result.users == users
    assert Fraction(result.raw["estimate_exact"]) == Fraction(
        sum(quantize(v, precision) for v in values), precision
    )


async def test_a_client_that_does_not_trust_the_ca_fails_at_once(
    tmp_path: Path, pki: Pki
) -> None:
    policy = RoundPolicy(min_users=2, max_users=2, deadline_seconds=60.0)
    tls = LocalTls(pki.ca, pki.server())
    async with local_chain(tmp_path, CloakProtocol(PARAMS), policy, mixes=1, tls=tls) as chain:
        wrong = dataclasses.replace(
            chain.chain, config=dataclasses.replace(chain.chain.config, tls=TlsConfig(pki.other_ca))
        )
        started = time.monotonic()
        async with connect(wrong, retry_for=30) as net:
            with pytest.raises(TlsError) as info:
                await net.submit(0.5)
        assert time.monotonic() - started < 5  # not retried for retry_for seconds
        message = str(info.value)
        assert "\n" not in message
        assert "TLS certificate is not trusted" in message
        assert "unable to get local issuer certificate" in message
        assert chain.chain.config.mixes[0].url in message


def test_node_refuses_a_url_and_certificate_that_disagree(tmp_path: Path, pki: Pki) -> None:
    secure = tmp_path / "secure"
    secure.mkdir()
    chain, _ = write_chain(secure, mixes=1, scheme="wss", tls=TlsConfig(pki.ca))
    key = ["--key", str(secure / "mix1.key")]
    bare = cloaknet("node", "--chain", str(chain), "--name", "mix1", *key)
    assert bare.returncode == 2
    assert bare.stderr.count("\n") == 1
    assert "wss:// URL, but has no TLS certificate" in bare.stderr
    assert not (secure / "mix1.db").exists()  # refused before anything was created
    key_only = cloaknet("node", "--chain", str(chain), "--name", "mix1", *key,
                        "--tls-key", str(pki.key))
    assert key_only.returncode == 2 and "--tls-key needs --tls-cert" in key_only.stderr
    mismatched = cloaknet("node", "--chain", str(chain), "--name", "mix1", *key,
                          "--tls-cert", str(pki.cert), "--tls-key", str(pki.ca))
    assert mismatched.returncode == 2 and mismatched.stderr.count("\n") == 1
    assert "cannot load TLS certificate and key" in mismatched.stderr

    plain = tmp_path / "plain"
    plain.mkdir()
    chain, _ = write_chain(plain, mixes=1, scheme="ws")
    given = cloaknet("node", "--chain", str(chain), "--name", "analyzer",
                     "--tls-cert", str(pki.cert), "--tls-key", str(pki.key))
    assert given.returncode == 2 and given.stderr.count("\n") == 1
    assert "ws:// URL, but was given a TLS certificate" in given.stderr

    (secure / "chain.toml").write_text(
        (secure / "chain.toml").read_text().replace(str(pki.ca), "missing.pem")
    )
    missing = cloaknet("node", "--chain", str(secure / "chain.toml"), "--name", "analyzer")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "tls.ca: cannot use CA bundle" in missing.stderr and "missing.pem" in missing.stderr
