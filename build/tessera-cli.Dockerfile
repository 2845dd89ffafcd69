# The tessera CLI (also kubectl-tessera), for running from a pod or a CI job.
#   docker build -f build/tessera-cli.Dockerfile -t ghcr.io/tessera-gpu/tessera-cli:<tag> .
ARG GO_VERSION=1.24
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY placement/ placement/
COPY pluginargs/ pluginargs/
COPY internal/ internal/
COPY plugins/ plugins/
COPY cli/ cli/
COPY cmd/tessera/ cmd/tessera/
COPY cmd/tessera-simulate/ cmd/tessera-simulate/
ARG VERSION=dev
ARG REVISION=unknown
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/tessera-gpu/tessera/internal/buildinfo.Version=${VERSION} -X github.com/tessera-gpu/tessera/internal/buildinfo.Revision=${REVISION}" \
      -o /out/tessera ./cmd/tessera
# `tessera simulate` runs tessera-simulate from beside it (it links Volcano's scheduler; tessera does not).
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/tessera-gpu/tessera/internal/buildinfo.Version=${VERSION} -X github.com/tessera-gpu/tessera/internal/buildinfo.Revision=${REVISION}" \
      -o /out/tessera-simulate ./cmd/tessera-simulate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/tessera /usr/bin/tessera
COPY --from=build /out/tessera /usr/bin/kubectl-tessera
COPY --from=build /out/tessera-simulate /usr/bin/tessera-simulate
ENTRYPOINT ["/usr/bin/tessera"]
