"""Errors of the device plugin, named by meaning; the gRPC servicer maps them to status codes."""

from __future__ import annotations

from core.cdi import CDISpecError as CDISpecError  # the CDI spec is shared with the DRA driver


class DevicePluginError(Exception):
    """Base of every device plugin error."""


class InvalidRequest(DevicePluginError):
    """A kubelet request that cannot be served as asked (bad size, empty list)."""


class UnknownDevice(InvalidRequest):
    """A device id this plugin does not advertise."""


class DeviceUnhealthy(DevicePluginError):
    """A requested GPU is currently unhealthy (gone, unbound from vfio, fabric failure)."""


class DeviceReleasing(DeviceUnhealthy):
    """A requested GPU's only fault is that its release is not over (lease Releasing or
    Checking): its container may start once it is, and the kubelet retries until then."""


class FabricUnavailable(DevicePluginError):
    """The node's fabric service cannot be reached (or its Fabric Manager is down)."""


class ActivationConflict(DevicePluginError):
    """The fabric service refused: a needed partition is held by another allocation."""


class ActivationRejected(DevicePluginError):
    """The fabric service refused the activation for another reason."""


class RegistrationFailed(DevicePluginError):
    """The kubelet did not accept (or could not be reached for) registration."""
