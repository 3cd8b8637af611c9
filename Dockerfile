# Two images from one file (`make image` builds both):
#   --target operator  `agents-operator run`: the base dependencies only (kopf, kubernetes, pydantic, ...), no
#                      TensorFlow, pybullet, pygame, matplotlib or ffmpeg.
#   --target trainer   what job pods run (`train`, `env-server`, `visualize`, `plot`): + [trainer,tensorboard];
#                      it also serves the TensorBoard Deployment of jobs that ask for one.
# Both install from the hashed locks (`make locks`) with --require-hashes. pip and setuptools live in a
# build-only venv; the venv a runtime stage copies never has pip, setuptools or wheel.

# The base, pinned by digest: python:3.11-slim-bookworm. `make image` passes BASE for a local stand-in.
ARG BASE=python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91

FROM ${BASE} AS build
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY locks/build.txt locks/operator.txt locks/trainer.txt ./locks/
# /opt/pip: pip and setuptools (hashed); /opt/venv: the runtime venv, created without pip and filled through
# `pip --python`. The project's wheel is built without build isolation, so from the locked setuptools.
RUN python -m venv /opt/pip \
    && /opt/pip/bin/python -m pip install --quiet --require-hashes -r locks/build.txt \
    && python -m venv --without-pip /opt/venv
# kubernetes 37 also ships an asyncio copy of its client (kubernetes/aio, ~68 MB with bytecode) that nothing
# imports: kopf talks to the API server through aiohttp, kube.py and client.py through kubernetes.client.
ENV UNUSED=/opt/venv/lib/python3.11/site-packages/kubernetes/aio

# The project's wheel, in a stage of its own: a change to the sources rebuilds it and the last layer of each
# target, while the dependencies' layers above stay cached.
FROM build AS wheel
COPY pyproject.toml README.md ./
COPY agents_operator ./agents_operator
RUN /opt/pip/bin/python -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir /dist .

FROM build AS build-operator
RUN /opt/pip/bin/python -m pip --python /opt/venv/bin/python install --quiet --require-hashes -r locks/operator.txt \
    && rm -r "$UNUSED"
COPY --from=wheel /dist /dist
RUN /opt/pip/bin/python -m pip --python /opt/venv/bin/python install --quiet --no-deps /dist/*.whl

# tensorflow-cpu declares setuptools and astunparse declares wheel, yet neither is imported by anything the
# trainer runs (pybullet_envs_gymnasium needs no pkg_resources, pygame does without it: tests/test_extras.py),
# so both leave the venv after the hashed install.
FROM build AS build-trainer
RUN /opt/pip/bin/python -m pip --python /opt/venv/bin/python install --quiet --require-hashes -r locks/trainer.txt \
    && /opt/pip/bin/python -m pip --python /opt/venv/bin/python uninstall --quiet --yes setuptools wheel \
    && rm -r "$UNUSED"
COPY --from=wheel /dist /dist
RUN /opt/pip/bin/python -m pip --python /opt/venv/bin/python install --quiet --no-deps /dist/*.whl

# What both runtime images share: the user the pods run as (UID 1000), the environment, the entry point. The
# base's own pip, setuptools and wheel (python:3.11 images ship them) are deleted; the venv never sees them.
FROM ${BASE} AS runtime
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=https://github.com/agents-operator/agents-operator
LABEL org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --gid 1000 agents \
    && useradd --uid 1000 --gid 1000 --no-create-home --shell /usr/sbin/nologin agents \
    && rm -rf /usr/local/bin/pip* /usr/local/lib/python3.11/site-packages/pip* \
              /usr/local/lib/python3.11/site-packages/setuptools* /usr/local/lib/python3.11/site-packages/wheel* \
              /usr/local/lib/python3.11/site-packages/pkg_resources /usr/local/lib/python3.11/site-packages/_distutils_hack
# HOME=/tmp: TensorFlow, Keras and matplotlib write caches under HOME; /tmp is writable (an emptyDir in the
# chart, where the root file system is read-only). The venv holds compiled bytecode: start-up reads it instead
# of compiling TensorFlow's Python on every start, and a read-only root could not keep what it compiled.
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/tmp \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TF_CPP_MIN_LOG_LEVEL=2
USER 1000:1000
WORKDIR /tmp
ENTRYPOINT ["agents-operator"]
CMD ["--help"]

FROM runtime AS operator
LABEL org.opencontainers.image.title="agents-operator" \
      org.opencontainers.image.description="The AgentsJob operator: distributed PPO training as a Kubernetes object"
COPY --from=build-operator /opt/venv /opt/venv

FROM runtime AS trainer
LABEL org.opencontainers.image.title="agents-operator-trainer" \
      org.opencontainers.image.description="The PPO trainer, env server and TensorBoard that AgentsJob pods run"
COPY --from=build-trainer /opt/venv /opt/venv
