"""`make audit` (tools/audit.py) never passes without having checked every package."""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "audit.py"
_spec = importlib.util.spec_from_file_location("audit", SCRIPT)
audit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(audit)


def test_an_unreachable_service_is_said_plainly_and_fails():
    unreachable = "-s osv --osv-url http://127.0.0.1:9/v1/query --timeout 5"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--pip-audit-args", unreachable, "locks/kubectl.txt"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == audit.NOT_AUDITED, done.stderr
    assert "locks/kubectl.txt: NOT AUDITED: the vulnerability service cannot be reached" in done.stderr
    assert "Traceback" not in done.stderr
    assert "No known vulnerabilities" not in done.stdout + done.stderr


def test_a_package_the_service_did_not_answer_for_fails(capsys):
    skipped = {"name": "kopf", "skip_reason": "Dependency not found on PyPI and could not be audited: kopf (1.45.2)"}
    clean = {"name": "pyyaml", "version": "6.0.2", "vulns": []}
    assert audit._judge("x.txt", [clean, skipped]) == audit.NOT_AUDITED
    assert "NOT AUDITED: the vulnerability service had no answer for 1 of 2 packages" in capsys.readouterr().err


def test_vulnerabilities_and_a_clean_audit():
    vulnerable = {"name": "pyyaml", "version": "5.3", "vulns": [{"id": "PYSEC-2021-142"}]}
    assert audit._judge("x.txt", [vulnerable]) == audit.VULNERABLE
    assert audit._judge("x.txt", [{"name": "pyyaml", "version": "6.0.2", "vulns": []}]) == audit.CLEAN
