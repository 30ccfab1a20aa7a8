"""The CDI spec: content, CDI rules (schema + SPEC.md naming), atomic rewrite, stale entries."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from core import vfio_sysfs as sysfs
from core.cdi import CDI_VERSION, CDISpecError, SpecWriter, build_cdi_spec, check_cdi_spec
from devtools.fake_sysfs import GPU_BDFS, FakeBoard, build_hgx_h100
from tests.fixtures.fake_kubelet import FakeKubelet

#: The parts of CDI's schema/schema.json (container-device-interface) this spec uses,
#: with SPEC.md's naming rules as patterns.
CDI_SCHEMA = {
    "type": "object",
    "required": ["cdiVersion", "kind", "devices"],
    "additionalProperties": False,
    "properties": {
        "cdiVersion": {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"},
        "kind": {
            "type": "string",
            "pattern": r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+/"
            r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$",
        },
        "annotations": {"$ref": "#/definitions/annotations"},
        "devices": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "containerEdits"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "pattern": r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$"},
                    "annotations": {"$ref": "#/definitions/annotations"},
                    "containerEdits": {"$ref": "#/definitions/containerEdits"},
                },
            },
        },
        "containerEdits": {"$ref": "#/definitions/containerEdits"},
    },
    "definitions": {
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "absPath": {"type": "string", "pattern": "^/"},
        "containerEdits": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "env": {"type": "array", "items": {"type": "string"}},
                "deviceNodes": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["path"],
                        "additionalProperties": False,
                        "properties": {
                            "path": {"$ref": "#/definitions/absPath"},
                            "hostPath": {"$ref": "#/definitions/absPath"},
                            "type": {"enum": ["b", "c", "u", "p"]},
                            "major": {"type": "integer"},
                            "minor": {"type": "integer"},
                            "fileMode": {"type": "integer"},
                            "permissions": {"type": "string", "pattern": "^[rwm]+$"},
                            "uid": {"type": "integer"},
                            "gid": {"type": "integer"},
                        },
                    },
                },
                "mounts": {"type": "array"},
                "hooks": {"type": "array"},
            },
        },
    },
}


def _spec_of(board: FakeBoard, **kw) -> dict:
    return build_cdi_spec(sysfs.scan(board.sysfs, board.dev).gpus, kind="nvidia.com/gpu", **kw)


@pytest.mark.parametrize("iommufd", [False, True], ids=["legacy-vfio", "iommufd"])
def test_spec_follows_cdi_rules(tmp_path: Path, iommufd: bool) -> None:
    board = build_hgx_h100(tmp_path / "node", iommufd=iommufd)
    spec = _spec_of(board)
    jsonschema.validate(spec, CDI_SCHEMA)
    assert check_cdi_spec(spec) == []
    assert spec["cdiVersion"] == CDI_VERSION == "0.7.0"
    assert spec["kind"] == "nvidia.com/gpu"
    assert [d["name"] for d in spec["devices"]] == list(GPU_BDFS)
    for dev, gpu in zip(spec["devices"], board.gpus, strict=True):
        paths = [n["path"] for n in dev["containerEdits"]["deviceNodes"]]
        if iommufd:
            assert paths == [f"/dev/vfio/devices/vfio{gpu.vfio_dev}", "/dev/iommu"]
        else:
            assert paths == [f"/dev/vfio/{gpu.iommu_group}"]
        assert dev["annotations"]["gpucaas.dev/model"] == "NVIDIA H100 80GB HBM3 SXM5"
    spec_level = [n["path"] for n in spec.get("containerEdits", {}).get("deviceNodes", [])]
    assert spec_level == ([] if iommufd else ["/dev/vfio/vfio"])


def test_host_paths_point_into_a_non_default_dev_root(hgx_board: FakeBoard) -> None:
    spec = _spec_of(hgx_board, dev_root=hgx_board.dev)
    node = spec["devices"][0]["containerEdits"]["deviceNodes"][0]
    assert node["path"] == f"/dev/vfio/{hgx_board.gpus[0].iommu_group}"
    assert node["hostPath"] == str(hgx_board.dev / "vfio" / str(hgx_board.gpus[0].iommu_group))
    assert "hostPath" not in _spec_of(hgx_board)["devices"][0]["containerEdits"]["deviceNodes"][0]


BAD = [
    ("kind-no-class", {"kind": "nvidia.com"}, "kind must be 'vendor/class'"),
    ("kind-vendor-not-domain", {"kind": "nvidia/gpu"}, "must be a domain name"),
    ("kind-class-charset", {"kind": "nvidia.com/g pu"}, "kind class"),
    ("version-not-semver", {"cdiVersion": "v1"}, "cdiVersion"),
    ("no-devices", {"devices": []}, "non-empty list"),
]


@pytest.mark.parametrize(("patch", "message"), [(p, m) for _, p, m in BAD], ids=[i for i, _, _ in BAD])
def test_checker_rejects_rule_breaks(hgx_board: FakeBoard, patch: dict, message: str) -> None:
    spec = dict(_spec_of(hgx_board), **patch)
    assert any(message in e for e in check_cdi_spec(spec))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(spec, CDI_SCHEMA)


@pytest.mark.parametrize(
    "name", ["-0000:18:00.0", "0000:18:00.0/", "gpu 1", "gpu="], ids=["leading-dash", "slash", "space", "equals"]
)
def test_checker_rejects_bad_device_names(hgx_board: FakeBoard, name: str) -> None:
    spec = _spec_of(hgx_board)
    spec["devices"][0]["name"] = name
    assert any("devices[0].name" in e for e in check_cdi_spec(spec))


def test_relative_node_path_rejected_and_nothing_written(hgx_board: FakeBoard, tmp_path: Path) -> None:
    spec = _spec_of(hgx_board)
    spec["devices"][1]["containerEdits"]["deviceNodes"][0]["path"] = "dev/vfio/21"
    assert any("must be an absolute path" in e for e in check_cdi_spec(spec))
    writer = SpecWriter(tmp_path / "cdi", "nvidia.com/gpu", Path("/dev"))
    gpus = list(sysfs.scan(hgx_board.sysfs, hgx_board.dev).gpus)
    broken = [gpus[0].__class__(**{**gpus[0].__dict__, "bdf": "bad name!"})]
    with pytest.raises(CDISpecError, match="devices\\[0\\].name"):
        writer.update(broken)
    assert not writer.path.exists()


def test_writer_is_atomic_rewrites_on_change_and_removes_when_empty(hgx_board: FakeBoard, tmp_path: Path) -> None:
    cdi_dir = tmp_path / "cdi"
    writer = SpecWriter(cdi_dir, "nvidia.com/gpu", hgx_board.dev)
    gpus = list(sysfs.scan(hgx_board.sysfs, hgx_board.dev).gpus)
    assert writer.update(gpus) is True
    assert writer.update(gpus) is False  # unchanged: not rewritten
    assert [p.name for p in cdi_dir.iterdir()] == ["gpucaas-nvidia.com-gpu.json"]  # no temp files left
    assert writer.update(gpus[1:]) is True
    assert [d["name"] for d in json.loads(writer.path.read_text())["devices"]] == list(GPU_BDFS[1:])
    assert writer.update([]) is True
    assert not writer.path.exists()


def test_running_plugin_keeps_spec_current(
    hgx_board: FakeBoard, fake_kubelet: FakeKubelet, make_settings, run_plugin, tmp_path: Path
) -> None:
    p = run_plugin(make_settings(hgx_board, fabric_socket=""))
    conn = fake_kubelet.wait_for_plugin("nvidia.com/gpu")
    path = p.settings.cdi_dir / "gpucaas-nvidia.com-gpu.json"

    def names() -> list[str]:
        return [d["name"] for d in json.loads(path.read_text())["devices"]]

    assert names() == list(GPU_BDFS)
    hgx_board.bind(GPU_BDFS[3], "nvidia")  # stale entry must go
    assert conn.wait_for(lambda c: c.health()[GPU_BDFS[3]] == "Unhealthy")
    assert names() == [b for b in GPU_BDFS if b != GPU_BDFS[3]]
    hgx_board.bind(GPU_BDFS[3], "vfio-pci")
    assert conn.wait_for(lambda c: c.health()[GPU_BDFS[3]] == "Healthy")
    assert names() == list(GPU_BDFS)
    jsonschema.validate(json.loads(path.read_text()), CDI_SCHEMA)
