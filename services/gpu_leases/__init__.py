"""GPU leases: who holds each GPU, and the firmware check between two tenants.

One place for the whole lease life cycle (Free -> Leased -> Releasing -> Checking ->
Free | Quarantined):

- the state machine and the GPULease store are in the core
  (``core/lease_states.py``, ``core/lease_store.py``) because three
  services move leases: this one, the tenancy controller process (via the timers
  below) and the API (an admin quarantines or releases a GPU);
- ``agent.py``: the node side (``NodeLeases``) — a lease per GPU, Leased/Releasing
  from the kubelet's PodResources, the firmware check when a lease is Checking, and the
  health source that withholds every GPU whose lease is not Free/Leased;
- ``firmware.py``: the check itself (expansion ROM hash and version through sysfs);
- ``controller.py``: the cluster side, Kopf timers (Releasing -> Checking, check
  retries and time-outs, holders that vanished while the node was down), added to
  the operator of ``gpucaas controller`` by ``gpucaas/controller.py``, so the
  tenancy controller never imports this package;
- ``main.py`` (building the node agent), ``cli.py`` (the options the composed commands
  take), ``settings.py`` and ``errors.py``: the skeleton every service has.

The node agent runs in the device plugin's process, composed by
``gpucaas/gpu_node.py`` (``gpucaas device-plugin``): the agent reads the
plugin's GPU inventory, hears every Allocate at once, and gives the plugin a health
source; neither package imports the other.
"""
