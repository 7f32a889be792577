"""Start tt-models' OpenAI-compatible server for one model, as TT vLLM's ``examples/server_example_tt.py`` starts
``vllm serve``. Every other option goes to ``tt-models serve`` (see ``tt-models serve --help``).

    python demo/server_example_tt.py                                 # SmolLM2-135M-Instruct on port 8000
    python demo/server_example_tt.py --model whisper-tiny.en --port 8001
    curl localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \\
        -d '{"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "Hi!"}]}'
"""

from __future__ import annotations

import argparse

from tt_models.server.cli import main as tt_models_main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model to serve (path, HF id or alias)")
    parser.add_argument("--max_seqs_in_batch", type=int, default=32, help="max_num_seqs: the decode batch")
    args, serve_args = parser.parse_known_args()
    tt_models_main(["serve", args.model, "--max-num-seqs", str(args.max_seqs_in_batch), *serve_args])


if __name__ == "__main__":
    main()
