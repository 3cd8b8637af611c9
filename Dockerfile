# One image for the operator and the trainer: `agents-operator run` (operator) or `agents-operator train`;
# it also serves the TensorBoard Deployment of jobs that ask for one (`tensorboard`, from the extra).
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md ./
COPY agents_operator ./agents_operator
RUN pip install --no-compile "./[trainer,tensorboard]" && find /opt/venv -name '__pycache__' -prune -exec rm -rf {} +

# The final stage has no compiler and no pip cache. The wheels need only glibc, libstdc++ and libgcc_s
# (pybullet, TensorFlow), which the slim base has.
FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="agents-operator" \
      org.opencontainers.image.description="Distributed PPO training as a Kubernetes object"
RUN groupadd --gid 1000 agents && useradd --uid 1000 --gid 1000 --no-create-home --shell /usr/sbin/nologin agents
COPY --from=build /opt/venv /opt/venv
# HOME=/tmp: TensorFlow, Keras and matplotlib write caches under HOME; /tmp is writable (an emptyDir in the
# chart, where the root file system is read-only).
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/tmp \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TF_CPP_MIN_LOG_LEVEL=2
USER 1000:1000
WORKDIR /tmp
ENTRYPOINT ["agents-operator"]
CMD ["--help"]
