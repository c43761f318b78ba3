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
# distroless/static (no shell, no package manager).
#
# Health probes use `walpost healthcheck` (see the walpost service's
# healthcheck in docker-compose.yml; there is no HEALTHCHECK here because the
# same image also runs one-shot commands such as migrate and check). The
# image runs as an unprivileged numeric user (Kubernetes runAsNonRoot can
# verify it).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Dependencies first, so source edits reuse the module download layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=
ARG DATE=
ENV CGO_ENABLED=0
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.date=${DATE}" -o /out/walpost ./cmd/walpost \
    && /out/walpost version

FROM gcr.io/distroless/static-debian12:nonroot AS runtime
# No shell, no package manager: CA certificates and the nonroot user
# (65532:65532) come with the base. Health probes run `walpost healthcheck`.
COPY --from=build /out/walpost /usr/local/bin/walpost
USER 65532:65532
# http.listen: /metrics, /healthz and /readyz.
EXPOSE 9187
ENTRYPOINT ["walpost"]
CMD ["run"]
