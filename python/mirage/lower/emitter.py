"""A small builder of MLIR text for one `gpu.func`.

Index values are Python ints (compile-time constants, folded) or SSA names (str);
float values are SSA names of type f32. Constants are hoisted to the function entry
(every nested region can use them). Nothing here imports MLIR: the text is parsed
once, by `mirage.lower.pipeline`.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence, Union

Idx = Union[int, str]

SMEM = "#gpu.address_space<workgroup>"


def fmt_f32(v: float) -> str:
    import struct

    # hex form is exact and accepts inf/nan
    return "0x%08X" % struct.unpack("<I", struct.pack("<f", float(v)))[0]


class Emitter:
    def __init__(self):
        self.body: list[str] = []
        self.consts: list[str] = []
        self._cache: dict[tuple, str] = {}
        self.n = 0
        self.depth = 2
        self.approx_exp = False  # `exp`: the result is rounded to 16 bits (`scalar.apply`)
        self._values: dict[str, float] = {}  # f32 constant -> its value
        self._scaled: dict[str, tuple[str, float]] = {}  # x * constant -> (x, the constant)

    # -- naming and raw emission --
    def fresh(self, p: str = "v") -> str:
        self.n += 1
        return f"%{p}{self.n}"

    def line(self, s: str) -> None:
        self.body.append("  " * self.depth + s)

    def op(self, text: str, p: str = "v") -> str:
        r = self.fresh(p)
        self.line(f"{r} = {text}")
        return r

    # -- constants --
    def const(self, value, ty: str) -> str:
        key = (ty, value if ty != "f32" else fmt_f32(value))
        if key not in self._cache:
            r = f"%c{len(self._cache)}_{ty.replace('<', '').replace('>', '').replace('x', '_')}"
            if ty == "index" or ty.startswith("i"):
                self.consts.append(f"{r} = arith.constant {int(value)} : {ty}")
            elif ty == "f32":
                self.consts.append(f"{r} = arith.constant {fmt_f32(value)} : f32")
            else:  # vector splat
                self.consts.append(f"{r} = arith.constant dense<{value}> : {ty}")
            self._cache[key] = r
        return self._cache[key]

    def exp(self, x: str) -> str:
        """e^x of f32 `x`. With `approx_exp`: 2^(x log2 e) by the hardware's ex2.approx
        (two instructions; math.exp's expansion is eleven), whose relative error (about
        2^-22, and |x log2 e| 2^-24 from rounding the product) is far below a 16-bit
        result's 2^-11. Of x = v * c (a scaled score), 2^(v (c log2 e)): one product."""
        if not self.approx_exp:
            return self.op(f"math.exp {x} : f32", "f")
        v, c = self._scaled.get(x, (x, 1.0))
        y = self.fbin("mulf", v, self.f32(c * 1.4426950408889634))
        return self.op(f'llvm.inline_asm "ex2.approx.ftz.f32 $0, $1;", "=f,f" {y} : (f32) -> f32', "f")

    def idx(self, v: Idx) -> str:
        return self.const(v, "index") if isinstance(v, int) else v

    def f32(self, v: float) -> str:
        r = self.const(float(v), "f32")
        self._values[r] = float(v)
        return r

    # -- index arithmetic with folding --
    def add(self, a: Idx, b: Idx) -> Idx:
        if isinstance(a, int) and isinstance(b, int):
            return a + b
        if a == 0:
            return b
        if b == 0:
            return a
        return self.op(f"arith.addi {self.idx(a)}, {self.idx(b)} : index", "x")

    def mul(self, a: Idx, b: Idx) -> Idx:
        if isinstance(a, int) and isinstance(b, int):
            return a * b
        if a == 0 or b == 0:
            return 0
        if a == 1:
            return b
        if b == 1:
            return a
        return self.op(f"arith.muli {self.idx(a)}, {self.idx(b)} : index", "x")

    def div(self, a: Idx, b: int) -> Idx:
        if isinstance(a, int):
            return a // b
        if b == 1:
            return a
        return self.op(f"arith.divui {a}, {self.idx(b)} : index", "x")

    def rem(self, a: Idx, b: int) -> Idx:
        if isinstance(a, int):
            return a % b
        if b == 1:
            return 0
        return self.op(f"arith.remui {a}, {self.idx(b)} : index", "x")

    def xor(self, a: Idx, b: Idx) -> Idx:
        if isinstance(a, int) and isinstance(b, int):
            return a ^ b
        if b == 0:
            return a
        if a == 0:
            return b
        return self.op(f"arith.xori {self.idx(a)}, {self.idx(b)} : index", "x")

    def minui(self, a: Idx, b: Idx) -> Idx:
        if isinstance(a, int) and isinstance(b, int):
            return min(a, b)
        return self.op(f"arith.minui {self.idx(a)}, {self.idx(b)} : index", "x")

    def cmp(self, pred: str, a: Idx, b: Idx) -> str:
        return self.op(f"arith.cmpi {pred}, {self.idx(a)}, {self.idx(b)} : index", "p")

    def dot(self, coords: Sequence[Idx], strides: Sequence[int]) -> Idx:
        acc: Idx = 0
        for c, s in zip(coords, strides):
            acc = self.add(acc, self.mul(c, s))
        return acc

    def delinearize(self, e: Idx, shape: Sequence[int]) -> list[Idx]:
        """Row-major coordinates of linear index `e` in `shape`."""
        coords: list[Idx] = []
        rest = e
        for k in range(len(shape) - 1, -1, -1):
            n = shape[k]
            if k == 0:
                coords.append(rest if n > 1 else 0)
            else:
                coords.append(self.rem(rest, n) if n > 1 else 0)
                rest = self.div(rest, n) if n > 1 else rest
        return coords[::-1]

    # -- float helpers (f32) --
    def fbin(self, name: str, a: str, b: str) -> str:
        r = self.op(f"arith.{name} {a}, {b} : f32", "f")
        if name == "mulf" and b in self._values:
            self._scaled[r] = (a, self._values[b])
        return r

    def load(self, mem: str, ty: str, i: Idx, elt: str) -> str:
        v = self.op(f"memref.load {mem}[{self.idx(i)}] : {ty}", "l")
        if elt != "f32":
            v = self.op(f"arith.extf {v} : {elt} to f32", "f")
        return v

    def store(self, v: str, mem: str, ty: str, i: Idx, elt: str) -> None:
        if elt != "f32":
            v = self.op(f"arith.truncf {v} : f32 to {elt}", "t")
        self.line(f"memref.store {v}, {mem}[{self.idx(i)}] : {ty}")

    # -- structured control flow --
    @contextmanager
    def for_(self, lb: Idx, ub: Idx, step: Idx):
        iv = self.fresh("i")
        self.line(f"scf.for {iv} = {self.idx(lb)} to {self.idx(ub)} step {self.idx(step)} {{")
        self.depth += 1
        yield iv
        self.depth -= 1
        self.line("}")

    @contextmanager
    def if_(self, cond: str):
        self.line(f"scf.if {cond} {{")
        self.depth += 1
        yield
        self.depth -= 1
        self.line("}")

    def for_iter(self, lb: Idx, ub: Idx, step: Idx, inits: Sequence[tuple[str, str]]):
        """Open an scf.for with iter_args; returns (iv, args, results, close) where
        close(yields) emits the yield and the closing brace."""
        iv = self.fresh("i")
        args = [self.fresh("a") for _ in inits]
        base = self.fresh("r")
        n = len(inits)
        res = [f"{base}#{k}" for k in range(n)] if n > 1 else [base]
        head = f"{base}:{n}" if n > 1 else base
        its = ", ".join(f"{a} = {v}" for a, (v, _) in zip(args, inits))
        tys = ", ".join(t for _, t in inits)
        self.line(f"{head} = scf.for {iv} = {self.idx(lb)} to {self.idx(ub)} step {self.idx(step)} "
                  f"iter_args({its}) -> ({tys}) {{")
        self.depth += 1

        def close(yields: Sequence[str]):
            self.line(f"scf.yield {', '.join(yields)} : {tys}")
            self.depth -= 1
            self.line("}")

        return iv, args, res, close

    def barrier(self) -> None:
        self.line("gpu.barrier")

    def text(self) -> list[str]:
        ind = "  " * 2
        return [ind + c for c in self.consts] + self.body
