# The miniplane image: nothing but the statically linked binary, so it builds without
# pulling anything (there is no registry to pull from) and runs every component:
#   docker run miniplane:latest <etcd|apiserver|controller-manager|scheduler|kubeletstub|certs|probe> ...
#
# The binary is built on the host first (CGO_ENABLED=0, see the Makefile), and the build
# context is the folder holding only that binary:
#   make image        # = go build -o _output/image/miniplane ./cmd/miniplane
#                     #   docker build -f Dockerfile -t miniplane:latest _output/image
FROM scratch
COPY miniplane /miniplane
# Runs as root inside its container: it reads the 0600 keys that `miniplane certs` hands to
# the host user (--owner) in the bind-mounted state folder.
ENTRYPOINT ["/miniplane"]
CMD ["--help"]
