"""The superoptimizer (paper §4): expression-guided μGraph generation with
abstract-expression pruning, thread-graph construction, Lax partitioning,
verification, and cost-model ranking. See docs/search.md."""
from .config import PRESETS, SearchConfig, make_config
from .driver import superoptimize
from .result import Candidate, SearchResult

__all__ = ["superoptimize", "SearchConfig", "SearchResult", "Candidate", "PRESETS", "make_config"]
