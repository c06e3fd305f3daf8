"""`python -m bench --quick` (bench/README.md): every benchmark runs and reports its rows. Verdicts are not
asserted: the figures are only meaningful on a quiet machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Timed figures: `make test` runs these alone, after the parallel part (the `serial` marker, pyproject.toml).
pytestmark = pytest.mark.serial


@pytest.mark.timeout(900)
def test_every_benchmark_runs_and_reports() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), str(REPO / "server" / "src"), str(REPO / "clients" / "python" / "src"), env.get("PYTHONPATH", "")]
    )
    listed = subprocess.run(
        [sys.executable, "-m", "bench", "--list"], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    names = [line.split("\t", 1)[0] for line in listed.stdout.splitlines() if line.strip()]
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick"], cwd=REPO, env=env, capture_output=True, text=True, timeout=880
    )
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads((REPO / "bench" / "results" / "summary-quick.json").read_text())
    assert summary["failed"] == []
    assert [r["benchmark"] for r in summary["results"]] == names
    for result in summary["results"]:
        assert result["rows"], result["benchmark"]
        for row in result["rows"]:
            assert isinstance(row["service"], float | int), row
