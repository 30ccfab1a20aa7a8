"""Development tools beside the programs: the local Kubernetes cluster from the pinned
upstream binaries, the kubelet's container-log endpoint, the fake sysfs board, the fake
kubelet and the bounded wait. No service imports them (an import-linter contract in
pyproject.toml keeps it so)."""
