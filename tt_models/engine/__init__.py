"""The serving engine: inputs, scheduling, KV block management, batching and the model runner loop."""
