"""What the benchmarks share, one module a part; no benchmark imports another.

* :mod:`.report`: the benchmark's one JSON object as the last line of stdout, progress on
  stderr, and the percentile every figure is taken with;
* :mod:`.procstat`: a running process's CPU seconds, resident and proportional memory and
  threads, from ``/proc``;
* :mod:`.gpucaas_api`: the gpucaas API over HTTPS with the sandbox's CA and tokens (retries on
  the next replica, answers timed), and :mod:`.tenancies`: tenancies with their tokens, and
  the wait for them to be Ready;
* :mod:`.watch`: a collection's objects as they change (pods, tenancies), on the product's
  informer (``core.kube.Informer``);
* :mod:`.sandbox`: ``gpucaas sandbox`` started for one run and stopped after;
* :mod:`.killer`: kills named processes of a running sandbox and starts them again (the chaos
  soak), and starts again what exits on its own;
* :mod:`.leaseless_plugin`: a second, lease-less ``gpucaas device-plugin`` on a sandbox node,
  registered with the node's real kubelet;
* :mod:`.processes`: helper processes (``gpucaas`` sub-commands) started with a log and stopped;
* :mod:`.database`: a scratch PostgreSQL database, created and dropped;
* :mod:`.loadgen`: ``wrk`` driving an HTTP server, closed loop or paced;
* :mod:`.workload`: the seeded job trace (Poisson arrivals, lognormal durations, the 1/2/4/8-GPU mix).
"""
