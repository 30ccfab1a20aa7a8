"""Pure builders of the Kubernetes objects the API creates, and the pod → status mapping.

``build_pod`` and ``build_tenancy`` take typed inputs and return wire-format dicts
(tested by equality); ``pod_name`` derives the pod's name from the container id so
that a retried or restarted submission can never create a second pod;
``container_status_from_pod`` reads a pod (as a wire dict) back into the fields
the API reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from core import crds, dra, kueue
from services.api.domain import reasons, sizing, tenant_secrets, volumes as tenant_volumes

POD_NAME_PREFIX = "gpucaas-"
CONTAINER_NAME = "main"
NFS_VOLUME = "tenant-storage"
NFS_CLAIM = "tenant-storage"
NFS_MOUNT_PATH = "/data"
SHM_VOLUME = "dshm"
MANAGED_BY = "gpucaas-api"
#: The label of a container's pod giving the run it is (``restart_on_preemption``: the run after
#: n preemptions is run n); absent on the first run's pods, run 0.
RUN_LABEL = "gpucaas.dev/run"
#: Seconds between SIGTERM and SIGKILL when a container is stopped before its end: cancelled,
#: preempted by the queue, its node drained (the pod's ``terminationGracePeriodSeconds``).
STOP_GRACE_SECONDS = 30
#: UID (and GID) tenant containers run as inside their Kata VM by default: Pod Security
#: ``restricted`` requires a non-root user (see docs/pod-security.md).
DEFAULT_RUN_AS_USER = 1000


#: how many times a container's pod is made again after its node refused it at admission
#: (``UnexpectedAdmissionError``, ``OutOf<resource>``: no container of it ever started)
ADMISSION_RETRIES = 3
#: the kubelet's reasons for refusing a pod at admission (pkg/kubelet/lifecycle's predicate
#: results): the pod never started, so making another cannot run the container twice
_ADMISSION_REFUSALS = ("UnexpectedAdmissionError",)
_ADMISSION_REFUSAL_PREFIX = "OutOf"
#: the device manager's words when it admits a pod again, after a kubelet restart, whose devices
#: it had allocated before (its checkpoint holds them) and finds unhealthy now: that pod was
#: admitted once already, and its container may have run under the kubelet that died, which
#: reported nothing of it. Another pod could run the container twice.
_READMITTED = "previously allocated devices"


def pod_name(container_id: str, attempt: int = 0) -> str:
    """The pod name of a container's attempt: one name per attempt, the first ``gpucaas-<id>``;
    a later attempt exists only after the node refused the one before at admission."""
    return f"{POD_NAME_PREFIX}{container_id}" + (f"-r{attempt}" if attempt else "")


def attempt_of(name: str, container_id: str) -> int:
    """Which attempt ``name`` is (0 for the first pod; -1 for a name not of this container)."""
    first = pod_name(container_id)
    if name == first:
        return 0
    rest = name.removeprefix(first + "-r")
    return int(rest) if rest != name and rest.isdigit() else -1


def run_of(pod: Mapping[str, Any]) -> int:
    """The run a container's pod is (its ``gpucaas.dev/run`` label; 0 when absent or unreadable)."""
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(RUN_LABEL, "0")
    return int(value) if isinstance(value, str) and value.isdigit() else 0


def refused_at_admission(pod: Mapping[str, Any]) -> str | None:
    """The kubelet's message when it refused the pod at admission before any of its containers
    started (None otherwise): the pod failed without running, and another may be made.

    Not a refusal on a kubelet's second admission of a pod it had admitted before it restarted
    (:data:`_READMITTED`): the pod's failure then fails the container, which may have run."""
    status = pod.get("status") or {}
    reason = status.get("reason") or ""
    if status.get("phase") != "Failed" or not (
        reason in _ADMISSION_REFUSALS or reason.startswith(_ADMISSION_REFUSAL_PREFIX)
    ):
        return None
    if _READMITTED in str(status.get("message") or ""):
        return None
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if state.get("running") or (state.get("terminated") or {}).get("startedAt"):
            return None
    return f"{reason}: {status.get('message') or ''}".strip()


#: the kubelet's waiting reason for a container whose start a device plugin refused
#: (pkg/kubelet/kuberuntime: a PreStartContainer error is a CreateContainerConfigError)
_CONFIG_ERROR = "CreateContainerConfigError"
#: what the kubelet's message then carries for a GPU that waiting will not make well (the
#: gpucaas device plugin answers FailedPrecondition for a GPU quarantined or gone after the pod
#: was admitted; Unavailable for one only being released, which the kubelet's retries outlast)
_PRE_START_REFUSED = ("PreStartContainer", "code = FailedPrecondition")


def refused_before_start(pod: Mapping[str, Any]) -> str | None:
    """The kubelet's message when the device plugin refused to start the pod's container on a GPU
    unhealthy for good (None otherwise). The kubelet retries such a start for ever and the pod
    stays Pending; its container never ran, so another pod may be made."""
    status = pod.get("status") or {}
    if status.get("phase") != "Pending":
        return None
    for cs in status.get("containerStatuses") or []:
        if cs.get("restartCount") or (cs.get("lastState") or {}).get("terminated"):
            return None
        waiting = (cs.get("state") or {}).get("waiting") or {}
        message = str(waiting.get("message") or "")
        if waiting.get("reason") == _CONFIG_ERROR and all(word in message for word in _PRE_START_REFUSED):
            return f"{_CONFIG_ERROR}: {message}"
    return None


def bound_before_start_with_claims(pod: Mapping[str, Any]) -> list[str]:
    """The names of the pod's ResourceClaims when it is bound to a node, Pending and none of its
    containers has started (else []): the moment the kubelet prepares its claims. A pod being
    deleted is not (the resourceclaim controller may take back its reservation first)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if not spec.get("nodeName") or status.get("phase") != "Pending":
        return []
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return []
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if state.get("running") or state.get("terminated") or cs.get("restartCount"):
            return []
    return [
        str(c["resourceClaimName"]) for c in status.get("resourceClaimStatuses") or [] if c.get("resourceClaimName")
    ]


def claim_not_reserved(pod: Mapping[str, Any], claim: Mapping[str, Any]) -> str | None:
    """Why the pod's node will never start it, when its claim does not name it in
    ``status.reservedFor`` (None otherwise). kube-scheduler reserves a claim for the pod before it
    binds the pod, and nothing reserves it after: the kubelet refuses such a pod at every sync
    ("not allowed to use ResourceClaim"), and the pod stays Pending for ever. Seen when the
    binding and its undoing failed on a kube-apiserver restart and a later cycle bound the pod."""
    uid = (pod.get("metadata") or {}).get("uid")
    if not uid or any(r.get("uid") == uid for r in (claim.get("status") or {}).get("reservedFor") or []):
        return None
    name = (claim.get("metadata") or {}).get("name")
    return f"ClaimNotReserved: ResourceClaim {name} is not reserved for the pod bound to {pod['spec']['nodeName']}"


def build_tenancy(
    *,
    name: str,
    gpu_quota: int,
    pod_quota: int,
    guaranteed_gpus: int = 0,
    weight: float = 1.0,
    allow_internet: bool = False,
    nfs: Mapping[str, Any] | None = None,
    share: sizing.Share | None = None,
    volumes: tenant_volumes.Quota | None = None,
    revision: int | None = None,
) -> dict[str, Any]:
    """The Tenancy custom resource for a tenancy's database record (``nfs`` in API snake_case).

    ``revision`` (the record's) goes into the ``gpucaas.dev/revision`` annotation, which orders
    the pushes of concurrent writers: a resource never goes back to an older revision.

    ``guaranteed_gpus`` and ``weight`` are its guarantee and fair-sharing weight, which the
    tenancy controller makes its ClusterQueue's with queueing by Kueue (docs/queues.md).

    With ``volumes`` (the operator's volume allowance) ``spec.volumes`` carries the storage
    class, storage quota and volume count the tenancy controller writes into the ResourceQuota.

    With ``share`` (the per-GPU sizing), the CPU and memory quotas are the GPU quota's worth
    of shares plus the Kata overhead (``sizing.tenancy_quota``)."""
    spec: dict[str, Any] = {
        "gpuQuota": gpu_quota,
        "podQuota": pod_quota,
        "guaranteedGpus": guaranteed_gpus,
        "weight": weight,
        "network": {"allowInternet": allow_internet},
    }
    if share is not None:
        quota = sizing.tenancy_quota(share, gpu_quota)
        spec["cpuQuota"] = sizing.format_cpu(quota["cpu_milli"])
        spec["memoryQuota"] = sizing.format_bytes(quota["memory_bytes"])
    if volumes is not None:
        spec["volumes"] = volumes.spec()
    if nfs:
        spec["nfs"] = {
            "server": nfs["server"],
            "path": nfs["path"],
            "readOnly": bool(nfs.get("read_only", False)),
            "capacity": nfs.get("capacity") or "1Ti",
        }
    metadata: dict[str, Any] = {"name": name, "labels": {crds.LABEL_MANAGED_BY: MANAGED_BY}}
    if revision is not None:
        metadata["annotations"] = {crds.ANNOTATION_TENANCY_REVISION: str(revision)}
    return {"apiVersion": crds.API_VERSION, "kind": "Tenancy", "metadata": metadata, "spec": spec}


def _env_var(name: str, value: str | Mapping[str, str]) -> dict[str, Any]:
    """A plain value, or ``{"secret": n}``: the value of the tenant secret ``n`` (EnvVarSource.secretKeyRef)."""
    if isinstance(value, str):
        return {"name": name, "value": value}
    ref = {"name": tenant_secrets.secret_object_name(value["secret"]), "key": tenant_secrets.SECRET_KEY}
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def build_pod(
    *,
    container_id: str,
    tenancy: str,
    image: str,
    gpus: int,
    command: Sequence[str] | None = None,
    args: Sequence[str] | None = None,
    env: Mapping[str, str | Mapping[str, str]] | None = None,
    timeout_seconds: int | None = None,
    nfs: Mapping[str, Any] | None = None,
    gpu_resource: str = "nvidia.com/gpu",
    runtime_class: str = "kata-qemu-nvidia-gpu",
    run_as_user: int = DEFAULT_RUN_AS_USER,
    image_pull_secrets: Sequence[str] = (),
    size: sizing.Size | None = None,
    allocation_mode: dra.AllocationMode = dra.DEVICE_PLUGIN_MODE,
    volumes: Sequence[Mapping[str, Any]] = (),
    name: str | None = None,
    queue: str | None = None,
    interruptible: bool = False,
    run: int = 0,
    finalizer: bool = True,
) -> dict[str, Any]:
    """The tenant pod: a Kata micro-VM with ``gpus`` passthrough GPUs and no host access.

    ``finalizer``: the pod carries ``gpucaas.dev/usage``, which the API's worker takes off once
    the pod is deleted and says no more (``deletionGracePeriodSeconds`` 0), after recording its
    last state: a pod that ends and goes while the API's watch is down is still seen at its end,
    as the Job controller's ``batch.kubernetes.io/job-tracking`` does for its pods. A client
    that deletes its own pods and runs no worker (the kwok fleet benchmark) leaves it out.

    ``queue`` (queueing by Kueue) names the tenancy's LocalQueue in the label
    ``kueue.x-k8s.io/queue-name``: Kueue's pod webhook then gates the pod until its tenancy's
    ClusterQueue admits it, and it stays Pending meanwhile (docs/queues.md). With a queue the pod
    also names its class's WorkloadPriorityClass (``kueue.x-k8s.io/priority-class``:
    ``gpucaas-interruptible`` when ``interruptible``, else ``gpucaas-standard``): Kueue preempts
    the lower first. ``run``: which run of the container this pod is (after ``run`` preemptions),
    in the label ``gpucaas.dev/run`` from the second on.

    The GPUs: the extended resource ``gpu_resource`` (``allocation_mode`` device-plugin), or
    (dra) a ResourceClaim that Kubernetes creates for the pod from the tenant namespace's
    template ``gpucaas-gpus-<gpus>`` (the tenancy controller keeps it there) and that the
    container uses by name (Kubernetes docs, "Dynamic Resource Allocation": ``spec.resourceClaims``
    with ``resourceClaimTemplateName``, ``resources.claims`` in the container). A dra pod with a
    ``queue`` requests ``gpu_resource`` too, beside its claim: Kueue counts a pod's GPUs from its
    containers' requests (it would count a claim's devices, one per NVLink partition), and the DRA
    driver advertises each node's GPU count under that name (docs/queues.md, "The DRA mode").

    ``nfs`` is the Tenancy's ``spec.nfs`` (camelCase, as on the custom resource); when
    set, the tenancy's PVC ``tenant-storage`` is mounted at ``/data``. ``volumes`` are the
    container's tenant volumes (``{"name", "mount_path", "read_only"}``): each one's claim
    (``services.api.domain.volumes``) is mounted at its path; the pod's ``fsGroup`` is then the
    tenant's GID, so a driver that manages ownership (NFS CSI with ``fsGroupPolicy: File``)
    gives the non-root user its files.

    The pod passes Pod Security ``restricted`` (no privilege escalation, every
    capability dropped, seccomp RuntimeDefault, a non-root UID/GID ``run_as_user``,
    only a PVC volume). ``run_as_user=0`` keeps the image's own user (root inside
    the VM): such a pod passes ``baseline`` only. docs/pod-security.md says why.
    """
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        # Always: the kubelet checks the tenant's right to pull on every start, so another
        # tenant's private image cached on the node is never run (docs/abuse-and-limits.md).
        "imagePullPolicy": "Always",
        "resources": _resources(
            gpu_resource if allocation_mode == dra.DEVICE_PLUGIN_MODE or queue else None, gpus, size
        ),
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if command:
        container["command"] = list(command)
    if args:
        container["args"] = list(args)
    if env:
        container["env"] = [_env_var(k, v) for k, v in env.items()]
    spec: dict[str, Any] = {
        "runtimeClassName": runtime_class,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": STOP_GRACE_SECONDS,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "securityContext": _pod_security_context(run_as_user),
        "containers": [container],
    }
    if allocation_mode == dra.DRA_MODE:
        spec["resourceClaims"] = [
            {"name": dra.POD_CLAIM_NAME, "resourceClaimTemplateName": dra.claim_template_name(gpus)}
        ]
        container["resources"]["claims"] = [{"name": dra.POD_CLAIM_NAME}]
    if image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in image_pull_secrets]
    if timeout_seconds:
        spec["activeDeadlineSeconds"] = timeout_seconds
    pod_volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if nfs:
        read_only = bool(nfs.get("readOnly", False))
        pod_volumes.append(
            {"name": NFS_VOLUME, "persistentVolumeClaim": {"claimName": NFS_CLAIM, "readOnly": read_only}}
        )
        mounts.append({"name": NFS_VOLUME, "mountPath": NFS_MOUNT_PATH, "readOnly": read_only})
    for index, mount in enumerate(volumes):
        volume_name = f"volume-{index}"
        read_only = bool(mount.get("read_only", False))
        pod_volumes.append(
            {
                "name": volume_name,
                "persistentVolumeClaim": {"claimName": tenant_volumes.pvc_name(mount["name"]), "readOnly": read_only},
            }
        )
        mounts.append({"name": volume_name, "mountPath": mount["mount_path"], "readOnly": read_only})
    if volumes and run_as_user:
        spec["securityContext"]["fsGroup"] = run_as_user
    if size is not None and size.shm_bytes:
        # a tmpfs in the guest; the container's default /dev/shm (64 MiB) breaks PyTorch data loaders
        pod_volumes.append(
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": sizing.format_bytes(size.shm_bytes)}}
        )
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    if pod_volumes:
        spec["volumes"] = pod_volumes
        container["volumeMounts"] = mounts
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name or pod_name(container_id),
            "namespace": crds.tenant_namespace(tenancy),
            "labels": {
                crds.LABEL_CONTAINER: container_id,
                crds.LABEL_TENANCY: tenancy,
                crds.LABEL_MANAGED_BY: MANAGED_BY,
                **(
                    {
                        kueue.QUEUE_LABEL: queue,
                        kueue.PRIORITY_CLASS_LABEL: kueue.priority_class(interruptible=interruptible),
                    }
                    if queue
                    else {}
                ),
                **({RUN_LABEL: str(run)} if run else {}),
            },
            **({"finalizers": [crds.FINALIZER_POD_USAGE]} if finalizer else {}),
        },
        "spec": spec,
    }


def _resources(gpu_resource: str | None, gpus: int, size: sizing.Size | None) -> dict[str, Any]:
    if size is not None:
        return size.resources(gpu_resource, gpus)
    return {"limits": {gpu_resource: str(gpus)}} if gpu_resource else {}


def _gpus_of(spec: Mapping[str, Any], container: Mapping[str, Any], gpu_resource: str) -> int | None:
    """The GPU count a pod asks for: its extended-resource limit, else its DRA claim's template."""
    limit = ((container.get("resources") or {}).get("limits") or {}).get(gpu_resource)
    if limit is not None:
        return int(limit)
    used = {c.get("name") for c in (container.get("resources") or {}).get("claims") or []}
    for claim in spec.get("resourceClaims") or []:
        if claim.get("name") in used:
            gpus = dra.gpus_of_claim_template(claim.get("resourceClaimTemplateName"))
            if gpus is not None:
                return gpus
    return None


def _pod_security_context(run_as_user: int) -> dict[str, Any]:
    context: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if run_as_user:
        context.update(runAsNonRoot=True, runAsUser=run_as_user, runAsGroup=run_as_user)
    return context


@dataclass(frozen=True)
class PodReport:
    """What a pod says about its container, in the API's terms."""

    status: str  # a ContainerStatus value
    node_name: str | None
    gpus: int | None
    message: str | None
    started_at: datetime | None
    finished_at: datetime | None
    exit_code: int | None = None
    #: ``Preempted`` when the queue stopped it to give its GPUs to other work (reasons.PREEMPTED)
    reason: str | None = None


def _time(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        dt = value
    else:
        dt = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def container_status_from_pod(pod: Mapping[str, Any], gpu_resource: str = "nvidia.com/gpu") -> PodReport:
    """Map a pod (wire dict) to the container's status, node, GPU count, message and times."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase not in ("Pending", "Running", "Succeeded", "Failed"):
        phase = "Pending"  # Unknown: the node lost contact; report it as not running
    gpus = None
    for c in spec.get("containers") or []:
        if c.get("name") == CONTAINER_NAME:
            gpus = _gpus_of(spec, c, gpu_resource)
    image = ""
    for c in spec.get("containers") or []:
        if c.get("name") == CONTAINER_NAME:
            image = c.get("image") or ""
    outcome = reasons.explain(pod, container=CONTAINER_NAME, image=image, timeout=spec.get("activeDeadlineSeconds"))
    finished = started = None
    for cs in status.get("containerStatuses") or []:
        if cs.get("name", CONTAINER_NAME) != CONTAINER_NAME:
            continue
        state = cs.get("state") or {}
        terminated, running = state.get("terminated"), state.get("running")
        if terminated:
            finished = _time(terminated.get("finishedAt"))
            started = _time(terminated.get("startedAt"))
        elif running:
            started = _time(running.get("startedAt"))
    if started is None and phase in ("Running", "Succeeded"):
        # no container state reported (yet): the pod's own start stands in. A pod that
        # failed or still waits without its container's start never ran it (an image that
        # never pulled, a deadline passed while pulling, a refused admission): no start.
        started = _time(status.get("startTime"))
    preempted = reasons.preempted_by_queue(pod)
    if preempted and phase == "Succeeded":
        # a program that saves its state and exits 0 on SIGTERM still did not finish its work:
        # a preempted run ends Failed (reason Preempted, its exit code as it was), never Succeeded
        phase = "Failed"
    return PodReport(
        status=phase,
        node_name=spec.get("nodeName"),
        gpus=gpus,
        message=outcome.message,
        started_at=started,
        finished_at=finished,
        exit_code=outcome.exit_code,
        reason=reasons.PREEMPTED if preempted else None,
    )
