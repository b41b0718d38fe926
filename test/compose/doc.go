// Package compose holds the end-to-end fault test of the docker compose deployment
// (docker-compose.yml at the top of the repository). The test builds the image, brings up
// its own stack under a unique compose project name, host folder and host port, injects
// faults with docker-compose (an etcd member stopped, the leading controller-manager killed,
// a stub kubelet stopped, the whole stack taken down and up again) and asserts on what the
// API returns. Every container, network and volume of its project, and the image tag it
// built, are removed at the end, also when a step fails or the run is interrupted.
//
// It needs a Docker engine and docker-compose (or the docker compose plugin), and runs only
// when MINIPLANE_COMPOSE_TEST=1:
//
//	MINIPLANE_COMPOSE_TEST=1 CGO_ENABLED=0 go test -count=1 -timeout 30m -v ./test/compose/
//
// (`make compose-test` runs the same.) MINIPLANE_COMPOSE selects the compose command, for
// example MINIPLANE_COMPOSE="docker compose"; by default docker-compose is used when it is
// installed, else the plugin.
package compose
