"""`make audit`: pip-audit over the lock files, failing loudly when nothing could be checked.

pip-audit alone reports "No known vulnerabilities found" and exits 0 when the PyPI JSON API answers 404 for
every package (a proxy or mirror that serves only the simple index does this): each package is merely
"skipped". Here a skipped package fails the audit as much as a vulnerable one, and a service that cannot be
reached at all is said in one plain line instead of a traceback.

Exit status: 0 every package audited and clean, 1 vulnerabilities found, 2 something could not be audited.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CLEAN, VULNERABLE, NOT_AUDITED = 0, 1, 2
# What requests/urllib3 say when the service's host cannot be resolved or connected to.
_UNREACHABLE = ("ConnectionError", "NameResolutionError", "Max retries exceeded", "ConnectTimeout", "ReadTimeout")


def audit(lock: str, pip_audit_args: list[str]) -> int:
    """Audit one lock file; print what was found; return its exit status."""
    command = [sys.executable, "-m", "pip_audit", "--disable-pip", "--require-hashes", "--progress-spinner", "off"]
    done = subprocess.run(
        [*command, "--format", "json", "-r", lock, *pip_audit_args], capture_output=True, text=True, check=False
    )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        return _failed(lock, done.stderr)
    return _judge(lock, report["dependencies"])


def _failed(lock: str, stderr: str) -> int:
    if any(marker in stderr for marker in _UNREACHABLE):
        reason = stderr.strip().splitlines()[-1]
        print(f"{lock}: NOT AUDITED: the vulnerability service cannot be reached ({reason})", file=sys.stderr)
    else:
        print(f"{lock}: NOT AUDITED: pip-audit failed:\n{stderr.strip()}", file=sys.stderr)
    return NOT_AUDITED


def _judge(lock: str, dependencies: list[dict]) -> int:
    skipped = [d for d in dependencies if "skip_reason" in d]
    vulnerable = [d for d in dependencies if d.get("vulns")]
    for dep in vulnerable:
        ids = ", ".join(v["id"] for v in dep["vulns"])
        print(f"{lock}: {dep['name']}=={dep['version']}: {ids}", file=sys.stderr)
    if skipped:
        print(
            f"{lock}: NOT AUDITED: the vulnerability service had no answer for {len(skipped)} of "
            f"{len(dependencies)} packages (unreachable, or a mirror without the JSON API?), e.g. "
            f"{skipped[0]['skip_reason']}",
            file=sys.stderr,
        )
        return NOT_AUDITED
    if vulnerable:
        return VULNERABLE
    print(f"{lock}: {len(dependencies)} packages audited, no known vulnerabilities")
    return CLEAN


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("locks", nargs="+", metavar="LOCK", help="hashed requirements files")
    parser.add_argument(
        "--pip-audit-args", default="", help="more pip-audit arguments, space-separated (e.g. '-s osv')"
    )
    args = parser.parse_args(argv)
    return max(audit(lock, args.pip_audit_args.split()) for lock in args.locks)


if __name__ == "__main__":
    sys.exit(main())
