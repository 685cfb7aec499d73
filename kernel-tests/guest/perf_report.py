#!/usr/bin/env python3
"""perf_report.py RAW OUT ACCEL SECS ROUNDS SIZE META SERVERS WORKLOADS [WARMUP_SECS]
   perf_report.py --line FIO_JSON SERVER WORKLOAD ROUND   (one job's line for the log)

Reads fio's JSON outputs RAW/SERVER-WORKLOAD-rROUND.json of rounds 1..ROUNDS (written
by perf.sh; round 0, the warm-up, is not read) and writes OUT/results.json (every
round's figures, medians, spreads, ratios) and OUT/README.md (the table). Each server's
figures: the median over rounds and the min..max. Ratios are paired: in each round,
granary's figure over the peer's figure of the same workload (the two jobs ran back to
back), then the median of those per-round ratios and their min..max (above 1: granary
did more). The ratio of the two medians is kept beside it in results.json.
"""

import json
import statistics
import sys


def load(raw, server, workload, rnd):
    return load_file(f"{raw}/{server}-{workload}-r{rnd}.json")


def load_file(path):
    with open(path) as f:
        job = json.load(f)["jobs"][0]
    d = job["read"] if job["read"]["io_bytes"] else job["write"]
    pct = d["clat_ns"].get("percentile", {})
    return {
        "iops": round(d["iops"], 1),
        "mib_per_s": round(d["bw"] / 1024, 2),
        "clat_mean_us": round(d["clat_ns"]["mean"] / 1000, 1),
        "clat_p99_us": round(pct.get("99.000000", 0) / 1000, 1),
    }


def line(path, server, workload, rnd):
    r = load_file(path)
    print(f"  {server:8} {workload:18} round {rnd}: {r['iops']:9.0f} IOPS {r['mib_per_s']:8.1f} MiB/s"
          f"  clat mean {r['clat_mean_us']:9.1f} us  p99 {r['clat_p99_us']:9.1f} us")


def paired(ours, peer):
    """The per-round ratios of `ours` over `peer` (IOPS, and mean completion latency),
    their median and min..max, and the ratio of the two servers' medians."""
    iops = [round(a["iops"] / b["iops"], 3) for a, b in zip(ours["rounds"], peer["rounds"])]
    clat = [round(a["clat_mean_us"] / b["clat_mean_us"], 3)
            for a, b in zip(ours["rounds"], peer["rounds"])]
    return {
        "iops": round(statistics.median(iops), 3),
        "iops_min_max": [min(iops), max(iops)],
        "iops_rounds": iops,
        "clat_mean": round(statistics.median(clat), 3),
        "iops_of_medians": round(ours["median"]["iops"] / peer["median"]["iops"], 3),
    }


def main():
    if sys.argv[1] == "--line":
        line(*sys.argv[2:6])
        return
    raw, out, accel, secs, rounds, size, meta = sys.argv[1:8]
    servers, workloads = sys.argv[8].split(), sys.argv[9].split()
    warmup = int(sys.argv[10]) if len(sys.argv) > 10 else 0
    rounds = int(rounds)
    # granary's targets (mem and host backends) against the peers of the same protocol,
    # and each granary target through NFSv4.2 against itself through NFSv3.
    ours = [s for s in servers if s in ("granary", "host", "granary-v4", "host-v4")]
    peers = [p for p in servers if p not in ours]
    pairs = [(o, p) for o in ours for p in peers if o.endswith("-v4") == p.endswith("-v4")]
    pairs += [(o, o[:-3]) for o in ours if o.endswith("-v4") and o[:-3] in servers]
    results = {}
    for w in workloads:
        results[w] = {}
        for s in servers:
            runs = [load(raw, s, w, r) for r in range(1, rounds + 1)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            spread = {k: [min(r[k] for r in runs), max(r[k] for r in runs)] for k in runs[0]}
            results[w][s] = {"rounds": runs, "median": med, "min_max": spread}
        results[w]["ratios"] = {f"{o}/{p}": paired(results[w][o], results[w][p]) for o, p in pairs}
    doc = {
        "accelerator": accel,
        "note": ("Under TCG (software emulation) absolute numbers are emulation-bound and "
                 "mean nothing outside this run; only the ratios between servers measured "
                 "in the same guest boot do." if accel == "tcg" else
                 "Servers measured in the same guest boot; compare ratios."),
        "client": "Linux 6.1 kernel NFS client (Debian 12 guest of kernel-tests/vm/vm.sh), "
                  "NFSv3 over TCP on the guest's loopback, nolock (the -v4 targets: NFSv4.2)",
        "servers": {
            "granary": "granary serve --squash none --no-portmap (mem backend), 2 workers",
            "host": "granary serve /export-host --squash none --no-portmap (host backend on "
                    "a tmpfs), 2 workers",
            "knfsd": "Linux 6.1 nfsd exporting a tmpfs (sync, no_root_squash)",
            "ganesha": "nfs-ganesha 4.3 (Debian), FSAL VFS on a tmpfs",
            "granary-v4": "granary serve --squash none --no-portmap (mem backend), mounted "
                          "with NFSv4.2, a server of its own",
            "host-v4": "granary serve /export-host-v4 (host backend on a tmpfs), mounted with "
                       "NFSv4.2, a server of its own",
            "knfsd-v4": "the same knfsd, its export mounted with NFSv4.2 (a directory of its own)",
        },
        "fio": {"direct": 1, "runtime_s": int(secs), "ramp_time_s": 1, "size": size,
                "rounds": rounds, "warmup_round_s": warmup,
                "engines": "psync at iodepth 1, libaio otherwise"},
        "method": ("a warm-up round (discarded), then the rounds; in each round every "
                   "workload runs on every server back to back, the servers' order rotated "
                   "by one each round; ratios: median (min..max) of the per-round ratios "
                   "between servers of the same round and workload"),
        "meta": json.loads(meta),
        "workloads": results,
    }
    with open(f"{out}/results.json", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")

    pairs = [f"{o}/{p}" for o, p in pairs]
    lines = [
        f"# Kernel-client fio: {', '.join(ours)} vs {', '.join(peers)} (accelerator: {accel})",
        "",
        f"**{doc['note']}**",
        "",
        f"- Client: {doc['client']}.",
    ]
    lines += [f"- {s}: {d}." for s, d in doc["servers"].items() if s in servers]
    lines += [
        f"- fio: O_DIRECT, {secs} s per job after 1 s ramp, file {size}, psync at iodepth 1, "
        f"libaio at 4 and 16.",
        f"- Method: a warm-up round of {warmup} s per job (discarded), then {rounds} rounds; in "
        "each round every workload runs on every server back to back, the servers' order "
        "rotated by one each round. Per server: the median over rounds (min..max). Ratios: "
        "in each round, granary's figure over the peer's of the same workload, then the "
        "median of these paired ratios (min..max).",
    ]
    for k, v in doc["meta"].items():
        lines.append(f"- {k}: {v}")
    lines += ["", "Median IOPS (MiB/s for the 1 MiB jobs) with the rounds' min..max, and the "
              "median of the mean completion latency:", ""]
    head = "| workload | " + " | ".join(servers) + " | " + " | ".join(pairs) + " |"
    lines += [head, "|---" + "|---:" * (len(servers) + len(pairs)) + "|"]
    for w in workloads:
        cells = []
        for s in servers:
            m = results[w][s]["median"]
            key, unit = ("mib_per_s", "MiB/s") if "1m" in w else ("iops", "IOPS")
            lo, hi = results[w][s]["min_max"][key]
            cells.append(f"{m[key]:.0f} {unit} ({lo:.0f}..{hi:.0f}); {m['clat_mean_us']:.0f} us")
        ratios = []
        for pair in pairs:
            r = results[w]["ratios"][pair]
            lo, hi = r["iops_min_max"]
            ratios.append(f"**{r['iops']:.2f}** ({lo:.2f}..{hi:.2f})")
        lines.append(f"| {w} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    lines += ["", "Ratios are the median (min..max) over rounds of the per-round IOPS ratio "
              "(equal to the bandwidth ratio for the 1 MiB jobs); above 1 means granary (mem "
              "or host backend) did more; X-v4/X compares granary through NFSv4.2 with "
              "itself through NFSv3.", ""]
    with open(f"{out}/README.md", "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
