# Tessera's vc-scheduler: Volcano v1.10.0's scheduler with the vgpu plugin compiled in.
# Build from the repository root:
#   docker build -f build/vc-scheduler.Dockerfile -t ghcr.io/tessera-gpu/vc-scheduler:<tag> .
ARG GO_VERSION=1.24
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY placement/ placement/
COPY pluginargs/ pluginargs/
COPY plugins/ plugins/
COPY cmd/vc-scheduler/ cmd/vc-scheduler/
# Static binary: the scheduler needs no C library.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/vc-scheduler ./cmd/vc-scheduler

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/vc-scheduler /vc-scheduler
USER 65532:65532
ENTRYPOINT ["/vc-scheduler"]
