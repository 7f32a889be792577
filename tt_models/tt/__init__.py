"""TT-NN building blocks shared by the models: attention (self, cross, encoder), MLP, norms, rotary
embedding, embedding, LM head, the paged KV cache, and the generator plumbing (contract, decode inputs and
traces, device sampling). Written once against the ttnn API
(``tt_models.runtime.ttnn``); they run on a TT device, the mock device and the host backend."""
