# One image for the operator and the trainer: `agents-operator run` (operator) or `agents-operator train`.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md ./
COPY agents_operator ./agents_operator
RUN pip install --no-compile . && find /opt/venv -name '__pycache__' -prune -exec rm -rf {} +

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="agents-operator" \
      org.opencontainers.image.description="Distributed PPO training as a Kubernetes object"
RUN groupadd --gid 1000 agents && useradd --uid 1000 --gid 1000 --no-create-home --shell /usr/sbin/nologin agents
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    TF_CPP_MIN_LOG_LEVEL=2
USER 1000:1000
WORKDIR /tmp
ENTRYPOINT ["agents-operator"]
CMD ["--help"]
