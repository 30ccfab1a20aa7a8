"""The parts of ``benchmarks.fleet``'s run of one mode (and of ``benchmarks.fairness``'s two runs):
the real kube-scheduler placing one GPU trace on a fleet of kwok nodes (the method is in
``benchmarks/fleet.py``'s docstring).

* :mod:`.trace`: the trace offered (the shared seeded workload) and its pooled upper bound;
* :mod:`.node_objects`: what a node and its daemons publish (Node, FabricState, ResourceSlices);
* :mod:`.control_plane`: the cluster, kwok, the extender and kube-scheduler of one mode;
* :mod:`.timers`: actions due at given times (arrivals, departures, FabricState writes), in one thread;
* :mod:`.pod_record`: what is known of one pod;
* :mod:`.node_side`: what each node's device plugin (or DRA driver) and fabric service do for
  the pods bound to it: give them GPUs, show the partitions active;
* :mod:`.tenants`: the tenants' pods, created and deleted, and the watch that sees them placed;
* :mod:`.phases`: the trace in compressed time, the clear-out, the burst;
* :mod:`.figures`: the figures of the trace's measurement window;
* :mod:`.tenancy_trace`, :mod:`.fair_share`: ``benchmarks.fairness``'s tenancies (who submits
  each job) and its fairness figures (fair share, share error, guaranteed wait, preemptions).
"""
