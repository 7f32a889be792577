"""The soak run of ``bench/soak.py`` as a test (marker ``soak``): one ``tt-models serve`` in its own process, a light
load for ``$TT_MODELS_SOAK_MINUTES`` (default 10) minutes, and the acceptance from its samples: RSS grew under 5%
after the warm-up, file descriptors and threads flat, 0 KV blocks in use at the end, no 5xx (nor transport error)
for a good request and a 4xx for every bad one, no traceback in the server's log.

The load is light so that it can run beside the rest of the suite: the tiny random BART alone (its encoder-decoder
path, streams, disconnects, aborts and refusals are where blocks and connections could leak), one client, a pause
after each request.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from bench.soak import BART, Load, report, running_server, soak
from tt_models.testing.seq2seq import save_tiny_bart

pytestmark = pytest.mark.soak

MINUTES = float(os.environ.get("TT_MODELS_SOAK_MINUTES", "10"))
KINDS = ("completion", "stream", "disconnect", "abort", "bad")  # the BART requests of bench/soak.py's mix
PAUSE_S = 5.0  # after each request: light load (about a twentieth of a core), the CPU is shared with the suite
INTERVAL_S = 10.0


def test_soak_keeps_resources_flat_and_answers_every_good_request(tmp_path):
    models = {BART: str(save_tiny_bart(tmp_path))}
    with running_server(models, tmp_path, max_num_seqs=4) as (pid, url, log):
        load = Load(url, b"", kinds=KINDS, pause=PAUSE_S)  # no transcription: no audio
        baseline, final = asyncio.run(soak(load, pid, tuple(models), minutes=MINUTES, interval=INTERVAL_S,
                                           concurrency=1))
    failed = report(baseline, final, load, log)
    assert load.done > 0 and not failed, failed
