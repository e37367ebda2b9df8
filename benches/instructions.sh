#!/usr/bin/env bash
# Instructions the server executes per tool call, counted by valgrind's
# callgrind: unlike req/s or CPU time, the count is the same from one run to
# the next whatever else the machine is doing, so it shows changes of a few
# per cent that the load benchmark's noise hides.
#
# usage: benches/instructions.sh BINARY [TOOL] [CALLS]
#   BINARY  a toolgate binary (e.g. target/release/toolgate)
#   TOOL    echo (default) or read_file (of a 1 MB file in the workspace)
#   CALLS   calls in the long run (default 200)
#
# It serves BINARY under callgrind twice, on a fresh data directory each
# time, and posts CALLS + 10 and then 10 sequential calls of TOOL (one
# thread, every id new); the difference of the two totals divided by CALLS
# is what one call costs, start-up and shutdown cancelled out. The SQLite
# checkpointer's thread, which runs every 100 ms whatever the calls, is left
# out; what else runs on a timer still adds a little that depends on how long
# a run takes, so compare builds over alternating runs. Needs valgrind
# (Debian: valgrind), curl and python3.
set -euo pipefail

bin=$(realpath "$1")
tool=${2:-echo}
calls=${3:-200}
case $tool in
echo | read_file) ;;
*)
    echo "TOOL is echo or read_file, not $tool" >&2
    exit 2
    ;;
esac

# The total instructions of one server run that answers $1 calls.
run() {
    local n=$1 dir port log pid token root i
    dir=$(mktemp -d)
    log=$dir/server.log
    port=$((20000 + RANDOM % 20000))
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$dir/callgrind.out" \
        "$bin" serve --bind "127.0.0.1:$port" --data-dir "$dir" >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 300); do
        grep -q "dev bearer token" "$log" && break
        sleep 0.5
    done
    sleep 0.5
    token=$(grep -A1 "dev bearer token" "$log" | tail -n1 | tr -d ' ')
    if [[ $tool == read_file ]]; then
        root=$(curl -sf "http://127.0.0.1:$port/v1/workspace" -H "Authorization: Bearer $token" |
            python3 -c 'import json, sys; print(json.load(sys.stdin)["root"])')
        python3 -c 'import sys; open(sys.argv[1], "w").write(("x" * 523 + "\n") * 2000)' "$root/big.txt"
    fi
    for i in $(seq 1 "$n"); do
        if [[ $tool == echo ]]; then
            body="{\"id\": \"c$i\", \"name\": \"echo\", \"arguments\": {\"text\": \"hi\"}}"
        else
            body="{\"id\": \"c$i\", \"name\": \"read_file\", \"arguments\": {\"path\": \"big.txt\"}}"
        fi
        curl -sf -o /dev/null "http://127.0.0.1:$port/v1/threads/instructions/tool-calls" \
            -H "Authorization: Bearer $token" -H 'content-type: application/json' -d "$body"
    done
    kill -INT "$pid"
    wait "$pid" || true
    # One file per thread; the checkpointer's runs on a timer, not per call.
    # It is the thread that both waits in a std channel's recv_timeout (its
    # loop) and runs SQLite's walCheckpoint; a name of ours would not do: the
    # blocking thread that started it goes on to serve calls (file reads).
    local total=0 file
    for file in "$dir"/callgrind.out-*; do
        grep -q "recv_timeout" "$file" && grep -q "walCheckpoint" "$file" && continue
        total=$((total + $(awk '/^totals:/ { print $2; exit }' "$file")))
    done
    echo "$total"
    rm -rf "$dir"
}

short=$(run 10)
long=$(run $((calls + 10)))
echo "$tool: $(((long - short) / calls)) instructions per call ($calls calls; totals $short and $long)"
