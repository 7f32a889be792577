"""tt-models: transformer models in TT-NN behind the TT vLLM contract, with paged self- and cross-attention."""

__version__ = "0.1.0"
