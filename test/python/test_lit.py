"""Runs the lit + FileCheck suite (test/**/*.mlir) as one pytest test, so that one
command (`pytest`) runs every test and its summary line comes last."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

TEST_DIR = Path(__file__).resolve().parents[1]


def test_lit_suite():
    lit = shutil.which("lit") or shutil.which("lit", path=os.path.dirname(sys.executable))
    assert lit, "lit is not installed (pip install '.[test]')"
    jobs = str(min(os.cpu_count() or 1, 4))
    proc = subprocess.run([lit, "-q", "-j", jobs, str(TEST_DIR)], capture_output=True, text=True)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, "lit failures:\n" + report[-20000:]
