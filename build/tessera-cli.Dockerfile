# The tessera CLI (also kubectl-tessera), for running from a pod or a CI job.
#   docker build -f build/tessera-cli.Dockerfile -t ghcr.io/tessera-gpu/tessera-cli:<tag> .
ARG GO_VERSION=1.24
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY internal/ internal/
COPY plugins/ plugins/
COPY cli/ cli/
COPY cmd/tessera/ cmd/tessera/
ARG VERSION=dev
ARG REVISION=unknown
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/tessera-gpu/tessera/internal/buildinfo.Version=${VERSION} -X github.com/tessera-gpu/tessera/internal/buildinfo.Revision=${REVISION}" \
      -o /out/tessera ./cmd/tessera

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/tessera /usr/bin/tessera
COPY --from=build /out/tessera /usr/bin/kubectl-tessera
ENTRYPOINT ["/usr/bin/tessera"]
