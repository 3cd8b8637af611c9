"""A replica of a tiny between-graph job (one variable vector), for testing the cluster protocols."""

import logging
import os
import sys
import time
from pathlib import Path

import tensorflow as tf

from agents_operator import tfconfig
from agents_operator.trainer import distributed


def wait_for_members(membership: distributed.Membership, session: tf.compat.v1.Session, count: int) -> None:
    """Wait (60 s at most) until `count` slots are taken. A real job's chief trains far longer than another worker
    takes to join; the tiny job's 50 steps can end first, and the chief then tells the ps that the job is over
    before the other worker has joined, which then finds no ps: it failed on its first read, or waited for the
    ps to call it back until the test's 120 s ran out (2 of 7 runs alone on the 2-core machine)."""
    deadline = time.monotonic() + 60
    while len(membership.members(session)) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg = tfconfig.from_env(os.environ, lambda path: Path(path).read_text())
    if cfg.task_type == "ps":
        return distributed.run_ps(cfg)
    cluster = distributed.Cluster(cfg)
    for name, address in cluster.peers():
        distributed.wait_for(name, address)
    server = distributed.start_server(cfg, 1)
    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.device(cluster.device_setter()):
            weights = tf.compat.v1.get_variable("w", [4], initializer=tf.compat.v1.zeros_initializer())
            step = tf.compat.v1.train.get_or_create_global_step()
            loss = tf.reduce_sum((weights - 1.0) ** 2)
            train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
            init = tf.compat.v1.global_variables_initializer()
            uninitialized = tf.compat.v1.report_uninitialized_variables()
        membership = distributed.Membership.create(cluster)
    with tf.compat.v1.Session(server.target, graph=graph, config=cluster.session_config(1)) as session:
        distributed.prepare_session(session, uninitialized, lambda: session.run(init), cluster.is_chief)
        membership.enter(session, cluster.is_chief)
        print(f"worker {cfg.task_index} joins: slots taken {membership.members(session)}", flush=True)
        if cluster.is_chief:  # a job of STEPS steps is over before a slow worker joins: start with MEMBERS of them
            wait_for_members(membership, session, int(os.environ.get("MEMBERS", "1")))
        while session.run(step) < int(os.environ.get("STEPS", "50")):
            session.run(train)
        print(f"worker {cfg.task_index} sees w = {session.run(weights).round(3).tolist()}", flush=True)
        if cluster.is_chief:  # the chief leaves last (as trainer/leaving.py's leave_cluster)
            addresses = cfg.cluster["worker"]
            others = lambda: [addresses[i] for i in membership.members(session) if i != cfg.task_index]  # noqa: E731
            distributed.wait_until_gone(others, print)
        membership.give_back(session)
        session.run(membership.done)
    return 0


if __name__ == "__main__":
    sys.exit(main())
