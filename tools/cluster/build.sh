#!/usr/bin/env bash
# Builds the binaries of the loopback control plane that are not yet in the cache.
#
# Versions come from the go.mod of each module beside this script (one module per
# component, so their k8s.io dependency versions never have to agree). Binaries go
# to ${XMC_CLUSTER_CACHE:-~/.cache/xmc-cluster}/<component>-<version>/bin/, outside
# the work tree; a component whose directory is complete is not rebuilt, so a
# second run builds nothing. Builds run one at a time under `nice -n 19`.
#
#   tools/cluster/build.sh            build what is missing
#   tools/cluster/build.sh --print    print `component version dir` lines only
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${XMC_CLUSTER_CACHE:-$HOME/.cache/xmc-cluster}"
export GOFLAGS="${GOFLAGS:--p=2} -mod=readonly -trimpath"
export CGO_ENABLED=0

# component | module pinned in its go.mod | binary=package ...
COMPONENTS=(
  "etcd|go.etcd.io/etcd/server/v3|etcd=go.etcd.io/etcd/server/v3"
  "kubernetes|k8s.io/kubernetes|kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler"
  "jobset|sigs.k8s.io/jobset|jobset-manager=sigs.k8s.io/jobset"
  "kueue|sigs.k8s.io/kueue|kueue-manager=sigs.k8s.io/kueue/cmd/kueue"
  "kwok|sigs.k8s.io/kwok|kwok=sigs.k8s.io/kwok/cmd/kwok"
)

# version_of COMPONENT MODULE: the version its go.mod requires (no network needed).
version_of() {
  awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' \
    "$HERE/$1/go.mod"
}

ldflags_for() { # version stamps that the components report about themselves
  local comp="$1" ver="$2"
  case "$comp" in
    kubernetes)
      local minor="${ver#v1.}"; minor="${minor%%.*}"
      echo "-s -w -X k8s.io/component-base/version.gitVersion=$ver -X k8s.io/component-base/version.gitMajor=1" \
           "-X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
           "-X k8s.io/client-go/pkg/version.gitVersion=$ver" ;;
    kueue) echo "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$ver" ;;
    *) echo "-s -w" ;;
  esac
}

print_only=0
[[ "${1:-}" == "--print" ]] && print_only=1

for entry in "${COMPONENTS[@]}"; do
  IFS='|' read -r comp module bins <<<"$entry"
  ver="$(version_of "$comp" "$module")"
  [[ -n "$ver" ]] || { echo "build.sh: no version of $module in $HERE/$comp/go.mod" >&2; exit 1; }
  dir="$CACHE/$comp-$ver"
  if (( print_only )); then echo "$comp $ver $dir"; continue; fi
  for pair in $bins; do
    bin="${pair%%=*}" pkg="${pair#*=}"
    [[ -x "$dir/bin/$bin" ]] && continue
    mkdir -p "$dir/bin"
    echo "build.sh: building $bin ($module $ver)" >&2
    start=$(date +%s)
    (cd "$HERE/$comp" && nice -n 19 go build -ldflags "$(ldflags_for "$comp" "$ver")" \
        -o "$dir/bin/.$bin.tmp" "$pkg")
    mv "$dir/bin/.$bin.tmp" "$dir/bin/$bin"
    echo "build.sh: built $bin in $(( $(date +%s) - start )) s" >&2
  done
done
