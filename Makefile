# One entry point for every routine task. `make help` lists them.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: help install services proto proto-check openapi lint test test-fast run bench compat faults faults-short screenshots clean cluster cluster-down cluster-xmc test-cluster

# `make run CLUSTER=real`: XMC against the loopback cluster of `make cluster` (docs/cluster.md).
CLUSTER ?= kubesim

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## create .venv and install XMC with its dev tools

services: ## Postgres on 127.0.0.1:5432 (trust) and Redis on 127.0.0.1:6379: installs and starts what is missing
	bash tools/services.sh

proto: $(STAMP) ## regenerate libs/xmc_api from proto/, and docs/openapi.json from it
	$(PY) tools/gen_proto.py
	$(PY) tools/gen_openapi.py

proto-check: $(STAMP) ## fail if libs/xmc_api is stale against proto/, or docs/openapi.json against it
	$(PY) tools/gen_proto.py --check
	$(PY) tools/gen_openapi.py --check

openapi: $(STAMP) ## regenerate docs/openapi.json, the REST face's OpenAPI document (docs/rest.md)
	$(PY) tools/gen_openapi.py

lint: $(STAMP) ## ruff + mypy + import-linter (the layering contracts in pyproject.toml)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Four workers on two cores: the suite spends much of its time waiting on real time (process
# stacks, restarts, deadlines), so two workers left the cores idle; worksteal rebalances the
# long tests at the end instead of leaving them queued behind one worker (docs/testing.md).
TEST_WORKERS ?= 4

test: services $(STAMP) ## the whole test suite (starts the local Postgres and Redis first)
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# The loop to live in: everything but the tests marked slow (process stacks, faults, end to
# end, examples) and those make compat / make test-cluster run.
test-fast: services $(STAMP) ## the test suite without the tests marked slow: the loop to run while changing code
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist worksteal -m 'not slow and not compat and not real_cluster' $(PYTEST_ARGS)

run: services $(STAMP) ## set up and run XMC locally (kubesim, ESS, Actuator, Reconciler, dashboard); CLUSTER=real: on `make cluster` instead
ifeq ($(CLUSTER),real)
	@$(PY) tools/cluster/xmc_setup.py running || $(MAKE) --no-print-directory cluster
	$(PY) tools/cluster/xmc_setup.py setup
	XMC_RUN_CLUSTER=real $(PY) -m xmc.devrun
else ifeq ($(CLUSTER),kubesim)
	$(PY) -m xmc.devrun
else
	$(error CLUSTER is kubesim (the default) or real, not $(CLUSTER))
endif

bench: services $(STAMP) ## benchmarks (print figures; not tests)
	$(PY) bench/store_update.py
	$(PY) bench/ess_create.py
	$(PY) bench/ess_rpc.py
	$(PY) bench/kubesim_bench.py
	$(PY) bench/kubesim_store_bench.py
	$(PY) bench/kubesim_persist_bench.py
	$(PY) bench/deployed_listing.py
	$(PY) bench/actuator_bench.py
	$(PY) bench/reconciler_bench.py
	$(PY) bench/e2e_sweep.py
	$(PY) bench/ui_bench.py
	$(PY) bench/ess_args.py
	$(PY) bench/log_follow.py
	$(PY) bench/watch_bench.py
	$(PY) bench/flood_bench.py
	$(PY) bench/usage_bench.py

compat: services $(STAMP) ## the published xmanager client against a real stack, in its own virtualenvs
	$(VENV)/bin/pytest -m compat tests/compat $(PYTEST_ARGS)

faults: services $(STAMP) ## the fault matrix: every crash, failover, partition and restart, 5 runs each, one table (~4 h; root for net-*); FAULTS_ARGS narrows it
	$(PY) bench/faults.py $(FAULTS_ARGS)

# One run of one fault of each kind: what CI runs (docs/operations.md, "High availability").
SHORT_FAULTS ?= baseline,kill-ess,baseline-x2,pg-failover,redis-failover,redis-cluster-failover,pause-reconciler-leader,net-cut:ess-postgres,rolling-restart

faults-short: services $(STAMP) ## one run of one fault of each kind, as CI runs it (~12 min; root for the net-* one)
	$(PY) bench/faults.py --runs 1 --net-hold 15 --scenarios $(SHORT_FAULTS) $(FAULTS_ARGS)

screenshots: $(STAMP) ## the dashboard's pages, timelines and logs, from the browser tests, into docs/screenshots
	XMC_UI_SCREENSHOTS=$(CURDIR)/docs/screenshots $(VENV)/bin/pytest tests/integration/test_ui_browser.py tests/integration/test_ui_browser_timeline.py tests/integration/test_ui_browser_sweep.py tests/integration/test_ui_logs.py tests/integration/test_ui_browser_usage.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

cluster: $(STAMP) ## a real Kubernetes control plane on loopback (etcd, apiserver, KCM, scheduler, JobSet, Kueue, kwok); builds what is missing, writes .cluster/kubeconfig
	bash tools/cluster/build.sh
	$(PY) tools/cluster/up.py

cluster-xmc: $(STAMP) ## on the running `make cluster`: kubectl apply -k k8s/overlays/kueue-example, gpu-queue, one kubeconfig per service
	$(PY) tools/cluster/xmc_setup.py setup

test-cluster: services $(STAMP) ## make cluster, the real-cluster tests and the contract suite on it (as the SAs of k8s/base), make cluster-down
	bash tools/cluster/test_cluster.sh $(PYTEST_ARGS)

cluster-down: ## stop what `make cluster` started
	$(PYTHON) tools/cluster/down.py
