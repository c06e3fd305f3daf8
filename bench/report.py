"""The summary table of a bench run (one row per measure: service, baseline, ratio, overhead, verdict)
and `bench/results/summary.json`."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR


def _num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "—"
    return f"{value:.{digits}f}"


def print_table(results: Sequence[dict[str, Any]], pinning: str, *, quick: bool) -> None:
    rows = [r for result in results for r in result.get("rows", [])]
    head = ("measure", "unit", "service", "baseline", "ratio", "overhead", "target", "verdict")
    cells = [head]
    for r in rows:
        verdict = "report" if r["pass"] is None else ("PASS" if r["pass"] else "FAIL")
        if not r.get("fake_fast", True):
            verdict += " (fake slow)"
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}×"
        cells.append(
            (
                r["measure"],
                r["unit"],
                _num(r["service"]),
                _num(r["baseline"]),
                ratio,
                _num(r["overhead"]),
                r["target"],
                verdict,
            )
        )
    widths = [max(len(str(c[i])) for c in cells) for i in range(len(head))]
    print("=" * 100)
    print(
        f"Service vs bare anthropic SDK (identical request), p50 unless stated; {pinning}"
        + (" — QUICK" if quick else "")
    )
    for i, c in enumerate(cells):
        print(
            "  ".join(
                str(v).ljust(widths[j]) if j in (0, 1, 6, 7) else str(v).rjust(widths[j]) for j, v in enumerate(c)
            )
        )
        if i == 0:
            print("  ".join("-" * w for w in widths))
    for result in results:
        fake = result.get("fake")
        if fake:
            print(
                f"{result['benchmark']}: fake {fake['fake process CPU ms per request']:.3f} ms CPU/request "
                f"(self-timed {fake['fake self-timed ms per request']:.3f}) vs limit "
                f"{fake['20% of baseline turn p50, ms']:.3f} → "
                f"{'fast enough' if fake['fake fast enough'] else 'TOO SLOW'}"
            )
        for note in result.get("notes", []):
            print(f"{result['benchmark']}: note: {note}")
    print("=" * 100)


def write_summary(results: Sequence[dict[str, Any]], failed: Sequence[str], *, quick: bool) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / ("summary-quick.json" if quick else "summary.json")
    data = {
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "quick": quick,
        "failed": list(failed),
        "rows": [r | {"benchmark": result["benchmark"]} for result in results for r in result.get("rows", [])],
        "results": [{k: v for k, v in result.items() if k != "samples_ms"} for result in results],
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path
