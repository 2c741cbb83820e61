"""The import graph reads like the pipeline: the lower layers import nothing above them
(checked on every import statement, function-level ones included)."""
import ast
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")


def modules():
    """{module name: set of imported module names} for every file of the mirage package."""
    out = {}
    for dirpath, _, files in os.walk(os.path.join(ROOT, "mirage")):
        for f in files:
            if not f.endswith(".py") or f.endswith("_ops_gen.py") or f.endswith("_enum_gen.py"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
            name = ".".join(rel[:-1] if rel[-1] == "__init__" else rel)
            pkg = rel[:-1]
            imported = set()
            for node in ast.walk(ast.parse(open(path).read())):
                if isinstance(node, ast.Import):
                    imported |= {a.name for a in node.names}
                elif isinstance(node, ast.ImportFrom):
                    base = pkg[:len(pkg) - node.level + 1] if node.level else []
                    mod = ".".join(base + ([node.module] if node.module else []))
                    imported.add(mod)
                    imported |= {f"{mod}.{a.name}" for a in node.names}  # `from . import x`
            out[name] = imported
    return out


def internal(imports):
    return {m for m in imports if m == "mirage" or m.startswith("mirage.")}


def test_the_model_imports_nothing_above_it():
    for name, imps in modules().items():
        if name.startswith("mirage.core"):
            bad = {m for m in internal(imps) if not m.startswith(("mirage.core", "mirage.target"))}
            assert not bad, f"{name} imports {sorted(bad)}"


def test_runtime_and_target_stand_alone():
    for name, imps in modules().items():
        if name.startswith("mirage.runtime"):
            assert all(m.startswith("mirage.runtime") for m in internal(imps)), (name, internal(imps))
        if name == "mirage.target":
            assert not internal(imps)


def test_the_lowering_plan_is_data():
    mods = modules()
    for name in ("mirage.lower.kernel_plan", "mirage.lower.predefined"):
        assert not any(m == "mlir" or m.startswith("mlir.") for m in mods[name]), name
        assert "mirage.lower.block" not in mods[name]


def test_only_the_boundary_package_imports_mlir():
    """`mirage.mlir` is the one package that crosses between MLIR and the model. Outside
    it: the lowering's back end, which runs upstream MLIR passes on the text the lowering
    printed (GPU dialects to PTX)."""
    users = {n for n, imps in modules().items() if any(m == "mlir" or m.startswith("mlir.") for m in imps)}
    outside = {n for n in users if not n.startswith("mirage.mlir")}
    assert outside <= {"mirage.lower.pipeline"}, sorted(outside)


def test_no_import_cycle_between_packages():
    """Packages import each other along a DAG (module-level and function-level imports;
    `__main__` modules are entry points that nothing imports, and are left out). The
    passes (`mirage.mlir.passes`) sit above the stages they call; the rest of the
    boundary package (dialects, importer, bridge) below the stages that read MLIR
    (the search cache reads its entries back through the importer)."""
    def pkg(m):
        if m.startswith("mirage.mlir.passes"):
            return "mirage.mlir.passes"
        parts = m.split(".")
        return ".".join(parts[:2]) if len(parts) > 1 else m
    edges = {}
    for name, imps in modules().items():
        if name.endswith("__main__"):
            continue
        for m in internal(imps):
            a, b = pkg(name), pkg(m)
            if a != b and b != "mirage":
                edges.setdefault(a, set()).add(b)
    seen, stack = set(), []

    def visit(n):
        assert n not in stack, "import cycle: " + " -> ".join(stack[stack.index(n):] + [n])
        if n in seen:
            return
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            visit(m)
        stack.pop()
        seen.add(n)
    for n in sorted(edges):
        visit(n)


def test_search_result_breaks_the_driver_partition_cycle():
    mods = modules()
    assert "mirage.search.driver" not in mods["mirage.search.partition"]
    assert not {"mirage.search.driver", "mirage.search.partition"} & mods["mirage.search.result"]
    assert "mirage.search.driver" not in mods["mirage.search.measure"]
