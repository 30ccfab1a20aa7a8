"""The chart renderer the tests share with the sandbox (:mod:`gpucaas.chart`)."""

from gpucaas.chart import (  # noqa: F401 (re-exported for the tests)
    CHART,
    CORE_CRDS,
    KUBE_VERSIONS,
    NAMESPACE,
    PRODUCTION_VALUES,
    RELEASE,
    REPO,
    chart_crds,
    component,
    find,
    is_hook,
    pod_spec,
    production_values,
    render,
    render_notes,
    workloads,
)
