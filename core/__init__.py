"""The bottom floor: what every service and program shares (topology, leases, node devices,
clients, configuration). It imports no service and no program."""

__version__ = "0.1.0"
