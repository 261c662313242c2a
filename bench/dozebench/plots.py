"""Section 9's figures as files: `scale.json` (every figure of the run, with
when and on what load it was taken) and one PNG per dimension
(`scale-<dimension>.png`: memory, per-request cost and start-up by size, a
line per broker), in `--results-dir` (bench/results/, checked in)."""

import json
import math
import os
import textwrap
import time

from .common import say

PEER_STYLE = {"doze": ("tab:blue", "o"), "kafka-default": ("tab:orange", "s"),
              "kafka-flush1": ("tab:red", "^")}


def partition_rows(res):
    """The partition sweep in the dimensions' shape: {peer: [figures per count]}."""
    per = {}
    for (peer, n), r in sorted(res.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        rss = r["rss_fresh"].get("VmRSS", float("nan"))
        per.setdefault(peer, []).append({
            "n": n, "rss_mib": rss, "hwm_mib": r["rss_fresh"].get("VmHWM", float("nan")),
            "rss_clean_mib": r.get("rss_clean", {}).get("VmRSS", float("nan")),
            "metadata_p50_s": r.get("metadata_p50_s"), "probe_p50_s": r.get("metadata_p50_s"),
            "clean_s": r.get("clean_s"), "kill_s": r.get("kill_s"),
            "create_s": r.get("create_s"), "produce_s": r.get("produce_s")})
    for rows in per.values():  # per item: above the smallest count, as summary_scale says
        for row in rows[1:]:
            row["kib_per_item"] = (row["rss_mib"] - rows[0]["rss_mib"]) * 1024 / (row["n"] - rows[0]["n"])
    return per


def clean(v):
    """JSON has no NaN."""
    return None if isinstance(v, float) and math.isnan(v) else v


def write_scale_results(args, res):
    from .scale_items import ITEM, PROBE_WHAT
    dims = {}
    if res["partitions"]:
        dims["partitions"] = partition_rows(res["partitions"])
    dims.update({d: per for d, per in res["items"].items()})
    if not dims:
        return
    os.makedirs(args.results_dir, exist_ok=True)
    probe = dict(PROBE_WHAT, partitions="Metadata v1 of the topic")
    item = dict(ITEM, partitions="partition")
    path = os.path.join(args.results_dir, "scale.json")
    # The file holds the last run of each dimension: a run of some of them
    # (--scale-dims) keeps the others' figures, each with when it was taken.
    try:
        with open(path) as f:
            kept = json.load(f).get("dimensions", {})
    except (OSError, ValueError):
        kept = {}
    taken = {"taken": time.strftime("%Y-%m-%d %H:%M:%S %z"),
             "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
             "cpus": os.cpu_count(), "quick": args.quick, "peers": args.scale_peers}
    doc = {"units": "rss_mib/hwm_mib: VmRSS/VmHWM of the broker after the items were made; "
                    "kib_per_item: RSS above the one before any item (partitions: above the "
                    "smallest count) per item; *_p50_s: seconds, p50 of requests one after the "
                    "other (probe: what `probe` says); clean_s/kill_s: start after SIGTERM / "
                    "kill -9 until Metadata is answered; probe_parts_p50_s: each request of the "
                    "probe item, p50; while the probes ran (doze): meta_round_p50_s / sync_p50_s: "
                    "p50 meta.db round (journal fdatasync) / disk sync from the broker's log, "
                    "cpu_per_item_s / core_busy_per_item_s: CPU of the process / of its core "
                    "task per probe item; raw_sync_p50_s: p50 of small writes + fdatasync "
                    "into a file beside the broker's, just after the probes (the disk then)",
           "probe": probe,
           "dimensions": dict(kept, **{d: dict(taken, brokers={
               p: [{k: clean(v) for k, v in row.items()} for row in rows] for p, rows in per.items()})
               for d, per in dims.items()})}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    say(f"figures: {path}")
    plot_scale(args.results_dir, doc, item)


def plot_scale(results_dir, doc, item):
    """A PNG per dimension of `doc` (scale.json's), each from its own run."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("no plots: matplotlib is not installed (make bench-deps: bench/requirements.txt)")
        return
    for dim, run in doc["dimensions"].items():
        per = run["brokers"]
        if not any(per.values()):
            continue
        panels = [("rss_mib", "broker VmRSS (MiB)"),
                  ("probe_p50_s", "\n".join(textwrap.wrap(f"p50 {doc['probe'][dim]} (ms)", 36)))]
        if any(row.get("clean_s") is not None for rows in per.values() for row in rows):
            panels.append(("start", "start until Metadata answered (s)"))
        fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), sharex=True)
        for ax, (key, label) in zip(axes, panels):
            for peer, rows in per.items():
                if not rows:
                    continue
                color, marker = PEER_STYLE.get(peer, ("tab:gray", "x"))
                xs = [row["n"] for row in rows]
                if key == "start":
                    for k, style, what in (("clean_s", "-", "after SIGTERM"), ("kill_s", "--", "after kill -9")):
                        ys = [row.get(k) for row in rows]
                        if any(y is not None for y in ys):
                            ax.plot(xs, [float("nan") if y is None else y for y in ys], style,
                                    color=color, marker=marker, label=f"{peer} {what}")
                else:
                    scale = 1e3 if key.endswith("_s") else 1
                    ys = [row.get(key) for row in rows]
                    ax.plot(xs, [float("nan") if y is None else y * scale for y in ys], "-",
                            color=color, marker=marker, label=peer)
            ax.set_xscale("log")
            ax.set_xlabel(f"{item.get(dim, 'item')}s")
            ax.set_ylabel(label)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(f"doze-kafka scale: {dim} ({run['taken']}, load average "
                     f"{run['load_average_at_end'][0]} on {run['cpus']} CPUs"
                     f"{', --quick' if run['quick'] else ''})", fontsize=10)
        fig.tight_layout()
        png = os.path.join(results_dir, f"scale-{dim}.png")
        fig.savefig(png, dpi=90)
        plt.close(fig)
        say(f"plot: {png}")


if __name__ == "__main__":
    # Draws the plots again from a results dir's scale.json:
    # .venv/bin/python -m dozebench.plots bench/results   (from bench/)
    import sys
    from .scale_items import ITEM
    with open(os.path.join(sys.argv[1], "scale.json")) as f:
        plot_scale(sys.argv[1], json.load(f), dict(ITEM, partitions="partition"))
