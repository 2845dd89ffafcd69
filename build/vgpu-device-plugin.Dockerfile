# Tessera's node agent plus the vgpu-core hook library it installs on each GPU node.
# Build from the repository root:
#   docker build -f build/vgpu-device-plugin.Dockerfile -t ghcr.io/tessera-gpu/vgpu-device-plugin:<tag> .
ARG GO_VERSION=1.24
FROM golang:${GO_VERSION}-bookworm AS agent
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY placement/ placement/
COPY deviceplugin/ deviceplugin/
COPY plugins/ plugins/
COPY cmd/vgpu-device-plugin/ cmd/vgpu-device-plugin/
# cgo: go-nvml resolves NVML at run time (dlopen), from the driver the NVIDIA runtime injects.
RUN CGO_ENABLED=1 go build -trimpath -ldflags="-s -w" -o /out/vgpu-device-plugin ./cmd/vgpu-device-plugin

# libvgpu.so is built against the same glibc as most CUDA images (bookworm, glibc 2.36)
# and runs its C test suite against the stub driver before it is shipped.
FROM debian:bookworm AS hook
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src/vgpu-core
COPY vgpu-core/ ./
RUN make clean && make && make test-normal

# The init container copies the library with /bin/sh, cp and mv, so the runtime image
# keeps a shell; it carries nothing else beyond the two files.
FROM debian:bookworm-slim
COPY --from=agent /out/vgpu-device-plugin /usr/bin/vgpu-device-plugin
COPY --from=hook /src/vgpu-core/build/libvgpu.so /opt/tessera/lib/libvgpu.so
ENTRYPOINT ["/usr/bin/vgpu-device-plugin"]
