# Tessera's vc-scheduler: Volcano v1.14.1's scheduler with the vgpu plugin compiled in.
# The same image contents as `make images` (tools/release), for those who build with
# Docker/BuildKit. `make images` is the path tested in CI; this file is checked for
# paths only (charts/test). From the repository root:
#   docker buildx build -f build/vc-scheduler.Dockerfile --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) \
#     -t <registry>/vc-scheduler:0.1.0 .
ARG GO_VERSION=1.24
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
ARG VERSION=dev
ARG REVISION=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY placement/ placement/
COPY pluginargs/ pluginargs/
COPY internal/ internal/
COPY plugins/ plugins/
COPY admission/ admission/
COPY cmd/vc-scheduler/ cmd/vc-scheduler/
COPY cmd/tessera-admission/ cmd/tessera-admission/
# Static binaries: the scheduler needs no C library.
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -buildvcs=false \
      -ldflags "-s -w -buildid= -X github.com/tessera-gpu/tessera/internal/buildinfo.Version=${VERSION} -X github.com/tessera-gpu/tessera/internal/buildinfo.Revision=${REVISION}" \
      -o /rootfs/usr/bin/vc-scheduler ./cmd/vc-scheduler
# The admission webhook, a second entrypoint the chart runs with its own command.
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -buildvcs=false \
      -ldflags "-s -w -buildid= -X github.com/tessera-gpu/tessera/internal/buildinfo.Version=${VERSION} -X github.com/tessera-gpu/tessera/internal/buildinfo.Revision=${REVISION}" \
      -o /rootfs/usr/bin/tessera-admission ./cmd/tessera-admission
# The users and directories every Tessera image has (tools/release/images.go, usersFS).
RUN mkdir -p /rootfs/etc /rootfs/root /rootfs/home/nonroot /rootfs/tmp \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >/rootfs/etc/passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' >/rootfs/etc/group \
 && chmod 0700 /rootfs/root /rootfs/home/nonroot && chown 65532:65532 /rootfs/home/nonroot && chmod 1777 /rootfs/tmp

FROM scratch
ARG VERSION=dev
ARG REVISION=unknown
COPY --from=build /rootfs/ /
COPY LICENSE /usr/share/doc/tessera/LICENSE
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER 65532:65532
LABEL org.opencontainers.image.title=vc-scheduler \
      org.opencontainers.image.source=https://github.com/tessera-gpu/tessera \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.revision=${REVISION} \
      org.opencontainers.image.licenses=Apache-2.0
ENTRYPOINT ["/usr/bin/vc-scheduler"]
