"""Domain XML template of the Fabric Manager service VM (package data)."""

from importlib import resources


def template_text() -> str:
    return resources.files(__package__).joinpath("service-vm.xml").read_text()
