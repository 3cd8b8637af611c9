"""The operator process (operator_main.py): kopf's settings from OperatorOptions, the heap frozen before
serving (the operator itself is not started)."""

import gc

from agents_operator import cli


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
