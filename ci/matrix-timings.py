#!/usr/bin/env python3
"""Where a matrix run's time went, from its reports: per scenario the worker's wall time, the
model load, each generation's wall time and the rest (worker start, the weights hash, comparisons,
shutdown), slowest first, then the totals. The driver's own time beside the workers (localization
with `bih explain`, process starts) is the run's wall time minus the sum printed here.

Usage: ci/matrix-timings.py RESULTS_DIR [RESULTS_DIR ...]   (folders holding bih reports)
"""
import glob
import json
import os
import sys


def rows(folder):
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        if os.path.basename(path).startswith("manifest"):
            continue
        with open(path) as f:
            report = json.load(f)
        gens = [(g.get("label", "?"), g.get("wall_s", 0.0)) for g in report.get("generations", [])]
        load = report.get("model", {}).get("load_s", 0.0)
        wall = report.get("wall_s", 0.0)
        yield report.get("id", path), report.get("verdict", "?"), wall, load, gens


def main(folders):
    if not folders:
        sys.exit(__doc__)
    table = [row for folder in folders for row in rows(folder)]
    table.sort(key=lambda r: -r[2])
    totals = {"wall": 0.0, "load": 0.0, "rest": 0.0}
    by_label = {}
    for scenario, verdict, wall, load, gens in table:
        rest = wall - load - sum(w for _, w in gens)
        totals["wall"] += wall
        totals["load"] += load
        totals["rest"] += rest
        for label, w in gens:
            by_label[label] = by_label.get(label, 0.0) + w
        text = " ".join(f"{label} {w:.2f}" for label, w in gens)
        print(f"{wall:7.2f} s  load {load:5.2f}  {text:48}  rest {rest:5.2f}  {verdict:14} {scenario}")
    labels = " ".join(f"{label} {w:.1f}" for label, w in sorted(by_label.items()))
    print(f"{len(table)} reports: workers {totals['wall']:.1f} s = load {totals['load']:.1f} + "
          f"generations ({labels}) + rest {totals['rest']:.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
