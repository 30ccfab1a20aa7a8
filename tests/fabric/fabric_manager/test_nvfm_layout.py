"""The ctypes structures agree with the C declarations, field by field."""

from __future__ import annotations

import ctypes

import pytest

from services.fabric.fabric_manager import nvfm

UNKNOWN = -(2 ** (8 * ctypes.sizeof(ctypes.c_long) - 1))  # LONG_MIN: key not in the C table

CONSTANTS = [
    "FM_MAX_STR_LENGTH",
    "FM_UUID_BUFFER_SIZE",
    "FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE",
    "FM_MAX_NUM_GPUS",
    "FM_MAX_NUM_NVSWITCHES",
    "FM_MAX_FABRIC_PARTITIONS",
    "FM_MAX_NUM_NVLINK_PORTS",
    "FM_CMD_PORT_NUMBER",
    *[name for name in nvfm.RETURN_NAMES.values() if name != "FM_ST_SUCCESS"],
]

FIELDS = [(name, field[0]) for name, struct in nvfm.STRUCTURES.items() for field in struct._fields_]


@pytest.mark.parametrize("name", sorted(nvfm.STRUCTURES))
def test_struct_size_matches_c(libnvfm, name: str) -> None:
    assert ctypes.sizeof(nvfm.STRUCTURES[name]) == libnvfm.fakeFmLayout(name.encode())


@pytest.mark.parametrize(("name", "field"), FIELDS, ids=[f"{n}.{f}" for n, f in FIELDS])
def test_field_offset_matches_c(libnvfm, name: str, field: str) -> None:
    c_offset = libnvfm.fakeFmLayout(f"{name}.{field}".encode())
    assert c_offset != UNKNOWN, f"the C library does not know {name}.{field}"
    assert getattr(nvfm.STRUCTURES[name], field).offset == c_offset


@pytest.mark.parametrize("name", sorted(nvfm.VERSIONS))
def test_version_words_match_c(libnvfm, name: str) -> None:
    assert nvfm.VERSIONS[name] == libnvfm.fakeFmLayout(name.encode())


def test_version_word_is_size_and_version() -> None:
    v = nvfm.fmFabricPartitionList_version
    assert v & 0xFFFFFF == ctypes.sizeof(nvfm.fmFabricPartitionList_t)
    assert v >> 24 == 1
    # 3 words + 64 partitions x (3 words + 16 GPUs x (4 + 80 + 32 + 12 bytes))
    assert ctypes.sizeof(nvfm.fmFabricPartitionList_t) == 12 + 64 * (12 + 16 * 128)


def test_every_function_has_a_signature(libnvfm) -> None:
    for name, (argtypes, restype) in nvfm.SIGNATURES.items():
        fn = getattr(libnvfm, name)
        assert fn.argtypes == argtypes and fn.restype is restype, name


@pytest.mark.parametrize("name", CONSTANTS)
def test_constants_match_c(libnvfm, name: str) -> None:
    assert getattr(nvfm, name) == libnvfm.fakeFmLayout(name.encode())


def test_unknown_layout_key_is_reported(libnvfm) -> None:
    assert libnvfm.fakeFmLayout(b"fmNoSuchThing_t") == UNKNOWN
