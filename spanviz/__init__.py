"""spanviz: learn how attention geometry shapes transformer training.

Three techniques on a tiny GPT, each with readable code, tests of its invariants, and live notebooks:
span / violation gradient scaling (arXiv 2512.13033, :mod:`spanviz.spans`), local + global attention heads
(arXiv 2505.15548, :mod:`spanviz.local_global`) and rank-aware spectral bounds for FP8 attention logits
(arXiv 2602.18851, :mod:`spanviz.fp8`).
"""

__version__ = "0.1.0"
