"""Development tools beside the programs: the Kubernetes API emulator, the fake
sysfs board, the fake kubelet and the bounded wait. No service imports them
(an import-linter contract in pyproject.toml keeps it so)."""
