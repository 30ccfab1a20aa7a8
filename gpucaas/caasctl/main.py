"""`caasctl`: the admins' command line over the API's admin endpoints and a node's fabric socket.

Exit codes: 0 ok; 1 an error, with a one-line reason on stderr; 2 a usage error.
Connection settings come from flags, then GPUCAAS_URL / GPUCAAS_TOKEN /
GPUCAAS_CA_CERT / GPUCAAS_INSECURE, then ``~/.config/gpucaas/config.yaml`` (``url``, ``token``,
``ca_cert``, ``insecure``, ``nodes: {<node>: {fabric_socket: ...}}``): one settings
class, gpucaas/caasctl/settings.py.
"""

from __future__ import annotations

import re
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import click
import typer
from typer.core import TyperGroup

from core.fabric_client import FabricError
from gpucaas.caasctl import tenant, tenant_resources, tenant_tokens, usage, volumes
from gpucaas.caasctl.client import ATTEMPT_HELP, CaasctlError, Config, RestClient, fabric_socket_for
from gpucaas.caasctl.output import Format, emit, err_console
from gpucaas.caasctl.settings import DEFAULT_CONFIG, CaasctlSettings, ConfigLocation

if TYPE_CHECKING:
    from core.fabric_client import FabricClient
    from core.fabric_messages import Partition


class _OneLineErrors(TyperGroup):
    """Root group: a CaasctlError or FabricError from any command is one line on stderr and exit 1."""

    def invoke(self, ctx: Any) -> Any:  # typer's own copy of click's Context
        try:
            return super().invoke(ctx)
        except (CaasctlError, FabricError) as exc:
            click.echo(f"error: {one_line(exc)}", err=True)
            ctx.exit(1)


def one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


app = typer.Typer(
    name="caasctl",
    help="gpucaas from the command line. Tenants: run, ps, logs, cancel, secrets, registry, webhooks, usage, "
    "tokens, audit. Admins: partitions, nodes, "
    "GPUs, leases, warm images, tenancies, tokens, containers, secrets.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    cls=_OneLineErrors,
)
partitions_app = typer.Typer(help="NVLink partitions (Fabric Manager).", no_args_is_help=True)
gpus_app = typer.Typer(help="GPUs: list, quarantine, release.", no_args_is_help=False, invoke_without_command=True)
tenancies_app = typer.Typer(help="Tenancies: create, list, describe, delete.", no_args_is_help=True)
tokens_app = typer.Typer(
    help="API tokens: yours (create, list, revoke), or a tenancy's (admins: issue, list, revoke).", no_args_is_help=True
)
containers_app = typer.Typer(help="Containers of every tenancy.", no_args_is_help=True)
secrets_app = typer.Typer(
    help="Secrets: create (value from stdin), list by name, delete; values are never shown.", no_args_is_help=True
)
registry_app = typer.Typer(
    help="A tenancy's registry credentials (server and user; never the password).", no_args_is_help=True
)
warm_images_app = typer.Typer(
    help="Warm images: images every GPU node keeps pulled, so that containers using them skip the pull.",
    no_args_is_help=True,
)
app.add_typer(partitions_app, name="partitions")
app.add_typer(gpus_app, name="gpus")
app.add_typer(tenancies_app, name="tenancies")
app.add_typer(tokens_app, name="tokens")
app.add_typer(containers_app, name="containers")
app.add_typer(secrets_app, name="secrets")
app.add_typer(registry_app, name="registry-credentials")
app.add_typer(warm_images_app, name="warm-images")

Output = Annotated[Format, typer.Option("--output", "-o", help="table, json or yaml.")]
NodeOpt = Annotated[str | None, typer.Option("--node", "-n", help="Only this node.")]
SocketOpt = Annotated[
    str | None,
    typer.Option(
        "--fabric-socket",
        envvar="GPUCAAS_FABRIC_SOCKET_PATH",
        help="The node's fabric service socket (default: from the config, or /run/gpucaas/fabric.sock).",
    ),
]


_F = CaasctlSettings.model_fields


def _print_version(value: bool) -> None:
    if value:
        from gpucaas import __version__

        typer.echo(f"caasctl {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(help=f"{_F['url'].description} \\[env: GPUCAAS_URL]")] = None,
    token: Annotated[str | None, typer.Option(help=f"{_F['token'].description} \\[env: GPUCAAS_TOKEN]")] = None,
    ca_cert: Annotated[str | None, typer.Option(help=f"{_F['ca_cert'].description} \\[env: GPUCAAS_CA_CERT]")] = None,
    insecure: Annotated[bool, typer.Option(help=f"{_F['insecure'].description} \\[env: GPUCAAS_INSECURE]")] = False,
    config: Annotated[
        str | None,
        typer.Option(
            help=f"{ConfigLocation.model_fields['config'].description} "
            f"\\[env: GPUCAAS_CONFIG; default {DEFAULT_CONFIG}]"
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print caasctl's version and exit."),
    ] = False,
) -> None:
    ctx.obj = {"args": dict(url=url, token=token, ca_cert=ca_cert, insecure=insecure, config_path=config)}


def _cfg(ctx: typer.Context) -> Config:
    root = ctx.find_root()
    if "config" not in root.obj:
        root.obj["config"] = Config.load(**root.obj["args"])
    return root.obj["config"]


def _api(ctx: typer.Context) -> RestClient:
    api = RestClient(_cfg(ctx))
    ctx.find_root().call_on_close(api.close)  # close the TLS connection cleanly when the command ends
    return api


tenant.register(app, lambda ctx: _api(ctx))
tenant_resources.register(app, secrets_app, lambda ctx: _api(ctx))
usage.register(app, lambda ctx: _api(ctx))
tenant_tokens.register(app, tokens_app, lambda ctx: _api(ctx))
volumes.register(app, lambda ctx: _api(ctx))


def _fabric(ctx: typer.Context, node: str | None, socket: str | None) -> FabricClient:
    from core.fabric_client import FabricClient

    return FabricClient(fabric_socket_for(_cfg(ctx), node, socket))


# --- partitions ----------------------------------------------------------------------------------
def _partition_rows_from_socket(node: str | None, parts: list[Partition]) -> list[dict[str, Any]]:
    return [
        {
            "node": node or "local",
            "id": p["id"],
            "gpus": [g["physical_id"] for g in p["gpus"]],
            "pci": [g["pci_bus_id"] for g in p["gpus"]],
            "nvlinks": p["nvlinks"],
            "active": p["active"],
            "supported": p["supported"],
            "holder": p["holder"],
        }
        for p in parts
    ]


PARTITION_COLUMNS = [
    ("NODE", lambda r: r["node"]),
    ("PARTITION ID", lambda r: r["id"]),
    (
        "STATUS",
        lambda r: ("Active" if r["active"] else "Inactive") + ("" if r.get("supported", True) else " (unsupported)"),
    ),
    ("GPUs", lambda r: len(r["gpus"])),
    ("NVLINKS", lambda r: r["nvlinks"]),
    ("GPU PHYSICAL IDs", lambda r: r["gpus"]),
    ("HOLDER", lambda r: r.get("holder")),
]


@partitions_app.command("list")
def partitions_list(
    ctx: typer.Context, node: NodeOpt = None, fabric_socket: SocketOpt = None, output: Output = Format.table
) -> None:
    """List NVLink partitions: from the node's fabric socket when given, else the cluster's FabricState."""
    if fabric_socket or (node and node in _cfg(ctx).fabric_sockets):
        with _fabric(ctx, node, fabric_socket) as fc:
            rows = _partition_rows_from_socket(node, fc.partitions())
    else:
        rows = _api(ctx).get("/v1/admin/partitions", node=node)["data"]
    emit(rows, output, PARTITION_COLUMNS, title="NVLink partitions")


def _partition_action(
    ctx: typer.Context,
    action: str,
    partition_id: int,
    node: str | None,
    socket: str | None,
    force: bool,
    output: Format,
) -> None:
    from core.fabric_client import FabricConflict, FabricError

    with (
        err_console.status(f"{action} partition {partition_id} on {node or 'this node'}…"),
        _fabric(ctx, node, socket) as fc,
    ):
        try:
            fn = fc.activate_partition if action == "activating" else fc.deactivate_partition
            result = fn(partition_id, force=force)
        except FabricConflict as exc:
            detail = exc.detail.removesuffix(" (use force)")
            raise CaasctlError(f"refused: {detail} (use --force to override)") from exc
        except FabricError as exc:
            raise CaasctlError(str(exc)) from exc
    emit(result if isinstance(result, dict) else {"result": result}, output)


@partitions_app.command("activate")
def partitions_activate(
    ctx: typer.Context,
    partition_id: int,
    node: NodeOpt = None,
    fabric_socket: SocketOpt = None,
    force: Annotated[bool, typer.Option(help="Even if a running container holds an overlapping partition.")] = False,
    output: Output = Format.table,
) -> None:
    """Activate a partition (refused when it overlaps one a running container holds, unless --force)."""
    _partition_action(ctx, "activating", partition_id, node, fabric_socket, force, output)


@partitions_app.command("deactivate")
def partitions_deactivate(
    ctx: typer.Context,
    partition_id: int,
    node: NodeOpt = None,
    fabric_socket: SocketOpt = None,
    force: Annotated[bool, typer.Option(help="Even if a running container holds it.")] = False,
    output: Output = Format.table,
) -> None:
    """Deactivate a partition (refused while a running container holds it, unless --force)."""
    _partition_action(ctx, "deactivating", partition_id, node, fabric_socket, force, output)


# --- nodes, gpus, leases -------------------------------------------------------------------------------
@app.command("nodes")
def nodes(ctx: typer.Context, output: Output = Format.table) -> None:
    """GPU nodes: readiness, GPU capacity, fabric state, warm images held."""
    rows = _api(ctx).get("/v1/admin/nodes")["data"]
    emit(
        rows,
        output,
        [
            ("NODE", lambda r: r["name"]),
            ("READY", lambda r: r["ready"]),
            ("GPUs", lambda r: f"{r['gpu_allocatable']}/{r['gpu_capacity']}"),
            ("SERVICE VM", lambda r: (r.get("fabric") or {}).get("service_vm")),
            ("FABRIC MANAGER", lambda r: (r.get("fabric") or {}).get("fabric_manager_reachable")),
            ("ACTIVE PARTITIONS", lambda r: (r.get("fabric") or {}).get("active_partitions")),
            ("NVLINK FABRIC", lambda r: (r.get("fabric") or {}).get("nvlink_fabric")),
            ("WARM IMAGES", _warm_images_cell),
            (
                "GPU MAP (module id -> PCI)",
                lambda r: " ".join(
                    f"{k}:{v}"
                    for k, v in sorted(
                        ((r.get("fabric") or {}).get("gpu_map") or {}).items(), key=lambda kv: int(kv[0])
                    )
                ),
            ),
        ],
        title="nodes",
    )


def _warm_images_cell(row: dict[str, Any]) -> str | None:
    """``2/3 held``, then what the node still lacks; nothing on a node that is not a GPU node."""
    warm = row.get("warm_images") or []
    if not warm:
        return None
    held = sum(1 for w in warm if w["held"])
    lacking = [w["image"] for w in warm if not w["held"]]
    return f"{held}/{len(warm)} held" + (f" (lacks {', '.join(lacking)})" if lacking else "")


@gpus_app.callback()
def gpus(ctx: typer.Context, node: NodeOpt = None, output: Output = Format.table) -> None:
    """List GPUs (state, lease, tenancy, health); or quarantine/release one."""
    if ctx.invoked_subcommand is not None:
        return
    rows = _api(ctx).get("/v1/admin/gpus", node=node)["data"]
    emit(
        rows,
        output,
        [
            ("NODE", lambda r: r["node"]),
            ("PCI", lambda r: r["pci_address"]),
            ("PHYS", lambda r: r["physical_id"]),
            ("STATE", lambda r: r["state"]),
            ("TENANCY", lambda r: r.get("tenancy")),
            ("POD", lambda r: r.get("pod")),
            ("HEALTHY", lambda r: r.get("healthy")),
            ("REASON", lambda r: r.get("reason")),
        ],
        title="GPUs",
    )


@gpus_app.command("quarantine")
def gpus_quarantine(
    ctx: typer.Context,
    node: str,
    pci_address: str,
    reason: Annotated[str, typer.Option(help="Why (recorded on the lease).")] = "quarantined by an admin",
    output: Output = Format.table,
) -> None:
    """Quarantine a GPU: it is not allocated again until released."""
    emit(_api(ctx).post(f"/v1/admin/gpus/{node}/{pci_address}/quarantine", {"reason": reason}), output)


@gpus_app.command("release")
def gpus_release(
    ctx: typer.Context,
    node: str,
    pci_address: str,
    skip_check: Annotated[bool, typer.Option(help="Free it without a new firmware check.")] = False,
    output: Output = Format.table,
) -> None:
    """Clear a GPU's quarantine (it is checked again first, unless --skip-check)."""
    emit(_api(ctx).post(f"/v1/admin/gpus/{node}/{pci_address}/release", {"skip_check": skip_check}), output)


@app.command("leases")
def leases(ctx: typer.Context, node: NodeOpt = None, output: Output = Format.table) -> None:
    """GPU leases: state, holder, last firmware check."""
    rows = _api(ctx).get("/v1/admin/leases", node=node)["data"]
    emit(
        rows,
        output,
        [
            ("LEASE", lambda r: r["name"]),
            ("STATE", lambda r: r["state"]),
            ("TENANCY", lambda r: (r.get("holder") or {}).get("tenancy")),
            ("POD", lambda r: (r.get("holder") or {}).get("pod")),
            ("LAST CHECK", lambda r: (r.get("last_check") or {}).get("result")),
            ("REASON", lambda r: r.get("reason")),
        ],
        title="GPU leases",
    )


# --- warm images ---------------------------------------------------------------------------------------
WARM_IMAGE_COLUMNS = [
    ("IMAGE", lambda r: r["image"]),
    ("ID", lambda r: r["id"]),
    ("SOURCE", lambda r: r["source"]),
    ("NODES HOLDING", lambda r: f"{r['nodes_holding']}/{r['nodes_total']}"),
    ("MISSING ON", lambda r: " ".join(r.get("missing_on") or [])),
]


@warm_images_app.command("list")
def warm_images_list(ctx: typer.Context, output: Output = Format.table) -> None:
    """The warm images and how many GPU nodes hold each (the kubelets' own report)."""
    emit(_api(ctx).get("/v1/admin/warm-images")["data"], output, WARM_IMAGE_COLUMNS, title="warm images")


@warm_images_app.command("add")
def warm_images_add(
    ctx: typer.Context,
    image: Annotated[
        str, typer.Argument(help="Image reference, as tenants name it (nvcr.io/nvidia/pytorch:25.01-py3).")
    ],
    output: Output = Format.table,
) -> None:
    """Keep an image pulled on every GPU node (from a registry the nodes reach without a login,
    or one of the chart's warmImagePullSecrets)."""
    emit(_api(ctx).post("/v1/admin/warm-images", {"image": image}), output, WARM_IMAGE_COLUMNS, title="warm image")


@warm_images_app.command("remove")
def warm_images_remove(
    ctx: typer.Context,
    image: Annotated[str, typer.Argument(help="Image reference, or the id the list shows.")],
    output: Output = Format.table,
) -> None:
    """Stop keeping an image warm (nodes drop it when the kubelet's image garbage collection needs the space)."""
    from core.image_refs import warm_image_name

    ident = image if re.fullmatch(r"wi-[0-9a-f]{20}", image) else warm_image_name(image)
    _api(ctx).delete(f"/v1/admin/warm-images/{ident}")
    emit({"removed": image, "id": ident}, output)


# --- tenancies and tokens ------------------------------------------------------------------------------
TENANCY_COLUMNS = [
    ("NAME", lambda r: r["name"]),
    ("GPU QUOTA", lambda r: r["gpu_quota"]),
    ("GUARANTEED", lambda r: r.get("guaranteed_gpus")),
    ("WEIGHT", lambda r: r.get("weight")),
    ("GPUs IN USE", lambda r: r.get("active_gpus")),
    ("POD QUOTA", lambda r: r["pod_quota"]),
    ("INTERNET", lambda r: r["allow_internet"]),
    ("NFS", lambda r: f"{r['nfs']['server']}:{r['nfs']['path']}" if r.get("nfs") else None),
]


GpuQuota = Annotated[int | None, typer.Option(help="Most GPUs at once.")]
PodQuota = Annotated[int | None, typer.Option(help="Most pods at once.")]
GuaranteedGpus = Annotated[
    int | None,
    typer.Option(min=0, help="GPUs guaranteed when the fleet is contended, at most the GPU quota (queueing by Kueue)."),
]
Weight = Annotated[
    float | None,
    typer.Option(min=0.001, max=1000, help="Fair-sharing weight against the other tenancies (default 1)."),
]


@tenancies_app.command("create")
def tenancies_create(
    ctx: typer.Context,
    name: str,
    gpu_quota: GpuQuota = None,
    pod_quota: PodQuota = None,
    guaranteed_gpus: GuaranteedGpus = None,
    weight: Weight = None,
    allow_internet: Annotated[bool, typer.Option(help="Allow egress to the internet.")] = False,
    nfs_server: Annotated[str | None, typer.Option(help="NFS server for the tenancy's storage.")] = None,
    nfs_path: Annotated[str | None, typer.Option(help="Exported path on the NFS server.")] = None,
    gpu_hours_per_month: Annotated[
        float | None,
        typer.Option(
            min=0, help="Monthly GPU-hour budget (UTC calendar month); submissions are refused once it is spent."
        ),
    ] = None,
    output: Output = Format.table,
) -> None:
    """Create a tenancy."""
    if (nfs_server is None) != (nfs_path is None):
        raise CaasctlError("--nfs-server and --nfs-path go together")
    body: dict[str, Any] = {"name": name, "allow_internet": allow_internet}
    body.update(_given(gpu_quota=gpu_quota, pod_quota=pod_quota, guaranteed_gpus=guaranteed_gpus, weight=weight))
    if nfs_server:
        body["nfs"] = {"server": nfs_server, "path": nfs_path}
    if gpu_hours_per_month is not None:
        body["gpu_hours_per_month"] = gpu_hours_per_month
    emit(_api(ctx).post("/v1/admin/tenancies", body), output, TENANCY_COLUMNS)


@tenancies_app.command("update")
def tenancies_update(
    ctx: typer.Context,
    name: str,
    gpu_quota: GpuQuota = None,
    pod_quota: PodQuota = None,
    guaranteed_gpus: GuaranteedGpus = None,
    weight: Weight = None,
    output: Output = Format.table,
) -> None:
    """Change a tenancy's quotas, guarantee or weight (what is not given stays)."""
    body = _given(gpu_quota=gpu_quota, pod_quota=pod_quota, guaranteed_gpus=guaranteed_gpus, weight=weight)
    if not body:
        raise CaasctlError("nothing to change: give --gpu-quota, --pod-quota, --guaranteed-gpus or --weight")
    emit(_api(ctx).patch(f"/v1/admin/tenancies/{name}", body), output, TENANCY_COLUMNS)


def _given(**fields: Any) -> dict[str, Any]:
    """The options that were given (None: not given)."""
    return {k: v for k, v in fields.items() if v is not None}


@tenancies_app.command("list")
def tenancies_list(ctx: typer.Context, output: Output = Format.table) -> None:
    """List tenancies."""
    emit(_api(ctx).get("/v1/admin/tenancies")["data"], output, TENANCY_COLUMNS, title="tenancies")


@tenancies_app.command("describe")
def tenancies_describe(ctx: typer.Context, name: str, output: Output = Format.table) -> None:
    """Show one tenancy."""
    emit(_api(ctx).get(f"/v1/admin/tenancies/{name}"), output)


@tenancies_app.command("delete")
def tenancies_delete(
    ctx: typer.Context,
    name: str,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    output: Output = Format.table,
) -> None:
    """Delete a tenancy (its namespace and everything in it go too)."""
    if not yes and sys.stdin.isatty() and not typer.confirm(f"delete tenancy {name} and all its containers?"):
        raise typer.Exit(1)
    result = _api(ctx).delete(f"/v1/admin/tenancies/{name}")
    emit(result if isinstance(result, dict) else {"deleted": name}, output)


@tokens_app.command("issue")
def tokens_issue(
    ctx: typer.Context,
    tenancy: str,
    name: Annotated[str | None, typer.Option(help="A label for the token.")] = None,
    scope: Annotated[str | None, typer.Option(help="read, submit or admin (default admin).")] = None,
    expires_at: Annotated[str | None, typer.Option(help="Expiry, UTC ISO 8601 (e.g. 2027-01-01T00:00:00Z).")] = None,
    output: Output = Format.table,
) -> None:
    """Issue a token for a tenancy (shown once)."""
    body = {k: v for k, v in (("name", name), ("scope", scope), ("expires_at", expires_at)) if v is not None}
    emit(_api(ctx).post(f"/v1/admin/tenancies/{tenancy}/tokens", body), output)


@tokens_app.command("list")
def tokens_list(
    ctx: typer.Context,
    tenancy: Annotated[str | None, typer.Argument(help="With an admin token: whose.")] = None,
    output: Output = Format.table,
) -> None:
    """List your tenancy's tokens (an admin: a tenancy's) with scope, expiry, last use; never a secret."""
    tenant_tokens.list_tokens(_api(ctx), tenancy, output)


@tokens_app.command("revoke")
def tokens_revoke(
    ctx: typer.Context,
    ids: Annotated[
        list[str], typer.Argument(help="ID (yours), or TENANCY ID with an admin token.", metavar="[TENANCY] ID")
    ],
    output: Output = Format.table,
) -> None:
    """Revoke a token: its next request, on any API replica, is refused."""
    tenant_tokens.revoke_token(_api(ctx), ids, output)


# --- containers ----------------------------------------------------------------------------------------
CONTAINER_COLUMNS = [
    ("ID", lambda r: r["id"]),
    ("TENANCY", lambda r: r["tenancy"]),
    ("IMAGE", lambda r: r["image"]),
    ("GPUs", lambda r: r["gpus"]),
    ("STATUS", lambda r: r["status"]),
    ("EXIT", lambda r: r.get("exit_code")),
    ("NODE", lambda r: r.get("node_name")),
    ("CREATED", lambda r: r.get("created_at")),
]


@containers_app.command("list")
def containers_list(
    ctx: typer.Context,
    tenancy: Annotated[str | None, typer.Option(help="Only this tenancy.")] = None,
    status: Annotated[str | None, typer.Option(help="Only this status.")] = None,
    output: Output = Format.table,
) -> None:
    """List containers of every tenancy."""
    emit(
        _api(ctx).get_all("/v1/admin/containers", tenancy=tenancy, status=status),
        output,
        CONTAINER_COLUMNS,
        title="containers",
    )


@containers_app.command("describe")
def containers_describe(ctx: typer.Context, container_id: str, output: Output = Format.table) -> None:
    """Show one container."""
    emit(_api(ctx).get(f"/v1/containers/{container_id}"), output)


@containers_app.command("logs")
def containers_logs(
    ctx: typer.Context,
    container_id: str,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Stream until the container ends.")] = False,
    attempt: Annotated[int | None, typer.Option(min=1, help=ATTEMPT_HELP)] = None,
) -> None:
    """Print a container's logs."""
    for line in _api(ctx).log_lines(container_id, follow=follow, attempt=attempt):
        typer.echo(line)


@containers_app.command("events")
def containers_events(ctx: typer.Context, container_id: str, output: Output = Format.table) -> None:
    """A container's timeline: queued, scheduled (or why not), GPUs allocated, pulling, running, finished."""
    emit(
        _api(ctx).get(f"/v1/containers/{container_id}/events")["data"],
        output,
        [
            ("TIME", lambda r: r["time"]),
            ("KIND", lambda r: r["kind"]),
            ("MESSAGE", lambda r: r["message"]),
            ("SOURCE", lambda r: r["source"]),
        ],
    )


@secrets_app.command("list")
def secrets_list(
    ctx: typer.Context,
    tenancy: Annotated[str | None, typer.Argument(help="With an admin token: whose.")] = None,
    output: Output = Format.table,
) -> None:
    """List your secrets (an admin: a tenancy's) by name."""
    emit(
        _api(ctx).get("/v1/secrets", tenancy=tenancy)["data"],
        output,
        [("NAME", lambda r: r["name"]), ("CREATED", lambda r: r.get("created_at"))],
    )


@secrets_app.command("delete")
def secrets_delete(
    ctx: typer.Context,
    names: Annotated[
        list[str], typer.Argument(help="NAME (yours), or TENANCY NAME with an admin token.", metavar="[TENANCY] NAME")
    ],
    output: Output = Format.table,
) -> None:
    """Delete a secret (containers referencing it can no longer start)."""
    if len(names) > 2:
        raise typer.BadParameter("expected NAME, or TENANCY NAME", param_hint="[TENANCY] NAME")
    tenancy, name = (names[0], names[1]) if len(names) == 2 else (None, names[0])
    _api(ctx).delete(f"/v1/secrets/{name}" + (f"?tenancy={tenancy}" if tenancy else ""))
    emit({"deleted": name, "tenancy": tenancy} if tenancy else {"deleted": name}, output)


@registry_app.command("list")
def registry_list(ctx: typer.Context, tenancy: str, output: Output = Format.table) -> None:
    """List a tenancy's registry credentials (server and username)."""
    emit(
        _api(ctx).get("/v1/registry-credentials", tenancy=tenancy)["data"],
        output,
        [
            ("SERVER", lambda r: r["server"]),
            ("USERNAME", lambda r: r["username"]),
            ("CREATED", lambda r: r.get("created_at")),
        ],
    )


@registry_app.command("delete")
def registry_delete(ctx: typer.Context, tenancy: str, server: str, output: Output = Format.table) -> None:
    """Forget a tenancy's credential for one registry server."""
    _api(ctx).delete(f"/v1/registry-credentials/{server}?tenancy={tenancy}")
    emit({"deleted": server, "tenancy": tenancy}, output)


@containers_app.command("cancel")
def containers_cancel(
    ctx: typer.Context,
    container_id: str,
    wait: Annotated[bool, typer.Option(help="Wait until the container is Cancelled.")] = True,
    output: Output = Format.table,
) -> None:
    """Cancel a container: its pod is deleted and its GPUs released."""
    api = _api(ctx)
    result = api.delete(f"/v1/containers/{container_id}")
    if wait:
        with err_console.status(f"cancelling {container_id}…"):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                result = api.get(f"/v1/containers/{container_id}")
                if result["status"] in ("Cancelled", "Succeeded", "Failed"):
                    break
                time.sleep(0.5)
    emit(result, output)


def run() -> None:
    """Entry point with caasctl's exit codes: usage errors exit 2 (click), our errors 1 with one line."""
    try:
        app()
    except CaasctlError as exc:
        sys.stderr.write(f"error: {one_line(exc)}\n")
        sys.exit(1)
