"""Encoder disaggregation (``seeds/separated-encoder-epd.md``): encoders on encode instances, decoders on
prefill-decode instances, encoder outputs between them through a Redis broker.

The flow of one encoder-decoder request (``proxy.py`` -> ``encode_engine.py`` -> ``broker.py`` -> ``inbox.py``):

1. The proxy picks an encode instance and a prefill-decode instance (least outstanding requests) and sends the
   HTTP request to the encode instance, naming the prefill-decode instance and the request id (``routing.py``).
2. The encode instance processes it as any instance would, runs the encoder and announces the states
   (metadata); the prefill-decode instance reserves the cross blocks when its pool has room and says so; the
   encode instance sends the states; the prefill-decode instance writes their cross K/V (``write_cross_kv``) and
   says so; the encode instance ends the request.
3. The proxy sends the same HTTP request to the prefill-decode instance, whose engine finds the cross blocks
   written under the request's id and decodes; its response goes back to the client.

Decoder-only requests go straight to a prefill-decode instance.
"""
