# gpucaas: the two set-up commands are `make sandbox` and `make test`.
# Installing means: the system packages the code needs (only those missing), a
# virtual environment in .venv, and `pip install -e .[dev]` into it (with the development tree
# on its path: the $(VENV)/.installed rule).

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# libvirt-python builds against libvirt-dev; the fabric tests run a real libvirtd
# with QEMU (software emulation); openssl makes the sandbox's self-signed pair;
# the API tests follow logs with curl, render /docs in headless chromium and drive the web console
# in it with Playwright (the pip package, dev extras; no browser download, no npm: the console has no
# third-party assets, see services/api/console);
# the sandbox's real nodes run containerd (built by upstream/build.sh) with Debian's runc and CNI
# plugins, and pull from local registries (docker-registry, filled by skopeo; htpasswd from
# apache2-utils for the private one);
# stress-ng is the CPU hog of `make test-e2e-dra` run alone; the API tests start their own
# redis-server (the replicas' shared rate-limit storage; no system service is used); nftables
# is the nft tool kube-proxy (nftables mode) programs the chart-installed sandbox's Services with.
APT_PACKAGES := gcc pkg-config libvirt-dev libvirt-daemon libvirt-daemon-driver-qemu \
	libvirt-clients qemu-system-x86 qemu-utils openssl busybox-static wrk curl chromium stress-ng \
	redis-server runc containernetworking-plugins docker-registry skopeo apache2-utils nftables

.PHONY: test-cilium test-chaos test-upgrade test-e2e-dra install python-env system-deps sandbox test test-contention bench clean checkov promtool crds test-image postgres upstream upstream-cilium lint image image-tools helm kueue

# The Go builds (CPU) run beside apt-get and pip (mostly waiting on downloads): on a new
# machine the builds set the time, and the rest is done by the time they are.
install:
	@$(MAKE) --no-print-directory -j2 upstream python-env

python-env: system-deps $(VENV)/.installed

# The pinned upstream binaries (Kubernetes 1.36 with kube-proxy, etcd 3.6, kwok, containerd, Traefik,
# CoreDNS, Helm, Kueue),
# built from their Go modules by upstream/build.sh into
# ~/.cache/gpucaas/upstream/<version>-<pins hash>/bin (reused while the pins are unchanged;
# GPUCAAS_KUBE_BIN or KUBEBUILDER_ASSETS naming a folder of prebuilt binaries skips the build).
# docs/local-cluster.md gives the build times.
upstream:
	@GPUCAAS_HELM=1 GPUCAAS_KUEUE=1 upstream/build.sh >/dev/null

# Cilium v1.20 (agent, generic operator, cilium-dbg, cilium-cni and the datapath's C sources)
# into the same folder (docs/cilium.md; ~9 min on 2 cores the first time), for what runs it:
# `gpucaas sandbox --network cilium` and `make test-cilium` (make test's last stage).
upstream-cilium:
	@GPUCAAS_CILIUM=1 upstream/build.sh >/dev/null

# Helm v3.22, built from its Go module into the same folder (upstream/helm; docs/local-cluster.md
# gives its build time), for installing the chart as a platform team does: `gpucaas sandbox
# --install helm` (docs/sandbox.md). `make install` builds it too (the upstream target).
helm:
	@GPUCAAS_HELM=1 upstream/build.sh >/dev/null

# Kueue v0.17's manager, built from its Go module into the same folder (upstream/kueue), with its
# CRDs and webhook manifests beside it in kueue-manifests/ (docs/queues.md gives its build time),
# for what queues containers on it: devtools/kueue.py and tests/kueue (in make test's `rest`
# stage). `make install` builds it too (the upstream target).
kueue:
	@GPUCAAS_KUEUE=1 upstream/build.sh >/dev/null

# The product's OCI image (deploy/image/build.sh, docs/image.md): a bookworm root filesystem made
# from Debian's packages by mmdebstrap, the pinned PyPI wheels and the gpucaas wheel in a venv,
# written as an OCI image layout by umoci into ~/.cache/gpucaas/image/oci, tagged with the
# commit; prints the tag and the manifest digest. mmdebstrap and umoci are installed here, as
# only this uses them.
IMAGE_APT_PACKAGES := mmdebstrap umoci
image: image-tools $(VENV)/.installed
	@$(SUDO) deploy/image/build.sh

image-tools:
	@missing=$$(for p in $(IMAGE_APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $$missing; \
	fi

# Tenant isolation proven with packets (tests/e2e_cilium, docs/cilium.md): the sandbox's real
# nodes in network namespaces of their own with Cilium enforcing the policies. The last stage of
# `make test` (Cilium's agent sets system-wide sysctls; its build is cached like the others).
CILIUM_APT_PACKAGES := clang-19 llvm-19
test-cilium: install upstream-cilium
	@missing=$$(for p in $(CILIUM_APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $$missing; \
	fi
	GPUCAAS_E2E_CILIUM=1 $(PY) -m pytest -q tests/e2e_cilium

# The PostgreSQL the tests use (Debian's server on 127.0.0.1:5432, trust auth, database test):
# installed and started when it does not answer.
postgres:
	@scripts/postgres.sh

system-deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:" $$missing; \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q $$missing; \
	fi

# The package holds the product only (pyproject.toml: gpucaas, core, services, vm_images); the
# development tree (devtools, benchmarks, tests) is importable from the venv wherever it runs
# (console scripts, `python -m gpucaas sandbox` subprocesses, `python -m benchmarks.x` from any
# directory) through a .pth file naming this repository.
$(VENV)/.installed: pyproject.toml | system-deps
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	echo "$(CURDIR)" > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gpucaas-source-tree.pth"
	$(PY) -m services.device_plugin.api.build
	$(PY) -m services.dra_driver.api.build
	touch $@

# checkov pins many libraries tightly; it lives in its own venv so it never fights
# the project's dependencies. tests/deploy runs .venv-checkov/bin/checkov on the chart.
CHECKOV_VENV := .venv-checkov

checkov: $(CHECKOV_VENV)/.installed

$(CHECKOV_VENV)/.installed:
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install -q --upgrade pip
	$(CHECKOV_VENV)/bin/python -m pip install -q 'checkov>=3.2,<4'
	touch $@

# promtool (Debian's prometheus package) checks the chart's alert rules (tests/deploy/test_monitoring.py).
# Only the tool is wanted: the package's own service is kept from starting during the install
# (policy-rc.d, put in place for the install only where the machine has none).
promtool:
	@command -v promtool >/dev/null 2>&1 || { \
	  guard=; if [ ! -e /usr/sbin/policy-rc.d ]; then \
	    printf '#!/bin/sh\nexit 101\n' | $(SUDO) tee /usr/sbin/policy-rc.d >/dev/null && $(SUDO) chmod +x /usr/sbin/policy-rc.d && guard=1; \
	  fi; \
	  $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends prometheus; \
	  rc=$$?; [ -z "$$guard" ] || $(SUDO) rm -f /usr/sbin/policy-rc.d; exit $$rc; }

# The chart's files/crds/ carries exact copies of the core CRDs (tests/deploy checks it), which
# templates/crds.yaml renders (so that `helm upgrade` updates them).
crds:
	cp core/crds/*.gpucaas.dev.yaml deploy/helm/gpucaas/files/crds/

# The kernel + busybox image the fabric tests boot under QEMU, fetched from Debian's
# archive (apt-get download) and cached in /var/cache/gpucaas/test-vm at install time.
# If Debian's archive cannot be reached the QEMU tests skip, saying why (in CI, with CI set,
# they fail instead: tests/fabric/conftest.py); everything else runs.
test-image: install
	$(PY) -m vm_images.test_image || echo "WARNING: the QEMU test image could not be built; the libvirtd tests will skip (fail when CI is set)"

# The sandbox installs the product with its chart (docs/sandbox.md): the image is built from this
# work tree (make image's tools) and the API's database is the host's PostgreSQL (make postgres).
sandbox: install image-tools postgres
	$(VENV)/bin/gpucaas sandbox

# The house rules, before any test: ruff's lint (pycodestyle, pyflakes, import order, bugbear,
# naming...), ruff's formatting, and mypy; each configured in pyproject.toml (docs/index.md, "Tests").
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# tests/api (about 750 tests, each with its own API server: CPU-bound) on two workers, a
# whole file per worker at a time; the rest on two workers as well: everything that starts real
# nodes or a sandbox one after another on one of them, the other files on the other
# (tests/conftest.py's scheduler keeps them together; much of that time is spent waiting on kubelets, containers and
# QEMU, which the other worker fills).
# Each stage is timed (scripts/stages.sh); the table ends the output, or follows a failed stage.
STAGE := scripts/stages.sh run
test:
	@scripts/stages.sh begin
	@$(STAGE) install $(MAKE) --no-print-directory install checkov promtool test-image postgres
	@$(STAGE) image $(MAKE) --no-print-directory image
	@$(STAGE) lint $(MAKE) --no-print-directory lint
	@$(STAGE) api $(PY) -m pytest -n 2 --dist loadfile --durations=15 tests/api
	@$(STAGE) rest $(PY) -m pytest -n 2 --dist loadfile --durations=30 --ignore=tests/api
	@$(STAGE) dra+chaos+upgrade $(MAKE) --no-print-directory -j3 --output-sync=target \
	  test-e2e-dra test-chaos test-upgrade CPU_HOG=0
	@$(STAGE) cilium $(MAKE) --no-print-directory test-cilium
	@scripts/stages.sh report

# The end-to-end package again in the DRA allocation mode (tests/e2e/conftest.py: the
# sandbox runs the DRA driver, the kubelets' DRA side and claim allocation instead of the
# device plugin), under CPU contention: the control plane and the DRA path must not stall or
# give up (docs/sandbox.md, "Under CPU contention"). Run alone, beside `stress-ng --cpu 2` (the
# package's autouse cpu_hog fixture; CPU_HOG=N); `make test` runs it with no hog beside the
# chaos soak and the upgrade run instead, two more sandboxes at work on the same two cores
# (load average about 25), whose CPU is spent on checks, not burnt. `pytest` above ran every
# end-to-end test in the device-plugin mode; this run leaves out the tests marked
# any_allocation, whose outcome does not depend on the mode (what a container does, exec,
# volumes, endpoints, the console, the API's isolation), and its RBAC audit checks the grants
# the DRA chart adds.
CPU_HOG ?= 2
test-e2e-dra: install
	GPUCAAS_E2E_ALLOCATION=dra GPUCAAS_E2E_SCOPE=allocation GPUCAAS_E2E_CPU_HOG=$(CPU_HOG) $(PY) -m pytest -q --durations=15 tests/e2e

# Opt-in, not part of `make test` (whose DRA run is under contention): the end-to-end package
# in the device-plugin mode beside `stress-ng --cpu 2`, leaving out the tests of what a
# container itself does (exit codes, OOM, exec, volumes, endpoints, the console) and the audit
# that every granted permission was used (some are used only by those tests).
CONTENTION_LEAVES_OUT := $(addprefix --ignore=tests/e2e/,test_containers_run.py test_exec.py \
	test_volumes.py test_endpoints.py test_console_on_sandbox.py) \
	--deselect tests/e2e/test_rbac_of_the_chart.py::test_every_granted_permission_was_used
test-contention: install
	GPUCAAS_E2E_CPU_HOG=$(CPU_HOG) $(PY) -m pytest -q tests/e2e $(CONTENTION_LEAVES_OUT)

# The chaos soak at its quick size (benchmarks/chaos.py, docs/chaos.md): the real control
# plane and real nodes, two API replicas on PostgreSQL, 60 short containers over 20
# tenancies while every component is killed once; it exits 1 unless lost, duplicated,
# stuck_leases, stuck_partitions, usage_mismatches and server_errors are all 0. One recorded
# random number per allocation mode (CHAOS_N_DP=N CHAOS_N_DRA=M tries others).
CHAOS_N_DP ?= 1
CHAOS_N_DRA ?= 2
test-chaos: install postgres
	$(PY) -m benchmarks.chaos --quick --random $(CHAOS_N_DP) --allocation device-plugin
	$(PY) -m benchmarks.chaos --quick --random $(CHAOS_N_DRA) --allocation dra

# helm upgrade under load (benchmarks/upgrade.py, docs/deploy.md "Upgrades"): the sandbox
# installs the chart and image of UPGRADE_FROM (a commit; by default benchmarks/upgrade.py's
# FROM), then 200 small containers are submitted while `helm upgrade` moves it to this work
# tree's chart and image; it exits 1 unless lost, duplicated, server_errors and stuck_leases
# are all 0. `make test` runs it beside the chaos soak (both mostly wait on their sandboxes;
# docs/index.md, "Tests").
test-upgrade: install postgres image-tools
	$(PY) -m benchmarks.upgrade $(if $(UPGRADE_FROM),--from $(UPGRADE_FROM))

bench: install postgres
	@for b in $$(ls benchmarks/*.py | xargs -n1 basename | sed 's/\.py$$//' | grep -v '^_'); do \
	  echo "== benchmarks.$$b"; $(PY) -m benchmarks.$$b || exit 1; \
	done

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
