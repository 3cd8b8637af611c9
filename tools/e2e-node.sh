#!/usr/bin/env bash
# `make e2e-node`: the node suite (tests/node) on the real node of ../shared/node. Installs podman and debootstrap
# from Debian's packages when missing, builds both images on a stand-in base (tools/node_images.py: reused while
# their inputs are unchanged), starts the node with the PersistentVolume binder the tests' volumes need, loads the
# images unless the node holds them already, and runs the suite. Needs root, as the node does.
# NODE_DIR: the node's scripts (default ../shared/node). PYTEST_ARGS: extra pytest arguments. With arguments, runs
# them as a command in place of the suite, with the same environment (`make bench-node`).
set -euo pipefail
cd "$(dirname "$0")/.."
NODE_DIR=${NODE_DIR:-../shared/node}
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$NODE_DIR/node-start" ] || { echo "e2e-node: no node at $NODE_DIR (node-start missing)" >&2; exit 1; }

missing=()
for tool in podman debootstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "e2e-node: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq "${missing[@]}" >/dev/null || { apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; }
fi

report=$("$PYTHON" tools/node_images.py)
echo "e2e-node: images $report" >&2
field() { "$PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$report" "$1"; }
tag=$(field tag) archive=$(field archive)

# The node's control plane runs the controllers node-env names, plus those of volumes: the binder binds the
# tests' claims to their volumes, the protection controllers lift the finalizers that let a namespace go.
VOLUME_CONTROLLERS=persistentvolume-binder-controller,persistentvolume-protection-controller,persistentvolumeclaim-protection-controller
NODE_CONTROLLERS="$(. "$NODE_DIR/node-env"; echo "$NODE_CONTROLLERS"),$VOLUME_CONTROLLERS"
export NODE_CONTROLLERS
# node-start keeps a node that runs already: one started without these controllers is restarted first.
kcm_port=$(. "$NODE_DIR/node-env"; echo "$KCM_PORT")
if pgrep -f "kube-controller-manager.*--secure-port=$kcm_port" >/dev/null \
   && ! pgrep -f "kube-controller-manager.*${VOLUME_CONTROLLERS##*,}.*--secure-port=$kcm_port|kube-controller-manager.*--secure-port=$kcm_port.*${VOLUME_CONTROLLERS##*,}" >/dev/null; then
  "$NODE_DIR/node-stop" >&2
fi
eval "$("$NODE_DIR/node-start")"
containerd=$(. "$NODE_DIR/node-env"; echo "$CONTAINERD_SOCK")
held=$(ctr --address "$containerd" --namespace k8s.io images ls -q)
if ! grep -qx "docker.io/library/agents-operator-trainer:$tag" <<<"$held" \
   || ! grep -qx "docker.io/library/agents-operator:$tag" <<<"$held"; then
  start=$SECONDS
  "$NODE_DIR/node-load-image" "$archive" >&2
  echo "e2e-node: images loaded into the node in $((SECONDS - start)) s" >&2
  # The images of earlier keys: 2.5 GB each in the node's containerd.
  stale=$(grep -E '^docker.io/library/agents-operator(-trainer)?:e2e-' <<<"$held" | grep -v ":$tag\$" || true)
  [ -z "$stale" ] || ctr --address "$containerd" --namespace k8s.io images rm $stale >/dev/null
fi

export AGENTS_NODE_KUBECONFIG=$KUBECONFIG AGENTS_NODE_IMAGE_TAG=$tag AGENTS_NODE_CONTAINERD=$containerd
[ $# -eq 0 ] || exec "$@"
# One test at a time: every test's pods share the node's two cores.
# shellcheck disable=SC2086
exec "$PYTHON" -m pytest -q -ra -p no:xdist tests/node ${PYTEST_ARGS:-}
