"""The DRA kubelet plugin: GPUs as devices of their NVLink pair and quad (resource.k8s.io/v1).

The second allocation mode beside the device plugin + scheduler extender. Each node
publishes one ResourceSlice with one device per GPU, naming its pair and quad; a claim for
2 or 4 GPUs asks for that many with a ``matchAttribute`` constraint on the pair or quad (8:
the board), so the stock kube-scheduler can only allocate whole, non-overlapping partitions
(docs/dra.md).
"""
