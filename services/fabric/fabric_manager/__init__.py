"""Fabric Manager access behind one interface (see ``interface.py``)."""
