"""Revocation on every replica: two API processes over one PostgreSQL database, each
remembering verified tokens for a minute. A token revoked through one is refused (401) on
its very next request on the other — because every replica acknowledges the revocation
before it is answered (``services.api.security.revocations``), not because the cache is short.

Replica A is the tests' in-process server; replica B is ``gpucaas api`` in a process of
its own (in one process, forgetting a token reaches every cache at once, which would
prove nothing)."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from devtools.ports import free_port
from devtools.waiting import wait_for
from services.api.security import revocations
from tests.api.conftest import new_tenancy
from tests.api.harness import ADMIN_TOKEN, ApiServer

pytestmark = pytest.mark.postgres

CACHE_SECONDS = "60"  # far longer than any test here: a 401 cannot come from an entry expiring


class Replica:
    """``gpucaas api`` as a separate process on the same database."""

    def __init__(self, url: str, verify: ssl.SSLContext, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.url, self.verify, self.proc, self.log = url, verify, proc, log

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, verify=self.verify, timeout=30, headers={"Authorization": f"Bearer {token}"}
        )


@pytest.fixture
def replica_a(serve: Callable[..., ApiServer], postgres_url: str, dead_kubeconfig: Path) -> ApiServer:
    return serve(postgres_url, dead_kubeconfig, token_cache_seconds=float(CACHE_SECONDS), run_worker=False)


@pytest.fixture
def replica_b(
    replica_a: ApiServer,
    postgres_url: str,
    dead_kubeconfig: Path,
    tls_pair: tuple[Path, Path],
    tls_ca: Any,
    tmp_path: Path,
) -> Iterator[Replica]:
    port = free_port()
    verify = ssl.create_default_context()
    tls_ca.configure_trust(verify)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCAAS_")}
    env.update(
        {
            "GPUCAAS_DATABASE_URL": postgres_url,
            "GPUCAAS_KUBECONFIG": str(dead_kubeconfig),
            "GPUCAAS_TLS_CERT": str(tls_pair[0]),
            "GPUCAAS_TLS_KEY": str(tls_pair[1]),
            "GPUCAAS_ADMIN_TOKEN": ADMIN_TOKEN,
            "GPUCAAS_RUN_WORKER": "false",
            "GPUCAAS_TOKEN_CACHE_SECONDS": CACHE_SECONDS,
            "GPUCAAS_LOG_LEVEL": "WARNING",
        }
    )
    log = tmp_path / "replica-b.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpucaas", "api", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"https://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            return httpx.get(f"{url}/healthz", verify=verify, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(healthy, 120, interval=0.2, what="replica B to answer /healthz")
        yield Replica(url, verify, proc, log)
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def _listeners(postgres_url: str) -> int:
    engine = create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text("SELECT count(*) FROM revocation_listener WHERE lease_until > clock_timestamp()")
                ).scalar_one()
            )
    finally:
        engine.dispose()


@pytest.fixture
def both(replica_a: ApiServer, replica_b: Replica, postgres_url: str) -> tuple[ApiServer, Replica, str]:
    """Both replicas listening, and a tenancy whose ``admin`` token is the owner's."""
    wait_for(lambda: _listeners(postgres_url) == 2, 30, what="both replicas to listen for revocations")
    with replica_a.client() as admin:
        owner = new_tenancy(admin, "shared")
    return replica_a, replica_b, owner


def _warm(a: ApiServer, b: Replica, token: str) -> None:
    """Use the token on both replicas: each has it in its cache now."""
    with a.client(token) as ca, b.client(token) as cb:
        assert ca.get("/v1/containers").status_code == 200
        assert cb.get("/v1/containers").status_code == 200


def test_a_token_revoked_on_one_replica_is_refused_on_its_next_request_on_the_other(
    both: tuple[ApiServer, Replica, str],
) -> None:
    a, b, owner = both
    for round_ in range(4):
        through_a = round_ % 2 == 0
        with a.client(owner) as ca:
            dash = ca.post("/v1/tokens", json={"name": f"dash-{round_}", "scope": "read"}).json()
        _warm(a, b, dash["token"])
        with a.client(dash["token"]) as da, b.client(dash["token"]) as db_:
            assert db_.post("/v1/containers", json={"image": "ubuntu"}).status_code == 403  # read only
            with a.client(owner) if through_a else b.client(owner) as revoker:
                assert revoker.delete(f"/v1/tokens/{dash['id']}").status_code == 204
            # the very next request, on each replica
            other, same = (db_, da) if through_a else (da, db_)
            assert other.get("/v1/containers").status_code == 401, f"round {round_}: the other replica"
            assert same.get("/v1/containers").status_code == 401, f"round {round_}: the revoking replica"
    with a.client(owner) as ca:
        events = ca.get("/v1/audit", params={"action": "token.revoke"}).json()["data"]
    assert len(events) == 4 and {e["token_name"] for e in events} == {"test"}


def test_without_the_notification_the_other_replica_would_have_served_it(
    both: tuple[ApiServer, Replica, str],
    postgres_url: str,
) -> None:
    """The control: a token row deleted behind the API's back (no revocation announced)
    is still served from replica B's cache — the 401s above come from the revocation."""
    a, b, owner = both
    with a.client(owner) as ca:
        ctl = ca.post("/v1/tokens", json={"name": "control"}).json()
    _warm(a, b, ctl["token"])
    engine = create_engine(postgres_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM api_token WHERE id = :id"), {"id": ctl["id"]})
    finally:
        engine.dispose()
    with b.client(ctl["token"]) as cb:
        assert cb.get("/v1/containers").status_code == 200  # from its cache


def test_a_replica_that_lost_its_listener_still_refuses_a_revoked_token(
    both: tuple[ApiServer, Replica, str],
    postgres_url: str,
) -> None:
    a, b, owner = both
    with a.client(owner) as ca:
        dash = ca.post("/v1/tokens", json={"name": "dash"}).json()
    _warm(a, b, dash["token"])
    engine = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:  # every replica's listening connection is cut (this test's database only)
            killed = conn.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = 'gpucaas-revocations' AND datname = current_database()"
                )
            ).scalar_one()
    finally:
        engine.dispose()
    assert killed == 2
    with a.client(owner) as ca:
        started = time.monotonic()
        assert ca.delete(f"/v1/tokens/{dash['id']}").status_code == 204
        took = time.monotonic() - started
    with b.client(dash["token"]) as cb:
        assert cb.get("/v1/containers").status_code == 401
    assert took < revocations.LEASE_SECONDS + 2
    wait_for(lambda: _listeners(postgres_url) == 2, 30, what="both replicas to listen again")


def test_a_revocation_waits_for_a_replica_that_does_not_answer_until_its_lease_ends(
    both: tuple[ApiServer, Replica, str],
    postgres_url: str,
) -> None:
    a, b, owner = both
    engine = create_engine(postgres_url)
    try:
        with engine.begin() as conn:  # a replica that holds a lease for 3 s more and never acknowledges
            conn.execute(
                text(
                    "INSERT INTO revocation_listener (replica, heard, lease_until) "
                    "VALUES ('stuck', 0, clock_timestamp() + interval '3 seconds'), "
                    "('long-gone', 0, clock_timestamp() - interval '1 second')"
                )
            )
        with a.client(owner) as ca:
            dash = ca.post("/v1/tokens", json={"name": "dash"}).json()
            assert ca.delete(f"/v1/tokens/{dash['id']}").status_code == 204
            with engine.connect() as conn:  # answered only once the stuck replica's lease was over
                assert conn.execute(
                    text("SELECT lease_until <= clock_timestamp() FROM revocation_listener WHERE replica = 'stuck'")
                ).scalar_one()
            dash2 = ca.post("/v1/tokens", json={"name": "dash2"}).json()
            started = time.monotonic()
            assert ca.delete(f"/v1/tokens/{dash2['id']}").status_code == 204
            fast = time.monotonic() - started
    finally:
        engine.dispose()
    assert fast < 1.5, fast  # neither lease is live any more: nobody to wait for
