"""Run every family's prefill and decode paths on one mock board (real ttnn validation), one model after another.

``python -m tests.models.families_on_mock BOARD LLAMA_CHECKPOINT_DIR`` (one board per process: the mock cluster is a
process singleton). Prints one ``ok`` line per model with its output shapes.
"""

import sys

from tests.models import llama_on_mock, mllama_on_mock, seq2seq_on_mock
from tt_models.runtime import close_device, open_device

SEQ2SEQ = ("whisper-multilingual", "bart")

if __name__ == "__main__":
    board, checkpoint = sys.argv[1], sys.argv[2]
    device = open_device("mock", board=board)
    print("ok llama", llama_on_mock.run(device, checkpoint, 1, "performance"))
    for name in SEQ2SEQ:
        print("ok", name, seq2seq_on_mock.run(device, name, 1, "performance"))
    print("ok mllama", mllama_on_mock.run(device, "tiny", 1, "performance"))
    close_device(device)
