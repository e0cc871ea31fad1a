# syntax=docker/dockerfile:1

# Build stage: the official Go image of go.mod's minor version (go 1.26.x). It runs on the
# build machine's own platform and cross-compiles for the target one, so an arm64 laptop
# building an amd64 image (or the reverse) needs no emulation.
FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
# go.mod pins a patch release (go 1.26.8): should the cached 1.26 image be older, let the go
# command fetch that toolchain rather than fail (the image defaults to GOTOOLCHAIN=local).
ENV GOTOOLCHAIN=auto
WORKDIR /src
# Dependencies first, so that editing the source does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /admitter ./cmd/admitter

# Run stage: a static binary needs no libc; distroless static has CA certificates (for
# rediss:// and TLS to NATS), tzdata and a non-root user, and no shell or package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /admitter /admitter
# nonroot (65532), numeric so that Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# admitter's defaults (127.0.0.1:9090 and :9080) are unreachable from outside a container:
# listen on all interfaces. /metrics, /healthz and /readyz are served on 9090, the decision API
# (POST /v1/decide, GET /v1/tenants/{tenant}) on 9080.
ENV ADMITTER_HTTP_ADDR=0.0.0.0:9090
ENV ADMITTER_API_ADDR=0.0.0.0:9080
EXPOSE 9090 9080
ENTRYPOINT ["/admitter"]
CMD ["run"]
