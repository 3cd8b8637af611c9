"""What the API server decides, decided by a real one: validation, defaulting, transition rules, the status
subresource, the columns of `kubectl get aj`, garbage collection and resourceVersion conflicts.

The offline tables of tests/api/cases.py (judged offline by tests/api/test_parsing.py and test_rules.py) are sent
here too (server-side dry-run, with the strict field validation kubectl uses), so that `agents-operator validate`
and `kubectl apply` are held to the same verdicts.
"""

from __future__ import annotations

import copy
import json
import re
import uuid
from collections.abc import Iterator

import pytest
import yaml

from agents_operator import api, crd, naming, render
from agents_operator.kube import ApiError, Kube
from tests.api.cases import BAD, IMMUTABLE, INTEGRAL_FLOATS, Bad, bad_id, bad_manifest, changed, manifest
from tests.crdtools import apply_defaults
from tests.e2e import installs
from tests.e2e.cluster import MERGE, Cluster, jobs_path, wait_for

pytestmark = pytest.mark.timeout(300)

STRICT_DRY_RUN = {"dryRun": "All", "fieldValidation": "Strict"}


@pytest.fixture(scope="module")
def dry_namespace(kube, crd) -> Iterator[str]:
    """One namespace for every dry run: nothing is stored there."""
    name = f"agents-e2e-dry-{uuid.uuid4().hex[:8]}"
    try:
        kube.request(
            "POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
    except ApiError as err:
        if err.status != 409:
            raise
    yield name
    installs.delete_namespace(kube, name)


@pytest.fixture
def quiet(chart_operator) -> None:
    """No operator writes to the jobs of this test (the next test that needs one starts it again)."""
    chart_operator.stop()


def refusal(err: ApiError) -> tuple[list[str], str]:
    """The fields an API error names (its causes) and its message."""
    body = json.loads(err.body)
    causes = (body.get("details") or {}).get("causes") or []
    return [c.get("field", "") for c in causes], body.get("message", "")


def names_field(err: ApiError, field: str) -> bool:
    fields, message = refusal(err)
    return field in fields or f'unknown field "{field}"' in message


def served(kube: Kube, manifest: dict) -> bool:
    """Whether the API server serves the manifest's apiVersion and kind (what kubectl asks discovery)."""
    try:
        resources = kube.request("GET", f"/apis/{manifest['apiVersion']}").get("resources") or []
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return any(r.get("kind") == manifest["kind"] for r in resources)


@pytest.mark.parametrize("bad", BAD, ids=bad_id)
def test_the_api_server_refuses_what_validate_refuses_naming_the_same_field(kube, dry_namespace, bad: Bad):
    data = bad_manifest(bad)
    if bad.not_json:
        with pytest.raises((ValueError, TypeError)):  # what kubectl would meet encoding it
            json.dumps(data, allow_nan=False)
        return
    if bad.unknown_resource:
        assert not served(kube, data)
        return
    if bad.only_validate:
        stored = kube.request("POST", jobs_path(dry_namespace), body=data, query=STRICT_DRY_RUN)
        assert stored["metadata"]["name"] == data["metadata"]["name"], bad.only_validate
        return
    with pytest.raises(ApiError) as err:
        kube.request("POST", jobs_path(dry_namespace), body=data, query=STRICT_DRY_RUN)
    assert err.value.status in (400, 422), err.value
    assert names_field(err.value, bad.field), refusal(err.value)


def test_a_good_manifest_passes_both(kube, dry_namespace):
    api.parse_job(manifest())
    kube.request("POST", jobs_path(dry_namespace), body=manifest(), query=STRICT_DRY_RUN)


def test_a_good_manifest_with_integral_floats_passes_both(kube, dry_namespace, kubectl, tmp_path):
    api.parse_job(copy.deepcopy(INTEGRAL_FLOATS))
    path = tmp_path / "floats.yaml"
    path.write_text(yaml.safe_dump(INTEGRAL_FLOATS))  # replicas: 2.0, as a user may write it
    kubectl("apply", "--dry-run=server", "-n", dry_namespace, "-f", str(path))  # kubectl sends it as 2
    kube.request("POST", jobs_path(dry_namespace), body=api.json_numbers(INTEGRAL_FLOATS), query=STRICT_DRY_RUN)
    # Sent as JSON's 2.0, the server reads a float, which the scale subresource's path does not take
    # (hence `api.json_numbers` in AgentsJobClient.create).
    with pytest.raises(ApiError) as err:
        kube.request("POST", jobs_path(dry_namespace), body=INTEGRAL_FLOATS, query=STRICT_DRY_RUN)
    assert "spec.replicaSpecs.worker.replicas" in err.value.message and "float64" in err.value.message


def test_the_api_server_fills_in_the_models_defaults(kube, dry_namespace):
    minimal = {
        "apiVersion": naming.API_VERSION,
        "kind": naming.KIND,
        "metadata": {"name": "defaults"},
        "spec": {"replicaSpecs": {"worker": {}}},
    }
    stored = kube.request("POST", jobs_path(dry_namespace), body=minimal, query=STRICT_DRY_RUN)
    assert stored["spec"] == apply_defaults(crd.openapi_schema(), copy.deepcopy(minimal))["spec"]
    assert stored["spec"]["environments"]["placement"] == "colocated"
    # Every effective value is stored, and they are the model's own defaults.
    model = api.parse_job(minimal).spec.model_dump(by_alias=True, exclude_none=True)
    assert stored["spec"] == model


@pytest.mark.parametrize(("path", "value", "field", "reason"), IMMUTABLE)
def test_immutable_fields_refuse_a_real_update(kube, namespace, quiet, path, value, field, reason):
    cluster = Cluster(kube, namespace)
    stored = kube.request("POST", jobs_path(namespace), body=manifest())
    update = changed(path, value)
    update["metadata"] = stored["metadata"]  # a PUT of the whole object at its resourceVersion
    with pytest.raises(ApiError) as err:
        kube.request("PUT", f"{jobs_path(namespace)}/demo", body=update)
    assert err.value.status == 422 and names_field(err.value, field), refusal(err.value)
    assert reason in refusal(err.value)[1]
    assert cluster.job("demo")["spec"] == stored["spec"]


def test_mutable_fields_take_a_real_update(kube, namespace, quiet):
    stored = kube.request("POST", jobs_path(namespace), body=manifest())
    patch = {"spec": {"runPolicy": {"backoffLimit": 9, "suspend": True, "ttlSecondsAfterFinished": 60}}}
    updated = kube.request("PATCH", f"{jobs_path(namespace)}/demo", body=patch, content_type=MERGE)
    assert updated["spec"]["runPolicy"] == {**stored["spec"]["runPolicy"], **patch["spec"]["runPolicy"]}
    assert updated["metadata"]["generation"] == stored["metadata"]["generation"] + 1


def test_status_is_a_subresource_with_its_own_schema(kube, namespace, quiet):
    path = f"{jobs_path(namespace)}/demo"
    kube.request("POST", jobs_path(namespace), body=manifest())
    # Through the main resource, status is ignored; through /status, spec is.
    kube.request("PATCH", path, body={"status": {"state": "Failed"}}, content_type=MERGE)
    assert (kube.request("GET", path).get("status") or {}).get("state") is None
    written = kube.request(
        "PATCH",
        f"{path}/status",
        body={"spec": {"runPolicy": {"backoffLimit": 7}}, "status": {"state": "Running", "restarts": 2, "kopf": {}}},
        content_type=MERGE,
    )
    assert written["status"] == {"state": "Running", "restarts": 2}  # unknown status fields pruned
    assert written["spec"]["runPolicy"]["backoffLimit"] == 3  # spec untouched
    with pytest.raises(ApiError) as err:
        kube.request("PATCH", f"{path}/status", body={"status": {"restarts": -1}}, content_type=MERGE)
    assert err.value.status == 422 and names_field(err.value, "status.restarts")


def test_the_status_names_an_export_as_the_operator_writes_it(kube, namespace, quiet):
    """The operator's `status.export` of a job that succeeded (spec.trainer.export may turn it off)."""
    path = f"{jobs_path(namespace)}/demo"
    body = manifest()
    body["spec"].setdefault("trainer", {})["export"] = False
    assert kube.request("POST", jobs_path(namespace), body=body)["spec"]["trainer"]["export"] is False
    claimed = manifest()
    claimed["spec"]["storage"] = {"persistentVolumeClaim": {"claimName": "c"}}
    export = render.export_status(api.parse_job(claimed))
    written = kube.request(
        "PATCH", f"{path}/status", body={"status": {"export": export.model_dump(by_alias=True)}}, content_type=MERGE
    )
    assert written["status"]["export"] == {"path": "/var/run/agents/demo/exported", "claimName": "c"}
    with pytest.raises(ApiError) as err:
        kube.request("PATCH", f"{path}/status", body={"status": {"export": {"claimName": None}}}, content_type=MERGE)
    assert err.value.status == 422 and names_field(err.value, "status.export.claimName")


def test_kubectl_get_aj_shows_the_columns(kube, namespace, quiet, kubectl):
    kube.request("POST", jobs_path(namespace), body=manifest())
    status = {
        "state": "Running",
        "replicaStatuses": {"worker": {"active": 2, "succeeded": 0, "failed": 0}},
        "progress": {"globalStep": 42, "envSteps": 8192, "meanReturn": -120.5},
    }
    kube.request("PATCH", f"{jobs_path(namespace)}/demo/status", body={"status": status}, content_type=MERGE)
    table = kubectl("get", "aj", "-n", namespace)
    header, row = (re.split(r"\s{2,}", line.strip()) for line in table.strip().splitlines())
    assert header == ["NAME", "STATE", "WORKERS", "DESIRED", "STEP", "SCORE", "AGE"]
    assert row[:6] == ["demo", "Running", "2", "2", "42", "-120.5"]
    wide = kubectl("get", "aj", "-n", namespace, "-o", "wide").strip().splitlines()[0]
    assert re.split(r"\s{2,}", wide.strip()) == ["NAME", "STATE", "WORKERS", "DESIRED", "MAX", "STEP", "SCORE", "AGE"]
    assert kubectl("get", "agentsjobs.agents.dev", "-n", namespace, "-o", "name").split() == [
        "agentsjob.agents.dev/demo"
    ]


def test_garbage_collection_deletes_the_children_of_a_deleted_job(cluster, operator):
    cluster.create_job()
    wait_for(lambda: len(cluster.live_pods()) == 3 and len(cluster.services()) == 3, 60, "children")
    operator.stop()  # only the cluster's garbage collector is left to delete them
    cluster.kube.delete(naming.KIND, cluster.ns, "pj")
    wait_for(lambda: cluster.job() is None, 60, "job gone")
    wait_for(lambda: not cluster.pods() and not cluster.services(), 90, "children collected")
    assert cluster.kube.list("NetworkPolicy", cluster.ns) == []


def test_foreground_deletion_is_not_fought_by_the_operator(cluster):
    cluster.started()
    created = len(cluster.events("SuccessfulCreate"))
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground"}
    cluster.kube.request("DELETE", f"{jobs_path(cluster.ns)}/pj", body=body)
    wait_for(lambda: cluster.job() is None, 90, "job and children deleted in the foreground")
    assert not cluster.live_pods() and not cluster.services()
    assert len(cluster.events("SuccessfulCreate")) == created  # nothing recreated while it was deleted


def test_a_stale_write_is_refused_and_the_operators_status_survives_concurrent_edits(cluster):
    cluster.started()
    path = f"{jobs_path(cluster.ns)}/pj"
    stale = cluster.job()
    for suspend in (True, False, True, False):  # while the operator writes status and deletes or creates pods
        cluster.kube.request("PATCH", path, body={"spec": {"runPolicy": {"suspend": suspend}}}, content_type=MERGE)
    with pytest.raises(ApiError) as err:
        cluster.kube.request("PUT", path, body=stale)  # a client that read before the others wrote
    assert err.value.status == 409

    def caught_up() -> bool:
        job = cluster.job()
        return job["status"].get("observedGeneration") == job["metadata"]["generation"]

    wait_for(lambda: caught_up() and len(cluster.live_pods()) == 3, 60, "the last resume acted upon")
    cluster.run_all()
    wait_for(lambda: cluster.state() == "Running", 60, "Running")
    job = cluster.job()
    assert job["spec"]["runPolicy"]["suspend"] is False
    assert job["status"]["observedGeneration"] == job["metadata"]["generation"]
    assert any(c["type"] == "Suspended" for c in job["status"]["conditions"])  # the suspension is in its history
