"""The Fabric Manager service VM: image recipe, domain template and the test image.

Only the domain template is Python-visible (``domain/service-vm.xml``, read by
``services.fabric.domain_xml``); the rest are build scripts, see README.md.
"""
