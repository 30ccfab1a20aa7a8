"""The node prerequisites of GPU containers, one pure check each.

Each check takes the gathered ``HostFacts`` and returns a ``CheckResult``: ``ok``,
``warn`` (works, but slower or riskier than it should be), ``fail`` (blocks GPU
containers on this node) or ``skip`` (not applicable here). A failing or warning
result carries the fix, in the words an operator types.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from gpucaas.doctor.facts import HostFacts, PciDevice

Status = Literal["ok", "warn", "fail", "skip"]

RUNTIME = "kata-qemu-nvidia-gpu"
RUNTIME_TYPE = "io.containerd.kata-qemu-nvidia-gpu.v2"
NVIDIA_MODULES = ("nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia_peermem", "nouveau")
VFIO_DRIVER = "vfio-pci"
#: guest memory one GPU VM needs at least, backed by hugepages (see deploy/kata/).
MIN_HUGEPAGES_KIB_DEFAULT = 16 * 1024 * 1024


@dataclass(frozen=True)
class CheckResult:
    id: str
    title: str
    status: Status
    summary: str
    details: tuple[str, ...] = ()
    hint: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "status": self.status,
            "summary": self.summary,
            "details": list(self.details),
            "hint": self.hint,
        }


@dataclass(frozen=True)
class Options:
    """Thresholds of the checks."""

    min_hugepages_kib: int = MIN_HUGEPAGES_KIB_DEFAULT
    expect_nvswitches: bool | None = None  # None: whatever the board has


@dataclass
class _Builder:
    id: str
    title: str
    details: list[str] = field(default_factory=list)

    def ok(self, summary: str) -> CheckResult:
        return CheckResult(self.id, self.title, "ok", summary, tuple(self.details))

    def warn(self, summary: str, hint: str) -> CheckResult:
        return CheckResult(self.id, self.title, "warn", summary, tuple(self.details), hint)

    def fail(self, summary: str, hint: str) -> CheckResult:
        return CheckResult(self.id, self.title, "fail", summary, tuple(self.details), hint)

    def skip(self, summary: str) -> CheckResult:
        return CheckResult(self.id, self.title, "skip", summary, tuple(self.details))


def _cmdline_args(cmdline: str | None) -> dict[str, str]:
    args: dict[str, str] = {}
    for token in (cmdline or "").replace("\x00", " ").split():
        key, _, value = token.partition("=")
        args[key] = value
    return args


# --- IOMMU --------------------------------------------------------------------------------


def check_iommu(facts: HostFacts, options: Options) -> CheckResult:
    b = _Builder("iommu", "IOMMU enabled")
    args = _cmdline_args(facts.cmdline)
    groups = facts.iommu_groups or {}
    enable_hint = (
        "enable VT-d/AMD-Vi in the firmware, add 'intel_iommu=on iommu=pt' (AMD: 'amd_iommu=on iommu=pt') "
        "to GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub and reboot"
    )
    if facts.cmdline is not None:
        b.details.append(f"cmdline: {' '.join(facts.cmdline.split())}")
    if not groups:
        return b.fail(
            "no IOMMU groups in /sys/kernel/iommu_groups: the IOMMU is off, vfio cannot pass devices", enable_hint
        )
    b.details.append(f"{len(groups)} IOMMU groups")
    if args.get("intel_iommu") == "off" or args.get("amd_iommu") == "off":
        return b.fail("the kernel command line turns the IOMMU off", enable_hint)
    if args.get("iommu") != "pt":
        return b.warn(
            "IOMMU on, but without iommu=pt: host DMA is translated too, which slows the host's own I/O",
            "add 'iommu=pt' to the kernel command line (update-grub, reboot)",
        )
    return b.ok(f"IOMMU on ({len(groups)} groups, iommu=pt)")


# --- vfio binding -------------------------------------------------------------------------


def _binding(b: _Builder, devices: list[PciDevice], what: str, hint: str, *, required: bool) -> CheckResult:
    if not devices:
        if required:
            return b.fail(
                f"no {what} found on the PCI bus",
                "lspci -nn shows none: check that they are seated and powered (BMC), "
                "or point --sysfs-root at the host's /sys",
            )
        return b.skip(f"no {what} on this board")
    wrong = [d for d in devices if d.driver != VFIO_DRIVER]
    for d in devices:
        b.details.append(f"{d.bdf} {d.vendor:04x}:{d.device:04x} driver={d.driver or 'none'}")
    if wrong:
        listed = ", ".join(f"{d.bdf} ({d.driver or 'unbound'})" for d in wrong)
        return b.fail(f"{len(wrong)} of {len(devices)} {what} not bound to vfio-pci: {listed}", hint)
    return b.ok(f"all {len(devices)} {what} bound to vfio-pci")


def _vfio_hint(devices: list[PciDevice]) -> str:
    ids = sorted({f"{d.vendor:04x}:{d.device:04x}" for d in devices})
    return (
        f"bind them at boot: add 'vfio-pci.ids={','.join(ids)}' to the kernel command line and "
        "'softdep nvidia pre: vfio-pci' to /etc/modprobe.d/vfio.conf (update-initramfs -u, reboot); "
        "or now: driverctl set-override <BDF> vfio-pci"
    )


def _pci(facts: HostFacts) -> list[PciDevice]:
    return list(facts.pci or ())


def check_gpus_vfio(facts: HostFacts, options: Options) -> CheckResult:
    b = _Builder("gpus-vfio", "GPUs bound to vfio-pci")
    if facts.pci is None:
        return b.fail("no /sys/bus/pci/devices: is --sysfs-root right?", "point --sysfs-root at the host's /sys")
    gpus = [d for d in _pci(facts) if d.is_nvidia_gpu]
    if not facts.vfio_pci_driver and gpus:
        b.details.append("the vfio-pci driver is not registered (/sys/bus/pci/drivers/vfio-pci missing)")
    return _binding(b, gpus, "NVIDIA GPUs", _vfio_hint(gpus), required=True)


def check_nvswitches_vfio(facts: HostFacts, options: Options) -> CheckResult:
    b = _Builder("nvswitches-vfio", "NVSwitches bound to vfio-pci")
    switches = [d for d in _pci(facts) if d.is_nvswitch]
    return _binding(
        b,
        switches,
        "NVSwitches",
        _vfio_hint(switches) + " (the fabric service VM takes them)",
        required=bool(options.expect_nvswitches),
    )


def check_memory_controller_vfio(facts: HostFacts, options: Options) -> CheckResult:
    b = _Builder("memory-controller-vfio", "NVSwitch memory controller bound to vfio-pci")
    controllers = [d for d in _pci(facts) if d.is_nvswitch_memory_controller]
    has_switches = any(d.is_nvswitch for d in _pci(facts))
    return _binding(
        b,
        controllers,
        "NVSwitch memory controllers",
        _vfio_hint(controllers) + " (it goes to the fabric service VM with the NVSwitches)",
        required=has_switches and bool(options.expect_nvswitches),
    )


# --- host drivers ---------------------------------------------------------------------------


def check_nvidia_modules(facts: HostFacts, options: Options) -> CheckResult:
    b = _Builder("nvidia-modules", "No NVIDIA kernel module on the host")
    if facts.modules is None:
        return b.fail("cannot read /proc/modules: is --proc-root right?", "point --proc-root at the host's /proc")
    loaded = [m for m in facts.modules if m in NVIDIA_MODULES]
    if loaded:
        b.details.extend(f"loaded: {m}" for m in loaded)
        return b.fail(
            f"host kernel has {', '.join(loaded)} loaded: the host must never drive the GPUs "
            "(tenants' guests load the driver; a host driver grabs the GPUs from vfio)",
            "blacklist them: printf 'blacklist nouveau\\nblacklist nvidia\\ninstall nvidia /bin/false\\n' "
            "> /etc/modprobe.d/gpucaas-blacklist.conf; update-initramfs -u; reboot "
            f"(or now: modprobe -r {' '.join(reversed(loaded))})",
        )
    if "vfio_pci" not in facts.modules and not facts.vfio_pci_driver:
        return b.fail("vfio_pci is not loaded", "modprobe vfio-pci and add 'vfio-pci' to /etc/modules-load.d/vfio.conf")
    return b.ok("no nvidia/nouveau module loaded")


# --- IOMMU groups and /dev/vfio ---------------------------------------------------------------


def check_iommu_groups(facts: HostFacts, options: Options) -> CheckResult:
    b = _Builder("iommu-groups", "IOMMU group layout")
    devices = {d.bdf: d for d in _pci(facts)}
    gpus = [d for d in devices.values() if d.is_nvidia_gpu]
    if not gpus or facts.iommu_groups is None:
        return b.skip("no GPUs or no IOMMU groups to inspect")
    problems: list[str] = []
    for gpu in gpus:
        if gpu.iommu_group is None:
            problems.append(f"{gpu.bdf} has no IOMMU group")
            continue
        members = [devices[m] for m in facts.iommu_groups.get(gpu.iommu_group, ()) if m in devices]
        for other in members:
            if other.bdf == gpu.bdf or other.is_bridge:
                continue
            if other.is_nvswitch or other.is_nvswitch_memory_controller:
                problems.append(
                    f"GPU {gpu.bdf} shares group {gpu.iommu_group} with the fabric device {other.bdf}: "
                    "a tenant VM would get the NVSwitch fabric"
                )
            elif other.driver != VFIO_DRIVER:
                problems.append(
                    f"GPU {gpu.bdf} shares group {gpu.iommu_group} with {other.bdf} "
                    f"(driver {other.driver or 'none'}): the whole group must go to one VM"
                )
            elif other.is_nvidia_gpu:
                problems.append(
                    f"GPUs {gpu.bdf} and {other.bdf} share group {gpu.iommu_group}: they can only be passed together"
                )
    fabric = [d for d in devices.values() if d.is_nvswitch or d.is_nvswitch_memory_controller]
    fabric_groups = sorted({d.iommu_group for d in fabric if d.iommu_group is not None})
    layout = "none"
    if fabric:
        layout = "shared" if len(fabric_groups) == 1 and len(fabric) > 1 else "per-device"
        b.details.append(
            f"fabric devices ({len(fabric)}) in "
            f"{'one group ' + str(fabric_groups[0]) if layout == 'shared' else 'groups ' + str(fabric_groups)}"
            + (
                " - Supermicro-style layout: the service VM takes the whole group (libvirt, not Kata)"
                if layout == "shared"
                else " - DGX-style layout"
            )
        )
        for group in fabric_groups:
            for member in facts.iommu_groups.get(group, ()):
                neighbour = devices.get(member)
                if (
                    neighbour
                    and not (neighbour.is_nvswitch or neighbour.is_nvswitch_memory_controller or neighbour.is_bridge)
                    and neighbour.driver != VFIO_DRIVER
                ):
                    problems.append(f"fabric group {group} also holds {member} (driver {neighbour.driver or 'none'})")
    b.details.extend(f"GPU {g.bdf}: group {g.iommu_group}" for g in gpus)
    if problems:
        b.details.extend(problems)
        return b.fail(
            f"{len(problems)} IOMMU group problem(s): {problems[0]}",
            "check the PCIe slot / ACS settings in the firmware (enable ACS so each GPU gets its own group); "
            "never use pcie_acs_override on a multi-tenant host",
        )
    return b.ok(f"each of the {len(gpus)} GPUs has its own IOMMU group; fabric layout: {layout}")


def check_vfio_device_nodes(facts: HostFacts, options: Options) -> CheckResult:
    b = _Builder("vfio-device-nodes", "/dev/vfio device nodes")
    if facts.dev_vfio is None:
        return b.fail(
            "no /dev/vfio: vfio is not loaded (or --dev-root is wrong)",
            "modprobe vfio-pci; check that udev created /dev/vfio",
        )
    missing = []
    if "vfio" not in facts.dev_vfio:
        missing.append("/dev/vfio/vfio")
    for d in _pci(facts):
        if (
            d.kind != "other"
            and d.driver == VFIO_DRIVER
            and d.iommu_group is not None
            and str(d.iommu_group) not in facts.dev_vfio
        ):
            missing.append(f"/dev/vfio/{d.iommu_group} ({d.bdf})")
    missing = sorted(set(missing))
    if missing:
        b.details.extend(missing)
        return b.fail(
            f"missing {', '.join(missing)}",
            "rebind the device to vfio-pci (driverctl set-override <BDF> vfio-pci) and check udev rules",
        )
    groups = sorted(n for n in facts.dev_vfio if n.isdigit())
    if facts.dev_iommu:
        b.details.append("/dev/iommu present (iommufd)")
    return b.ok(f"/dev/vfio/vfio and {len(groups)} group nodes present")


# --- memory -------------------------------------------------------------------------------------


def check_hugepages(facts: HostFacts, options: Options) -> CheckResult:
    b = _Builder("hugepages", "Hugepages for guest memory")
    hint = (
        "reserve hugepages at boot: 'default_hugepagesz=1G hugepagesz=1G hugepages=<N>' on the kernel command "
        "line (or echo N > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages), and mount hugetlbfs "
        "on /dev/hugepages; Kata's enable_hugepages=true backs guest RAM with them (deploy/kata/)"
    )
    if facts.meminfo is None:
        return b.fail("cannot read /proc/meminfo: is --proc-root right?", "point --proc-root at the host's /proc")
    pools = dict(facts.hugepage_pools)
    size_kib = facts.meminfo.get("Hugepagesize", 0)
    if not pools and size_kib:
        pools[size_kib] = facts.meminfo.get("HugePages_Total", 0)
    total_kib = sum(size * count for size, count in pools.items())
    free_kib = facts.meminfo.get("HugePages_Free", 0) * size_kib if len(pools) <= 1 else None
    for size, count in sorted(pools.items()):
        b.details.append(f"{count} x {size // 1024} MiB pages")
    if total_kib == 0:
        return b.fail("no hugepages reserved: Kata GPU VMs with hugepage-backed memory cannot start", hint)
    if facts.mounts is not None and not any(fstype == "hugetlbfs" for _, _, fstype in facts.mounts):
        return b.fail(
            "hugepages reserved but no hugetlbfs is mounted",
            "mount -t hugetlbfs nodev /dev/hugepages (and add it to /etc/fstab)",
        )
    if total_kib < options.min_hugepages_kib:
        return b.warn(
            f"only {total_kib // (1024 * 1024)} GiB of hugepages; one GPU VM wants at least "
            f"{options.min_hugepages_kib // (1024 * 1024)} GiB",
            hint,
        )
    if 1024 * 1024 not in pools:
        b.details.append("no 1 GiB pages: 2 MiB pages work, 1 GiB pages map large guests and BARs faster")
    free = f", {free_kib // (1024 * 1024)} GiB free" if free_kib is not None else ""
    return b.ok(f"{total_kib // (1024 * 1024)} GiB of hugepages{free}")


# --- kubelet and CDI ------------------------------------------------------------------------------


def check_cdi_dir(facts: HostFacts, options: Options) -> CheckResult:
    b = _Builder("cdi-dir", "CDI spec directory")
    cdi = facts.cdi
    assert cdi is not None
    if not cdi.exists:
        return b.fail(
            f"{cdi.path} does not exist: the device plugin has nowhere to write the CDI spec",
            f"mkdir -p {cdi.path} (the device plugin's DaemonSet also creates it)",
        )
    if not cdi.is_dir:
        return b.fail(f"{cdi.path} is not a directory", f"remove {cdi.path} and mkdir -p it")
    specs = [e for e in cdi.entries if e.endswith((".json", ".yaml", ".yml"))]
    b.details.extend(f"spec: {s}" for s in specs)
    return b.ok(f"{cdi.path} exists ({len(specs)} spec file(s))")


def check_kubelet(facts: HostFacts, options: Options) -> CheckResult:
    b = _Builder("kubelet-device-plugins", "kubelet device plugin directory")
    dp = facts.device_plugins
    assert dp is not None and facts.kubelet_socket is not None
    if not dp.is_dir:
        return b.fail(
            f"{dp.path} missing: no kubelet on this node (or --kubelet-dir is wrong)",
            "install and start the kubelet; join the node to the cluster",
        )
    if not facts.kubelet_socket.is_socket:
        return b.fail(
            f"{facts.kubelet_socket.path} is not a socket: the kubelet is not running",
            "systemctl restart kubelet; journalctl -u kubelet",
        )
    plugins = [e for e in dp.entries if e.endswith(".sock") and e != "kubelet.sock"]
    b.details.extend(f"plugin socket: {p}" for p in plugins)
    return b.ok(f"kubelet.sock present ({len(plugins)} plugin socket(s))")


# --- containerd -----------------------------------------------------------------------------------


def _cri_sections(config: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """(config version, CRI table holding enable_cdi, table holding containerd.runtimes)."""
    plugins = config.get("plugins", {}) or {}
    version = int(config.get("version", 1) or 1)
    if version >= 3:
        runtime = plugins.get("io.containerd.cri.v1.runtime", {}) or {}
        return version, runtime, runtime
    cri = plugins.get("io.containerd.grpc.v1.cri", {}) or plugins.get("cri", {}) or {}
    return version, cri, cri


def _containerd_unreadable(b: _Builder, facts: HostFacts) -> CheckResult | None:
    c = facts.containerd
    assert c is not None
    if not c.exists:
        return b.fail(
            f"{c.path} not found",
            "containerd config default > /etc/containerd/config.toml, then add "
            "deploy/containerd/kata-qemu-nvidia-gpu.toml (see deploy/containerd/README.md)",
        )
    if c.error:
        return b.fail(
            f"containerd config does not parse: {c.error}", "fix the TOML syntax, then systemctl restart containerd"
        )
    return None


def check_containerd_cri(facts: HostFacts, options: Options) -> CheckResult:
    b = _Builder("containerd-cri", "containerd CRI plugin")
    if (bad := _containerd_unreadable(b, facts)) is not None:
        return bad
    config = facts.containerd.config or {}  # type: ignore[union-attr]
    disabled = set(config.get("disabled_plugins", []) or [])
    b.details.extend(f"config: {s}" for s in facts.containerd.sources)  # type: ignore[union-attr]
    if disabled & {"cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images"}:
        return b.fail(
            f"the CRI plugin is disabled (disabled_plugins = {sorted(disabled)})",
            'remove "cri" from disabled_plugins in /etc/containerd/config.toml (distribution '
            "packages ship it disabled), then systemctl restart containerd",
        )
    return b.ok(f"CRI enabled (config version {config.get('version', 1)})")


def check_containerd_cdi(facts: HostFacts, options: Options) -> CheckResult:
    b = _Builder("containerd-cdi", "containerd CDI enabled")
    if (bad := _containerd_unreadable(b, facts)) is not None:
        return bad
    version, cri, _ = _cri_sections(facts.containerd.config or {})  # type: ignore[union-attr]
    # containerd 2.x (config version 3) enables CDI by default; 1.7 (version 2) does not.
    enabled = cri.get("enable_cdi", version >= 3)
    spec_dirs = cri.get("cdi_spec_dirs", ["/etc/cdi", "/var/run/cdi"])
    b.details.append(f"enable_cdi = {str(enabled).lower()}, cdi_spec_dirs = {spec_dirs}")
    table = "io.containerd.cri.v1.runtime" if version >= 3 else "io.containerd.grpc.v1.cri"
    if not enabled:
        return b.fail(
            "CDI is off: containerd ignores the device plugin's CDI devices (the VM gets no GPU)",
            f'set enable_cdi = true under [plugins."{table}"], then systemctl restart containerd',
        )
    # /var/run is /run on every distribution; the doctor may read the directory
    # under another root (tests, a container), so its own path counts too.
    wanted = {"/var/run/cdi", "/run/cdi", str(facts.paths.cdi_dir)}
    if not wanted & set(spec_dirs):
        return b.fail(
            f"cdi_spec_dirs {spec_dirs} does not include /var/run/cdi where the device plugin writes",
            f'add "/var/run/cdi" to cdi_spec_dirs under [plugins."{table}"]',
        )
    return b.ok(f"CDI enabled, reading {', '.join(spec_dirs)}")


def check_kata_runtime(facts: HostFacts, options: Options) -> CheckResult:
    b = _Builder("kata-runtime", f"containerd runtime {RUNTIME}")
    if (bad := _containerd_unreadable(b, facts)) is not None:
        return bad
    version, _, runtimes_table = _cri_sections(facts.containerd.config or {})  # type: ignore[union-attr]
    runtimes = (runtimes_table.get("containerd") or {}).get("runtimes") or {}
    hint = (
        'install deploy/containerd/kata-qemu-nvidia-gpu.toml (imports = ["/etc/containerd/conf.d/*.toml"]), '
        "then systemctl restart containerd"
    )
    runtime = runtimes.get(RUNTIME)
    if runtime is None:
        b.details.append(f"configured runtimes: {sorted(runtimes) or 'none'}")
        return b.fail(f"no runtime {RUNTIME!r}: pods with runtimeClassName {RUNTIME} fail to start", hint)
    b.details.append(f"runtime_type = {runtime.get('runtime_type')}")
    if runtime.get("runtime_type") != RUNTIME_TYPE:
        return b.fail(f"runtime_type is {runtime.get('runtime_type')!r}, want {RUNTIME_TYPE!r}", hint)
    config_path = (runtime.get("options") or {}).get("ConfigPath")
    if config_path:
        b.details.append(f"ConfigPath = {config_path}")
    if not runtime.get("privileged_without_host_devices", False):
        return b.warn(
            "privileged_without_host_devices is not set: a privileged pod would get every host device in its VM",
            f"set privileged_without_host_devices = true in the {RUNTIME} runtime table",
        )
    if not config_path:
        return b.warn(
            "no options.ConfigPath: Kata uses its generic configuration, not the GPU one",
            'set ConfigPath = "/opt/kata/share/defaults/kata-containers/configuration-qemu-nvidia-gpu.toml"',
        )
    return b.ok(f"{RUNTIME} -> {RUNTIME_TYPE}")


# --- libvirt and the fabric service ----------------------------------------------------------------


def check_libvirt(facts: HostFacts, options: Options) -> CheckResult:
    b = _Builder("libvirt", "libvirt reachable")
    sock = facts.libvirt
    assert sock is not None
    hint = "start libvirtd (Debian/Ubuntu: systemctl enable --now libvirtd; modular daemons: virtqemud.socket)"
    if not sock.exists:
        return b.fail(f"{sock.path} does not exist: libvirtd is not running; the fabric service VM cannot start", hint)
    if not sock.is_socket:
        return b.fail(f"{sock.path} is not a socket", hint)
    if not sock.connected:
        return b.fail(f"cannot connect to {sock.path}: {sock.error}", hint + "; check the socket's group (libvirt)")
    return b.ok(f"{sock.path} accepts connections")


def check_fabric_service(facts: HostFacts, options: Options) -> CheckResult:
    b = _Builder("fabric-service", "fabric service VM and Fabric Manager")
    fabric = facts.fabric
    assert fabric is not None
    switches = any(d.is_nvswitch for d in _pci(facts))
    hint = (
        "kubectl -n gpucaas-system logs ds/gpucaas-fabric on this node; the service VM's console: "
        "virsh console gpucaas-fabric"
    )
    if not fabric.socket.is_socket:
        if not switches and not options.expect_nvswitches:
            return b.skip(f"no fabric service socket at {fabric.socket.path} and no NVSwitch: NVLink-less node")
        return b.fail(
            f"no fabric service socket at {fabric.socket.path}: multi-GPU containers cannot get NVLink",
            "deploy the gpucaas fabric DaemonSet on this node (label it gpucaas.dev/gpu-node=true)",
        )
    if fabric.health is None:
        return b.fail(f"fabric service not answering: {fabric.error}", hint)
    fm = fabric.health.get("fabric_manager") or {}
    vm = fabric.health.get("service_vm") or {}
    failed = list(fabric.health.get("failed_gpus") or [])
    b.details.append(f"fabric manager: reachable={fm.get('reachable')} backend={fm.get('backend')}")
    b.details.append(f"service VM: state={vm.get('state')} restarts={vm.get('restarts')}")
    topo = fabric.topology or {}
    layout = topo.get("layout") or {}
    if layout:
        b.details.append(
            f"GPU layout: {layout.get('name')} ({layout.get('source')}, "
            f"{'verified' if layout.get('verified') else 'unverified on hardware'})"
        )
    for g in topo.get("gpus") or []:
        b.details.append(
            f"GPU {g.get('physical_id')} (module id) -> {g.get('pci_bus_id') or '?'} "
            f"[{g.get('pci_source', 'fabric-manager')}]"
        )
    # "unmanaged": Fabric Manager runs outside a VM this service manages; its reachability decides.
    if vm.get("state") not in ("running", "unmanaged"):
        return b.fail(f"the Fabric Manager service VM is {vm.get('state')!r}, not running", hint)
    if not fm.get("reachable"):
        return b.fail("Fabric Manager does not answer: no NVLink partition can be activated", hint)
    problems = list(topo.get("layout_problems") or [])
    unmapped = [g.get("physical_id") for g in topo.get("gpus") or [] if not g.get("pci_bus_id")]
    if problems or unmapped:
        b.details.extend(f"layout: {p}" for p in problems)
        return b.warn(
            f"GPU layout does not match Fabric Manager or sysfs"
            f"{f' (GPUs {unmapped} have no PCI address)' if unmapped else ''}",
            "set GPUCAAS_FABRIC_PLATFORM (fabric.platform) to the board's layout or a layout file; "
            "see docs/hardware-runbook.md, step 'mapping'",
        )
    if failed:
        b.details.extend(f"failed GPU: {g}" for g in failed)
        return b.warn(
            f"{len(failed)} GPU(s) failed in Fabric Manager: {', '.join(failed)}",
            "caasctl gpus --node <node>; reset or replace the GPU, then restart the fabric service",
        )
    if int(vm.get("restarts") or 0) > 0:
        return b.ok(f"service VM running (restarted {vm.get('restarts')}x), Fabric Manager answering")
    return b.ok(f"service VM {vm.get('state')}, Fabric Manager ({fm.get('backend')}) answering")


def check_kubernetes(facts: HostFacts, options: Options) -> CheckResult:
    b = _Builder("kubernetes-api", "Kubernetes API (as the node's components reach it)")
    kube = facts.kube
    if kube is None:
        return b.skip("no kubeconfig given (--kubeconfig) and not running in a pod")
    b.details.append(f"server: {kube.server or '?'}")
    if kube.ok:
        return b.ok(f"{kube.server} answers; GPULeases can be listed")
    if kube.kind == "Forbidden":
        return b.fail(
            kube.error or "forbidden",
            "the identity lacks a permission of the chart's device-plugin ClusterRole: check the "
            "ClusterRoleBinding of its ServiceAccount (kubectl auth can-i list gpuleases.gpucaas.dev --as ...)",
        )
    if kube.kind == "NotFound":
        return b.fail(
            f"the GPULease resource is not served: {kube.error}",
            "install the gpucaas CRDs (helm install of deploy/helm/gpucaas, or kubectl apply -f core/crds/)",
        )
    if kube.kind == "Unauthorized":
        return b.fail(
            f"credentials refused: {kube.error}",
            "renew the token in the kubeconfig (or the pod's ServiceAccount token)",
        )
    return b.fail(
        kube.error or "Kubernetes unreachable",
        "check the API server address, the node's route and firewall to it, and that it is up",
    )


Check = Callable[[HostFacts, Options], CheckResult]

#: Every check, in the order the report shows them.
CHECKS: tuple[Check, ...] = (
    check_iommu,
    check_gpus_vfio,
    check_nvswitches_vfio,
    check_memory_controller_vfio,
    check_nvidia_modules,
    check_iommu_groups,
    check_vfio_device_nodes,
    check_hugepages,
    check_cdi_dir,
    check_kubelet,
    check_containerd_cri,
    check_containerd_cdi,
    check_kata_runtime,
    check_libvirt,
    check_fabric_service,
    check_kubernetes,
)

CHECK_IDS: tuple[str, ...] = (
    "iommu",
    "gpus-vfio",
    "nvswitches-vfio",
    "memory-controller-vfio",
    "nvidia-modules",
    "iommu-groups",
    "vfio-device-nodes",
    "hugepages",
    "cdi-dir",
    "kubelet-device-plugins",
    "containerd-cri",
    "containerd-cdi",
    "kata-runtime",
    "libvirt",
    "fabric-service",
    "kubernetes-api",
)


def run_checks(facts: HostFacts, options: Options | None = None, *, only: set[str] | None = None) -> list[CheckResult]:
    options = options or Options()
    results = []
    for check_id, check in zip(CHECK_IDS, CHECKS, strict=True):
        if only and check_id not in only:
            continue
        result = check(facts, options)
        assert result.id == check_id, (result.id, check_id)
        results.append(result)
    return results
