#!/usr/bin/env bash
# Wall and CPU time per `bash {"command": "true"}` call, sequential, with
# one sandbox setting: compares a setting's cost on one build, so that
# nothing but the setting differs between runs.
#
# usage: benches/bash-calls.sh BINARY NAMESPACES [CALLS]
#   BINARY      a toolgate binary (e.g. target/release/toolgate)
#   NAMESPACES  sandbox.namespaces: best_effort, require or off
#   CALLS       timed calls, after 10 not timed (default 200)
#
# Serves BINARY on a fresh data directory, allows bash for the dev owner,
# posts the calls one after another with curl, and prints the wall time per
# call and the service's CPU time per call (its own and its reaped
# children's, from /proc/<pid>/stat). Needs curl and bc.
set -euo pipefail

bin=$(realpath "$1")
namespaces=$2
calls=${3:-200}
dir=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
port=$((20000 + RANDOM % 20000))
TOOLGATE_SANDBOX__NAMESPACES=$namespaces "$bin" serve --bind "127.0.0.1:$port" \
    --data-dir "$dir" >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
    grep -q "dev bearer token" "$dir/log" && break
    sleep 0.2
done
token=$(grep -A1 "dev bearer token" "$dir/log" | tail -n1 | tr -d ' ')
base=http://127.0.0.1:$port
curl -sf -o /dev/null -X PUT "$base/v1/permissions" -H "Authorization: Bearer $token" \
    -H 'content-type: application/json' -d '{"allow": ["bash"]}'
post() {
    curl -sf -o /dev/null "$base/v1/threads/bash-calls/tool-calls" \
        -H "Authorization: Bearer $token" -H 'content-type: application/json' \
        -d "{\"id\": \"c$1\", \"name\": \"bash\", \"arguments\": {\"command\": \"true\"}}"
}
cpu() { awk '{ print $14 + $15 + $16 + $17 }' "/proc/$pid/stat"; }
for i in $(seq 1 10); do post "w$i"; done
ticks=$(getconf CLK_TCK)
t0=$(date +%s.%N)
c0=$(cpu)
for i in $(seq 1 "$calls"); do post "$i"; done
t1=$(date +%s.%N)
c1=$(cpu)
wall=$(echo "($t1 - $t0) * 1000 / $calls" | bc -l)
used=$(echo "($c1 - $c0) * 1000000 / $ticks / $calls" | bc -l)
printf 'namespaces=%s: %.1f ms per call (wall), %.0f CPU µs per call (%s calls)\n' \
    "$namespaces" "$wall" "$used" "$calls"
