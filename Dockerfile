# The gateway in a container: slim Python 3.11, a non-root user, its data in the /data volume.
#
#   docker build -t chat-gateway .                              # every extra
#   docker build --build-arg EXTRAS=feishu,redis -t chat-gateway .
#   docker build --build-arg EXTRAS= -t chat-gateway .          # the defaults only
#
# It listens on 0.0.0.0:8080 inside the container, so it refuses to start without an admin
# token: docker run -e GATEWAY_ADMIN__TOKEN=... (see docs/deploy.md).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore
RUN python -m venv /opt/gateway
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY config ./config
COPY gateway ./gateway
COPY channels ./channels
# Extras to install, comma-separated (feishu, dingtalk, postgres, mysql, redis, llm, all).
ARG EXTRAS=all
RUN /opt/gateway/bin/pip install ".${EXTRAS:+[$EXTRAS]}"

FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 gateway \
    && useradd --system --uid 10001 --gid gateway --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin gateway \
    && mkdir /data \
    && chown gateway:gateway /data
COPY --from=build /opt/gateway /opt/gateway
ENV PATH=/opt/gateway/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    GATEWAY_DATA_DIR=/data \
    GATEWAY_SERVER__HOST=0.0.0.0 \
    GATEWAY_SERVER__PORT=8080
# The working directory is the data dir: a gateway.toml placed there is read by default.
WORKDIR /data
VOLUME ["/data"]
USER gateway
EXPOSE 8080
# /readyz answers 503 while the store or a channel is down; urlopen raises on it.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('GATEWAY_SERVER__PORT', '8080') + '/readyz', timeout=4)"]
# SIGTERM (docker stop) is a clean stop: pending confirmations are cancelled and the
# chats told, running calls finish, outbound messages drain. It takes up to the stop budget
# (docs/deploy.md, "Stopping"), longer than Docker's default 10 s: docker run --stop-timeout 60
# (or docker stop -t 60).
STOPSIGNAL SIGTERM
CMD ["gateway", "serve"]
