#!/bin/bash
# A DaemonSet rollout on the compose stack with REPLICAS kubelet-fleet replicas of 2,500
# nodes (fleet-10000.yml): time to numberReady == N, the rolling update at maxUnavailable
# 10 %, and each container's peak RSS from docker stats. It builds its own image and project
# (fleetbench) and removes every container, network, volume and image it made.
# Usage: test/compose/bench/rollout.sh REPO_DIR REPLICAS   (under flock /tmp/miniplane-bench.lock)
set -u
repo=$1; replicas=$2
export MINIPLANE_IMAGE=miniplane-fleetbench:latest MINIPLANE_COMPOSE_DIR=/tmp/fleetbench/state MINIPLANE_COMPOSE_PORT=16443
export MINIPLANE_UID=$(id -u) MINIPLANE_GID=$(id -g)
dc="docker-compose -f $repo/docker-compose.yml -f $(dirname "$0")/fleet-10000.yml -p fleetbench"
export KUBECONFIG=/tmp/fleetbench/state/kubeconfig
cleanup() {
  # Never kill 0: that is the whole process group, this script included.
  [ "$sampler" -gt 0 ] && kill $sampler 2>/dev/null
  $dc down -v --remove-orphans -t 5 >/dev/null 2>&1
  docker rmi miniplane-fleetbench:latest >/dev/null 2>&1
  rm -rf /tmp/fleetbench/state /tmp/fleetbench/image
}
sampler=0
trap cleanup EXIT
mkdir -p /tmp/fleetbench/state /tmp/fleetbench/image
(cd $repo && CGO_ENABLED=0 go build -ldflags='-s -w' -o /tmp/fleetbench/image/miniplane ./cmd/miniplane) || exit 1
docker build -q -f $repo/Dockerfile -t miniplane-fleetbench:latest /tmp/fleetbench/image || exit 1
echo "load before: $(cat /proc/loadavg)"
t_up=$(date +%s.%N)
$dc up -d --scale kubelet-fleet=$replicas 2>&1 | tail -2
want=$((replicas*2500+3))
( while :; do docker stats --no-stream --format '{{.Name}} {{.MemUsage}}' 2>/dev/null | sed "s/^/$(date +%s) /"; sleep 2; done ) > /tmp/fleetbench/stats.txt &
sampler=$!
ready_nodes() { kubectl get nodes -o json 2>/dev/null | jq '[.items[] | select(.status.conditions[]? | .type=="Ready" and .status=="True")] | length'; }
reg=""
for i in $(seq 1 600); do
  n=$(ready_nodes); [ "${n:-0}" -ge $want ] && break
  # On a loaded machine a few Leases are late now and then: go on with 99.5 % Ready.
  [ -n "$reg" ] && [ "${n:-0}" -ge $((want - want/200)) ] && break
  [ -z "$reg" ] && [ "$(kubectl get nodes --no-headers 2>/dev/null | wc -l)" -ge $want ] && { reg=1; echo "all $want nodes registered after $(echo "$(date +%s.%N) - $t_up" | bc) s from up"; }
  sleep 2
done
t_nodes=$(date +%s.%N)
echo "nodes Ready: ${n:-0}/$want after $(echo "$t_nodes - $t_up" | bc) s from up"
cidrs=$(kubectl get nodes -o json | jq '[.items[].spec.podCIDR] | (length|tostring) + " nodes, " + (unique|length|tostring) + " distinct podCIDRs, " + (map(select(.==null))|length|tostring) + " without"')
echo "pod CIDRs: $cidrs"
ips=$(kubectl get nodes -o json | jq '[.items[].status.addresses[]? | select(.type=="InternalIP") | .address] | (length|tostring) + " InternalIPs, " + (unique|length|tostring) + " distinct"')
echo "node addresses: $ips"
cat <<'YAML' | kubectl apply -f - >/dev/null
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: bench, namespace: default}
spec:
  selector: {matchLabels: {app: bench}}
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: "10%"}}
  template:
    metadata: {labels: {app: bench}}
    spec:
      tolerations: [{operator: Exists}]
      containers: [{name: c, image: "registry.example/bench:1"}]
YAML
t_ds=$(date +%s.%N)
st() { kubectl get ds bench -o json | jq -r '"\(.metadata.generation) \(.status.observedGeneration // 0) \(.status.desiredNumberScheduled // 0) \(.status.numberReady // 0) \(.status.updatedNumberScheduled // 0) \(.status.numberAvailable // 0)"'; }
while :; do
  read g og d r u a < <(st); [ "$d" -ge $want ] && [ "$r" -ge $want ] && break; sleep 0.5
  [ $(echo "$(date +%s) - ${t_ds%.*} > 900" | bc) = 1 ] && { echo "timeout: $g $og $d $r $u $a"; exit 1; }
done
t_ready=$(date +%s.%N)
echo "numberReady==$want: $(echo "$t_ready - $t_ds" | bc) s after create"
kubectl set image ds/bench c=registry.example/bench:2 >/dev/null
t_roll=$(date +%s.%N)
while :; do
  read g og d r u a < <(st); [ "$og" -ge "$g" ] && [ "$u" -ge $want ] && [ "$a" -ge $want ] && [ "$r" -ge $want ] && break; sleep 0.5
  [ $(echo "$(date +%s) - ${t_roll%.*} > 1200" | bc) = 1 ] && { echo "timeout: $g $og $d $r $u $a"; exit 1; }
done
t_done=$(date +%s.%N)
echo "rolling update (maxUnavailable 10%): $(echo "$t_done - $t_roll" | bc) s"
ips=$(kubectl get pods -l app=bench -o json | jq '[.items[].status.podIP] | (length|tostring) + " pods, " + (unique|length|tostring) + " distinct IPs"')
echo "pod IPs: $ips"
kill $sampler; sampler=0
echo "load after: $(cat /proc/loadavg)"
echo "peak RSS per container (docker stats, 2 s samples):"
awk '{name=$2; v=$3; u=v; sub(/[0-9.]+/,"",u); x=v+0; if (u ~ /GiB/) x*=1024; else if (u ~ /KiB/) x/=1024; else if (u ~ /^B/) x/=1048576; if (x>peak[name]) peak[name]=x} END {for (n in peak) printf "  %-45s %8.0f MiB\n", n, peak[n]}' /tmp/fleetbench/stats.txt | sort
