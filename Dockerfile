# An image holding only the static paddle binary.
#
#   podman build -t paddle .        (or docker build)
#   podman run --rm paddle version
#
# The build stage compiles the binary from this repository on Debian
# (dependencies from Debian's source packages, see vendor/); the final image
# is FROM scratch: nothing but /paddle.
FROM debian:bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
        gcc make musl-tools cmake perl patch dpkg-dev xz-utils bzip2 file git ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make paddle && file paddle | grep -q 'statically linked'

FROM scratch
COPY --from=build /src/paddle /paddle
ENTRYPOINT ["/paddle"]
CMD ["help"]
