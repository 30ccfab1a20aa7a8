"""The sandbox's stand-in for kube-controller-manager's resourceclaim controller.

Modelled on kubernetes ``pkg/controller/resourceclaim/controller.go`` (the parts gpucaas
uses):

* for each pod entry in ``spec.resourceClaims`` with a ``resourceClaimTemplateName`` and
  no claim yet, create a ResourceClaim from the template's ``spec``: name generated as
  ``<pod>-<claim>-<random suffix>``, annotation ``resource.kubernetes.io/pod-claim-name``
  naming the pod's claim entry, an ownerReference to the pod (controller, blocking
  deletion), and report it in the pod's ``status.resourceClaimStatuses``; a claim already
  owned by the pod for that entry is found again rather than created twice (after a
  crash between create and the status write);
* for each claim reserved for pods: pods that are gone or done are removed from
  ``status.reservedFor``; a claim reserved for nobody is deallocated (``status.allocation``
  cleared), and a claim generated for a pod that is gone or done is deleted (its
  ownerReference would also let the garbage collector remove it with the pod).

Not modelled: the finalizer ``resource.kubernetes.io/delete-protection``, metrics,
extended-resource claims.
"""

from __future__ import annotations

import logging
import secrets
import string
import threading
from typing import Any

from kubernetes import client

from gpucaas.core.kube import Conflict, Kube, KubeError, NotFound
from gpucaas.programs.sandbox import pod_wakeup

log = logging.getLogger(__name__)

GROUP, VERSION = "resource.k8s.io", "v1"
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
_SUFFIX = string.ascii_lowercase + string.digits


def generated_name(pod_name: str, claim_name: str) -> str:
    """``<pod>-<claim>-xxxxx``, cut to fit a name as generateName does (63 - 5 + suffix)."""
    base = f"{pod_name}-{claim_name}-"[:58]
    return base + "".join(secrets.choice(_SUFFIX) for _ in range(5))


def pod_done(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or bool(
        pod["metadata"].get("deletionTimestamp"))


class ClaimController:
    def __init__(self, api: client.ApiClient, resync_seconds: float = 2.0) -> None:
        self.kube = Kube.of(api)
        self.api = self.kube.api_client
        self.core = self.kube.core
        self.custom = self.kube.custom
        self.resync_seconds = resync_seconds
        self._stop = threading.Event()

    # --- pods -> claims -------------------------------------------------------------
    def _claims(self, namespace: str | None = None) -> list[dict[str, Any]]:
        if namespace is None:
            return self.kube.call(self.custom.list_cluster_custom_object, GROUP, VERSION, "resourceclaims",
                                  idempotent=True, what="list ResourceClaims")["items"]
        return self.kube.call(self.custom.list_namespaced_custom_object, GROUP, VERSION, namespace,
                              "resourceclaims", idempotent=True, what="list ResourceClaims")["items"]

    def sync_pod(self, pod: dict[str, Any]) -> None:
        md = pod["metadata"]
        entries = [e for e in pod["spec"].get("resourceClaims") or [] if e.get("resourceClaimTemplateName")]
        if not entries or pod_done(pod):
            return
        statuses = list((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        have = {s["name"] for s in statuses}
        missing = [e for e in entries if e["name"] not in have]
        if not missing:
            return
        owned = {c["metadata"].get("annotations", {}).get(POD_CLAIM_NAME): c["metadata"]["name"]
                 for c in self._claims(md["namespace"])
                 if any(r.get("uid") == md["uid"] for r in c["metadata"].get("ownerReferences") or [])}
        for entry in missing:
            name = owned.get(entry["name"]) or self._create_claim(pod, entry)
            if name is None:
                return
            statuses.append({"name": entry["name"], "resourceClaimName": name})
        try:
            self.kube.call(self.core.patch_namespaced_pod_status, md["name"], md["namespace"],
                           {"status": {"resourceClaimStatuses": statuses}}, idempotent=True,
                           what=f"report the claims of pod {md['namespace']}/{md['name']}")
        except NotFound:
            return

    def _create_claim(self, pod: dict[str, Any], entry: dict[str, Any]) -> str | None:
        md = pod["metadata"]
        template_name = entry["resourceClaimTemplateName"]
        try:
            template = self.kube.call(self.custom.get_namespaced_custom_object, GROUP, VERSION, md["namespace"],
                                      "resourceclaimtemplates", template_name, idempotent=True,
                                      what=f"read ResourceClaimTemplate {md['namespace']}/{template_name}")
        except NotFound:
            log.warning("pod %s/%s: ResourceClaimTemplate %s not found", md["namespace"], md["name"], template_name)
            return None
        tmeta = template["spec"].get("metadata") or {}
        body = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim",
            "metadata": {
                "name": generated_name(md["name"], entry["name"]), "namespace": md["namespace"],
                "labels": dict(tmeta.get("labels") or {}),
                "annotations": {**(tmeta.get("annotations") or {}), POD_CLAIM_NAME: entry["name"]},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": md["name"], "uid": md["uid"],
                                     "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": template["spec"]["spec"],
        }
        created = self.kube.call(self.custom.create_namespaced_custom_object, GROUP, VERSION, md["namespace"],
                                 "resourceclaims", body,
                                 what=f"create the ResourceClaim of pod {md['namespace']}/{md['name']}")
        log.info("created ResourceClaim %s/%s for pod %s from template %s", md["namespace"],
                 created["metadata"]["name"], md["name"], template_name)
        return created["metadata"]["name"]

    # --- claims: reservedFor, deallocation, deletion ----------------------------------
    def sync_claims(self, pods_by_uid: dict[str, dict[str, Any]]) -> None:
        for claim in self._claims():
            meta, status = claim["metadata"], dict(claim.get("status") or {})
            reserved = status.get("reservedFor") or []
            keep = [r for r in reserved if r.get("resource") != "pods"
                    or (r.get("uid") in pods_by_uid and not pod_done(pods_by_uid[r["uid"]]))]
            owner = next((r for r in meta.get("ownerReferences") or [] if r.get("kind") == "Pod"), None)
            owner_gone = owner is not None and (owner["uid"] not in pods_by_uid or pod_done(pods_by_uid[owner["uid"]]))
            try:
                if not keep and owner_gone:
                    self.kube.call(self.custom.delete_namespaced_custom_object, GROUP, VERSION, meta["namespace"],
                                   "resourceclaims", meta["name"], what=f"delete ResourceClaim {meta['name']}")
                    log.info("deleted ResourceClaim %s/%s: its pod is done", meta["namespace"], meta["name"])
                elif len(keep) != len(reserved) or (not keep and status.get("allocation")):
                    status["reservedFor"] = keep or None
                    if not keep:
                        status.pop("allocation", None)
                        status.pop("devices", None)
                    status = {k: v for k, v in status.items() if v is not None}
                    self.kube.call(self.custom.replace_namespaced_custom_object_status, GROUP, VERSION,
                                   meta["namespace"], "resourceclaims", meta["name"], {**claim, "status": status},
                                   what=f"update ResourceClaim {meta['name']} status")
                    log.info("ResourceClaim %s/%s: reserved for %d pod(s)%s", meta["namespace"], meta["name"],
                             len(keep), "" if keep else ", deallocated")
            except (NotFound, Conflict):
                continue  # changed meanwhile: the next pass sees it again

    def sync(self) -> None:
        pods = self.api.sanitize_for_serialization(self.core.list_pod_for_all_namespaces().items)
        for pod in pods:
            try:
                self.sync_pod(pod)
            except (NotFound, Conflict):
                continue
        self.sync_claims({p["metadata"]["uid"]: p for p in pods})

    def run(self) -> None:
        wake = threading.Event()
        pod_wakeup.start(self.core, wake, self._stop)
        while not self._stop.is_set():
            try:
                self.sync()
            except KubeError as exc:
                log.warning("claim controller pass failed, retrying: %s", exc.summary())
            except (client.ApiException, OSError) as exc:
                log.warning("claim controller pass failed, retrying: %s", exc)
            wake.wait(self.resync_seconds)
            wake.clear()

    def stop(self) -> None:
        self._stop.set()
