"""The submission worker against the local cluster's kube-apiserver, over HTTPS, on both databases:
Tenancy upsert and wait for Ready, the pod's fields, phases flowing back, cancel, logs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from devtools.waiting import wait_for
from tests.api.conftest import new_tenancy
from tests.api.harness import ApiServer
from tests.api.kube_helpers import bind_pod, get_pod, mark_tenancy_ready, set_pod_status

SEED = {"container-url": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubi8", "tenancy": "landon"}


@pytest.fixture
def api(kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str) -> ApiServer:
    return serve(database_url, kubeconfig)


def status_of(client: httpx.Client, cid: str) -> dict[str, Any]:
    r = client.get(f"/v1/containers/{cid}")
    assert r.status_code == 200, r.text
    return r.json()


def test_seed_payload_becomes_a_kata_pod_once_the_tenancy_is_ready(api: ApiServer, k8s: Any) -> None:
    with api.client() as admin:
        r = admin.post(
            "/v1/admin/tenancies",
            json={"name": "landon", "gpu_quota": 16, "nfs": {"server": "10.0.0.5", "path": "/export/landon"}},
        )
        assert r.status_code == 201, r.text
        token = admin.post("/v1/admin/tenancies/landon/tokens").json()["token"]
    with api.client(token) as landon:
        cid = landon.post("/v1/containers", json=SEED).json()["id"]
        # no controller yet: the Tenancy exists (upserted from the DB record) but is not Ready
        waiting = wait_for(
            lambda: (s := status_of(landon, cid))["message"] and "waiting for tenancy" in s["message"] and s
        )
        assert waiting["status"] == "Queued"
        tenancy = mark_tenancy_ready(k8s, "landon")
        assert tenancy["spec"]["gpuQuota"] == 16 and tenancy["spec"]["podQuota"] == 50
        assert tenancy["spec"]["nfs"]["server"] == "10.0.0.5"
        pod = wait_for(lambda: get_pod(k8s, "tenant-landon", f"gpucaas-{cid}"))
        assert wait_for(lambda: status_of(landon, cid)["status"] == "Pending")
    spec, main = pod["spec"], pod["spec"]["containers"][0]
    assert pod["metadata"]["labels"]["gpucaas.dev/container-id"] == cid
    assert pod["metadata"]["labels"]["gpucaas.dev/tenancy"] == "landon"
    assert spec["runtimeClassName"] == "kata-qemu-nvidia-gpu"
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
    assert main["image"] == SEED["container-url"]
    # one GPU's share of an HGX H100 node, memory backed by 1 GiB hugepages (the defaults)
    assert main["resources"]["limits"] == {
        "nvidia.com/gpu": "1",
        "cpu": "24",
        "memory": "224Gi",
        "hugepages-1Gi": "224Gi",
    }
    # the API server fills in the extended resource's request from its limit
    assert main["resources"]["requests"] == {
        "cpu": "24",
        "memory": "1Gi",
        "hugepages-1Gi": "224Gi",
        "nvidia.com/gpu": "1",
    }
    assert main["securityContext"]["privileged"] is False
    assert main["securityContext"]["allowPrivilegeEscalation"] is False
    assert all("hostPath" not in v for v in spec.get("volumes", []))
    # (the API server leaves out readOnly: false, a zero value of the built-in types)
    assert spec["volumes"] == [
        {"name": "tenant-storage", "persistentVolumeClaim": {"claimName": "tenant-storage"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}},
    ]
    assert main["volumeMounts"] == [
        {"name": "tenant-storage", "mountPath": "/data"},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    assert "activeDeadlineSeconds" not in spec


def test_never_before_seen_tenancy_flow(api: ApiServer, k8s: Any) -> None:
    """The seed's flow: a submission for a tenancy nobody prepared creates it on the fly."""
    with api.client() as admin:
        cid = admin.post("/v1/containers", json={**SEED, "tenancy": "newcomer"}).json()["id"]
        tenancy = mark_tenancy_ready(k8s, "newcomer")  # the Tenancy was upserted by the worker
        assert tenancy["spec"]["gpuQuota"] == 8 and "nfs" not in tenancy["spec"]
        assert wait_for(lambda: get_pod(k8s, "tenant-newcomer", f"gpucaas-{cid}"))
        assert wait_for(lambda: status_of(admin, cid)["status"] == "Pending")


def test_pod_options_and_phases_flow_back(api: ApiServer, k8s: Any) -> None:
    with api.client() as admin:
        token = new_tenancy(admin, "flow")
    mark_tenancy_ready(k8s, "flow")
    with api.client(token) as c:
        cid = c.post(
            "/v1/containers",
            json={
                "image": "ghcr.io/acme/train:v1",
                "gpus": 4,
                "command": ["python"],
                "args": ["train.py"],
                "env": {"EPOCHS": "3"},
                "timeout_seconds": 600,
            },
        ).json()["id"]
        name = f"gpucaas-{cid}"
        pod = wait_for(lambda: get_pod(k8s, "tenant-flow", name))
        assert pod["spec"]["activeDeadlineSeconds"] == 600
        main = pod["spec"]["containers"][0]
        assert (main["command"], main["args"], main["env"]) == (
            ["python"],
            ["train.py"],
            [{"name": "EPOCHS", "value": "3"}],
        )
        assert main["resources"]["limits"] == {
            "nvidia.com/gpu": "4",
            "cpu": "96",
            "memory": "896Gi",
            "hugepages-1Gi": "896Gi",
        }
        assert [v["name"] for v in pod["spec"]["volumes"]] == ["dshm"]  # no NFS on this tenancy

        bind_pod(k8s, "tenant-flow", name, "gpu-node-7")
        set_pod_status(k8s, "tenant-flow", name, {"phase": "Running", "startTime": "2026-01-02T03:04:05Z"})
        running = wait_for(lambda: (s := status_of(c, cid))["status"] == "Running" and s)
        assert running["node_name"] == "gpu-node-7" and running["gpus"] == 4
        assert running["started_at"] == "2026-01-02T03:04:05Z"

        set_pod_status(
            k8s,
            "tenant-flow",
            name,
            {
                "phase": "Succeeded",
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": False,
                        "restartCount": 0,
                        "image": "x",
                        "imageID": "",
                        "state": {
                            "terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": "2026-01-02T04:00:00Z"}
                        },
                    }
                ],
            },
        )
        done = wait_for(lambda: (s := status_of(c, cid))["status"] == "Succeeded" and s)
        assert done["finished_at"] == "2026-01-02T04:00:00Z"
        assert done["message"] == "Completed: finished with exit code 0" and done["exit_code"] == 0
        # a finished container frees its GPUs, and cannot be cancelled
        assert c.delete(f"/v1/containers/{cid}").status_code == 409


def test_failed_pod_and_vanished_pod(api: ApiServer, k8s: Any) -> None:
    with api.client() as admin:
        token = new_tenancy(admin, "fails")
    mark_tenancy_ready(k8s, "fails")
    with api.client(token) as c:
        a = c.post("/v1/containers", json={"image": "ubuntu"}).json()["id"]
        b = c.post("/v1/containers", json={"image": "ubuntu"}).json()["id"]
        wait_for(lambda: get_pod(k8s, "tenant-fails", f"gpucaas-{b}"))
        set_pod_status(
            k8s,
            "tenant-fails",
            f"gpucaas-{a}",
            {"phase": "Failed", "reason": "DeadlineExceeded", "message": "Pod was active too long"},
        )
        failed = wait_for(lambda: (s := status_of(c, a))["status"] == "Failed" and s)
        assert failed["message"] == "timeout_seconds exceeded: the container was stopped"
        from kubernetes import client as kc

        kc.CoreV1Api(k8s).delete_namespaced_pod(f"gpucaas-{b}", "tenant-fails")
        gone = wait_for(lambda: (s := status_of(c, b))["status"] == "Failed" and s)
        assert gone["message"] == "pod deleted"


def test_a_pod_its_node_refused_at_admission_is_made_again_a_bounded_number_of_times(api: ApiServer, k8s: Any) -> None:
    """The kubelet refuses a pod it cannot admit (its device plugin restarting: "no healthy
    devices present", UnexpectedAdmissionError) and never retries it; the pod never started, so
    the worker makes another, under the next attempt's name, three times at most."""
    from services.api.domain import pods

    with api.client() as admin:
        token = new_tenancy(admin, "refused")
    mark_tenancy_ready(k8s, "refused")
    refusal = {
        "phase": "Failed",
        "reason": "UnexpectedAdmissionError",
        "message": "Pod was rejected: Allocate failed due to no healthy devices present",
    }
    with api.client(token) as c:
        cid = c.post("/v1/containers", json={"image": "ubuntu", "gpus": 2}).json()["id"]
        for attempt in range(pods.ADMISSION_RETRIES + 1):
            name = pods.pod_name(cid, attempt)
            assert name == (f"gpucaas-{cid}" if attempt == 0 else f"gpucaas-{cid}-r{attempt}")
            wait_for(lambda name=name: get_pod(k8s, "tenant-refused", name), what=name)
            wait_for(
                lambda name=name: status_of(c, cid)["pod_name"] == name and status_of(c, cid)["status"] == "Pending"
            )
            bind_pod(k8s, "tenant-refused", name, "gpu-node-3")
            set_pod_status(k8s, "tenant-refused", name, refusal)
            if attempt < pods.ADMISSION_RETRIES:
                again = wait_for(
                    lambda attempt=attempt: (
                        (s := status_of(c, cid))["pod_name"] == pods.pod_name(cid, attempt + 1) and s
                    )
                )
                assert again["status"] in ("Queued", "Pending") and again["exit_code"] is None
                assert wait_for(lambda name=name: get_pod(k8s, "tenant-refused", name) is None, what=f"{name} deleted")
        failed = wait_for(lambda: (s := status_of(c, cid))["status"] == "Failed" and s)
        assert "no healthy devices present" in failed["message"], failed
    assert pods.attempt_of(f"gpucaas-{cid}-r2", cid) == 2 and pods.attempt_of(f"gpucaas-{cid}", cid) == 0
    assert pods.attempt_of("gpucaas-other", cid) == -1


def test_a_pod_a_restarted_kubelet_admits_again_and_refuses_fails_its_container(api: ApiServer, k8s: Any) -> None:
    """A kubelet that restarts admits its pods again. One whose GPUs it had allocated before the
    restart, and finds unhealthy now (its device plugin not back yet), it refuses with
    "previously allocated devices": that pod may have run under the kubelet that died (seen in
    the chaos soak: a 2-second container ran while kube-apiserver was down, and no status of it
    reached the API server before the refusal). Another pod could run it twice, so none is
    made: the container fails with the kubelet's message."""
    from services.api.domain import pods

    with api.client() as admin:
        token = new_tenancy(admin, "readmitted")
    mark_tenancy_ready(k8s, "readmitted")
    refusal = {
        "phase": "Failed",
        "reason": "UnexpectedAdmissionError",
        "message": "Pod was rejected: Allocate failed due to previously allocated devices are no longer healthy; "
        "cannot allocate unhealthy devices nvidia.com/gpu, which is unexpected",
    }
    with api.client(token) as c:
        cid = c.post("/v1/containers", json={"image": "ubuntu", "gpus": 2}).json()["id"]
        name = pods.pod_name(cid)
        wait_for(lambda: get_pod(k8s, "tenant-readmitted", name), what=name)
        bind_pod(k8s, "tenant-readmitted", name, "gpu-node-3")
        set_pod_status(k8s, "tenant-readmitted", name, refusal)
        failed = wait_for(lambda: (s := status_of(c, cid))["status"] == "Failed" and s)
        assert "previously allocated devices" in failed["message"], failed
        assert failed["pod_name"] == name
    assert get_pod(k8s, "tenant-readmitted", pods.pod_name(cid, 1)) is None


def _start_refused(message: str) -> dict[str, Any]:
    """A pod the kubelet admitted but whose container it cannot start (what it writes after a
    PreStartContainer error: pkg/kubelet/kuberuntime's CreateContainerConfigError)."""
    return {
        "phase": "Pending",
        "containerStatuses": [
            {
                "name": "main",
                "ready": False,
                "restartCount": 0,
                "image": "ubuntu",
                "imageID": "",
                "state": {"waiting": {"reason": "CreateContainerConfigError", "message": message}},
            }
        ],
    }


QUARANTINED = (
    "device plugin PreStartContainer rpc failed with err: rpc error: code = FailedPrecondition desc = "
    "GPU(s) unhealthy: 0000:9a:00.0 (GPU lease gpu-node-1-0000-9a-00-0 is Quarantined: RomMismatch)"
)


def test_a_pod_whose_gpu_went_bad_before_its_start_is_made_again_then_fails(api: ApiServer, k8s: Any) -> None:
    """A GPU quarantined after the kubelet admitted the pod: the device plugin refuses the
    container's start for good, the kubelet retries it for ever and the pod stays Pending. The
    container never ran, so the worker makes another pod (other GPUs, maybe another node), three
    times at most, then fails the container with the kubelet's message and deletes the pod."""
    from services.api.domain import pods

    with api.client() as admin:
        token = new_tenancy(admin, "badgpu")
    mark_tenancy_ready(k8s, "badgpu")
    with api.client(token) as c:
        cid = c.post("/v1/containers", json={"image": "ubuntu", "gpus": 1}).json()["id"]
        for attempt in range(pods.ADMISSION_RETRIES + 1):
            name = pods.pod_name(cid, attempt)
            wait_for(lambda name=name: get_pod(k8s, "tenant-badgpu", name), what=name)
            wait_for(lambda name=name: status_of(c, cid)["pod_name"] == name)
            bind_pod(k8s, "tenant-badgpu", name, "gpu-node-1")
            set_pod_status(k8s, "tenant-badgpu", name, _start_refused(QUARANTINED))
            assert wait_for(lambda name=name: get_pod(k8s, "tenant-badgpu", name) is None, what=f"{name} deleted")
        failed = wait_for(lambda: (s := status_of(c, cid))["status"] == "Failed" and s)
        assert failed["message"].startswith("the node could not start it: CreateContainerConfigError"), failed
        assert "Quarantined" in failed["message"] and failed["exit_code"] is None
        assert failed["pod_name"] == pods.pod_name(cid, pods.ADMISSION_RETRIES)


def test_only_a_start_refused_for_good_makes_another_pod() -> None:
    from services.api.domain import pods

    assert pods.refused_before_start({"status": _start_refused(QUARANTINED)})
    releasing = QUARANTINED.replace("FailedPrecondition", "Unavailable")  # a GPU still being checked: it waits
    assert pods.refused_before_start({"status": _start_refused(releasing)}) is None
    secret = "couldn't find key value in Secret tenant-badgpu/gpucaas-secret-hf"  # the tenant's own error
    assert pods.refused_before_start({"status": _start_refused(secret)}) is None
    restarted = _start_refused(QUARANTINED)
    restarted["containerStatuses"][0]["restartCount"] = 1  # it ran once: never made again
    assert pods.refused_before_start({"status": restarted}) is None


def test_a_late_report_of_a_refused_attempt_changes_nothing(api: ApiServer, k8s: Any) -> None:
    """Two replicas watch the pods: one may apply the refused attempt's last "Pending on the
    node" after the other queued the next attempt. That report must not move the container
    (Pending with no pod to come would hang it): it counts only for the current attempt."""
    from sqlmodel import Session

    from services.api.domain import pods
    from services.api.domain.models import Container
    from services.api.store import worker_state

    with api.client() as admin:
        token = new_tenancy(admin, "latereport")
    mark_tenancy_ready(k8s, "latereport")
    with api.client(token) as c:
        cid = c.post("/v1/containers", json={"image": "ubuntu", "gpus": 1}).json()["id"]
        first = pods.pod_name(cid)
        wait_for(lambda: get_pod(k8s, "tenant-latereport", first))
        bind_pod(k8s, "tenant-latereport", first, "gpu-node-4")
        bound = wait_for(lambda: (p := get_pod(k8s, "tenant-latereport", first)) and p["spec"].get("nodeName") and p)
        set_pod_status(
            k8s,
            "tenant-latereport",
            first,
            {
                "phase": "Failed",
                "reason": "UnexpectedAdmissionError",
                "message": "Pod was rejected: no healthy devices present",
            },
        )
        wait_for(lambda: status_of(c, cid)["pod_name"] == pods.pod_name(cid, 1))
        api.worker.stop()  # from here on, only the late report below
        report = pods.container_status_from_pod(bound, "nvidia.com/gpu")
        with Session(api.worker.engine) as session:
            assert not worker_state.apply_pod_report(session, container_id=cid, report=report, pod_name=first)
            worker_state.mark_failed(session, container_id=cid, message="pod deleted", pod_name=first)
            row = session.get(Container, cid)
            assert row is not None and (row.status, row.pod_name) == ("Queued", pods.pod_name(cid, 1))


def test_a_pod_that_started_is_never_made_again() -> None:
    from services.api.domain import pods

    ran = {
        "phase": "Failed",
        "reason": "UnexpectedAdmissionError",
        "containerStatuses": [
            {
                "name": "main",
                "ready": False,
                "restartCount": 0,
                "image": "x",
                "imageID": "",
                "state": {
                    "terminated": {
                        "exitCode": 1,
                        "startedAt": "2026-01-02T03:04:05Z",
                        "finishedAt": "2026-01-02T03:04:06Z",
                    }
                },
            }
        ],
    }
    assert pods.refused_at_admission({"status": ran}) is None
    assert pods.refused_at_admission({"status": {"phase": "Failed", "reason": "OutOfnvidia.com/gpu"}})
    assert pods.refused_at_admission({"status": {"phase": "Failed", "reason": "DeadlineExceeded"}}) is None
    # a kubelet that restarted admits its pods again; one whose devices it had allocated before
    # may have run under the kubelet that died, before any status of it reached the API server
    readmitted = {
        "phase": "Failed",
        "reason": "UnexpectedAdmissionError",
        "message": "Pod was rejected: Allocate failed due to previously allocated devices are no longer healthy; "
        "cannot allocate unhealthy devices nvidia.com/gpu, which is unexpected",
    }
    assert pods.refused_at_admission({"status": readmitted}) is None
    first_time = {**readmitted, "message": "Pod was rejected: Allocate failed due to no healthy devices present"}
    assert pods.refused_at_admission({"status": first_time})


def test_cancel_deletes_the_pod(api: ApiServer, k8s: Any) -> None:
    with api.client() as admin:
        token = new_tenancy(admin, "cancels")
    mark_tenancy_ready(k8s, "cancels")
    with api.client(token) as c:
        cid = c.post("/v1/containers", json={"image": "ubuntu"}).json()["id"]
        wait_for(lambda: get_pod(k8s, "tenant-cancels", f"gpucaas-{cid}"))
        assert c.delete(f"/v1/containers/{cid}").json()["status"] == "Cancelled"
        wait_for(lambda: get_pod(k8s, "tenant-cancels", f"gpucaas-{cid}") is None)
        assert status_of(c, cid)["status"] == "Cancelled"


def test_a_pod_that_outlives_its_cancellation_is_deleted(api: ApiServer, k8s: Any) -> None:
    from kubernetes import client as kc

    from services.api.domain.pods import build_pod

    with api.client() as admin:
        token = new_tenancy(admin, "late")
    mark_tenancy_ready(k8s, "late")
    with api.client(token) as c:
        cid = c.post("/v1/containers", json={"image": "ubuntu"}).json()["id"]
        wait_for(lambda: get_pod(k8s, "tenant-late", f"gpucaas-{cid}"))
        c.delete(f"/v1/containers/{cid}")
        wait_for(lambda: get_pod(k8s, "tenant-late", f"gpucaas-{cid}") is None)
        # a replica that crashed mid-submission creates the pod after the cancellation
        kc.CoreV1Api(k8s).create_namespaced_pod(
            "tenant-late", build_pod(container_id=cid, tenancy="late", image="ubuntu", gpus=1)
        )
        wait_for(lambda: get_pod(k8s, "tenant-late", f"gpucaas-{cid}") is None)
        assert status_of(c, cid)["status"] == "Cancelled"


def test_logs_and_follow(api: ApiServer, k8s: Any, node_logs: Any) -> None:
    with api.client() as admin:
        token = new_tenancy(admin, "logs")
    mark_tenancy_ready(k8s, "logs")
    with api.client(token) as c:
        cid = c.post("/v1/containers", json={"image": "ubuntu"}).json()["id"]
        name = f"gpucaas-{cid}"
        wait_for(lambda: status_of(c, cid)["status"] == "Pending")
        node_logs.write("tenant-logs", name, "Starting...\nDetected 1 CUDA Capable device(s)\n")
        r = c.get(f"/v1/containers/{cid}/logs")
        assert r.status_code == 200 and r.text == "Starting...\nDetected 1 CUDA Capable device(s)\n"
        with c.stream("GET", f"/v1/containers/{cid}/logs", params={"follow": "true"}) as stream:
            lines = stream.iter_lines()
            assert next(lines) == "Starting..."
            assert next(lines) == "Detected 1 CUDA Capable device(s)"
            node_logs.write("tenant-logs", name, "Result = PASS\n")
            assert next(lines) == "Result = PASS"


def test_admin_tenancy_changes_reach_the_resource(api: ApiServer, k8s: Any) -> None:
    from kubernetes import client as kc

    custom = kc.CustomObjectsApi(k8s)
    with api.client() as admin:
        admin.post("/v1/admin/tenancies", json={"name": "crd", "gpu_quota": 4})
        assert custom.get_cluster_custom_object("gpucaas.dev", "v1alpha1", "tenancies", "crd")["spec"]["gpuQuota"] == 4
        admin.patch("/v1/admin/tenancies/crd", json={"gpu_quota": 12, "allow_internet": True})
        spec = custom.get_cluster_custom_object("gpucaas.dev", "v1alpha1", "tenancies", "crd")["spec"]
        assert spec["gpuQuota"] == 12 and spec["network"]["allowInternet"] is True
        assert admin.delete("/v1/admin/tenancies/crd").status_code == 204
        assert admin.get("/v1/admin/tenancies/crd").status_code == 404
    with pytest.raises(kc.exceptions.ApiException) as exc:
        custom.get_cluster_custom_object("gpucaas.dev", "v1alpha1", "tenancies", "crd")
    assert exc.value.status == 404


def test_a_ready_tenancy_in_step_costs_its_next_pods_no_read_of_its_resource(api: ApiServer, k8s: Any) -> None:
    """The worker knows from its watch of the Tenancies that the resource holds the record and
    is Ready: the next containers of such a tenancy cost kube-apiserver their pods' creates and
    no read or write of the Tenancy."""
    kube = api.worker.kube
    calls: list[str] = []
    get, upsert = kube.get_tenancy, kube.upsert_tenancy

    def counted_get(name: str, **kw: Any) -> dict[str, Any]:
        calls.append(f"get {name}")
        return get(name, **kw)

    def counted_upsert(body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        calls.append(f"upsert {body['metadata']['name']}")
        return upsert(body, **kw)

    kube.get_tenancy, kube.upsert_tenancy = counted_get, counted_upsert  # type: ignore[method-assign]
    try:
        with api.client() as admin:
            token = new_tenancy(admin, "steady")
        with api.client(token) as c:
            first = c.post("/v1/containers", json={"image": "ubuntu", "gpus": 1}).json()["id"]
            mark_tenancy_ready(k8s, "steady")
            assert wait_for(lambda: status_of(c, first)["status"] == "Pending")
            assert "get steady" in calls  # the filter sees the tenancy's requests: the admin route's push
            calls.clear()
            later = [c.post("/v1/containers", json={"image": "ubuntu", "gpus": 1}).json()["id"] for _ in range(2)]
            assert wait_for(lambda: all(status_of(c, i)["status"] == "Pending" for i in later))
            assert calls == []
            for i in later:
                assert get_pod(k8s, "tenant-steady", f"gpucaas-{i}") is not None
    finally:
        del kube.get_tenancy, kube.upsert_tenancy


def test_readyz_when_everything_answers(api: ApiServer) -> None:
    with api.client(None) as anon:
        r = anon.get("/readyz")
    assert r.status_code == 200 and r.json() == {"status": "ok", "database": "ok", "kubernetes": "ok"}


def _queued_alone(api: ApiServer, k8s: Any, names: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """One queued container in each of new ready tenancies ``names``, the API's own worker
    stopped (the queue is the test's alone): their tokens and the containers' ids. The
    tenancies are made ready first, while the worker still pushes their resources."""
    ids: dict[str, str] = {}
    with api.client() as admin:
        tokens = {n: new_tenancy(admin, n) for n in names}
    for n in names:
        mark_tenancy_ready(k8s, n)
    api.worker.stop()
    for n in names:
        with api.client(tokens[n]) as c:
            ids[n] = c.post("/v1/containers", json={"image": "ubuntu", "gpus": 1}).json()["id"]
    return tokens, ids


def test_the_rows_of_different_tenancies_get_their_pods_side_by_side(api: ApiServer, k8s: Any) -> None:
    """A burst over several tenancies: the worker makes their pods at the same time (each
    tenancy's own in order), not one after another. Three pod creations meet at a barrier that
    only opens once all three are in flight at once."""
    import threading

    from services.api.domain import pods
    from services.api.worker import SubmissionWorker

    names = ["sidea", "sideb", "sidec"]
    tokens, ids = _queued_alone(api, k8s, names)
    worker = SubmissionWorker(engine=api.worker.engine, kube=api.worker.kube, settings=api.worker.settings)
    meet = threading.Barrier(len(names), timeout=30)
    create = worker.kube.create_pod

    def create_when_all_are_in_flight(body: dict[str, Any]) -> str | None:
        meet.wait()  # BrokenBarrierError (the pass fails) if the creations came one at a time
        return create(body)

    worker.kube.create_pod = create_when_all_are_in_flight  # type: ignore[method-assign]
    try:
        assert worker.run_once()
    finally:
        del worker.kube.create_pod
        worker.stop()
    assert not meet.broken
    for n in names:
        assert get_pod(k8s, f"tenant-{n}", pods.pod_name(ids[n])) is not None
    assert worker.submitted == len(names)


def test_a_pass_after_stop_makes_no_pods_and_leaves_its_rows_to_the_next_worker(api: ApiServer, k8s: Any) -> None:
    """A pass still running when stop() gave up joining it (or one begun after): it starts no
    pool nothing would shut down and makes no pod; the rows it claimed are taken, once their
    claim runs out, by the next worker, each pod made once."""
    from services.api.domain import pods
    from services.api.worker import SubmissionWorker

    names = ["stopa", "stopb"]
    tokens, ids = _queued_alone(api, k8s, names)
    settings = api.worker.settings.model_copy(update={"worker_claim_seconds": 1.0, "worker_concurrency": 2})
    stopped = SubmissionWorker(engine=api.worker.engine, kube=api.worker.kube, settings=settings)
    stopped.stop(timeout=0)
    stopped.run_once()
    assert stopped._pool is None
    assert all(get_pod(k8s, f"tenant-{n}", pods.pod_name(ids[n])) is None for n in names)

    following = SubmissionWorker(engine=api.worker.engine, kube=api.worker.kube, settings=settings)
    try:
        wait_for(lambda: following.run_once() and following.submitted == len(names), 30, what="the rows' pods")
    finally:
        following.stop()
    for n in names:
        assert get_pod(k8s, f"tenant-{n}", pods.pod_name(ids[n])) is not None
        with api.client(tokens[n]) as c:
            assert c.get(f"/v1/containers/{ids[n]}").json()["status"] != "Queued"


def test_with_queueing_by_kueue_the_pod_names_its_local_queue_and_the_tenancy_its_guarantee(
    kubeconfig: Path, serve: Callable[..., ApiServer], database_url: str, k8s: Any
) -> None:
    """queueing=kueue: the Tenancy carries the guarantee and weight (its ClusterQueue's figures, the
    controller's part) and the pod the label by which Kueue's webhook gates it; nothing else differs."""
    api = serve(database_url, kubeconfig, queueing="kueue")
    with api.client() as admin:
        token = new_tenancy(admin, "queued", gpu_quota=16, guaranteed_gpus=8, weight=2.5)
    tenancy = mark_tenancy_ready(k8s, "queued")
    assert {k: tenancy["spec"][k] for k in ("gpuQuota", "guaranteedGpus", "weight")} == {
        "gpuQuota": 16,
        "guaranteedGpus": 8,
        "weight": 2.5,
    }
    with api.client(token) as c:
        cid = c.post("/v1/containers", json={"image": SEED["container-url"], "gpus": 8}).json()["id"]
        pod = wait_for(lambda: get_pod(k8s, "tenant-queued", f"gpucaas-{cid}"))
        assert wait_for(lambda: status_of(c, cid)["status"] == "Pending")
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
