# syntax=docker/dockerfile:1
#
# walpost container image.
#
#   docker build -t walpost:local --build-arg VERSION=$(git describe --always --dirty) .
#   docker run --rm walpost:local version
#
# The binary is static: walpost needs no cgo (walpost lint's SQL parser,
# libpg_query, runs as WebAssembly), so it is built with CGO_ENABLED=0
# (cmd/walpost/compose_test.go checks it) and does not depend on the runtime
# image's libc. The builder is golang:1.26 on bookworm, the runtime
# debian:12-slim.
#
# The runtime image carries curl only for health probes of /healthz (see the
# walpost service's healthcheck in docker-compose.yml; there is no HEALTHCHECK
# here because the same image also runs one-shot commands such as migrate and
# check), and runs as an unprivileged numeric user (Kubernetes runAsNonRoot
# can verify it).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Dependencies first, so source edits reuse the module download layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ENV CGO_ENABLED=0
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/walpost ./cmd/walpost \
    && /out/walpost version

FROM debian:12-slim AS runtime
# Not pinning apt package versions (DL3008): Debian security updates replace
# them, and a pinned version disappears from the archive within weeks.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 walpost \
    && useradd --system --uid 10001 --gid walpost --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin walpost
COPY --from=build /out/walpost /usr/local/bin/walpost
USER 10001:10001
# http.listen: /metrics, /healthz and /readyz.
EXPOSE 9187
ENTRYPOINT ["walpost"]
CMD ["run"]
