"""Request rates hold for all the API replicas together when they share a storage
(``GPUCAAS_RATE_LIMIT_STORAGE_URL``, a Redis): two ``gpucaas api`` processes on one
database and one Redis refuse a tenant at the limit of the pair, not at twice it.
Without the storage each replica counts alone (the documented per-replica fallback),
and a storage that does not answer falls back to that, never to a 500."""

from __future__ import annotations

import logging
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.ports import free_port
from devtools.waiting import wait_for
from services.api.edge.limits import Limiter, LimitSettings
from tests.api.conftest import new_tenancy
from tests.api.harness import ADMIN_TOKEN, ApiServer, write_dead_kubeconfig
from tests.fixtures.redis_server import RedisServer


def _closed_port() -> int:
    """A port of 127.0.0.1 where nothing listens (connections are refused)."""
    return free_port()


class Replica:
    """One ``gpucaas api`` process on a port of its own."""

    def __init__(self, env: dict[str, str], verify: ssl.SSLContext, folder: Path) -> None:
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.verify = verify
        self.stderr = (folder / f"api-{self.port}.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpucaas", "api", "--host", "127.0.0.1", "--port", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
        )

    def wait_healthy(self) -> None:
        def healthy() -> bool:
            assert self.proc.poll() is None, Path(self.stderr.name).read_text()[-4000:]
            try:
                return httpx.get(f"{self.url}/healthz", verify=self.verify, timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(healthy, 120, interval=0.2, what=f"gpucaas api on port {self.port} to answer /healthz")

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, verify=self.verify, timeout=30, headers={"Authorization": f"Bearer {token}"}
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.stderr.close()


@pytest.fixture
def two_replicas(
    tmp_path: Path, tls_pair: tuple[Path, Path], tls_ca: Any, empty_postgres_url: str
) -> Iterator[Callable[..., tuple[Replica, Replica]]]:
    """``two_replicas(**env)``: two ``gpucaas api`` processes on one new, empty PostgreSQL database,
    with the given GPUCAAS_* variables; stopped at teardown."""
    started: list[Replica] = []
    verify = ssl.create_default_context()
    tls_ca.configure_trust(verify)

    def start(**settings: str) -> tuple[Replica, Replica]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCAAS_")}
        env.update(
            {
                "GPUCAAS_DATABASE_URL": empty_postgres_url,
                "GPUCAAS_KUBECONFIG": str(write_dead_kubeconfig(tmp_path / "kubeconfig")),
                "GPUCAAS_TLS_CERT": str(tls_pair[0]),
                "GPUCAAS_TLS_KEY": str(tls_pair[1]),
                "GPUCAAS_ADMIN_TOKEN": ADMIN_TOKEN,
                "GPUCAAS_RUN_WORKER": "false",
                "GPUCAAS_LOG_LEVEL": "WARNING",
            }
        )
        env.update({f"GPUCAAS_{k.upper()}": v for k, v in settings.items()})
        pair = []
        for _ in range(2):  # one after the other: the first migrates the database
            replica = Replica(env, verify, tmp_path)
            started.append(replica)
            replica.wait_healthy()
            pair.append(replica)
        return pair[0], pair[1]

    yield start
    for replica in started:
        replica.stop()


def _alternate(replicas: tuple[Replica, Replica], token: str, n: int) -> list[tuple[int, httpx.Response]]:
    """``n`` GET /v1/containers with ``token``, replica 0, 1, 0, 1, ...: (replica, answer) each."""
    clients = [r.client(token) for r in replicas]
    try:
        return [(i % 2, clients[i % 2].get("/v1/containers")) for i in range(n)]
    finally:
        for c in clients:
            c.close()


def _assert_refusals_say_when(answers: list[httpx.Response], what: str) -> None:
    for r in answers:
        assert r.status_code == 429, r.text
        assert r.json()["code"] == "too_many_requests" and what in r.json()["detail"], r.text
        assert int(r.headers["Retry-After"]) >= 1


@pytest.mark.postgres
def test_two_replicas_refuse_a_tenant_at_the_limit_of_the_pair(
    two_replicas: Callable[..., tuple[Replica, Replica]], redis_url: str
) -> None:
    # minute windows: the test ends long before any entry leaves its window, so every
    # count below is exact without waiting
    pair = two_replicas(
        rate_limit_storage_url=redis_url,
        rate_limit_token="6/minute",
        rate_limit_tenancy="10/minute",
        rate_limit_bad_tokens="4/minute",
    )
    with pair[0].client(ADMIN_TOKEN) as admin:
        first = new_tenancy(admin, "busy")
        second = admin.post("/v1/admin/tenancies/busy/tokens", json={}).json()["token"]

    # one token, its requests alternating between the replicas: 6 in all, not 6 on each
    answers = _alternate(pair, first, 16)
    served = [(replica, r) for replica, r in answers if r.status_code != 429]
    assert [r.status_code for _, r in served] == [200] * 6, [r.text for _, r in answers]
    assert sorted(replica for replica, _ in served) == [0, 0, 0, 1, 1, 1]  # each replica served some
    assert [r.status_code for _, r in answers[:6]] == [200] * 6  # the first six, then only refusals
    _assert_refusals_say_when([r for _, r in answers[6:]], "this token")

    # the tenancy's second token: the tenancy has 10 a minute and used 6 (the token's
    # refusals were not counted against it); 6 requests stay within this token's own 6
    answers = _alternate((pair[1], pair[0]), second, 6)
    assert [r.status_code for _, r in answers[:4]] == [200] * 4, [r.text for _, r in answers]
    _assert_refusals_say_when([r for _, r in answers[4:]], "tenancy 'busy'")

    # invalid tokens: the back-off counts the client address's guesses on both replicas
    answers = _alternate(pair, "gpc_guess", 8)
    assert [r.status_code for _, r in answers[:4]] == [401] * 4, [r.text for _, r in answers]
    _assert_refusals_say_when([r for _, r in answers[4:]], "invalid tokens")


@pytest.mark.postgres
def test_without_a_shared_storage_each_replica_counts_alone(
    two_replicas: Callable[..., tuple[Replica, Replica]],
) -> None:
    pair = two_replicas(rate_limit_token="6/minute", rate_limit_tenancy="")
    with pair[0].client(ADMIN_TOKEN) as admin:
        token = new_tenancy(admin, "apart")
    answers = _alternate(pair, token, 16)
    served = [(replica, r) for replica, r in answers if r.status_code != 429]
    assert [r.status_code for _, r in served] == [200] * 12, [r.text for _, r in answers]  # 6 on each
    assert sorted(replica for replica, _ in served) == [0] * 6 + [1] * 6
    _assert_refusals_say_when([r for _, r in answers[12:]], "this token")


def test_an_unreachable_storage_falls_back_to_each_replica_never_a_500(
    serve: Callable[..., ApiServer], sqlite_url: str, dead_kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="services.api.edge.limits")
    api = serve(
        sqlite_url,
        dead_kubeconfig,
        rate_limit_token="3/minute",
        rate_limit_tenancy="",
        rate_limit_storage_url=f"redis://127.0.0.1:{_closed_port()}/0",
    )
    with api.client() as admin:
        token = new_tenancy(admin, "offline")
    with api.client(token) as c:
        statuses = [c.get("/v1/containers").status_code for _ in range(5)]
        r = c.get("/v1/containers")
    assert statuses == [200] * 3 + [429] * 2
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1

    limiter = api.app.state.limiter
    assert not limiter.shared
    warnings = [
        rec for rec in caplog.records if rec.levelno == logging.WARNING and rec.name == "services.api.edge.limits"
    ]
    assert len(warnings) == 1 and "does not answer" in warnings[0].getMessage()  # once, not per request
    with api.client(None) as anon:
        metrics = anon.get("/metrics").text
    assert "gpucaas_api_rate_limit_shared 0.0" in metrics
    errors = [line for line in metrics.splitlines() if line.startswith("gpucaas_api_rate_limit_storage_errors_total ")]
    assert errors and float(errors[0].split()[1]) >= 1


def _limits(url: str, **kwargs: Any) -> Limiter:
    cfg = LimitSettings(
        token_rate="4/minute",
        tenancy_rate="",
        bad_token_rate="",
        streams_per_token=1,
        streams_per_tenancy=1,
        requests_per_client=1,
        storage_url=url,
    )
    return Limiter(cfg, **kwargs)


async def _served(limiter: Limiter, n: int, token: str = "tok") -> int:
    ok = 0
    for _ in range(n):
        try:
            await limiter.request(token_id=token, tenancy=None)
            ok += 1
        except Exception as exc:  # noqa: BLE001 - only a 429 may come out
            assert type(exc).__name__ == "TooManyRequests", exc
    return ok


async def test_limiters_on_one_storage_count_together_and_survive_its_restart(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="services.api.edge.limits")
    one, two = _limits(redis_server.url, retry_seconds=0), _limits(redis_server.url, retry_seconds=0)
    try:
        assert await _served(one, 3) == 3 and await _served(two, 3) == 1  # 4 a minute, together
        assert one.shared and two.shared

        redis_server.stop()
        assert await _served(one, 6) == 4  # alone now: its own 4, with a fresh window
        assert not one.shared
        assert "does not answer" in caplog.text

        redis_server.start()  # the same port, empty (no persistence)
        assert await _served(one, 1) == 1 and one.shared  # tried again at once (retry_seconds=0)
        assert "answers again" in caplog.text
        assert await _served(two, 6) == 3  # the new windows are shared again: 4 in all
    finally:
        await one.close()
        await two.close()


async def test_a_storage_that_hangs_costs_at_most_the_timeout_then_nothing() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        limiter = _limits(f"redis://127.0.0.1:{silent.getsockname()[1]}/0", timeout=0.2, retry_seconds=60)
        try:
            start = time.monotonic()
            assert await _served(limiter, 1) == 1
            assert time.monotonic() - start < 2  # the timeout, not the client's default retries
            assert not limiter.shared
            start = time.monotonic()
            assert await _served(limiter, 5) == 3  # counted here; the storage is not asked again yet
            assert time.monotonic() - start < 0.1
        finally:
            await limiter.close()
