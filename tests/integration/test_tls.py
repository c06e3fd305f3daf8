"""TLS and mutual TLS (docs/security.md) with a CA made at test time: the server speaks TLS when given a
certificate; with a client CA every connection must present a certificate it verifies, whose common name or a
SAN names the tenant ([[auth.client_certs]]); a verified but unmapped certificate is UNAUTHENTICATED unless
the call carries a token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from general_agent.v1 import agent_service_pb2_grpc, session_pb2
from general_agent.v1 import session_messages_pb2 as session_api
from tests.conftest import ServerFactory
from tests.support.certificates import Issued, MadeCA
from tests.support.rpc import Stub, create_session, rpc_error
from tests.support.tenants import ALICE, auth_env

CERTS = """
[[auth.client_certs]]
subject = "support.internal"
tenant = "support"
role = "tenant"

[[auth.client_certs]]
subject = "ops-sidecar.internal"
tenant = "ops"
role = "admin"
"""


@asynccontextmanager
async def tls_stub(address: str, ca: MadeCA, client: Issued | None, token: str = "") -> AsyncIterator[Stub]:
    key, chain = client.pair() if client is not None else (None, None)
    credentials = grpc.ssl_channel_credentials(ca.cert.read_bytes(), private_key=key, certificate_chain=chain)
    if token:
        credentials = grpc.composite_channel_credentials(credentials, grpc.access_token_call_credentials(token))
    options = [("grpc.ssl_target_name_override", "localhost")]
    async with grpc.aio.secure_channel(address, credentials, options=options) as channel:
        yield agent_service_pb2_grpc.AgentServiceStub(channel)


def tls_settings(ca: MadeCA, *, mutual: bool) -> dict[str, str]:
    server = ca.issue("localhost", dns=("localhost",), server=True)
    settings = {"GENERAL_AGENT_TLS_CERT_FILE": str(server.cert), "GENERAL_AGENT_TLS_KEY_FILE": str(server.key)}
    if mutual:
        settings["GENERAL_AGENT_TLS_CLIENT_CA_FILE"] = str(ca.cert)
    return settings


async def test_server_tls_refuses_plaintext(server_factory: ServerFactory, tmp_path: Path) -> None:
    ca = MadeCA(tmp_path)
    server = await server_factory({**auth_env(tmp_path), **tls_settings(ca, mutual=False)})
    async with tls_stub(server.address, ca, None, token=ALICE) as alice:
        assert (await create_session(alice)).tenant == "alice"
    async with grpc.aio.insecure_channel(server.address) as channel:
        error = await rpc_error(health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5))
        assert error.code == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize(
    ("name", "dns", "tenant"), [("support.internal", (), "support"), ("x", ("support.internal",), "support")]
)
async def test_a_client_certificate_names_its_tenant(
    server_factory: ServerFactory, tmp_path: Path, name: str, dns: tuple[str, ...], tenant: str
) -> None:
    ca = MadeCA(tmp_path)
    server = await server_factory({**auth_env(tmp_path, CERTS), **tls_settings(ca, mutual=True)})
    async with tls_stub(server.address, ca, ca.issue(name, dns=dns)) as stub:
        session = await create_session(stub)
        assert session.tenant == tenant
        listed = await stub.ListSessions(session_api.ListSessionsRequest())
        assert [s.identity.session_id for s in listed.sessions] == [session.identity.session_id]


async def test_an_unmapped_or_missing_certificate_is_refused(server_factory: ServerFactory, tmp_path: Path) -> None:
    ca = MadeCA(tmp_path)
    server = await server_factory({**auth_env(tmp_path, CERTS), **tls_settings(ca, mutual=True)})
    stranger = ca.issue("stranger.internal")
    async with tls_stub(server.address, ca, stranger) as stub:
        error = await rpc_error(create_session(stub))
        assert (error.code, error.reason) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    async with tls_stub(server.address, ca, stranger, token=ALICE) as stub:
        assert (await create_session(stub)).tenant == "alice"  # a token on a verified connection
    async with tls_stub(server.address, ca, None, token=ALICE) as stub:
        error = await rpc_error(create_session(stub))
        assert error.code == grpc.StatusCode.UNAVAILABLE  # no client certificate: no connection
    (tmp_path / "other").mkdir()
    other_ca = MadeCA(tmp_path / "other", "another CA")
    async with tls_stub(server.address, ca, other_ca.issue("support.internal")) as stub:
        error = await rpc_error(create_session(stub))
        assert error.code == grpc.StatusCode.UNAVAILABLE  # signed by a CA the server does not trust


async def test_an_admin_certificate_acts_on_another_tenant(server_factory: ServerFactory, tmp_path: Path) -> None:
    ca = MadeCA(tmp_path)
    server = await server_factory({**auth_env(tmp_path, CERTS), **tls_settings(ca, mutual=True)})
    key, chain = ca.issue("ops-sidecar.internal").pair()
    credentials = grpc.ssl_channel_credentials(ca.cert.read_bytes(), private_key=key, certificate_chain=chain)
    options = [("grpc.ssl_target_name_override", "localhost")]
    async with grpc.aio.secure_channel(server.address, credentials, options=options) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        request = session_api.CreateSessionRequest(session=session_pb2.Session())
        created = await stub.CreateSession(request, metadata=[("x-tenant", "support")])
        assert created.session.tenant == "support"
