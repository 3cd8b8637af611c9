"""The `agents-operator` command line."""

from __future__ import annotations

import argparse
import os
import sys

from agents_operator import __version__, naming
from agents_operator.trainer import commands as trainer_commands


def _crd(args: argparse.Namespace) -> int:
    from agents_operator import crd, manifests

    sys.stdout.write(manifests.dump(crd.crd()))
    return 0


def _validate(args: argparse.Namespace) -> int:
    from agents_operator import api, manifests

    failed = False
    for path in args.files:
        try:
            docs = manifests.load_documents(path)
        except manifests.ManifestError as err:
            print(err, file=sys.stderr)
            failed = True
            continue
        for number, doc in enumerate(docs):
            where = f"{path}" if len(docs) == 1 else f"{path}[{number}]"
            try:
                job = api.parse_job(doc)
            except api.InvalidJob as err:
                failed = True
                for problem in err.problems:
                    print(f"{where}: {problem}", file=sys.stderr)
                continue
            if not args.quiet:
                print(f"{where}: AgentsJob {job.name} is valid")
    return 1 if failed else 0


def _load_job(path: str):
    """The AgentsJob in `path`, or None after printing why it is not one (one line per problem)."""
    from agents_operator import manifests

    try:
        return manifests.load_job(path)
    except manifests.ManifestError as err:
        print(err, file=sys.stderr)
        return None


def _render(args: argparse.Namespace) -> int:
    from agents_operator import manifests, render

    job = _load_job(args.file)
    if job is None:
        return 1
    if args.namespace:
        job.metadata.namespace = args.namespace
    options = render.RenderOptions(default_image=args.image or render.DEFAULT_IMAGE)
    sys.stdout.write(manifests.dump_all(render.children(job, options)))
    return 0


def _local(args: argparse.Namespace) -> int:
    import logging
    from pathlib import Path

    from agents_operator import local
    from agents_operator.local import sandbox

    job = _load_job(args.file)
    if job is None:
        return 1
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    logdir = (Path(args.logdir) if args.logdir else Path("runs") / job.name).resolve()
    try:
        local.prepare_logdir(logdir)
        local.check_resume(job, logdir, video=not args.no_video)
        if not args.share_network:
            sandbox.isolate_network()
    except local.LaunchError as err:
        print(f"agents-operator local: error: {err}", file=sys.stderr)
        return 2
    except sandbox.SandboxError as err:
        print(
            f"agents-operator local: error: cannot give the job a network of its own ({err}); without one "
            "TensorFlow's servers listen on every interface, unauthenticated. --share-network runs it anyway",
            file=sys.stderr,
        )
        return 2
    return local.run_local(job, logdir, video=not args.no_video)


def _scale(args: argparse.Namespace) -> int:
    from pathlib import Path

    from agents_operator.local import scaling

    try:
        scaling.request(Path(args.logdir), args.replicas)
    except scaling.ScaleError as err:
        print(f"agents-operator scale: error: {err}", file=sys.stderr)
        return 2
    print(f"{args.logdir}: the job runs {args.replicas} worker(s) from now on")
    return 0


def _run(args: argparse.Namespace) -> int:
    # kopf, the Kubernetes client and aiohttp are imported here only: `agents-operator --help` stays fast.
    from agents_operator import kube, operator_main

    options = operator_main.OperatorOptions(
        namespaces=args.namespace or [],
        all_namespaces=args.all_namespaces,
        default_image=args.default_image or operator_main.render.DEFAULT_IMAGE,
        allow_privileged=args.allow_privileged_jobs,
        operator_namespace=args.operator_namespace or os.environ.get("POD_NAMESPACE") or None,
        operator_pod_labels=args.operator_pod_labels,
        log_format=args.log_format,
        verbose=args.verbose,
        peering=args.peering,
        priority=args.priority,
        liveness=args.liveness,
        metrics_port=args.metrics_port,
        kubeconfig=args.kubeconfig,
        context=args.context,
        **{
            name: getattr(args, name)
            for name in ("progress_interval", "resync_interval")
            if getattr(args, name) is not None  # else OperatorOptions' default
        },
        watch_timeout=args.watch_timeout,
        request_timeout=args.request_timeout,
    )
    try:
        return operator_main.run(options)
    except kube.NoCluster as err:
        print(f"agents-operator run: error: {err}", file=sys.stderr)
        return 2


def _labels(text: str) -> dict[str, str]:
    """`k=v,k2=v2` as a dict; argparse prints the error as a one-line usage error."""
    pairs = [item.split("=", 1) for item in text.split(",") if item]
    if any(len(pair) != 2 or not pair[0] for pair in pairs):
        raise argparse.ArgumentTypeError(f"expected key=value pairs separated by commas, got {text!r}")
    return dict(pairs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agents-operator",
        description="Distributed PPO training as a Kubernetes object: operator, trainer and local launcher.",
    )
    parser.add_argument("--version", action="version", version=f"agents-operator {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    for add in (_add_crd, _add_validate, _add_render, _add_local, _add_scale, _add_run):
        add(sub)
    trainer_commands.register(sub)
    return parser


def _add_crd(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("crd", help="print the AgentsJob CustomResourceDefinition (YAML)")
    p.set_defaults(func=_crd)


def _add_validate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="check AgentsJob manifests offline",
        description="Check AgentsJob manifests offline with the same rules as the CRD, plus the trainer "
        "preset and overrides. Prints one line per problem (file, field path, reason); exit 1 if any.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="YAML files ('-' for standard input)")
    p.add_argument("-q", "--quiet", action="store_true", help="print problems only")
    p.set_defaults(func=_validate)


def _add_render(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "render",
        help="print the children (NetworkPolicy, the cluster's ConfigMap, Services, Pods, TensorBoard) the operator "
        "creates for a job",
        description="Print, as multi-document YAML, the children the operator creates for the AgentsJob in "
        "FILE. Offline the job has no uid yet, so ownerReferences are left out.",
    )
    p.add_argument("file", metavar="FILE", help="an AgentsJob manifest ('-' for standard input)")
    p.add_argument("-n", "--namespace", help="namespace (default: the manifest's, else 'default')")
    p.add_argument("--image", help=f"image for replicas that name none (default: {naming.image(naming.TRAINER_IMAGE)})")
    p.set_defaults(func=_render)


def _add_local(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "local",
        help="run an AgentsJob on this machine, one process per replica",
        description="Run the job's replicas here with the commands and environment render gives their pods "
        "(hosts mapped to free localhost ports); env servers of a sidecar or remote placement too, each on a port "
        "of its own. The lifecycle, its reasons and Events are the operator's; logs and the status it would write "
        "go to LOGDIR/logs. Ctrl-C stops every process, and the replicas end with the launcher however it ends. "
        "The job runs in a network namespace whose only interface is loopback (Linux), so nothing it serves is "
        "reachable from other machines. Exit 0 only when the job succeeded.",
    )
    p.add_argument("file", metavar="FILE", help="an AgentsJob manifest")
    p.add_argument("--logdir", help="run directory (default: runs/<job name>)")
    p.add_argument("--no-video", action="store_true", help="no GIF of the learned policy at the end (video_episodes=0)")
    p.add_argument(
        "--share-network",
        action="store_true",
        help="run in this machine's network instead of a namespace with only loopback (for systems without "
        "network namespaces): TensorFlow's servers then listen on every interface, so only on a trusted network",
    )
    p.set_defaults(func=_local)


def _add_scale(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "scale",
        help="change the worker count of an elastic job that `local` runs",
        description="What `kubectl scale agentsjob/NAME --replicas=N` is for a job on a cluster, for one that "
        "`agents-operator local` runs in LOGDIR: the job's rules judge N (spec.elastic's bounds; a job without "
        "spec.elastic refuses any scale), then the launcher starts the added workers or stops the highest ones "
        "(SIGTERM: each ends its iteration and leaves), as the operator does. Exit 2 when N is refused or no "
        "launcher runs there.",
    )
    p.add_argument("--logdir", required=True, help="the run directory of the running `agents-operator local`")
    p.add_argument("--replicas", type=int, required=True, metavar="N", help="the number of workers from now on")
    p.set_defaults(func=_scale)


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run the operator (reconciles AgentsJobs into pods and services)",
        description="Run the AgentsJob operator against the cluster of the current kubeconfig (or in-cluster "
        "service account) until SIGINT/SIGTERM.",
    )
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", help="namespace to serve (repeatable; globs allowed)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="serve every namespace")
    # --default-image: the flag's name before the trainer had an image of its own.
    p.add_argument(
        "--trainer-image",
        "--default-image",
        dest="default_image",
        help=f"image of replicas whose job names none (default: {naming.image(naming.TRAINER_IMAGE)})",
    )
    p.add_argument(
        "--allow-privileged-jobs",
        action="store_true",
        help="run jobs with spec.podSecurity Privileged (templates may escalate); without it they fail",
    )
    p.add_argument(
        "--operator-namespace",
        help="the operator's namespace, whose operator pods alone may read job metrics "
        "(default: $POD_NAMESPACE; unset: no pod may)",
    )
    p.add_argument(
        "--operator-pod-labels",
        type=_labels,
        default={},
        metavar="K=V,...",
        help="labels of the operator's pods, for the same rule (default: every pod of its namespace)",
    )
    p.add_argument("--log-format", choices=["plain", "json"], default="plain", help="log format (default: plain)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--peering", metavar="NAME", help="KopfPeering object for HA: one active replica of many")
    p.add_argument("--priority", type=int, default=0, help="peering priority (the highest is active)")
    p.add_argument("--liveness", metavar="URL", help="serve liveness and probes here, e.g. http://0.0.0.0:8080/healthz")
    p.add_argument("--metrics-port", type=int, default=0, help="serve the operator's Prometheus metrics (0: off)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, else ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument(
        "--progress-interval", type=float, help="seconds between reads of running jobs' chiefs' metrics (default 5)"
    )
    p.add_argument("--resync-interval", type=float, help="seconds between resyncs of every job (default 30)")
    p.add_argument("--watch-timeout", type=int, default=300, help="server-side timeout of watch requests (whole s)")
    p.add_argument("--request-timeout", type=float, default=60.0, help="timeout of other API requests (s)")
    p.set_defaults(func=_run)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
