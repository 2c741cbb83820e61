"""Mirage's `mirage.visualizer` module, as its scripts use it: `visualizer(name)
.draw_graphs(graph)` draws a kernel graph with its block graphs as Graphviz DOT
(`name.dot`) and, where Graphviz's `dot` program is installed, `name.png`. Mirage passes
its C++ graph's structure (`cygraph.get_graph_structure()`); here the graph itself or
`graph.cygraph`. `g.visualize(name)` is the usual way (it writes the DOT file)."""
from __future__ import annotations

import shutil
import subprocess
import warnings


class visualizer:  # noqa: N801 (Mirage's name)
    def __init__(self, output_filename: str):
        self.output_filename = output_filename

    def draw_graphs(self, operators, dot: bool = True, png: bool = True) -> list[str]:
        """Write the files; returns their paths."""
        from .core.graph import KNGraph
        from .cuda_program import CyKNGraph

        g = operators.graph if isinstance(operators, CyKNGraph) else operators
        if not isinstance(g, KNGraph):
            raise TypeError(f"visualizer.draw_graphs: expected a kernel graph (or graph.cygraph), "
                            f"got {type(operators).__name__}")
        text = g.to_dot()
        written = []
        if dot:
            written.append(self.output_filename + ".dot")
            with open(written[-1], "w") as f:
                f.write(text)
        if png:
            exe = shutil.which("dot")
            if exe is None:
                warnings.warn("visualizer: Graphviz's `dot` program is not installed; no PNG written", stacklevel=2)
            else:
                written.append(self.output_filename + ".png")
                subprocess.run([exe, "-Tpng", "-o", written[-1]], input=text, text=True, check=True)
        return written
