"""The generator classes TT vLLM loads (``TT<HFArch>`` -> ``generator_vllm:<Class>``).

Each model family adds its class here as the model issues land (Llama-family, Whisper, BART).
"""

__all__: list[str] = []
