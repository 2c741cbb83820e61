"""benchmarks/mirage_scripts.py, the harness that runs the reference implementation's
scripts unchanged, on a stand-in checkout: scripts written here in Mirage's style (its
demo and benchmark layout), each with a known first GPU call or a known error. Checks
that each run stops where it should, says where (script line) and what it reached."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]

DEMO = '''
import mirage as mi
import torch

if __name__ == "__main__":
    graph = mi.new_kernel_graph()
    X = graph.new_input(dims=(8, 64), dtype=mi.float16)
    W = graph.new_input(dims=(64, 32), dtype=mi.float16)
    tb = mi.new_threadblock_graph(grid_dim=(2, 1, 1), block_dim=(128, 1, 1), forloop_range=2, reduction_dimx=32)
    tX = tb.new_input(dtensor=X, input_map=(-1, -1, -1), forloop_dim=1)
    tW = tb.new_input(dtensor=W, input_map=(1, -1, -1), forloop_dim=0)
    tb.new_output(stensor=tb.forloop_accum(tb.matmul(tX, tW)), output_map=(1, -1, -1))
    O = graph.customized([X, W], tb)
    graph.mark_output(O[0])
    inputs = [torch.randn(8, 64, dtype=torch.float16, device="cuda:0"),
              torch.randn(64, 32, dtype=torch.float16, device="cuda:0")]
    p = mi.generate_cuda_program(graph.cygraph, target_cc=86, input_strides=[t.stride() for t in inputs])
    outputs = graph(inputs=inputs, enable_online_softmax=True)
    torch.cuda.synchronize()
'''

BENCH = '''
import mirage as mi
import torch

if __name__ == "__main__":
    graph = mi.new_kernel_graph()
    X = graph.new_input(dims=(8, 64), dtype=mi.float16)
    graph.mark_output(graph.exp(graph.exp(X)))
    best = graph.superoptimize(config="mlp", previous_checkpoint="bench.json", warmup_iters=4)
    x = torch.randn(8, 64, dtype=torch.float16).cuda()
    best(inputs=[x])
'''

BROKEN = '''
import mirage as mi

graph = mi.new_kernel_graph()
graph.no_such_method(1)
'''


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("harness")
    ref = tmp / "ref"
    for rel, text in (("demo/reference_mugraphs/demo.py", DEMO), ("benchmark/bench.py", BENCH),
                      ("benchmark/broken.py", BROKEN), ("benchmark/README.md", "not a script")):
        (ref / rel).parent.mkdir(parents=True, exist_ok=True)
        (ref / rel).write_text(textwrap.dedent(text))
    env = dict(os.environ, MIRAGE_CACHE_DIR=str(tmp / "cache"))
    env.pop("MIRAGE_CACHE", None)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mirage_scripts.py"), str(ref),
                           "--work", str(tmp / "work"), "--json", str(tmp / "r.json"), "--time-limit", "30"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp / "r.json").read_text())
    return {(r["name"], r["mode"]): r for r in data["results"]}, proc.stdout


def test_only_the_scripts_are_run(results):
    by, _ = results
    assert sorted({n for n, _ in by}) == ["benchmark/bench.py", "benchmark/broken.py",
                                         "demo/reference_mugraphs/demo.py"]


def test_strict_stops_at_the_first_cuda_tensor(results):
    by, _ = results
    r = by["demo/reference_mugraphs/demo.py", "strict"]
    assert r["result"] == "GPU call" and r["what"] == "CUDA use (torch)"
    assert r["where"].startswith("line 15:") and "torch.randn(8, 64" in r["where"]
    assert r["graphs"] == 1
    r = by["benchmark/bench.py", "strict"]
    assert r["result"] == "GPU call" and "line 10:" in r["where"] and ".cuda()" in r["where"]
    assert r["events"][:2] == ["superoptimize called", r["events"][1]]
    assert r["events"][1].startswith("superoptimize returned in") and "2 -> 1 kernels" in r["events"][1]


def test_deep_runs_the_code_generation_and_stops_at_the_launch(results):
    by, _ = results
    r = by["demo/reference_mugraphs/demo.py", "deep"]
    assert r["result"] == "GPU call" and r["what"] == "μGraph launch g(inputs=...)"
    assert r["where"].startswith("line 18:")
    assert any(e.startswith("generate_cuda_program returned (sm_80") for e in r["events"])
    r = by["benchmark/bench.py", "deep"]
    assert r["result"] == "GPU call" and r["where"].startswith("line 11:")
    assert "from cache/checkpoint" in r["events"][1]  # the strict run's checkpoint, read back


def test_errors_name_the_line_and_the_exception(results):
    by, out = results
    for mode in ("strict", "deep"):
        r = by["benchmark/broken.py", mode]
        assert r["result"] == "error" and r["where"].startswith("line 5:")
        assert r["what"].startswith("AttributeError") and "no_such_method" in r["what"]
    assert "| `benchmark/broken.py` | **error**: AttributeError" in out
