# One image for every XMC service; the service is chosen by the command
# (docker-compose.yml `command:`, Kubernetes `args:`):
#   xmc-ess serve | xmc-ess migrate | xmc-actuator | xmc-reconciler | xmc-ui | xmc-kubesim
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# Only what `pip install .` needs (see .dockerignore): metadata, the README it names,
# and the two package roots of [tool.setuptools.packages.find].
COPY pyproject.toml README.md ./
COPY libs ./libs
COPY services ./services
RUN pip install . && rm -rf /src

RUN groupadd --system --gid 10001 xmc \
    && useradd --system --uid 10001 --gid xmc --no-create-home --home-dir /nonexistent xmc
USER 10001:10001
WORKDIR /

# gRPC (ESS), the dashboard (xmc-ui) and the conventional /metrics port (XMC_METRICS_LISTEN).
EXPOSE 50051 8080 9090

# No ENTRYPOINT: the command names the console script, so one image serves every service.
CMD ["xmc-ess", "serve"]
