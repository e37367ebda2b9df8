"""Time the checks of a new turn on a thread holding large results.

Fills thread `big` with N echo results of SIZE bytes each, then times,
as medians of ROUNDS requests: POST /messages with a user message (the
baseline: one durable write, no check of the thread), POST /messages with
an assistant message declaring one new call (checked against the thread's
outline), and, for scale, GET /context (which reads the whole thread).
Usage: python3 benches/turn_checks.py BINARY [N] [SIZE] [ROUNDS]
(BINARY: a release build, e.g. target/release/toolgate; with DATABASE_URL
set, the server runs on that Postgres database, which should be empty).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

binary = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 100
size = int(sys.argv[3]) if len(sys.argv) > 3 else 200_000
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 30
data = tempfile.mkdtemp()
port = 18000 + os.getpid() % 1000
env = dict(os.environ, TOOLGATE_SERVER__BIND=f"127.0.0.1:{port}")
srv = subprocess.Popen([binary, "serve", "--data-dir", data, "--bind", f"127.0.0.1:{port}"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
try:
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(base + "/healthz"); break
        except Exception:
            time.sleep(0.1)
    token = subprocess.check_output([binary, "token", "--sub", "bench", "--data-dir", data]).decode().strip().split()[-1]
    h = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
    def req(method, path, body=None):
        r = urllib.request.Request(base + path, method=method, headers=h,
                                   data=None if body is None else json.dumps(body).encode())
        with urllib.request.urlopen(r) as resp:
            return resp.read()
    for i in range(n):
        req("POST", "/v1/threads/big/tool-calls",
            {"id": f"c{i}", "name": "echo", "arguments": {"text": "x" * size}})
    def timed(f):
        out = []
        for _ in range(rounds):
            t = time.perf_counter(); f(); out.append((time.perf_counter() - t) * 1000)
        return statistics.median(out)
    k = [0]
    def post_turn():
        k[0] += 1
        req("POST", "/v1/threads/big/messages",
            {"role": "assistant", "content": "",
             "tool_calls": [{"id": f"d{k[0]}", "name": "echo", "arguments": {"text": "hi"}}]})
    def post_plain():
        req("POST", "/v1/threads/big/messages", {"role": "user", "content": "hi"})
    def context():
        req("GET", "/v1/threads/big/context?format=openai")
    plain = timed(post_plain)
    turn = timed(post_turn)
    ctx = timed(context)
    print(f"thread: {n} echo results of {size} bytes; median of {rounds}")
    print(f"POST user message:                {plain:8.2f} ms")
    print(f"POST assistant message with call: {turn:8.2f} ms  ({turn/plain:.1f}x the user message)")
    print(f"GET context (reads everything):   {ctx:8.2f} ms")
finally:
    srv.terminate(); srv.wait(); shutil.rmtree(data)
