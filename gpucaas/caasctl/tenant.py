"""caasctl's tenant commands: run, ps, logs, exec, cancel — with a tenant's own token.

They use only the tenant endpoints of the API (``/v1/containers``), so a tenant token is
enough; an admin token works too (``--tenancy`` then says whose container it is). The
exit code of ``run --follow`` is the container's: 0 when it succeeded, its ``exit_code``
when it failed (1 if the API gives none), 130 when it was cancelled, 124 when its
``timeout_seconds`` ran out.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from gpucaas.caasctl import exec_session, volumes
from gpucaas.caasctl.client import ATTEMPT_HELP, CaasctlError, RestClient
from gpucaas.caasctl.output import Format, emit, err_console

TERMINAL = ("Succeeded", "Failed", "Cancelled")
#: a waiting container's ``queue.reason`` (queueing by Kueue), as a person reads it
QUEUE_REASONS = {
    "over_share": "over your share",
    "waiting_for_partition": "waiting for a partition",
    "preempted": "preempted",
}


def queue_text(spot: dict[str, Any] | None) -> str | None:
    """``#2, 8 GPUs ahead, over your share``: where a waiting container stands (None: in no queue)."""
    if not spot:
        return None
    reason = QUEUE_REASONS.get(spot["reason"], spot["reason"])
    return f"#{spot['position']}, {spot['gpus_ahead']} GPUs ahead, {reason}"


def class_text(container: dict[str, Any]) -> str:
    return "interruptible" if container.get("interruptible") else "standard"


PS_COLUMNS = [
    ("ID", lambda r: r["id"]),
    ("IMAGE", lambda r: r["image"]),
    ("GPUs", lambda r: r["gpus"]),
    ("CLASS", lambda r: class_text(r)),
    ("STATUS", lambda r: r["status"] + (f" ({r['reason']})" if r.get("reason") else "")),
    ("NODE", lambda r: r.get("node_name")),
    ("CREATED", lambda r: r.get("created_at")),
    ("QUEUE", lambda r: queue_text(r.get("queue"))),
    ("MESSAGE", lambda r: r.get("message")),
    (
        "ENDPOINTS",
        lambda r: (
            " ".join(e["url"] + ("" if e.get("public") else " (private)") for e in r.get("endpoints") or ()) or None
        ),
    ),
]


def parse_port(raw: str) -> dict[str, Any]:
    """``8080`` (private: only tokens of the tenancy get through) or ``8080:public``."""
    number, _, visibility = raw.partition(":")
    if not number.isdigit() or not 1 <= int(number) <= 65535 or visibility not in ("", "public", "private"):
        raise typer.BadParameter(f"{raw!r}: expected PORT or PORT:public, PORT from 1 to 65535", param_hint="--port")
    return {"port": int(number), "public": visibility == "public"}


def parse_env(pairs: list[str], secret_pairs: list[str]) -> dict[str, Any]:
    """``K=V`` plain values and ``K=NAME`` references to the tenancy's secrets."""
    env: dict[str, Any] = {}
    for raw, secret in [(p, False) for p in pairs] + [(p, True) for p in secret_pairs]:
        name, sep, value = raw.partition("=")
        if not sep or not name:
            flag = "--secret-env" if secret else "--env"
            raise typer.BadParameter(f"{raw!r}: expected NAME=VALUE", param_hint=flag)
        env[name] = {"secret": value} if secret else value
    return env


def exit_code_of(container: dict[str, Any]) -> int:
    status = container.get("status")
    if status == "Succeeded":
        return 0
    if status == "Cancelled":
        return 130
    if "timeout_seconds" in (container.get("message") or "").lower():
        return 124
    code = container.get("exit_code")
    return int(code) if isinstance(code, int) and code != 0 else 1


def wait_until(
    api: RestClient, cid: str, statuses: tuple[str, ...], *, timeout: float | None = None, interval: float = 0.5
) -> dict[str, Any]:
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        c = api.get(f"/v1/containers/{cid}")
        if c["status"] in statuses:
            return c
        if deadline is not None and time.monotonic() > deadline:
            raise CaasctlError(
                f"container {cid} is still {c['status']} after {timeout:g} s"
                + (f": {c['message']}" if c.get("message") else "")
            )
        time.sleep(interval)


def follow(api: RestClient, cid: str) -> dict[str, Any]:
    """Print the log from the start until the container ends; returns the finished container."""
    with err_console.status(f"waiting for {cid} to start…"):
        wait_until(api, cid, ("Running", *TERMINAL))
    for line in api.stream_lines(f"/v1/containers/{cid}/logs", follow="true"):
        typer.echo(line)
    return wait_until(api, cid, TERMINAL, timeout=120)


def register(app: typer.Typer, api_of: Any) -> None:
    """Add the tenant commands to caasctl's root ``app``; ``api_of(ctx)`` gives the REST client."""

    @app.command("run")
    def run(
        ctx: typer.Context,
        image: Annotated[str, typer.Argument(help="OCI image reference, e.g. nvcr.io/nvidia/pytorch:24.05-py3.")],
        command: Annotated[
            list[str] | None,
            typer.Argument(help="Command to run, after -- (caasctl run IMAGE --gpus 2 -- python train.py)."),
        ] = None,
        gpus: Annotated[int, typer.Option("--gpus", min=1, max=8, help="GPUs (1, 2, 4, 8 get NVLink).")] = 1,
        env: Annotated[list[str] | None, typer.Option("--env", "-e", help="NAME=VALUE (repeatable).")] = None,
        secret_env: Annotated[
            list[str] | None,
            typer.Option(
                "--secret-env", help="NAME=SECRET: the variable's value is the tenancy's secret SECRET (repeatable)."
            ),
        ] = None,
        timeout: Annotated[
            int | None, typer.Option("--timeout", min=1, help="timeout_seconds: stop it after S s.")
        ] = None,
        volume: Annotated[
            list[str] | None,
            typer.Option("--volume", "-v", help="NAME:/path[:ro]: mount the tenancy's volume NAME (repeatable)."),
        ] = None,
        port: Annotated[
            list[str] | None,
            typer.Option(
                "--port",
                "-p",
                help="PORT[:public]: serve HTTP on PORT at https://<id>-<port>.<endpoint domain>; "
                "private (the default) answers only your tenancy's tokens (repeatable).",
            ),
        ] = None,
        interruptible: Annotated[
            bool,
            typer.Option(
                "--interruptible",
                help="The interruptible class: runs on GPUs nobody is guaranteed now, preempted first "
                "(SIGTERM, then SIGKILL after the grace period).",
            ),
        ] = False,
        restart_on_preemption: Annotated[
            bool,
            typer.Option(
                "--restart-on-preemption",
                help="When the queue preempts it, put it back in the queue under the same id (a new attempt).",
            ),
        ] = False,
        tenancy: Annotated[str | None, typer.Option(help="With an admin token: the tenancy to run in.")] = None,
        detach: Annotated[
            bool, typer.Option("--detach", "-d", help="Print the container id and return at once.")
        ] = False,
        follow_log: Annotated[
            bool,
            typer.Option("--follow", "-f", help="Stream the log and exit with the container's code (the default)."),
        ] = True,
    ) -> None:
        """Run IMAGE on GPUs, stream its log and exit with its exit code, as `docker run` does
        (--detach: print its id)."""
        body: dict[str, Any] = {"image": image, "gpus": gpus}
        if command:
            body["command"] = command
        variables = parse_env(env or [], secret_env or [])
        if variables:
            body["env"] = variables
        if timeout is not None:
            body["timeout_seconds"] = timeout
        if volume:
            body["volumes"] = [volumes.parse_volume(v) for v in volume]
        if port:
            body["ports"] = [parse_port(p) for p in port]
        if interruptible:
            body["interruptible"] = True
        if restart_on_preemption:
            body["restart_on_preemption"] = True
        if tenancy:
            body["tenancy"] = tenancy
        api = api_of(ctx)
        created = api.post("/v1/containers", body)
        if detach:
            typer.echo(created["id"])
            for endpoint in created.get("endpoints") or ():
                err_console.print(
                    f"port {endpoint['port']}: {endpoint['url']}" + ("" if endpoint["public"] else " (private)")
                )
            return
        err_console.print(f"container {created['id']} submitted")
        for endpoint in created.get("endpoints") or ():
            err_console.print(
                f"port {endpoint['port']}: {endpoint['url']}"
                + ("" if endpoint["public"] else " (private: send Authorization: Bearer <token>)")
            )
        done = follow(api, created["id"])
        code = exit_code_of(done)
        if code:
            err_console.print(
                f"container {done['id']} {done['status']}"
                + (f" ({done['reason']})" if done.get("reason") else "")
                + (f": {done['message']}" if done.get("message") else "")
            )
        raise typer.Exit(code)

    @app.command("ps")
    def ps(
        ctx: typer.Context,
        status: Annotated[str | None, typer.Option(help="Only this status (Queued, Pending, Running, ...).")] = None,
        output: Annotated[Format, typer.Option("--output", "-o", help="table, json or yaml.")] = Format.table,
    ) -> None:
        """Your containers."""
        rows = api_of(ctx).get_all("/v1/containers", status=status)
        emit(rows, output, PS_COLUMNS, title="containers")

    @app.command("logs")
    def logs(
        ctx: typer.Context,
        container_id: str,
        follow_log: Annotated[bool, typer.Option("--follow", "-f", help="Stream until the container ends.")] = False,
        attempt: Annotated[int | None, typer.Option(min=1, help=ATTEMPT_HELP)] = None,
    ) -> None:
        """Print a container's log."""
        for line in api_of(ctx).log_lines(container_id, follow=follow_log, attempt=attempt):
            typer.echo(line)

    @app.command("exec")
    def exec_(
        ctx: typer.Context,
        container_id: Annotated[str, typer.Argument(help="A Running container of yours.")],
        command: Annotated[list[str], typer.Argument(help="The command and its arguments, after --.")],
        interactive: Annotated[
            bool, typer.Option("--interactive", "-i", help="Send this terminal's input to the command.")
        ] = False,
        tty: Annotated[
            bool, typer.Option("--tty", "-t", help="Give the command a terminal (raw mode, resized with the window).")
        ] = False,
    ) -> None:
        """Run a command in a running container and exit with its code, as `docker exec` does (-it: a shell)."""
        raise typer.Exit(exec_session.run(api_of(ctx), container_id, command, stdin=interactive, tty=tty))

    @app.command("cancel")
    def cancel(
        ctx: typer.Context,
        container_id: str,
        wait: Annotated[bool, typer.Option(help="Wait until it has ended.")] = True,
    ) -> None:
        """Cancel a container: its pod is deleted and its GPUs released."""
        api = api_of(ctx)
        api.delete(f"/v1/containers/{container_id}")
        if wait:
            with err_console.status(f"cancelling {container_id}…"):
                wait_until(api, container_id, TERMINAL, timeout=120)
        typer.echo(container_id)
