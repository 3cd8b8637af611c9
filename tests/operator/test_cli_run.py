"""`agents-operator run` maps its flags onto OperatorOptions (the operator itself is not started)."""

import gc
import subprocess
import sys

import pytest

from agents_operator import cli


def test_run_flags_reach_the_operator(monkeypatch):
    from agents_operator import operator_main

    seen = []
    monkeypatch.setattr(operator_main, "run", lambda options: seen.append(options) or 0)
    argv = ["run", "-n", "a", "-n", "b", "--log-format", "json", "--peering", "agents", "--metrics-port", "9100"]
    assert cli.main([*argv, "--liveness", "http://0.0.0.0:8080/healthz", "--trainer-image", "img:1"]) == 0
    (options,) = seen
    assert options.namespaces == ["a", "b"] and not options.all_namespaces
    assert options.log_format == "json" and options.peering == "agents" and options.metrics_port == 9100
    assert options.liveness == "http://0.0.0.0:8080/healthz" and options.default_image == "img:1"


def test_pod_security_flags_reach_the_controller_and_render(monkeypatch):
    from agents_operator import operator_main

    seen = []
    monkeypatch.setattr(operator_main, "run", lambda options: seen.append(options) or 0)
    monkeypatch.setenv("POD_NAMESPACE", "ops")  # the chart sets it from the downward API
    argv = ["run", "--allow-privileged-jobs", "--operator-pod-labels", "app=op,release=r"]
    assert cli.main(argv) == 0
    (options,) = seen
    assert options.allow_privileged and options.operator_namespace == "ops"
    assert options.operator_pod_labels == {"app": "op", "release": "r"}
    _, controller = operator_main.build(options, kube=object())
    assert controller.options.allow_privileged
    assert controller.options.render.operator_namespace == "ops"
    assert controller.options.render.operator_pod_labels == (("app", "op"), ("release", "r"))
    monkeypatch.delenv("POD_NAMESPACE")
    assert cli.main(["run"]) == 0
    assert not seen[-1].allow_privileged and seen[-1].operator_namespace is None


def test_malformed_operator_labels_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["run", "--operator-pod-labels", "app"])
    assert exit.value.code == 2
    assert "--operator-pod-labels: expected key=value pairs separated by commas, got 'app'" in capsys.readouterr().err


def test_help_does_not_import_kopf():
    code = "import sys, agents_operator.cli as c\ntry:\n c.main(['run','--help'])\nexcept SystemExit: pass\n"
    code += "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kopf','kubernetes','aiohttp')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("[]")


def test_watch_timeouts_reach_kopf_as_whole_seconds():
    """kopf puts `str(server_timeout)` in the watch URL and the API server refuses `300.0` (400)."""
    import kopf

    from agents_operator import operator_main

    defaults = cli.build_parser().parse_args(["run"])
    for options in (
        operator_main.OperatorOptions(watch_timeout=defaults.watch_timeout),
        operator_main.OperatorOptions(watch_timeout=299.5),
    ):
        settings = kopf.OperatorSettings()
        operator_main.configure_settings(settings, options)
        assert isinstance(settings.watching.server_timeout, int) and settings.watching.server_timeout == 300


def test_exact_namespaces_are_served_without_scanning_the_cluster():
    """A namespaced install may not list namespaces or CRDs: kopf would retry those 403s for a minute."""
    import kopf

    from agents_operator import operator_main

    for options, scanning in (
        (operator_main.OperatorOptions(namespaces=["team-a", "team-b"]), False),
        (operator_main.OperatorOptions(namespaces=["team-*"]), True),
        (operator_main.OperatorOptions(all_namespaces=True), True),
    ):
        settings = kopf.OperatorSettings()
        operator_main.configure_settings(settings, options)
        assert settings.scanning.disabled is not scanning, options


def test_run_freezes_the_heap_before_serving(monkeypatch):
    """What is alive when the operator starts is out of every later full garbage collection's way."""
    from agents_operator import operator_main

    frozen = []

    async def serve(options, kube):
        frozen.append(gc.get_freeze_count())

    monkeypatch.setattr(operator_main.kopf, "configure", lambda **_: None)
    monkeypatch.setattr(operator_main.Kube, "connect", lambda *args, **kwargs: None)
    monkeypatch.setattr(operator_main, "serve", serve)
    try:
        assert operator_main.run(operator_main.OperatorOptions()) == 0
    finally:
        gc.unfreeze()
    assert frozen and frozen[0] > 0
