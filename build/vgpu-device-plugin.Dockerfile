# Tessera's node agent plus the vgpu-core hook library it installs on each GPU node.
# The same image contents as `make images` (tools/release), for those who build with
# Docker/BuildKit; `make images` is the path tested in CI (it runs every entrypoint from
# the image's root file system), this file is checked for paths only (charts/test).
# amd64 only, as make images. From the repository root:
#   docker build -f build/vgpu-device-plugin.Dockerfile --build-arg VERSION=0.1.0 \
#     --build-arg REVISION=$(git rev-parse HEAD) -t <registry>/vgpu-device-plugin:0.1.0 .
ARG GO_VERSION=1.24
FROM golang:${GO_VERSION}-bookworm AS agent
ARG VERSION=dev
ARG REVISION=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY placement/ placement/
COPY internal/ internal/
COPY deviceplugin/ deviceplugin/
COPY plugins/ plugins/
COPY cmd/vgpu-device-plugin/ cmd/vgpu-device-plugin/
# cgo: go-nvml resolves NVML at run time (dlopen), from the driver the NVIDIA runtime injects.
RUN CGO_ENABLED=1 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -buildid= -X github.com/tessera-gpu/tessera/internal/buildinfo.Version=${VERSION} -X github.com/tessera-gpu/tessera/internal/buildinfo.Revision=${REVISION}" \
      -o /out/vgpu-device-plugin ./cmd/vgpu-device-plugin

# libvgpu.so links against glibc 2.17-era symbol versions (vgpu-core/compat), so it loads in
# old CUDA images too; its C suite runs against the stub driver before it is shipped.
FROM debian:bookworm AS hook
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src/vgpu-core
COPY vgpu-core/ ./
RUN make clean && make && make test-normal

# The root file system: the Debian packages of build/image-packages.lock (checked by sha256),
# only the parts make images keeps, and the same users and directories.
FROM debian:bookworm AS rootfs
COPY build/image-packages.lock /lock
WORKDIR /pkgs
RUN apt-get update \
 && grep -v '^#' /lock | while read n v a s; do [ -n "$n" ] || continue; \
      apt-get download "$n:$a=$v" && echo "$s  $(ls "$n"_*.deb)" | sha256sum -c - || exit 1; \
      dpkg-deb -x "$n"_*.deb "/pkgs/$n"; done \
 && t=x86_64-linux-gnu && mkdir -p /rootfs/etc /rootfs/lib /rootfs/bin /rootfs/usr/lib/$t /rootfs/usr/share/doc/tessera \
      /rootfs/usr/share/doc/libc6 /rootfs/usr/share/doc/busybox-static /rootfs/root /rootfs/home/nonroot /rootfs/tmp \
 && cp -a /pkgs/libc6/etc/ld.so.conf.d /rootfs/etc/ && cp -a /pkgs/libc6/lib/$t /rootfs/lib/ && cp -a /pkgs/libc6/lib64 /rootfs/ \
 && cp /pkgs/libc6/usr/share/doc/libc6/copyright /rootfs/usr/share/doc/libc6/ \
 && cp /pkgs/busybox-static/bin/busybox /rootfs/bin/ \
 && cp /pkgs/busybox-static/usr/share/doc/busybox-static/copyright /rootfs/usr/share/doc/busybox-static/ \
 && for a in sh cp mv chmod rm ls cat mkdir; do ln -s busybox /rootfs/bin/$a; done \
 && echo 'include /etc/ld.so.conf.d/*.conf' >/rootfs/etc/ld.so.conf \
 && { echo '# Debian packages unpacked into this image (name version arch sha256)'; grep -v '^#' /lock | grep ' amd64 '; } \
      >/rootfs/usr/share/doc/tessera/image-packages \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >/rootfs/etc/passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' >/rootfs/etc/group \
 && chmod 0700 /rootfs/root /rootfs/home/nonroot && chown 65532:65532 /rootfs/home/nonroot && chmod 1777 /rootfs/tmp

FROM scratch
ARG VERSION=dev
ARG REVISION=unknown
COPY --from=rootfs /rootfs/ /
COPY --from=agent /out/vgpu-device-plugin /usr/bin/vgpu-device-plugin
COPY --from=hook /src/vgpu-core/build/libvgpu.so /opt/tessera/lib/libvgpu.so
COPY LICENSE /usr/share/doc/tessera/LICENSE
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LABEL org.opencontainers.image.title=vgpu-device-plugin \
      org.opencontainers.image.source=https://github.com/tessera-gpu/tessera \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.revision=${REVISION} \
      org.opencontainers.image.licenses=Apache-2.0
ENTRYPOINT ["/usr/bin/vgpu-device-plugin"]
