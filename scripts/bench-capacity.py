#!/usr/bin/env python3
"""Server capacity: several `granary bench` load generators at once against one server.

`granary bench` drives a server from one thread. For 1 MiB READs that thread is the bound
on a 2-core machine: it copies every byte out of its socket and checks it, while granary's
host backend sends the file with `sendfile` (`--sendfile always`, this harness's default:
the servers' own default copies for loopback clients) and needs a quarter of a core. This harness
runs N bench processes at once against each server (granary's host backend and nfs-ganesha
FSAL VFS, each on its own fresh tmpfs directory), interleaved round by round, and reports
the summed throughput and the server's CPU time per unit of work (from /proc/PID/stat over
the middle of each run). With N bench processes and a server on 2 cores the machine is
oversubscribed, and the report says so: the figure is what each server delivers when the
load generators compete with it for the cores, and the CPU per MiB is what it costs.

    scripts/bench-capacity.py [--clients 2] [--rounds 3] [--phases read1m] [--out DIR]

Writes DIR/results.json, DIR/report.md and each bench run's own output under DIR/raw/.
Needs a release build with the bench (`cargo build --release --features lab`: target/release/granary)
and the ganesha peer (bench/peers/ganesha.sh).
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PEERS = REPO / "bench" / "peers"
GRANARY_PORT = 20731
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def steal_percent(seconds):
    def sample():
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:]]
        return sum(cpu), cpu[7]

    t0, s0 = sample()
    time.sleep(seconds)
    t1, s1 = sample()
    return 100.0 * (s1 - s0) / max(1, t1 - t0)


def start_servers(binary, work, sendfile):
    gdir, sdir = work / "granary-export", work / "ganesha-export"
    for d in (gdir, sdir):
        d.mkdir(parents=True)
    granary = subprocess.Popen(
        [binary, "serve", str(gdir), "--listen", f"127.0.0.1:{GRANARY_PORT}",
         "--no-portmap", "--squash", "none", "--state-dir", str(work / "granary-state"),
         "--sendfile", sendfile],
        stdout=open(work / "granary.log", "w"), stderr=subprocess.STDOUT,
        start_new_session=True)
    subprocess.run([PEERS / "ganesha.sh", "start", "dir", str(sdir)], check=True,
                   stdout=subprocess.DEVNULL)
    ganesha_pid = int((Path("/tmp/peers/ganesha/server.pid")).read_text().split()[0])
    time.sleep(1)
    return {
        "granary": (granary.pid,
                    f"nfs://127.0.0.1/?nfsport={GRANARY_PORT}&mountport={GRANARY_PORT}"),
        "ganesha": (ganesha_pid,
                    f"nfs://127.0.0.1{sdir}?nfsport=12049&mountport=12050"),
    }, granary


def one_run(binary, name, pid, url, phase, clients, duration, raw):
    procs = []
    raw.mkdir(parents=True, exist_ok=True)
    for c in range(clients):
        out = raw / f"{name}-c{c}"
        cmd = [binary, "bench", "--suite", "host", "--target", f"{name}={url}",
               "--workloads", f"host-tmpfs/{phase}", "--no-limit", "--no-plots",
               "--allow-busy", "--repeats", "1", "--duration", str(duration),
               "--out", str(out)]
        procs.append((out, subprocess.Popen(cmd, stdout=open(f"{out}.txt", "w"),
                                            stderr=subprocess.STDOUT)))
    # Setup (a 64 MiB file per client) and warm-up come first; sample the middle.
    time.sleep(3 + duration * 0.3)
    c0, t0 = cpu_ticks(pid), time.monotonic()
    time.sleep(duration * 0.5)
    c1, t1 = cpu_ticks(pid), time.monotonic()
    values, unit = [], None
    for out, p in procs:
        p.wait(timeout=600)
        samples = json.load(open(out / "results.json"))["samples"]
        s = next(s for s in samples if s["phase"] == phase)
        if s["status"] != "ok":
            sys.exit(f"{name}: a bench client failed: {s.get('reason')}")
        values.append(s["value"])
        unit = s["metric"]
    cores = (c1 - c0) / TICKS / (t1 - t0)
    total = sum(values)
    return {"clients": values, "sum": total, "unit": unit, "server_cores": cores,
            "server_cpu_us_per_unit": 1e6 * cores / total if total else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--phases", default="read1m",
                    help="host suite phases, comma-separated (read1m, write1m, read4k, ...)")
    ap.add_argument("--duration", type=int, default=6)
    # The bench clients are on loopback, where granary's default (auto) copies large
    # READs; this harness measures the sendfile path unless told otherwise.
    ap.add_argument("--sendfile", default="always", choices=["always", "auto", "never"],
                    help="granary's --sendfile (default: always)")
    ap.add_argument("--binary", default=str(REPO / "target" / "release" / "granary"))
    ap.add_argument("--out", default=str(REPO / "bench" / "results" /
                                         f"{datetime.date.today()}-capacity"))
    a = ap.parse_args()
    out = Path(a.out)
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="granary-capacity-", dir="/dev/shm"))
    servers, granary = start_servers(a.binary, work, a.sendfile)
    runs = []
    try:
        for r in range(a.rounds):
            order = ["granary", "ganesha"] if r % 2 == 0 else ["ganesha", "granary"]
            for phase in a.phases.split(","):
                for name in order:
                    pid, url = servers[name]
                    res = one_run(a.binary, name, pid, url, phase, a.clients, a.duration,
                                  raw / f"r{r}-{phase}")
                    res.update(round=r, server=name, phase=phase,
                               steal_percent_after=steal_percent(1))
                    runs.append(res)
                    print(f"round {r} {phase} {name}: {res['sum']:.0f} {res['unit']} "
                          f"({' + '.join(f'{v:.0f}' for v in res['clients'])}), server "
                          f"{res['server_cores']:.2f} cores, "
                          f"{res['server_cpu_us_per_unit']:.0f} µs CPU per "
                          f"{res['unit'].split('/')[0]}", flush=True)
    finally:
        granary.terminate()
        granary.wait()
        subprocess.run([PEERS / "ganesha.sh", "stop"], stdout=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "command": " ".join(sys.argv), "date": datetime.datetime.now().isoformat(),
        "cores": os.cpu_count(), "load_before": load, "load_after": os.getloadavg(),
        "clients": a.clients, "oversubscribed": a.clients + 1 > (os.cpu_count() or 1),
        "runs": runs,
    }
    json.dump(result, open(out / "results.json", "w"), indent=1)
    write_report(out, result, a)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def write_report(out, result, a):
    lines = [f"# Server capacity, {result['date'][:10]}", "",
             f"Command: `{result['command']}`  ",
             f"{result['cores']} cores; load average {result['load_before'][0]:.2f} before, "
             f"{result['load_after'][0]:.2f} after; {a.clients} bench processes at once per "
             "server" + (" (**oversubscribed**: more busy processes than cores)"
                         if result["oversubscribed"] else ""), "",
             "| phase | granary (sum) | ganesha (sum) | granary/ganesha per round | "
             "server CPU per unit, granary | ganesha |",
             "|---|---|---|---|---|---|"]
    for phase in a.phases.split(","):
        rs = [r for r in result["runs"] if r["phase"] == phase]
        g = [r for r in rs if r["server"] == "granary"]
        n = [r for r in rs if r["server"] == "ganesha"]
        ratios = [x["sum"] / y["sum"] for x, y in zip(g, n)]
        unit = g[0]["unit"]
        per = unit.split("/")[0]
        lines.append(
            f"| {phase} | {median([r['sum'] for r in g]):,.0f} {unit} | "
            f"{median([r['sum'] for r in n]):,.0f} {unit} | "
            f"{median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) | "
            f"{median([r['server_cpu_us_per_unit'] for r in g]):,.0f} µs/{per} | "
            f"{median([r['server_cpu_us_per_unit'] for r in n]):,.0f} µs/{per} |")
    steal = [r["steal_percent_after"] for r in result["runs"]]
    lines += ["", f"Steal sampled after each run: {min(steal):.0f}–{max(steal):.0f}%. "
              "Medians over rounds; rounds alternate which server goes first."]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
