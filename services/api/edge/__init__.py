"""What guards the HTTP edge before and around a route: the ASGI middleware (``middleware``:
request targets, in-flight requests per address, body size and read time, request
metrics), per-token and per-tenancy limits (``limits``) and uvicorn's header read timeout
for slow clients (``slow_clients``).
"""
