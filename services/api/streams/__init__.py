"""Long-lived streams relayed between a tenant and the Kubernetes API server: an exec
session's WebSocket (``exec_relay``) and a followed pod log (``log_stream``).
"""
