"""Simulated Atlas node (test infrastructure of ascendai.vllm; never shipped, no hardware).

Stands in for the hardware layer only: the NPU cards, their RoCE NICs and the Ascend installer packages.
Everything is driven by one JSON state file (``state.py``).  Python 3.8+ standard library only.
"""

SIMULATED_NOTE = ("NOTE: this is a SIMULATED tool (ascendai.vllm test infrastructure, tests/simulator); "
                  "no Ascend hardware is present.")
