"""The DRA kubelet plugin: NVLink partitions as partitionable devices (resource.k8s.io/v1).

The second allocation mode beside the device plugin + scheduler extender. Each node
publishes one ResourceSlice holding a counter set (one counter per GPU) and one holding
one device per Fabric Manager partition, each consuming the counters of its GPUs, so the
stock kube-scheduler can only allocate whole, non-overlapping partitions.
"""
