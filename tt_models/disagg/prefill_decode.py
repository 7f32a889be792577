"""A prefill-decode instance: an ``LLMEngine`` whose encoder outputs may come from encode instances."""

from __future__ import annotations

from tt_models.disagg.broker import Broker
from tt_models.disagg.inbox import EncoderInbox
from tt_models.engine.config import decoder_config
from tt_models.engine.llm_engine import LLMEngine


def attach_encoder_inbox(engine: LLMEngine, broker: Broker, *, timeout: float = 30.0) -> EncoderInbox:
    """Receive encoder outputs for ``engine`` through ``broker``. Requests whose output arrived run without their
    encoder; the others (sent to this instance directly) still run it here."""
    if not engine.runner.uses_cross or not hasattr(engine.runner.model, "write_cross_kv"):
        raise ValueError(f"{engine.checkpoint.config.model_type} has no encoder outputs to receive: a "
                         "prefill-decode instance serves encoder-decoder and image+text models (decoder-only ones "
                         "need no encode instance)")
    config = engine.config
    kvs = engine.scheduler.kvs
    hf_config = engine.checkpoint.config
    dim = getattr(hf_config, "d_model", None) or decoder_config(hf_config).hidden_size  # Mllama: its text width

    def queued(replica: int) -> bool:
        return any(r.replica == replica and not kvs[replica].has_cross(r.request_id) for r in engine.scheduler.waiting)

    inbox = EncoderInbox(broker, kvs, engine.runner.write_cross, queued,
                         max_encoder_len=engine.runner.model.max_cross_attn_tokens, dim=dim,
                         headroom_blocks=kvs[0].num_blocks_for(config.max_model_len), timeout=timeout)
    engine.encoder_inbox = inbox
    inbox.start()
    return inbox
