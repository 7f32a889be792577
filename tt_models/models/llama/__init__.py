"""Llama-family decoder-only models (HF ``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ``MistralForCausalLM``)."""
