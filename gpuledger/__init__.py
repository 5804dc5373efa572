"""gpuledger: where the GPU money goes, what is wasted, and what to change, in dollars."""

__version__ = "0.1.0"
