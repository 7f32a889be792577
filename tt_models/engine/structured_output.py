"""Structured outputs: vLLM's ``StructuredOutputsParams`` (a JSON schema, a regex, a choice of strings, an EBNF grammar
or any JSON object), compiled by xgrammar against the model's vocabulary, and a matcher per constrained sequence
whose token bitmask limits that row's logits to the tokens that keep the output in the grammar.

Names and semantics follow vLLM 0.25.1 (``vllm/sampling_params.py``, ``vllm/v1/structured_output/backend_xgrammar.py``):
exactly one constraint per request; a choice is the grammar ``root ::= "a" | "b"``; ``json_object`` is the schema
``{"type": "object"}``. The grammar ends at the engine's eos ids (the matcher allows them once the output is
complete), so a finished output stops as any output stops at eos.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    import xgrammar as xgr

logger = logging.getLogger(__name__)

_CONSTRAINTS = ("json", "regex", "choice", "grammar", "json_object")
_LOCATION = re.compile(r"^\[[\d:]+\] \S+:\d+: ")  # xgrammar's "[time] file.cc:line: " before its message
# Array keywords xgrammar ignores (no grammar can count or compare items): vLLM refuses schemas with them.
_UNSUPPORTED_ARRAY_KEYWORDS = ("uniqueItems", "contains", "minContains", "maxContains")


@dataclass
class StructuredOutputsParams:
    """vLLM's structured output constraint: exactly one of ``json`` (a schema, as a dict or its JSON text),
    ``regex``, ``choice``, ``grammar`` (EBNF, xgrammar's dialect) and ``json_object``."""

    json: str | dict | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False  # JSON without whitespace between its tokens

    def __post_init__(self) -> None:
        count = sum(getattr(self, name) is not None for name in _CONSTRAINTS)
        if count > 1:
            raise ValueError("You can only use one kind of structured outputs constraint "
                             f"but multiple are specified: {self.__dict__}")
        if count < 1:
            raise ValueError("You must use one kind of structured outputs constraint "
                             f"but none are specified: {self.__dict__}")
        if self.choice is not None and (not self.choice or not all(isinstance(c, str) for c in self.choice)):
            raise ValueError(f"structured outputs choice must be a non-empty list of strings, got {self.choice!r}")

    def spec(self) -> tuple[str, str]:
        """The constraint as (kind, text): a JSON schema, a regex or an EBNF grammar."""
        if self.json is not None:
            return "json", self.json if isinstance(self.json, str) else json.dumps(self.json)
        if self.json_object is not None:
            return "json", '{"type": "object"}'
        if self.regex is not None:
            return "regex", self.regex
        if self.choice is not None:  # vLLM's choice_as_grammar (JSON's escapes are EBNF's)
            return "grammar", "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in self.choice)
        return "grammar", self.grammar


class GrammarCompiler:
    """Compiles constraints for one model on a worker thread, so that the engine keeps stepping meanwhile: the
    vocabulary is read once, at the first constrained request (a 128k vocabulary takes seconds), then each grammar
    (xgrammar caches them by their text)."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int]) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size  # the logits' width: ids the tokenizer lacks are never allowed
        self.stop_token_ids = list(stop_token_ids)
        self._compiler: xgr.GrammarCompiler | None = None
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar-compiler")

    def submit(self, params: StructuredOutputsParams) -> Future[xgr.CompiledGrammar]:
        """The constraint, checked now (raises ValueError naming what is wrong with it) and compiled on the worker."""
        import xgrammar as xgr  # here: every engine imports this module, few serve constrained requests

        if self.tokenizer is None:
            raise ValueError("structured outputs need the model's tokenizer")
        kind, text = params.spec()
        try:
            if kind == "json":
                grammar = xgr.Grammar.from_json_schema(text, any_whitespace=not params.disable_any_whitespace)
            elif kind == "regex":
                grammar = xgr.Grammar.from_regex(text)
            else:
                grammar = xgr.Grammar.from_ebnf(text)
        except RuntimeError as error:
            what = {"json": "JSON schema", "regex": "regex", "grammar": "grammar"}[kind]
            raise ValueError(f"invalid structured outputs {what}: {_LOCATION.sub('', str(error)).strip()}") from None
        if kind == "json" and _unsupported(json.loads(text)):
            raise ValueError("invalid structured outputs JSON schema: xgrammar cannot enforce "
                             f"{', '.join(_UNSUPPORTED_ARRAY_KEYWORDS)} on arrays")
        return self._worker.submit(self._compile, grammar)

    def close(self) -> None:
        self._worker.shutdown(wait=False, cancel_futures=True)

    def _compile(self, grammar: xgr.Grammar) -> xgr.CompiledGrammar:
        import xgrammar as xgr

        if self._compiler is None:  # (only the one worker thread gets here)
            info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.vocab_size,
                                                      stop_token_ids=self.stop_token_ids or None)
            self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=True)
        return self._compiler.compile_grammar(grammar)


def _unsupported(schema: Any) -> bool:
    """Whether a schema (or any schema inside it) is an array with a keyword xgrammar would ignore."""
    if isinstance(schema, list):
        return any(_unsupported(item) for item in schema)
    if not isinstance(schema, dict):
        return False
    if schema.get("type") == "array" and any(key in schema for key in _UNSUPPORTED_ARRAY_KEYWORDS):
        return True
    return any(_unsupported(value) for value in schema.values())


class Guide:
    """One sequence's place in its grammar: a matcher fed every output token the sequence gets. The sequence is
    scheduled only once its grammar is compiled, so the matcher is made at its first use."""

    def __init__(self, grammar: Future[xgr.CompiledGrammar], name: str) -> None:
        """``name``: the sequence's, for the log."""
        self._grammar = grammar
        self.name = name
        self._matcher: xgr.GrammarMatcher | None = None
        self.terminated = False  # the grammar took a stop token: nothing constrains the row any more (as in vLLM)

    @property
    def matcher(self) -> xgr.GrammarMatcher:
        if self._matcher is None:
            import xgrammar as xgr

            self._matcher = xgr.GrammarMatcher(self._grammar.result())
        return self._matcher

    def accept(self, token_id: int) -> None:
        if self.terminated:
            return
        if not self.matcher.accept_token(token_id):  # only if its row's mask was overridden (e.g. by min_tokens)
            logger.error("sequence %s: token %d does not fit its grammar; it is left out of the grammar", self.name,
                         token_id)
        self.terminated = self.matcher.is_terminated()


def apply_guides(logits: torch.Tensor, guides: Sequence[Guide | None]) -> None:
    """Set to -inf, in place, every logit of row ``i`` that ``guides[i]`` does not allow next (None: no grammar)."""
    rows = [i for i, g in enumerate(guides) if g is not None and not g.terminated]
    if not rows:
        return
    import xgrammar as xgr

    bitmask = xgr.allocate_token_bitmask(len(guides), logits.shape[1])
    for i in rows:
        guides[i].matcher.fill_next_token_bitmask(bitmask, i)
    xgr.apply_token_bitmask_inplace(logits, bitmask, indices=rows)
