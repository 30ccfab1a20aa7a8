"""gpucaas: a GPU Containers-as-a-Service control plane (shared core and entry points)."""

__version__ = "0.1.0"
