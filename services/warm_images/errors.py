"""Errors of warm images, named by meaning.

None of its own: the controller's passes meet only Kubernetes' answers, :mod:`core.kube`'s
errors (a conflict is left to the next pass, a refusal is logged, the rest retried).
"""
