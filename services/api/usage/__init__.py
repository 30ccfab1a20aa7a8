"""GPU usage: one durable record per container run, the reports built from them, the
Prometheus counter, and monthly GPU-hour budgets.

A run's start and end are the pod's own container timestamps (``state.running.startedAt``,
``state.terminated.startedAt/finishedAt`` of the ``main`` container, as the kubelet reports
them: https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/#PodStatus),
never the time the API noticed, so time queued, scheduled or waiting for a partition is not
charged and a run that ended while the API was down is charged exactly once it is back.
"""
