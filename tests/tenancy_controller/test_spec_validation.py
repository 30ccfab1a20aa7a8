"""parse_tenancy: every rule, each failure naming the field and what is allowed."""

from __future__ import annotations

import pytest

from services.tenancy_controller.errors import InvalidSpec
from services.tenancy_controller.spec import NFSSpec, parse_tenancy

from .factories import tenancy_body


def test_defaults_and_values():
    t = parse_tenancy(tenancy_body("acme", gpu_quota=None, pod_quota=None, allow_internet=None, uid="u1", generation=4))
    assert (t.name, t.uid, t.generation, t.namespace) == ("acme", "u1", 4, "tenant-acme")
    assert (t.spec.gpu_quota, t.spec.pod_quota, t.spec.allow_internet, t.spec.nfs) == (8, 50, False, None)
    t = parse_tenancy(
        tenancy_body("x", gpu_quota=0, nfs={"server": "nfs.corp.example", "path": "/e", "readOnly": True})
    )
    assert t.spec.gpu_quota == 0
    assert t.spec.nfs == NFSSpec(server="nfs.corp.example", path="/e", read_only=True, capacity="1Ti")
    assert t.spec.nfs.server_ip is None
    assert (
        str(parse_tenancy(tenancy_body("y", nfs={"server": "10.1.2.3", "path": "/"})).spec.nfs.server_ip) == "10.1.2.3"
    )


@pytest.mark.parametrize(
    "name,spec,field,says",
    [
        ("a" * 57, {}, "metadata.name", "at most 56"),
        ("Upper", {}, "metadata.name", "lowercase"),
        ("-dash", {}, "metadata.name", "starting and ending"),
        ("", {}, "metadata.name", "non-empty"),
        ("q", dict(gpu_quota=-1), "spec.gpuQuota", "between 0 and 100000"),
        ("q", dict(gpu_quota=100001), "spec.gpuQuota", "between 0 and 100000"),
        ("q", dict(gpu_quota=True), "spec.gpuQuota", "integer"),
        ("q", dict(pod_quota=0), "spec.podQuota", "between 1 and 100000"),
        ("q", dict(allow_internet="yes"), "spec.network.allowInternet", "true or false"),
        ("q", dict(nfs="10.0.0.1:/x"), "spec.nfs", "object"),
        ("q", dict(nfs={"path": "/x"}), "spec.nfs.server", "required"),
        ("q", dict(nfs={"server": "bad host", "path": "/x"}), "spec.nfs.server", "neither an IP address nor a host"),
        ("q", dict(nfs={"server": "300.1.1.1", "path": "/x"}), "spec.nfs.server", "neither"),
        ("q", dict(nfs={"server": "127.0.0.1", "path": "/x"}), "spec.nfs.server", "loopback"),
        ("q", dict(nfs={"server": "169.254.169.254", "path": "/x"}), "spec.nfs.server", "link-local"),
        ("q", dict(nfs={"server": "0.0.0.0", "path": "/x"}), "spec.nfs.server", "unspecified"),
        ("q", dict(nfs={"server": "224.0.0.1", "path": "/x"}), "spec.nfs.server", "multicast"),
        ("q", dict(nfs={"server": "10.0.0.1", "path": "x"}), "spec.nfs.path", "absolute"),
        ("q", dict(nfs={"server": "10.0.0.1", "path": "/a/../b"}), "spec.nfs.path", "'..'"),
        ("q", dict(nfs={"server": "10.0.0.1", "path": "/a", "readOnly": "no"}), "spec.nfs.readOnly", "true or false"),
        ("q", dict(nfs={"server": "10.0.0.1", "path": "/a", "capacity": "1TB"}), "spec.nfs.capacity", "quantity"),
    ],
    ids=[
        "name-too-long",
        "name-uppercase",
        "name-leading-dash",
        "name-empty",
        "gpu-negative",
        "gpu-too-big",
        "gpu-bool",
        "pods-zero",
        "internet-not-bool",
        "nfs-not-object",
        "nfs-no-server",
        "nfs-server-spaces",
        "nfs-server-bad-ip",
        "nfs-loopback",
        "nfs-metadata",
        "nfs-unspecified",
        "nfs-multicast",
        "nfs-relative-path",
        "nfs-dotdot",
        "nfs-readonly-not-bool",
        "nfs-capacity-unit",
    ],
)
def test_invalid(name, spec, field, says):
    with pytest.raises(InvalidSpec) as info:
        parse_tenancy(tenancy_body(name, **spec))
    assert info.value.field == field
    assert says in info.value.detail
    assert str(info.value).startswith(f"{field}: ")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"cpuQuota": "lots"}, "spec.cpuQuota"),
        ({"cpuQuota": 96}, "spec.cpuQuota"),
        ({"memoryQuota": "1TB"}, "spec.memoryQuota"),
    ],
    ids=["cpu-word", "cpu-integer", "memory-decimal-unit"],
)
def test_invalid_cpu_and_memory_quotas(spec, field):
    body = tenancy_body("q")
    body["spec"].update(spec)
    with pytest.raises(InvalidSpec) as info:
        parse_tenancy(body)
    assert info.value.field == field and "must be a quantity" in info.value.detail


def test_cpu_and_memory_quotas_parse():
    body = tenancy_body("q")
    body["spec"].update({"cpuQuota": "392", "memoryQuota": "3600Gi"})
    spec = parse_tenancy(body).spec
    assert (spec.cpu_quota, spec.memory_quota) == ("392", "3600Gi")
