"""Fabric Manager through NVIDIA's ``libnvfm.so``, by ctypes.

The structures below are declared from the layout the Fabric Manager SDK
documents (nv_fm_types.h); every versioned structure carries its version word,
``sizeof(struct) | version << 24``, which the library checks. The tests build a
small C library with the same signatures and compare ``sizeof``/``offsetof`` of
every field with these declarations.

Mapping of ``fmReturn_t`` to our errors. Fabric Manager folds several causes
into one code, so after a failed call the binding looks at the partition table
to say which one it was (only on the failure path):

* FM_ST_CONNECTION_NOT_VALID: the handle is stale (Fabric Manager restarted);
  the binding connects again and retries the call once (the call never reached
  Fabric Manager, so retrying is safe); if Fabric Manager cannot be reached,
  or on FM_ST_TIMEOUT, FabricManagerUnavailable (the next call connects again);
* FM_ST_NOT_CONFIGURED -> NotReady (initialising, or a restarted Fabric Manager
  waiting for the activated list);
* activate: FM_ST_IN_USE -> PartitionAlreadyActive or PartitionConflict (with the
  active partitions it overlaps); FM_ST_BADPARAM -> PartitionUnsupported when the
  id is in the unsupported list, else UnknownPartition; FM_ST_NVLINK_ERROR ->
  PartitionUnsupported;
* deactivate: FM_ST_UNINITIALIZED -> PartitionNotActive; FM_ST_BADPARAM ->
  UnknownPartition;
* set list: FM_ST_BADPARAM -> UnknownPartition / PartitionConflict /
  InvalidArgument after checking the list against the table;
* anything else -> FabricManagerError with the code.

Calls are serialised by a lock per client: the SDK does not promise that one
handle can be used from several threads at once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import re
import threading
from collections.abc import Mapping
from typing import Any

from core import topology
from services.fabric.fabric_manager import rules
from services.fabric.fabric_manager.errors import (
    FabricManagerError,
    FabricManagerUnavailable,
    InvalidArgument,
    NotReady,
    NotSupported,
    PartitionAlreadyActive,
    PartitionConflict,
    PartitionNotActive,
    PartitionUnsupported,
    UnknownPartition,
)
from services.fabric.fabric_manager.interface import (
    FailedDevice,
    FailedDevices,
    GpuInfo,
    PartitionInfo,
)
from services.fabric.fabric_manager.pci import normalize_pci_bus_id

logger = logging.getLogger(__name__)

# --- constants (nv_fm_types.h) ------------------------------------------------------
FM_MAX_STR_LENGTH = 256
FM_UUID_BUFFER_SIZE = 80
FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32
FM_MAX_NUM_GPUS = 16
FM_MAX_NUM_NVSWITCHES = 12
FM_MAX_FABRIC_PARTITIONS = 64
FM_MAX_NUM_NVLINK_PORTS = 64
FM_CMD_PORT_NUMBER = 6666

FM_ST_SUCCESS = 0
FM_ST_BADPARAM = -1
FM_ST_GENERIC_ERROR = -2
FM_ST_NOT_SUPPORTED = -3
FM_ST_UNINITIALIZED = -4
FM_ST_TIMEOUT = -5
FM_ST_VERSION_MISMATCH = -6
FM_ST_IN_USE = -7
FM_ST_NOT_CONFIGURED = -8
FM_ST_CONNECTION_NOT_VALID = -9
FM_ST_NVLINK_ERROR = -10
# Return codes FM 550+ adds (nv_fm_types.h of those releases); a 535 library never
# returns them, a newer one may, so the binding names and maps them whatever it loaded.
FM_ST_RESOURCE_BAD = -11
FM_ST_RESOURCE_IN_USE = -12
FM_ST_RESOURCE_NOT_IN_USE = -13
FM_ST_RESOURCE_EXHAUSTED = -14
FM_ST_RESOURCE_NOT_READY = -15
FM_ST_PARTITION_EXISTS = -16
FM_ST_PARTITION_ID_IN_USE = -17
FM_ST_PARTITION_ID_NOT_IN_USE = -18
FM_ST_PARTITION_NAME_IN_USE = -19
FM_ST_PARTITION_NAME_NOT_IN_USE = -20
FM_ST_PARTITION_ID_NAME_MISMATCH = -21
FM_ST_NOT_READY = -22
FM_ST_RESOURCE_USED_IN_THIS_PARTITION = -23
FM_ST_RESOURCE_USED_IN_ANOTHER_PARTITION = -24
FM_ST_PARTITION_MISWIRED_TRUNKS = -25
FM_ST_PARTITION_INSUFFICIENT_TRUNKS = -26
FM_ST_PARTITION_MISSING_SWITCHES = -27
FM_ST_PARTITION_NETWORK_CONFIG_ERROR = -28
FM_ST_PARTITION_ROUTE_PROGRAMMING_ERROR = -29

#: nvFmApiAddrTypes (fmConnectParams_v2.addressType, FM 550+).
NV_FM_API_ADDR_TYPE_INET = 1
NV_FM_API_ADDR_TYPE_UNIX = 2

#: First driver branch whose libnvfm expects fmConnectParams_v2 (its nv_fm_types.h makes
#: fmConnectParams_t = fmConnectParams_v2); 525/535 libraries expect v1.
CONNECT_PARAMS_V2_FROM_BRANCH = 550

RETURN_NAMES: dict[int, str] = {
    FM_ST_SUCCESS: "FM_ST_SUCCESS",
    FM_ST_BADPARAM: "FM_ST_BADPARAM",
    FM_ST_GENERIC_ERROR: "FM_ST_GENERIC_ERROR",
    FM_ST_NOT_SUPPORTED: "FM_ST_NOT_SUPPORTED",
    FM_ST_UNINITIALIZED: "FM_ST_UNINITIALIZED",
    FM_ST_TIMEOUT: "FM_ST_TIMEOUT",
    FM_ST_VERSION_MISMATCH: "FM_ST_VERSION_MISMATCH",
    FM_ST_IN_USE: "FM_ST_IN_USE",
    FM_ST_NOT_CONFIGURED: "FM_ST_NOT_CONFIGURED",
    FM_ST_CONNECTION_NOT_VALID: "FM_ST_CONNECTION_NOT_VALID",
    FM_ST_NVLINK_ERROR: "FM_ST_NVLINK_ERROR",
    **{v: k for k, v in globals().items() if k.startswith("FM_ST_") and isinstance(v, int) and v <= -11},
}

#: Codes that mean "Fabric Manager cannot be reached now" (the connection is dropped).
UNAVAILABLE_CODES = frozenset({FM_ST_CONNECTION_NOT_VALID, FM_ST_TIMEOUT, FM_ST_GENERIC_ERROR})

fmReturn_t = ctypes.c_int
fmHandle_t = ctypes.c_void_p
fmFabricPartitionId_t = ctypes.c_uint


# --- structures ---------------------------------------------------------------------
class fmConnectParams_v1(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("addressInfo", ctypes.c_char * FM_MAX_STR_LENGTH),
        ("timeoutMs", ctypes.c_uint),
        ("addressIsUnixSocket", ctypes.c_uint),
    ]


class fmConnectParams_v2(ctypes.Structure):
    """FM 550+: v1 plus ``addressType`` (nvFmApiAddrTypes; ``addressIsUnixSocket`` deprecated)."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("addressInfo", ctypes.c_char * FM_MAX_STR_LENGTH),
        ("timeoutMs", ctypes.c_uint),
        ("addressIsUnixSocket", ctypes.c_uint),
        ("addressType", ctypes.c_int),  # a C enum: int-sized
    ]


class fmPciDevice_t(ctypes.Structure):
    _fields_ = [
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("function", ctypes.c_uint),
    ]


class fmFabricPartitionGpuInfo_t(ctypes.Structure):
    _fields_ = [
        ("physicalId", ctypes.c_uint),
        ("uuid", ctypes.c_char * FM_UUID_BUFFER_SIZE),
        ("pciBusId", ctypes.c_char * FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE),
        ("numNvLinksAvailable", ctypes.c_uint),
        ("maxNumNvLinks", ctypes.c_uint),
        ("nvlinkLineRateMBps", ctypes.c_uint),
    ]


class fmFabricPartitionInfo_t(ctypes.Structure):
    _fields_ = [
        ("partitionId", fmFabricPartitionId_t),
        ("isActive", ctypes.c_uint),
        ("numGpus", ctypes.c_uint),
        ("gpuInfo", fmFabricPartitionGpuInfo_t * FM_MAX_NUM_GPUS),
    ]


class fmFabricPartitionList_v2(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("numPartitions", ctypes.c_uint),
        ("maxNumPartitions", ctypes.c_uint),
        ("partitionInfo", fmFabricPartitionInfo_t * FM_MAX_FABRIC_PARTITIONS),
    ]


class fmActivatedFabricPartitionList_v1(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("numPartitions", ctypes.c_uint),
        ("partitionIds", fmFabricPartitionId_t * FM_MAX_FABRIC_PARTITIONS),
    ]


class fmNvlinkFailedDeviceInfo_t(ctypes.Structure):
    _fields_ = [
        ("uuid", ctypes.c_char * FM_UUID_BUFFER_SIZE),
        ("pciBusId", ctypes.c_char * FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE),
        ("numPorts", ctypes.c_uint),
        ("portNum", ctypes.c_uint * FM_MAX_NUM_NVLINK_PORTS),
    ]


class fmNvlinkFailedDevices_v1(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("numGpus", ctypes.c_uint),
        ("numSwitches", ctypes.c_uint),
        ("gpuInfo", fmNvlinkFailedDeviceInfo_t * FM_MAX_NUM_GPUS),
        ("switchInfo", fmNvlinkFailedDeviceInfo_t * FM_MAX_NUM_NVSWITCHES),
    ]


class fmUnsupportedFabricPartitionInfo_t(ctypes.Structure):
    _fields_ = [
        ("partitionId", fmFabricPartitionId_t),
        ("numGpus", ctypes.c_uint),
        ("gpuPhysicalIds", ctypes.c_uint * FM_MAX_NUM_GPUS),
    ]


class fmUnsupportedFabricPartitionList_v1(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("numPartitions", ctypes.c_uint),
        ("partitionInfo", fmUnsupportedFabricPartitionInfo_t * FM_MAX_FABRIC_PARTITIONS),
    ]


# The SDK's typedef names for the current versions.
fmConnectParams_t = fmConnectParams_v1
fmFabricPartitionList_t = fmFabricPartitionList_v2
fmActivatedFabricPartitionList_t = fmActivatedFabricPartitionList_v1
fmNvlinkFailedDevices_t = fmNvlinkFailedDevices_v1
fmUnsupportedFabricPartitionList_t = fmUnsupportedFabricPartitionList_v1


def make_param_version(struct: type[ctypes.Structure], version: int) -> int:
    """MAKE_FM_PARAM_VERSION: the struct's size in the low 24 bits, the version above."""
    return ctypes.sizeof(struct) | (version << 24)


fmConnectParams_version = make_param_version(fmConnectParams_v1, 1)
fmConnectParams_v2_version = make_param_version(fmConnectParams_v2, 2)
fmFabricPartitionList_version = make_param_version(fmFabricPartitionList_v2, 1)
fmActivatedFabricPartitionList_version = make_param_version(fmActivatedFabricPartitionList_v1, 1)
fmNvlinkFailedDevices_version = make_param_version(fmNvlinkFailedDevices_v1, 1)
fmUnsupportedFabricPartitionList_version = make_param_version(fmUnsupportedFabricPartitionList_v1, 1)

#: Every structure the binding declares, by its SDK name (the layout test walks these).
STRUCTURES: dict[str, type[ctypes.Structure]] = {
    "fmConnectParams_v1": fmConnectParams_v1,
    "fmConnectParams_v2": fmConnectParams_v2,
    "fmPciDevice_t": fmPciDevice_t,
    "fmFabricPartitionGpuInfo_t": fmFabricPartitionGpuInfo_t,
    "fmFabricPartitionInfo_t": fmFabricPartitionInfo_t,
    "fmFabricPartitionList_t": fmFabricPartitionList_t,
    "fmActivatedFabricPartitionList_t": fmActivatedFabricPartitionList_t,
    "fmNvlinkFailedDeviceInfo_t": fmNvlinkFailedDeviceInfo_t,
    "fmNvlinkFailedDevices_t": fmNvlinkFailedDevices_t,
    "fmUnsupportedFabricPartitionInfo_t": fmUnsupportedFabricPartitionInfo_t,
    "fmUnsupportedFabricPartitionList_t": fmUnsupportedFabricPartitionList_t,
}

VERSIONS: dict[str, int] = {
    "fmConnectV1Params_version1": fmConnectParams_version,
    "fmConnectV2Params_version2": fmConnectParams_v2_version,
    "fmFabricPartitionList_version": fmFabricPartitionList_version,
    "fmActivatedFabricPartitionList_version": fmActivatedFabricPartitionList_version,
    "fmNvlinkFailedDevices_version": fmNvlinkFailedDevices_version,
    "fmUnsupportedFabricPartitionList_version": fmUnsupportedFabricPartitionList_version,
}

_P = ctypes.POINTER
#: name -> (argtypes, restype) of every SDK function the binding calls.
SIGNATURES: dict[str, tuple[list[Any], Any]] = {
    "fmLibInit": ([], fmReturn_t),
    "fmLibShutdown": ([], fmReturn_t),
    "fmConnect": ([ctypes.c_void_p, _P(fmHandle_t)], fmReturn_t),  # v1 or v2 params
    "fmDisconnect": ([fmHandle_t], fmReturn_t),
    "fmGetSupportedFabricPartitions": ([fmHandle_t, _P(fmFabricPartitionList_t)], fmReturn_t),
    "fmActivateFabricPartition": ([fmHandle_t, fmFabricPartitionId_t], fmReturn_t),
    "fmDeactivateFabricPartition": ([fmHandle_t, fmFabricPartitionId_t], fmReturn_t),
    "fmSetActivatedFabricPartitions": ([fmHandle_t, _P(fmActivatedFabricPartitionList_t)], fmReturn_t),
    "fmGetNvlinkFailedDevices": ([fmHandle_t, _P(fmNvlinkFailedDevices_t)], fmReturn_t),
    "fmGetUnsupportedFabricPartitions": ([fmHandle_t, _P(fmUnsupportedFabricPartitionList_t)], fmReturn_t),
}


# --- loading ------------------------------------------------------------------------
def find_libnvfm(path: str | os.PathLike[str] | None = None) -> str | None:
    """The libnvfm to load, or None when there is none.

    ``path``: a file path (used when it exists) or a bare soname such as
    ``libnvfm.so.1`` (used when the dynamic loader can open it); default: what
    ``find_library('nvfm')`` finds.
    """
    if not path:
        return ctypes.util.find_library("nvfm")
    text = os.fspath(path)
    if os.sep in text:
        return text if os.path.exists(text) else None
    try:
        ctypes.CDLL(text)
    except OSError:
        return None
    return text


def library_branch(path: str | os.PathLike[str]) -> int | None:
    """The driver branch (535, 550, ...) of a libnvfm, from the file the name resolves to.

    NVIDIA ships ``libnvfm.so.<driver version>`` (e.g. ``libnvfm.so.535.216.01``) with
    ``libnvfm.so.1`` linking to it; the library exports no version call, so the real
    file name is the version. None when it cannot be told (a plain ``libnvfm.so``).
    """
    text = os.fspath(path)
    if os.sep not in text:  # a soname: ask the loader where it is
        found = ctypes.util.find_library(text.removeprefix("lib").split(".so")[0]) or text
        text = found
    real = os.path.realpath(text)
    m = re.search(r"\.so\.(\d{3,})\.\d+", os.path.basename(real))
    return int(m.group(1)) if m else None


_libs: dict[str, ctypes.CDLL] = {}
_libs_lock = threading.Lock()


def load_libnvfm(path: str | os.PathLike[str] | None = None) -> ctypes.CDLL:
    """Load libnvfm once per path, declare the signatures and call fmLibInit.

    Raises FabricManagerUnavailable when no library can be found or loaded.
    """
    found = find_libnvfm(path)
    if found is None:
        where = f"at {os.fspath(path)!r}" if path else "by the loader (find_library('nvfm'))"
        raise FabricManagerUnavailable(f"libnvfm not found {where}")
    with _libs_lock:
        lib = _libs.get(found)
        if lib is not None:
            return lib
        try:
            # A bare soname ("libnvfm.so.1") is resolved by the dynamic loader.
            lib = ctypes.CDLL(found)
        except OSError as exc:
            raise FabricManagerUnavailable(f"cannot load libnvfm {found!r}: {exc}") from exc
        for name, (argtypes, restype) in SIGNATURES.items():
            try:
                fn = getattr(lib, name)
            except AttributeError as exc:
                raise FabricManagerUnavailable(f"{found!r} is not a Fabric Manager library: no {name}()") from exc
            fn.argtypes = argtypes
            fn.restype = restype
        rc = lib.fmLibInit()
        if rc not in (FM_ST_SUCCESS, FM_ST_IN_USE):  # IN_USE: initialised already
            raise FabricManagerUnavailable(f"fmLibInit failed: {_name(rc)}", code=rc)
        logger.info("loaded Fabric Manager library %s", found)
        _libs[found] = lib
        return lib


def _name(rc: int) -> str:
    return RETURN_NAMES.get(rc, f"fmReturn_t {rc}")


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("ascii", errors="replace")


# --- the client ---------------------------------------------------------------------
class NvfmFabricManager:
    """``interface.FabricManager`` over libnvfm.

    address: Fabric Manager's API address, ``host`` or ``host:port`` (TCP, port 6666
    by default) or a unix socket path with ``unix_socket=True``.
    gpu_map: physical id -> PCI bus id known beforehand (from the board); used for
    GPUs Fabric Manager lists only in unsupported partitions, which carry physical
    ids alone. The binding also learns the map from every listing.
    """

    backend = "nvfm"

    def __init__(
        self,
        *,
        library: str | os.PathLike[str] | None = None,
        address: str = "127.0.0.1",
        unix_socket: bool = False,
        timeout_ms: int = 5000,
        gpu_map: Mapping[int, str] | None = None,
        connect_params_version: int | None = None,
    ) -> None:
        if connect_params_version not in (None, 1, 2):
            raise ValueError(
                f"connect_params_version: 1, 2 or None (by the library's version), got {connect_params_version!r}"
            )
        if not address or len(address.encode()) >= FM_MAX_STR_LENGTH:
            raise ValueError(
                f"address: give a host[:port] or socket path shorter than {FM_MAX_STR_LENGTH} bytes, got {address!r}"
            )
        if timeout_ms <= 0:
            raise ValueError(f"timeout_ms: must be > 0, got {timeout_ms}")
        self._library_path = library
        self.address = address
        self.unix_socket = unix_socket
        self.timeout_ms = timeout_ms
        self._known_pci: dict[int, str] = {int(k): normalize_pci_bus_id(v) for k, v in (gpu_map or {}).items()}
        self._lib: ctypes.CDLL | None = None
        self._handle: fmHandle_t | None = None
        self._lock = threading.RLock()
        self._connect_version = connect_params_version
        self._table: dict[int, topology.Partition] = {}  # the partition table last listed

    def __repr__(self) -> str:
        return f"NvfmFabricManager(address={self.address!r}, connected={self._handle is not None})"

    # --- connection -------------------------------------------------------------------
    @property
    def lib(self) -> ctypes.CDLL:
        if self._lib is None:
            self._lib = load_libnvfm(self._library_path)
        return self._lib

    def connect_params_version(self) -> int:
        """fmConnectParams version the loaded library expects: as configured, else v2 for
        a 550+ library and v1 for 525/535 or an unknown one (nv_fm_types.h of each release)."""
        if self._connect_version is None:
            found = find_libnvfm(self._library_path)
            branch = library_branch(found) if found else None
            self._connect_version = 2 if branch is not None and branch >= CONNECT_PARAMS_V2_FROM_BRANCH else 1
        return self._connect_version

    def _params(self, version: int) -> ctypes.Structure:
        params: ctypes.Structure
        if version == 2:
            params = fmConnectParams_v2()
            params.version = fmConnectParams_v2_version
            params.addressType = NV_FM_API_ADDR_TYPE_UNIX if self.unix_socket else NV_FM_API_ADDR_TYPE_INET
        else:
            params = fmConnectParams_v1()
            params.version = fmConnectParams_version
        params.addressInfo = self.address.encode()
        params.timeoutMs = self.timeout_ms
        params.addressIsUnixSocket = 1 if self.unix_socket else 0
        return params

    def connect(self) -> None:
        with self._lock:
            self._disconnect_locked()
            lib = self.lib
            version = self.connect_params_version()
            handle = fmHandle_t()
            rc = lib.fmConnect(ctypes.byref(self._params(version)), ctypes.byref(handle))
            if rc == FM_ST_VERSION_MISMATCH:
                # The file name misled us (renamed library): the other layout is the only other one.
                other = 1 if version == 2 else 2
                rc = lib.fmConnect(ctypes.byref(self._params(other)), ctypes.byref(handle))
                if rc == FM_ST_SUCCESS:
                    logger.warning("libnvfm refused fmConnectParams v%d; it takes v%d", version, other)
                    self._connect_version = other
            if rc != FM_ST_SUCCESS:
                raise FabricManagerUnavailable(
                    f"cannot connect to Fabric Manager at {self.address}: {_name(rc)}", code=rc
                )
            self._handle = handle
            logger.info("connected to Fabric Manager at %s (fmConnectParams v%d)", self.address, self._connect_version)

    def close(self) -> None:
        with self._lock:
            self._disconnect_locked()

    def _disconnect_locked(self) -> None:
        if self._handle is not None and self._lib is not None:
            rc = self._lib.fmDisconnect(self._handle)
            if rc != FM_ST_SUCCESS:
                logger.debug("fmDisconnect: %s (ignored)", _name(rc))
        self._handle = None

    def _call(self, name: str, *args: Any) -> int:
        """Call an SDK function on the live handle (connecting first when there is none)."""
        with self._lock:
            if self._handle is None:
                self.connect()
            rc = getattr(self.lib, name)(self._handle, *args)
            if rc == FM_ST_CONNECTION_NOT_VALID:
                # The call never reached Fabric Manager (it restarted, the service VM
                # came back): connect again and retry once, as the simulator's clients do.
                logger.info("%s: Fabric Manager connection lost; reconnecting", name)
                self._disconnect_locked()
                self.connect()
                rc = getattr(self.lib, name)(self._handle, *args)
            if rc in UNAVAILABLE_CODES:
                # FM_ST_GENERIC_ERROR is what a call returns after ~70 s when Fabric
                # Manager is gone or silent (the library's own request timeout): the
                # connection is as good as lost, so it counts as unavailable.
                self._disconnect_locked()
                raise FabricManagerUnavailable(
                    f"{name}: Fabric Manager at {self.address} not reachable: {_name(rc)}",
                    code=rc,
                )
            if rc == FM_ST_NOT_SUPPORTED:
                raise NotSupported(
                    f"{name}: not supported by Fabric Manager in its current mode ({_name(rc)}; e.g. restart mode)",
                    code=rc,
                )
            if rc in (FM_ST_NOT_CONFIGURED, FM_ST_NOT_READY, FM_ST_RESOURCE_NOT_READY):
                raise NotReady(
                    f"{name}: Fabric Manager is initialising or waits for the activated partition list ({_name(rc)})",
                    code=rc,
                )
            return int(rc)

    @staticmethod
    def _fail(name: str, rc: int) -> FabricManagerError:
        return FabricManagerError(f"{name} failed: {_name(rc)}", code=rc)

    # --- queries -------------------------------------------------------------------------
    def _supported(self) -> fmFabricPartitionList_t:
        out = fmFabricPartitionList_t()
        out.version = fmFabricPartitionList_version
        rc = self._call("fmGetSupportedFabricPartitions", ctypes.byref(out))
        if rc != FM_ST_SUCCESS:
            raise self._fail("fmGetSupportedFabricPartitions", rc)
        if out.numPartitions > FM_MAX_FABRIC_PARTITIONS:
            raise FabricManagerError(
                f"fmGetSupportedFabricPartitions returned {out.numPartitions} partitions "
                f"(max {FM_MAX_FABRIC_PARTITIONS})"
            )
        return out

    def _unsupported(self) -> dict[int, tuple[int, ...]]:
        out = fmUnsupportedFabricPartitionList_t()
        out.version = fmUnsupportedFabricPartitionList_version
        rc = self._call("fmGetUnsupportedFabricPartitions", ctypes.byref(out))
        if rc != FM_ST_SUCCESS:
            raise self._fail("fmGetUnsupportedFabricPartitions", rc)
        result = {}
        for i in range(min(out.numPartitions, FM_MAX_FABRIC_PARTITIONS)):
            info = out.partitionInfo[i]
            n = min(info.numGpus, FM_MAX_NUM_GPUS)
            result[int(info.partitionId)] = tuple(int(info.gpuPhysicalIds[j]) for j in range(n))
        return result

    def list_partitions(self) -> list[PartitionInfo]:
        with self._lock:
            supported = self._supported()
            unsupported = self._unsupported()
        parts: dict[int, PartitionInfo] = {}
        for i in range(supported.numPartitions):
            info = supported.partitionInfo[i]
            gpus = []
            for j in range(min(info.numGpus, FM_MAX_NUM_GPUS)):
                g = info.gpuInfo[j]
                # H100: pciBusId and uuid are empty (FM User Guide, GPU Partitions for
                # DGX/HGX H100): the PCI address comes from the host's mapping.
                raw = _text(g.pciBusId)
                if raw:
                    bdf = normalize_pci_bus_id(raw)
                    self._known_pci[int(g.physicalId)] = bdf
                else:
                    bdf = self._known_pci.get(int(g.physicalId), "")
                gpus.append(
                    GpuInfo(
                        physical_id=int(g.physicalId),
                        pci_bus_id=bdf,
                        uuid=_text(g.uuid),
                        nvlinks_available=int(g.numNvLinksAvailable),
                        max_nvlinks=int(g.maxNumNvLinks),
                        nvlink_line_rate_mbps=int(g.nvlinkLineRateMBps),
                    )
                )
            gpus.sort(key=lambda x: x.physical_id)
            pid = int(info.partitionId)
            parts[pid] = PartitionInfo(
                id=pid,
                gpus=tuple(gpus),
                nvlinks=sum(x.nvlinks_available for x in gpus),
                active=bool(info.isActive),
                supported=pid not in unsupported,
            )
        for pid, physical_ids in unsupported.items():
            if pid in parts:
                continue
            gpus = [GpuInfo(physical_id=g, pci_bus_id=self._known_pci.get(g, "")) for g in sorted(physical_ids)]
            parts[pid] = PartitionInfo(id=pid, gpus=tuple(gpus), nvlinks=0, active=False, supported=False)
        self._table = {p.id: topology.Partition(p.id, p.physical_ids) for p in parts.values()}
        return [parts[k] for k in sorted(parts)]

    def unsupported_partitions(self) -> list[int]:
        return sorted(self._unsupported())

    def nvlink_failed_devices(self) -> FailedDevices:
        out = fmNvlinkFailedDevices_t()
        out.version = fmNvlinkFailedDevices_version
        rc = self._call("fmGetNvlinkFailedDevices", ctypes.byref(out))
        if rc != FM_ST_SUCCESS:
            raise self._fail("fmGetNvlinkFailedDevices", rc)
        gpu_bdfs = {
            normalize_pci_bus_id(_text(out.gpuInfo[i].pciBusId))
            for i in range(min(out.numGpus, FM_MAX_NUM_GPUS))
            if _text(out.gpuInfo[i].pciBusId)
        }
        if not gpu_bdfs <= set(self._known_pci.values()):
            self.list_partitions()  # learn physical id <-> PCI bus id from Fabric Manager
        by_pci = {v: k for k, v in self._known_pci.items()}

        def device(info: fmNvlinkFailedDeviceInfo_t, gpu: bool) -> FailedDevice:
            raw = _text(info.pciBusId)
            bdf = normalize_pci_bus_id(raw) if raw else ""
            n = min(info.numPorts, FM_MAX_NUM_NVLINK_PORTS)
            return FailedDevice(
                pci_bus_id=bdf,
                uuid=_text(info.uuid),
                ports=tuple(sorted(int(info.portNum[k]) for k in range(n))),
                physical_id=by_pci.get(bdf) if gpu else None,
            )

        return FailedDevices(
            gpus=tuple(device(out.gpuInfo[i], True) for i in range(min(out.numGpus, FM_MAX_NUM_GPUS))),
            switches=tuple(
                device(out.switchInfo[i], False) for i in range(min(out.numSwitches, FM_MAX_NUM_NVSWITCHES))
            ),
        )

    # --- changes ------------------------------------------------------------------------
    @staticmethod
    def _check_id(partition_id: int) -> None:
        if not isinstance(partition_id, int) or isinstance(partition_id, bool) or not 0 <= partition_id < 2**32:
            raise UnknownPartition(
                partition_id, f"partition_id: {partition_id!r} is not a partition id (unsigned 32-bit integer)"
            )

    def activate(self, partition_id: int) -> None:
        self._check_id(partition_id)
        with self._lock:
            rc = self._call("fmActivateFabricPartition", fmFabricPartitionId_t(partition_id))
            if rc == FM_ST_SUCCESS:
                logger.info("Fabric Manager activated partition %d", partition_id)
                return
            raise self._activate_error(partition_id, rc)

    def _activate_error(self, partition_id: int, rc: int) -> FabricManagerError:
        kind = rc
        if rc in (FM_ST_RESOURCE_IN_USE, FM_ST_RESOURCE_USED_IN_ANOTHER_PARTITION):
            kind = FM_ST_IN_USE  # 550+ names the same refusal more precisely
        elif rc in (FM_ST_RESOURCE_BAD, FM_ST_PARTITION_ID_NOT_IN_USE):
            kind = FM_ST_BADPARAM
        if (
            kind == FM_ST_NVLINK_ERROR
            or FM_ST_PARTITION_ROUTE_PROGRAMMING_ERROR <= kind <= FM_ST_PARTITION_MISWIRED_TRUNKS
        ):
            return PartitionUnsupported(
                partition_id,
                f"partition {partition_id}: NVLink training/routing failed on activation ({_name(rc)})",
                code=rc,
            )
        if kind in (FM_ST_IN_USE, FM_ST_BADPARAM):
            parts = {p.id: p for p in self.list_partitions()}
            target = parts.get(partition_id)
            if kind == FM_ST_IN_USE:
                if target is not None and target.active:
                    return PartitionAlreadyActive(partition_id, code=rc)
                conflicting = tuple(
                    sorted(
                        p.id
                        for p in parts.values()
                        if p.active and target is not None and p.physical_ids & target.physical_ids
                    )
                )
                return PartitionConflict(partition_id, conflicting=conflicting, code=rc)
            if target is not None and not target.supported:
                return PartitionUnsupported(partition_id, code=rc)
            return UnknownPartition(partition_id, code=rc)
        return self._fail("fmActivateFabricPartition", rc)

    def deactivate(self, partition_id: int) -> None:
        self._check_id(partition_id)
        with self._lock:
            rc = self._call("fmDeactivateFabricPartition", fmFabricPartitionId_t(partition_id))
            if rc == FM_ST_SUCCESS:
                logger.info("Fabric Manager deactivated partition %d", partition_id)
                return
            if rc in (FM_ST_UNINITIALIZED, FM_ST_RESOURCE_NOT_IN_USE):
                raise PartitionNotActive(partition_id, code=rc)
            if rc == FM_ST_BADPARAM:
                raise UnknownPartition(partition_id, code=rc)
            raise self._fail("fmDeactivateFabricPartition", rc)

    def set_activated_list(self, partition_ids: list[int]) -> None:
        ids = list(partition_ids)
        if len(ids) > FM_MAX_FABRIC_PARTITIONS:
            raise InvalidArgument(f"partition_ids: at most {FM_MAX_FABRIC_PARTITIONS} partitions, got {len(ids)}")
        for pid in ids:
            self._check_id(pid)
        arg = fmActivatedFabricPartitionList_t()
        arg.version = fmActivatedFabricPartitionList_version
        arg.numPartitions = len(ids)
        for i, pid in enumerate(ids):
            arg.partitionIds[i] = pid
        with self._lock:
            rc = self._call("fmSetActivatedFabricPartitions", ctypes.byref(arg))
            if rc == FM_ST_SUCCESS:
                logger.info("Fabric Manager activated list set to %s", sorted(ids))
                return
            if rc == FM_ST_BADPARAM:
                raise self._list_error(ids, rc)
            raise self._fail("fmSetActivatedFabricPartitions", rc)

    def _list_error(self, ids: list[int], rc: int) -> FabricManagerError:
        """Say why Fabric Manager refused an activated list."""
        # Not listed now: a restarted Fabric Manager refuses listing until it has a list.
        table = self._table or {p.id: p for p in topology.HGX_H100_PARTITIONS}
        try:
            rules.check_activated_list(ids, table)
        except FabricManagerError as exc:
            exc.code = rc
            return exc
        return InvalidArgument(f"fmSetActivatedFabricPartitions refused {ids}: {_name(rc)}", code=rc)
