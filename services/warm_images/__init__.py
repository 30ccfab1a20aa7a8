"""Warm images: images every GPU node keeps pulled, so that a container using one skips the pull.

- The list is the cluster's WarmImage objects (``core/crds/warmimages.gpucaas.dev.yaml``):
  admins add and remove them with ``caasctl warm-images`` (through the API's
  ``/v1/admin/warm-images``), and the chart's ``warmImages`` value renders its own.
- ``daemonset.py``: the one DaemonSet that holds them. Its pod on each GPU node mounts every
  WarmImage as an image volume (``volumes[].image``, KEP-4639, on by default since
  Kubernetes 1.35), so the kubelet pulls each image through the node's own runtime and
  snapshotter, with no program of the image ever run, and the image stays in use while the
  pod runs.
- ``controller.py``: Kopf handlers, hosted by ``gpucaas controller`` (``gpucaas/controller.py``),
  that keep the DaemonSet equal to the list.
- Which nodes hold which image is the kubelet's own report, each Node's ``status.images``
  (read by the API for ``caasctl nodes``, and by kube-scheduler's ImageLocality score,
  which breaks ties between nodes whose partitions fit equally well).
"""
