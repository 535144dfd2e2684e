# An image holding only the static paddle binary, built offline:
#
#   make image                      (podman, or docker; IMAGE=name:tag to name it)
#   podman run --rm paddle version
#
# `make image` copies ./paddle (static, musl) into build/image/ and builds
# this file there: FROM scratch, nothing to pull. Dockerfile.build is the
# two-stage variant for machines that can pull debian:bookworm: it compiles
# the binary inside the first stage (podman build -f Dockerfile.build .).
FROM scratch
COPY paddle /paddle
WORKDIR /job
ENTRYPOINT ["/paddle"]
CMD ["help"]
