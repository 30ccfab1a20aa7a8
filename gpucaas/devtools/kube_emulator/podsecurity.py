"""Pod Security admission: the Pod Security Standards, per namespace labels.

Modelled on k8s.io/pod-security-admission (staging/src/k8s.io/pod-security-admission
in kubernetes/kubernetes): ``api/helpers.go`` (labels
``pod-security.kubernetes.io/{enforce,warn,audit}[-version]``, levels ``privileged``,
``baseline``, ``restricted``), ``policy/check_*.go`` (one function per control below,
with its ForbiddenReason and ForbiddenDetail wording), ``admission/admission.go``
(pods: ``enforce`` refuses with ``violates PodSecurity "<level>:<version>": ...``, ``warn``
adds ``would violate PodSecurity ...`` warnings; workload resources with a pod template
are never refused, they only get the warnings, for ``enforce`` and ``warn`` alike).

Every version label is evaluated with the ``latest`` checks (the emulator keeps no
per-version check history); an unknown level is treated as ``restricted`` (fail closed).
``audit`` annotations are not written to an audit log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from gpucaas.devtools.kube_emulator import errors

PREFIX = "pod-security.kubernetes.io/"
LEVELS = ("privileged", "baseline", "restricted")
POD_TEMPLATE_KINDS = {("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets"),
                      ("apps", "daemonsets"), ("batch", "jobs"), ("", "replicationcontrollers"),
                      ("batch", "cronjobs"), ("", "podtemplates")}

# check_capabilities_baseline.go: the capabilities a container may add at baseline.
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
# check_sysctls.go: the safe sysctls.
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
# check_restrictedVolumes.go: the only volume sources allowed at restricted.
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
# check_seLinuxOptions.go
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}

Pod = dict[str, Any]
Result = tuple[str, str]  # (ForbiddenReason, ForbiddenDetail)


def _containers(spec: Pod) -> Iterator[dict[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(c: dict[str, Any]) -> dict[str, Any]:
    return c.get("securityContext") or {}


def _plural(word: str, n: int) -> str:
    return word if n == 1 else word + "s"


def _quote(names: list[str]) -> str:
    return ", ".join(f'"{n}"' for n in names)


def _who(names: list[str]) -> str:
    return f"{_plural('container', len(names))} {_quote(names)}"


# ---- baseline -------------------------------------------------------------------------

def host_process(spec: Pod) -> Result | None:
    bad = [c["name"] for c in _containers(spec) if ((_sc(c).get("windowsOptions") or {}).get("hostProcess"))]
    pod = ((spec.get("securityContext") or {}).get("windowsOptions") or {}).get("hostProcess")
    if pod or bad:
        who = " and ".join(([f"pod"] if pod else []) + ([_who(bad)] if bad else []))
        return "hostProcess", f"{who} must not set securityContext.windowsOptions.hostProcess=true"
    return None


def host_namespaces(spec: Pod) -> Result | None:
    bad = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    return ("host namespaces", ", ".join(bad)) if bad else None


def privileged(spec: Pod) -> Result | None:
    bad = [c["name"] for c in _containers(spec) if _sc(c).get("privileged")]
    return ("privileged", f"{_who(bad)} must not set securityContext.privileged=true") if bad else None


def capabilities_baseline(spec: Pod) -> Result | None:
    bad: list[str] = []
    caps: list[str] = []
    for c in _containers(spec):
        added = [x for x in ((_sc(c).get("capabilities") or {}).get("add") or []) if x not in BASELINE_CAPABILITIES]
        if added:
            bad.append(c["name"])
            caps.extend(x for x in added if x not in caps)
    if not bad:
        return None
    return "non-default capabilities", f"{_who(bad)} must not include {_quote(caps)} in securityContext.capabilities.add"


def host_path_volumes(spec: Pod) -> Result | None:
    bad = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    return ("hostPath volumes", f"{_plural('volume', len(bad))} {_quote(bad)}") if bad else None


def host_ports(spec: Pod) -> Result | None:
    bad: list[str] = []
    ports: list[str] = []
    for c in _containers(spec):
        used = [str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")]
        if used:
            bad.append(c["name"])
            ports.extend(used)
    if not bad:
        return None
    verb = "uses" if len(bad) == 1 else "use"
    return "hostPort", f"{_who(bad)} {verb} {_plural('hostPort', len(ports))} {', '.join(ports)}"


def app_armor(spec: Pod, annotations: dict[str, str]) -> Result | None:
    bad: list[str] = []
    for key, value in annotations.items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
                value == "runtime/default" or value.startswith("localhost/")):
            bad.append(f'{key}="{value}"')
    profiles = [(spec.get("securityContext") or {}).get("appArmorProfile")]
    profiles += [_sc(c).get("appArmorProfile") for c in _containers(spec)]
    if any((p or {}).get("type") == "Unconfined" for p in profiles):
        bad.append('securityContext.appArmorProfile.type="Unconfined"')
    return (f"forbidden AppArmor {_plural('profile', len(bad))}", ", ".join(bad)) if bad else None


def selinux(spec: Pod) -> Result | None:
    opts = [((spec.get("securityContext") or {}).get("seLinuxOptions") or {})]
    opts += [(_sc(c).get("seLinuxOptions") or {}) for c in _containers(spec)]
    bad: list[str] = []
    for o in opts:
        if o.get("type", "") not in SELINUX_TYPES:
            bad.append(f'type "{o["type"]}"')
        if o.get("user"):
            bad.append(f'user "{o["user"]}"')
        if o.get("role"):
            bad.append(f'role "{o["role"]}"')
    return ("seLinuxOptions", f"forbidden securityContext.seLinuxOptions: {', '.join(bad)}") if bad else None


def proc_mount(spec: Pod) -> Result | None:
    bad = [c["name"] for c in _containers(spec) if _sc(c).get("procMount") not in (None, "", "Default")]
    if not bad:
        return None
    return "procMount", f'{_who(bad)} must not set securityContext.procMount to "Unmasked"'


def seccomp_baseline(spec: Pod) -> Result | None:
    who: list[str] = []
    if ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type") == "Unconfined":
        who.append("pod")
    bad = [c["name"] for c in _containers(spec) if (_sc(c).get("seccompProfile") or {}).get("type") == "Unconfined"]
    if bad:
        who.append(_who(bad))
    return ("seccompProfile", f'{" and ".join(who)} must not set securityContext.seccompProfile.type to "Unconfined"'
            ) if who else None


def sysctls(spec: Pod) -> Result | None:
    bad = [s.get("name", "") for s in (spec.get("securityContext") or {}).get("sysctls") or []
           if s.get("name") not in SAFE_SYSCTLS]
    return ("forbidden sysctls", ", ".join(bad)) if bad else None


# ---- restricted -----------------------------------------------------------------------

def restricted_volumes(spec: Pod) -> Result | None:
    bad: list[str] = []
    kinds: list[str] = []
    for v in spec.get("volumes") or []:
        sources = [k for k in v if k != "name"]
        forbidden = [k for k in sources if k not in RESTRICTED_VOLUMES]
        if forbidden:
            bad.append(v["name"])
            kinds.extend(k for k in forbidden if k not in kinds)
    if not bad:
        return None
    verb = "uses" if len(bad) == 1 else "use"
    return ("restricted volume types",
            f"{_plural('volume', len(bad))} {_quote(bad)} {verb} {_plural('restricted volume type', len(kinds))} "
            f"{_quote(kinds)}")


def allow_privilege_escalation(spec: Pod) -> Result | None:
    bad = [c["name"] for c in _containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False]
    if not bad:
        return None
    return "allowPrivilegeEscalation != false", f"{_who(bad)} must set securityContext.allowPrivilegeEscalation=false"


def run_as_non_root(spec: Pod) -> Result | None:
    pod = (spec.get("securityContext") or {}).get("runAsNonRoot")
    setters: list[str] = ["pod"] if pod is False else []
    explicit = [c["name"] for c in _containers(spec) if _sc(c).get("runAsNonRoot") is False]
    implicit = [c["name"] for c in _containers(spec) if _sc(c).get("runAsNonRoot") is None and pod is not True]
    if explicit:
        setters.append(_who(explicit))
    if setters:
        return "runAsNonRoot != true", f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false"
    if implicit:
        return "runAsNonRoot != true", f"pod or {_who(implicit)} must set securityContext.runAsNonRoot=true"
    return None


def run_as_user(spec: Pod) -> Result | None:
    who: list[str] = ["pod"] if (spec.get("securityContext") or {}).get("runAsUser") == 0 else []
    bad = [c["name"] for c in _containers(spec) if _sc(c).get("runAsUser") == 0]
    if bad:
        who.append(_who(bad))
    return ("runAsUser=0", f"{' and '.join(who)} must not set runAsUser=0") if who else None


def seccomp_restricted(spec: Pod) -> Result | None:
    ok = ("RuntimeDefault", "Localhost")
    pod_type = ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
    who: list[str] = []
    if pod_type is not None and pod_type not in ok:
        who.append("pod")
    explicit = [c["name"] for c in _containers(spec)
                if (_sc(c).get("seccompProfile") or {}).get("type") not in (None, *ok)]
    if explicit:
        who.append(_who(explicit))
    if who:
        types = sorted({t for t in [pod_type, *[(_sc(c).get("seccompProfile") or {}).get("type")
                                               for c in _containers(spec)]] if t is not None and t not in ok})
        return "seccompProfile", (f"{' and '.join(who)} must not set securityContext.seccompProfile.type to "
                                  f"{_quote(types)}")
    if pod_type in ok:
        return None
    implicit = [c["name"] for c in _containers(spec) if (_sc(c).get("seccompProfile") or {}).get("type") is None]
    if implicit:
        return "seccompProfile", (f'pod or {_who(implicit)} must set securityContext.seccompProfile.type to '
                                  f'"RuntimeDefault" or "Localhost"')
    return None


def capabilities_restricted(spec: Pod) -> Result | None:
    no_drop: list[str] = []
    bad_add: list[str] = []
    caps: list[str] = []
    for c in _containers(spec):
        capabilities = _sc(c).get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            no_drop.append(c["name"])
        added = [x for x in capabilities.get("add") or [] if x != "NET_BIND_SERVICE"]
        if added:
            bad_add.append(c["name"])
            caps.extend(x for x in added if x not in caps)
    details: list[str] = []
    if no_drop:
        details.append(f'{_who(no_drop)} must set securityContext.capabilities.drop=["ALL"]')
    if bad_add:
        details.append(f"{_who(bad_add)} must not include {_quote(caps)} in securityContext.capabilities.add")
    return ("unrestricted capabilities", "; ".join(details)) if details else None


Check = Callable[[Pod], "Result | None"]
# Baseline checks in check-ID order, minus those a restricted check overrides at restricted.
BASELINE: list[tuple[str, Check]] = [
    ("capabilities_baseline", capabilities_baseline),
    ("hostNamespaces", host_namespaces),
    ("hostPathVolumes", host_path_volumes),
    ("hostPorts", host_ports),
    ("privileged", privileged),
    ("procMount", proc_mount),
    ("seLinuxOptions", selinux),
    ("seccompProfile_baseline", seccomp_baseline),
    ("sysctls", sysctls),
    ("windowsHostProcess", host_process),
]
RESTRICTED: list[tuple[str, Check]] = [
    ("allowPrivilegeEscalation", allow_privilege_escalation),
    ("capabilities_restricted", capabilities_restricted),
    ("restrictedVolumes", restricted_volumes),
    ("runAsNonRoot", run_as_non_root),
    ("runAsUser", run_as_user),
    ("seccompProfile_restricted", seccomp_restricted),
]
OVERRIDDEN_AT_RESTRICTED = {"capabilities_baseline", "hostPathVolumes", "seccompProfile_baseline"}


def evaluate(level: str, spec: Pod, annotations: dict[str, str] | None = None) -> list[Result]:
    """The violations of ``spec`` (a PodSpec) at ``level``, in the order the real checks report them."""
    if level == "privileged":
        return []
    out: list[Result] = []
    apparmor = app_armor(spec, annotations or {})
    if apparmor:
        out.append(apparmor)
    for check_id, check in BASELINE:
        if level == "restricted" and check_id in OVERRIDDEN_AT_RESTRICTED:
            continue
        result = check(spec)
        if result:
            out.append(result)
    if level == "restricted":
        for _, check in RESTRICTED:
            result = check(spec)
            if result:
                out.append(result)
    return out


def namespace_policy(namespace: dict[str, Any] | None, mode: str) -> tuple[str, str] | None:
    """(level, version) a namespace's ``mode`` label asks for; None when unlabelled."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    level = labels.get(PREFIX + mode)
    if level is None:
        return None
    version = labels.get(f"{PREFIX}{mode}-version") or "latest"
    return (level if level in LEVELS else "restricted"), version


def _describe(results: list[Result]) -> str:
    return ", ".join(f"{reason} ({detail})" for reason, detail in results)


def pod_template(group: str, plural: str, body: dict[str, Any]) -> tuple[Pod, dict[str, str]] | None:
    """(PodSpec, annotations) of a pod or a workload's pod template; None for other kinds."""
    if (group, plural) == ("", "pods"):
        return body.get("spec") or {}, (body.get("metadata") or {}).get("annotations") or {}
    if (group, plural) not in POD_TEMPLATE_KINDS:
        return None
    spec = body.get("spec") or {}
    if plural == "cronjobs":
        spec = ((spec.get("jobTemplate") or {}).get("spec") or {})
    template = (body.get("template") if plural == "podtemplates" else spec.get("template")) or {}
    return template.get("spec") or {}, (template.get("metadata") or {}).get("annotations") or {}


def admit(group: str, plural: str, body: Any, namespace: dict[str, Any] | None) -> list[str]:
    """Admit a create/update of ``body`` in ``namespace``; returns warnings, raises 403 for pods.

    ``Forbidden``: ``pods "<name>" is forbidden: violates PodSecurity "<level>:<version>": ...``.
    """
    if not isinstance(body, dict):
        return []
    found = pod_template(group, plural, body)
    if found is None:
        return []
    spec, annotations = found
    is_pod = (group, plural) == ("", "pods")
    warnings: list[str] = []
    enforce = namespace_policy(namespace, "enforce")
    if enforce:
        results = evaluate(enforce[0], spec, annotations)
        if results:
            policy = f'"{enforce[0]}:{enforce[1]}"'
            if is_pod:
                name = (body.get("metadata") or {}).get("name", "")
                raise errors.Forbidden(f'pods "{name}" is forbidden: violates PodSecurity {policy}: {_describe(results)}',
                                       details={"name": name, "kind": "pods"})
            warnings.append(f"would violate PodSecurity {policy}: {_describe(results)}")
    warn = namespace_policy(namespace, "warn")
    if warn and warn != enforce:
        results = evaluate(warn[0], spec, annotations)
        if results:
            warnings.append(f'would violate PodSecurity "{warn[0]}:{warn[1]}": {_describe(results)}')
    return warnings
