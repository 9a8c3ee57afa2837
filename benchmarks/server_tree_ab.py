"""The server of another checkout against this one's, on the same VM at the same time:
`python benchmarks/server_tree_ab.py TREE PIPELINE [RATE]` runs TREE's `fastcoord serve`
(classic, 100,000 members on 1,000 connections) pinned to core 0 and this tree's loadgen
on core 1, closed loop with PIPELINE requests in flight (or open loop at RATE/s), and
prints heartbeats/s and p99 of three 5 s windows and the server's CPU per heartbeat.
With FASTCOORD_AB_PROTOCOL=consumer in the environment the members use the consumer
protocol (KIP-848) instead, with the server's consumer session timeout raised as the
benchmark's (the members must outlive the setup).
TREE must be built in place with a `.venv` (for instance a `git worktree` of an old
commit with this tree's venv linked in). Alternate trees run by run: the VM's phase moves
more between minutes than most changes do."""
import os, sys, subprocess, signal
import uvloop
from fastcoord.loadgen import Loadgen
tree, pipe, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 0
env = dict(os.environ, PYTHONPATH=tree)
cmd = ["taskset", "-c", "0", f"{tree}/.venv/bin/python", "-m", "fastcoord", "serve", "--host", "127.0.0.1",
       "--port", "0", "--store", "memory", "--status-interval-s", "0", "--no-request-log",
       "--group-initial-rebalance-delay-ms", "500", "--max-connections", "20000", "--log-level", "WARNING"]
protocol = os.environ.get("FASTCOORD_AB_PROTOCOL", "classic")
if protocol == "consumer":
    cmd += ["--topic", "loadgen:100", "--group-consumer-session-timeout-ms", "300000",
            "--group-consumer-max-session-timeout-ms", "600000"]
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, cwd=tree, env=env)
first = p.stdout.readline().decode()
port = int(first.split("listening on ", 1)[1].split()[0].rsplit(":", 1)[1])
os.sched_setaffinity(0, {1})
loop = uvloop.new_event_loop()
gen = Loadgen("127.0.0.1", port, connections=1000, members=100000, groups=1000, pipeline=pipe,
              setup_timeout_s=300, protocol=protocol)
loop.run_until_complete(gen.__aenter__())
loop.run_until_complete(gen.measure(2.0, 0.0, rate or None, "c"))
def stat():
    f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) / 100 + int(f[12]) / 100
c0 = stat(); n = 0; rs = []
for _ in range(3):
    r = loop.run_until_complete(gen.measure(5.0, 0.0, rate or None, "c"))
    rs.append(r); n += r["heartbeats"]
c1 = stat()
print(os.path.basename(tree), protocol, "hb/s", [round(r["heartbeats_per_s"]) for r in rs], "p99", [r["p99_ms"] for r in rs],
      "server us/hb", round((c1 - c0) / n * 1e6, 2), flush=True)
loop.run_until_complete(gen.__aexit__(None, None, None))
os.kill(p.pid, signal.SIGTERM); p.wait()
