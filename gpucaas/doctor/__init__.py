"""``gpucaas doctor``: is this node ready to run GPU containers?

A GPU node of gpucaas never loads NVIDIA drivers: every GPU, NVSwitch and the
NVSwitch memory controller is bound to vfio-pci and handed to a VM (a tenant's
Kata micro-VM or the Fabric Manager service VM). The prerequisites are spread
over the kernel command line, sysfs, /dev/vfio, /proc, containerd's
configuration, the kubelet's directories, libvirt and the fabric service; a
single wrong one makes pods hang in ContainerCreating or VMs fail to boot.

Layers, bottom-up:

- ``paths``: where the host's trees are (every path rooted, so tests point them
  at a fake board built in ``tmp_path``).
- ``facts``: the only module that reads the host; it gathers plain data
  (``HostFacts``) and never decides anything.
- ``checks``: pure functions ``HostFacts -> CheckResult``, one per prerequisite,
  each with a fix hint.
- ``report``: the verdict (exit code) and its table / JSON rendering.
- ``cli``: the ``gpucaas doctor`` command.
"""
