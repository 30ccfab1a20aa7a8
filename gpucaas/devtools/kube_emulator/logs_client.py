"""Client side of the emulator-only pod-log endpoint, for node agents that play the kubelet.

The real kubelet serves pod logs itself; in the emulator a node agent stores them with
``POST /emulator/v1/namespaces/{ns}/pods/{name}/log[?container=c]`` (append; ``PUT``
replaces). :func:`write_pod_log` does that through an official ``kubernetes`` ApiClient,
so the agent reuses its kubeconfig and connection pool.
"""

from __future__ import annotations

from typing import Any


def write_pod_log(api: Any, namespace: str, name: str, text: str, *, container: str | None = None,
                  append: bool = True) -> None:
    """Append ``text`` to (or, with ``append=False``, replace) a pod container's log in the emulator.

    ``api`` is a ``kubernetes.client.ApiClient`` for the emulator; raises ``ApiException``
    (404 when the pod does not exist).
    """
    from kubernetes.client.exceptions import ApiException

    query = [("container", container)] if container else []
    method, url, headers, body, _ = api.param_serialize(
        method="POST" if append else "PUT",
        resource_path="/emulator/v1/namespaces/{namespace}/pods/{name}/log",
        path_params={"namespace": namespace, "name": name},
        query_params=query,
        header_params={"Content-Type": "text/plain"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, header_params=headers, body=text.encode())
    response.read()
    if not 200 <= response.status < 300:
        raise ApiException(http_resp=response)
