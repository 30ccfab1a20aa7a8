"""A real node on this machine (containerd, runc, the kubelet) and the local registries it pulls from."""
