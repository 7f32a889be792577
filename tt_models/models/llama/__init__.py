"""Llama-family decoder-only models (HF ``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ``Qwen3ForCausalLM``,
``Qwen3MoeForCausalLM``, ``GptOssForCausalLM``, ``MistralForCausalLM``)."""
