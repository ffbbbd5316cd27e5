#!/usr/bin/env bash
# `make test-cluster`: XMC on the real loopback control plane (docs/cluster.md).
# Starts `make cluster` unless this work tree's cluster already runs (then leaves it
# running), applies k8s/overlays/kueue-example as an operator does, plus gpu-queue
# (xmc_setup.py), the contract suite's cluster objects, checks every k8s/ kustomization
# with a server-side dry run, then runs tests/real (the services as k8s/base's
# ServiceAccounts), the node agent's tests (tests/cluster) and the contract suite (KUBECONFIG: cluster-admin, it makes namespaces).
# Extra arguments go to both pytest runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=.venv/bin/python
started=0
if ! "$PY" tools/cluster/xmc_setup.py running; then
  make --no-print-directory cluster > /dev/null
  started=1
fi
cleanup() { if [ "$started" = 1 ]; then make --no-print-directory cluster-down; fi; }
trap cleanup EXIT
"$PY" tools/cluster/xmc_setup.py setup
"$PY" -m tests.contract.setup | kubectl --kubeconfig .cluster/kubeconfig apply -f - > /dev/null
"$PY" tools/cluster/xmc_setup.py dry-run
status=0
CI="${CI:-}" .venv/bin/pytest -m real_cluster tests/real "$@" || status=$?
XMC_REAL_CLUSTER_KUBECONFIG="$PWD/.cluster/kubeconfig" .venv/bin/pytest -m real_cluster tests/cluster "$@" || status=$?
KUBECONFIG="$PWD/.cluster/kubeconfig" .venv/bin/pytest -m contract tests/contract "$@" || status=$?
exit "$status"
