"""The dispatcher: sends due deliveries from the outbox, one thread per API process.

Each pass claims due ``pending`` deliveries, and for each: reads the endpoint's signing
secret, checks the URL's resolved address again (``ssrf.delivery_address``), POSTs the
stored body to that very address with fresh signature headers, and records the attempt.
A 2xx answer delivers it; anything else (another status, a redirect, which is never
followed, a timeout, a refused address) schedules the next attempt after an exponential
back-off (``webhook_retry_first_seconds`` doubling up to ``webhook_retry_max_seconds``),
until ``webhook_retry_hours`` after the delivery was created or last resent: then it is
``failed``. Finished deliveries are forgotten after ``retention_days``, like finished
containers. Delivery is at least once: a crash after the POST and before the record
sends it again, and receivers deduplicate on ``Gpucaas-Webhook-Id``.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import Engine
from sqlmodel import Session

from core import __version__
from core.backoff import Backoff
from core.kube import KubeError
from services.api.domain.models import utcnow
from services.api.kube import Kube
from services.api.settings import Settings
from services.api.webhooks import signing, ssrf, store
from services.api.webhooks.models import Webhook, WebhookDelivery
from services.api.webhooks.secret_store import SecretCache

log = logging.getLogger(__name__)


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def backoff(settings: Settings, attempts: int) -> float:
    """Seconds before attempt ``attempts + 1`` (``attempts`` already made, at least 1)."""
    rule = Backoff(settings.webhook_retry_first_seconds, settings.webhook_retry_max_seconds)
    return rule.delay(max(1, attempts))


class WebhookDispatcher:
    def __init__(self, *, engine: Engine, kube: Kube, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.secrets = SecretCache(kube)
        self.window = timedelta(hours=settings.webhook_retry_hours)
        self._client: httpx.Client | None = None  # made at the first delivery (loading the CA store costs)
        self._client_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="gpucaas-webhooks", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    @property
    def client(self) -> httpx.Client:
        """The HTTPS client deliveries go out on (the system's CAs, no proxy, no redirects)."""
        with self._client_lock:
            if self._client is None:
                timeout = self.settings.webhook_timeout_seconds
                self._client = httpx.Client(
                    timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
                    follow_redirects=False,
                    trust_env=False,  # no proxy from the environment: the checked address is the one reached
                    headers={"User-Agent": f"gpucaas-webhooks/{__version__}"},
                )
            return self._client

    def wake(self) -> None:
        """A delivery became due now (a resend): look at once."""
        self._wake.set()

    def _loop(self) -> None:
        next_prune = time.monotonic()
        while not self._stop.is_set():
            if time.monotonic() >= next_prune:
                next_prune = time.monotonic() + self.settings.retention_interval_seconds
                try:
                    self.prune()
                except Exception:  # retried at the next interval
                    log.exception("webhook delivery pruning failed")
            try:
                busy = self.run_once()
            except Exception:  # e.g. the database briefly unreachable
                log.exception("webhook delivery pass failed")
                busy = False
            if not busy:
                self._wake.wait(self.settings.worker_poll_seconds)
                self._wake.clear()

    def prune(self) -> int:
        """Forget finished deliveries older than ``retention_days`` (as finished containers are)."""
        with Session(self.engine) as session:
            return store.prune(session, before=utcnow() - timedelta(days=self.settings.retention_days))

    def run_once(self) -> bool:
        with Session(self.engine) as session:
            claimed = store.claim_due(session, claim_seconds=self.settings.webhook_timeout_seconds * 3 + 30)
        for row in claimed:
            if self._stop.is_set():
                break
            self.deliver(row)
        return bool(claimed)

    def deliver(self, row: WebhookDelivery) -> None:
        with Session(self.engine) as session:
            hook = store.webhook_by_id(session, webhook_id=row.webhook_id)
        if hook is None:  # deleted meanwhile, with its deliveries
            return
        started = utcnow()
        t0 = time.monotonic()
        status_code, error = self._attempt(hook, row)
        duration_ms = (time.monotonic() - t0) * 1000
        delivered = error is None
        next_at: datetime | None = None
        if not delivered:
            next_at = utcnow() + timedelta(seconds=backoff(self.settings, row.attempts + 1))
            if next_at > _utc(row.window_start) + self.window:
                next_at = None
            log.info("webhook %s delivery %s attempt %d failed: %s", hook.id, row.id, row.attempts + 1, error)
        with Session(self.engine) as session:
            store.record_attempt(
                session,
                delivery=row,
                started_at=started,
                duration_ms=duration_ms,
                status_code=status_code,
                error=error,
                next_attempt_at=next_at,
                delivered=delivered,
            )

    def _attempt(self, hook: Webhook, row: WebhookDelivery) -> tuple[int | None, str | None]:
        """One POST: (status code, None) when delivered, else (status code or None, why not)."""
        try:
            target, address = ssrf.delivery_address(
                hook.url,
                allow_loopback=self.settings.webhook_allow_loopback,
                networks=self.settings.webhook_allow_networks,
            )
        except ssrf.Refused as exc:
            return None, f"url refused: {exc}"
        try:
            secret = self.secrets.get(tenancy=hook.tenancy, webhook_id=hook.id)
        except KubeError as exc:
            return None, f"signing secret unavailable now (Kubernetes: {exc})"
        if secret is None:
            return None, "signing secret missing (its Kubernetes Secret was deleted); delete and re-create the webhook"
        body = row.body.encode()
        headers = signing.headers(secret, row.event_id, body)
        url = httpx.URL(hook.url)
        headers["Host"] = url.netloc.decode()  # host[:port] as registered (no userinfo: refused)
        # connect to the address just checked, not to whatever the name resolves to next
        pinned = url.copy_with(host=str(address))
        extensions = {"sni_hostname": target.host} if target.scheme == "https" and target.ip is None else {}
        try:
            request = self.client.build_request("POST", pinned, content=body, headers=headers, extensions=extensions)
            response = self.client.send(request, stream=True)
            response.close()  # the answer's body is not read: the status code is all that counts
        except httpx.TimeoutException:
            return None, f"timed out after {self.settings.webhook_timeout_seconds:g}s"
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"[:1024]
        code = response.status_code
        if 200 <= code < 300:
            return code, None
        if 300 <= code < 400:
            return code, f"HTTP {code}: redirects are not followed; register the final URL"
        return code, f"HTTP {code}"
