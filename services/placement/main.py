"""Entry module of ``gpucaas scheduler-extender``: load settings, configure logging, wire, run — only."""

from __future__ import annotations

import logging

from services.placement.settings import PlacementSettings

#: the Lease whose holder answers Kueue's partition AdmissionCheck (``services.placement.leader``)
PARTITION_CHECK_LEASE = "gpucaas-partition-check"


def run(settings: PlacementSettings) -> None:
    import uvicorn

    from services.placement.fleet import FleetIndex
    from services.placement.kube import FleetWatcher, new_kube
    from services.placement.server import create_app

    log = logging.getLogger("services.placement")
    log.info("configuration: %s", settings.model_dump(mode="json"))
    index = FleetIndex()
    api = new_kube(str(settings.kubeconfig) if settings.kubeconfig else None, timeout_s=settings.kube_timeout_seconds)
    watcher = FleetWatcher(
        api,
        index,
        gpu_resource=settings.gpu_resource,
        watch_timeout_seconds=settings.watch_timeout_seconds,
        request_timeout_seconds=settings.kube_timeout_seconds,
        # the binder filters: tell kube-scheduler when GPUs free (its DRA plugin watches its own objects)
        nudge_nodes=settings.bind,
    )
    watcher.start()
    check = None
    if settings.partition_check:
        import socket
        import uuid

        from services.placement.admission_check import PartitionCheck
        from services.placement.leader import LeaseElector

        elector = LeaseElector(
            api,
            settings.partition_check_lease_namespace,
            PARTITION_CHECK_LEASE,
            f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}",
        )
        check = PartitionCheck(
            api,
            index,
            counted=watcher.counted,
            freeing=watcher.freeing,
            occupants=watcher.occupants,
            synced=watcher.is_synced,
            gpu_resource=settings.gpu_resource,
            promise_s=settings.partition_promise_seconds,
            watch_timeout_s=settings.watch_timeout_seconds,
            elector=elector,
        ).start()
    app = create_app(
        index,
        binder=watcher if settings.bind else None,
        ready=watcher.is_synced,
        gpu_resource=settings.gpu_resource,
    )
    log.info("serving the scheduler extender on http://%s:%s", settings.host, settings.port)
    try:
        uvicorn.Server(
            uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None, access_log=False)
        ).run()
    finally:
        if check is not None:
            check.stop()
        watcher.stop()
        api.close()
