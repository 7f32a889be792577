"""KVBlockManager against the encoder-decoder seed's free-block formulas ("Memory management").

Hand-written cases check each formula on known numbers; a hypothesis state machine runs random
allocate / append / fork / free / free_cross / swap_out / swap_in / reset sequences against a model that
predicts every count on its own (its own blocks and reference counts, never the manager's). It stays one module
though long: both check the same formulas of the one manager, and a sequence the machine breaks is read against
the case written for its formula.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import count

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tt_models.engine.kv_blocks import KVBlockManager


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# The seed's formulas on known numbers.


def test_allocate_takes_cross_plus_self_blocks():
    m = KVBlockManager(num_blocks=20, block_size=4)
    m.allocate("r", [0], prompt_len=5, encoder_len=10)
    assert m.num_free_blocks == 20 - (3 + 2)
    assert len(m.cross_table("r")) == 3 and len(m.self_table(0)) == 2
    assert set(m.cross_table("r")).isdisjoint(m.self_table(0))


def test_allocate_n_sequences_share_the_prompt_blocks():
    m = KVBlockManager(num_blocks=20, block_size=4)
    m.allocate("r", [0, 1, 2], prompt_len=5, encoder_len=10)
    assert m.num_free_blocks == 20 - (3 + 2)
    assert m.self_table(0) == m.self_table(1) == m.self_table(2)


def test_decoder_only_request_has_no_cross_table():
    m = KVBlockManager(num_blocks=8, block_size=4)
    assert m.can_allocate(8) and not m.can_allocate(33)
    m.allocate("r", [0], prompt_len=8)
    assert m.num_free_blocks == 6 and m.cross_table("r") == []
    with pytest.raises(ValueError, match="no cross table"):
        m.free_cross("r")


def test_append_takes_a_block_at_each_boundary():
    m = KVBlockManager(num_blocks=8, block_size=4)
    m.allocate("r", [0], prompt_len=4, encoder_len=4)
    free = m.num_free_blocks
    for tokens, expected_free in [(1, free - 1), (3, free - 1), (1, free - 2), (8, free - 4)]:
        assert m.append(0, tokens) is None
        assert m.num_free_blocks == expected_free
    assert len(m.self_table(0)) == ceil_div(4 + 1 + 3 + 1 + 8, 4)


def test_append_each_is_all_or_none():
    m = KVBlockManager(num_blocks=4, block_size=4)
    m.allocate("a", [0], prompt_len=4)
    m.allocate("b", [1], prompt_len=4)
    tables = m.self_table(0), m.self_table(1)
    m.allocate("c", [2], prompt_len=4)  # one block left: two sequences at a block boundary need two
    assert m.blocks_to_append([0, 1]) == 2
    assert m.append_each([0, 1]) is None
    assert (m.self_table(0), m.self_table(1)) == tables and m.num_free_blocks == 1
    m.free(2)
    assert m.append_each([0, 1]) == [None, None]
    assert [len(m.self_table(s)) for s in (0, 1)] == [2, 2] and m.num_free_blocks == 0


def test_fork_shares_and_append_copies_the_shared_partial_block():
    m = KVBlockManager(num_blocks=8, block_size=4)
    m.allocate("r", [0], prompt_len=6)
    m.fork(0, 1)
    assert m.num_free_blocks == 6 and m.self_table(1) == m.self_table(0)
    full, partial = m.self_table(0)
    src, dst = m.append(1)  # the child writes into the shared partial block: its own copy first
    assert src == partial and m.self_table(1) == [full, dst] and dst not in (full, partial)
    assert m.num_free_blocks == 5
    assert m.append(0) is None  # the parent now holds its partial block alone
    assert m.self_table(0) == [full, partial] and m.num_free_blocks == 5
    assert m.append(0, 2) is None  # crossing into a new block: the full shared block stays shared
    assert m.self_table(0)[0] == full and m.num_free_blocks == 4


def test_fork_at_a_block_boundary_copies_nothing():
    m = KVBlockManager(num_blocks=8, block_size=4)
    m.allocate("r", [0], prompt_len=4)
    m.fork(0, 1)
    assert m.append(1) is None and m.append(0) is None
    assert m.self_table(0)[0] == m.self_table(1)[0] and m.num_free_blocks == 8 - 3


def test_free_gives_back_the_blocks_no_sibling_holds():
    m = KVBlockManager(num_blocks=16, block_size=4)
    m.allocate("r", [0, 1], prompt_len=8, encoder_len=4)
    m.append(0, 4)  # sequence 0: two shared blocks + one of its own
    assert m.num_free_blocks == 16 - 4
    m.free(0)
    assert m.num_free_blocks == 16 - 3  # only its own block
    m.free(1)
    assert m.num_free_blocks == 16 - 1  # the shared blocks' last holder: |self table| = 2
    m.free_cross("r")
    assert m.num_free_blocks == 16  # |cross table| = 1
    with pytest.raises(ValueError, match="unknown request"):
        m.cross_table("r")


def test_swap_moves_the_request_blocks_and_maps_them():
    m = KVBlockManager(num_blocks=16, block_size=4, num_host_blocks=10)
    m.allocate("r", [0], prompt_len=5, encoder_len=9)
    m.fork(0, 1)
    before = {0: m.self_table(0), 1: m.self_table(1), "cross": m.cross_table("r")}
    group = 3 + 2  # distinct blocks: the forked table is shared
    assert m.can_swap_out("r")
    to_host = m.swap_out("r")
    assert m.num_free_blocks == 16 and m.num_free_host_blocks == 10 - group and m.is_swapped_out("r")
    assert sorted(to_host) == sorted({b for table in before.values() for b in table})
    assert m.self_table(0) == [to_host[b] for b in before[0]] == m.self_table(1)
    assert m.cross_table("r") == [to_host[b] for b in before["cross"]]
    with pytest.raises(ValueError, match="swapped out"):
        m.append(0)
    m.allocate("other", [7], prompt_len=4 * 13)
    assert not m.can_swap_in("r")
    with pytest.raises(RuntimeError, match="swap in 'r': needs 5 blocks, 3 free"):
        m.swap_in("r")
    m.free(7)
    to_device = m.swap_in("r")
    assert m.num_free_blocks == 16 - group and m.num_free_host_blocks == 10
    assert m.self_table(0) == [to_device[to_host[b]] for b in before[0]] == m.self_table(1)
    src, dst = m.append(1)  # still shared after the round trip: copy-on-write
    assert src == m.self_table(0)[-1] and m.num_free_blocks == 16 - group - 1


def test_free_while_swapped_out_frees_host_blocks():
    m = KVBlockManager(num_blocks=8, block_size=2, num_host_blocks=8)
    m.allocate("r", [0], prompt_len=3, encoder_len=5)
    m.swap_out("r")
    m.free(0)
    assert m.num_free_host_blocks == 8 - 3 and m.num_free_blocks == 8
    m.free_cross("r")
    assert m.num_free_host_blocks == 8


def test_reset_frees_everything():
    m = KVBlockManager(num_blocks=8, block_size=2, num_host_blocks=8)
    m.allocate("a", [0, 1], prompt_len=3, encoder_len=5)
    m.allocate("b", [2], prompt_len=1)
    m.swap_out("b")
    m.reset()
    assert m.num_free_blocks == 8 and m.num_free_host_blocks == 8
    m.allocate("a", [0], prompt_len=16)  # ids are free again, and so is every block
    assert m.num_free_blocks == 0


def test_reserved_cross_blocks_go_to_the_request_that_allocates_them():
    """Encoder disaggregation: cross blocks reserved before the request arrives, then taken by its allocate."""
    m = KVBlockManager(num_blocks=20, block_size=4)
    cross = m.reserve_cross("r", encoder_len=10)
    assert len(cross) == 3 and m.num_free_blocks == 17 and m.has_cross("r")
    m.allocate("r", [0], prompt_len=5, encoder_len=10)
    assert m.cross_table("r") == cross and m.num_free_blocks == 15  # only the self blocks were new
    m.free(0)
    assert m.has_cross("r")
    m.free_cross("r")
    assert m.num_free_blocks == 20 and not m.has_cross("r")
    m.reserve_cross("unused", encoder_len=4)
    m.free_cross("unused")  # a reservation nobody took
    assert m.num_free_blocks == 20
    with pytest.raises(ValueError, match="unknown request 'unused'"):
        m.free_cross("unused")


@pytest.mark.parametrize("misuse, message", [
    (lambda m: m.reserve_cross("r", 4), "request 'r' is already allocated"),
    (lambda m: m.allocate("r", [1], 1, encoder_len=9), "request 'r' is already allocated"),  # not its length
    (lambda m: m.reserve_cross("s", 4 * 20), "reserve_cross 's': needs 20 blocks, 18 free"),
])
def test_reservation_misuse_is_named(misuse, message):
    m = KVBlockManager(num_blocks=20, block_size=4)
    m.reserve_cross("r", encoder_len=5)
    with pytest.raises((ValueError, RuntimeError), match=message):
        misuse(m)
    assert m.num_free_blocks == 18


@pytest.mark.parametrize("misuse, error, message", [
    (lambda m: m.allocate("r", [9], 1), ValueError, "request 'r' is already allocated"),
    (lambda m: m.allocate("s", [0], 1), ValueError, "sequence 0 is already allocated"),
    (lambda m: m.allocate("s", [5, 5], 1), ValueError, "distinct"),
    (lambda m: m.allocate("s", [], 1), ValueError, "non-empty"),
    (lambda m: m.allocate("s", [5], -1), ValueError, "negative"),
    (lambda m: m.allocate("s", [5], 4 * 7), RuntimeError, "needs 7 blocks, 6 free"),
    (lambda m: m.append(3), ValueError, "unknown sequence 3"),
    (lambda m: m.append(0, 0), ValueError, "num_tokens"),
    (lambda m: m.append(0, 4 * 7), RuntimeError, "needs 7 blocks, 6 free"),
    (lambda m: m.fork(0, 0), ValueError, "sequence 0 is already allocated"),
    (lambda m: m.fork(3, 4), ValueError, "unknown sequence 3"),
    (lambda m: m.free(3), ValueError, "unknown sequence 3"),
    (lambda m: m.free_cross("x"), ValueError, "unknown request 'x'"),
    (lambda m: m.swap_in("r"), ValueError, "not swapped out"),
    (lambda m: m.swap_out("r"), RuntimeError, "swap out 'r': needs 2 blocks, 1 free"),
    (lambda m: KVBlockManager(0, 4), ValueError, "num_blocks"),
])
def test_misuse_is_named(misuse, error, message):
    m = KVBlockManager(num_blocks=8, block_size=4, num_host_blocks=1)
    m.allocate("r", [0], prompt_len=3, encoder_len=4)
    with pytest.raises(error, match=message):
        misuse(m)
    assert m.num_free_blocks == 6 and m.num_free_host_blocks == 1  # nothing moved


def test_appending_to_a_freed_sequence_fails():
    m = KVBlockManager(num_blocks=8, block_size=4)
    m.allocate("r", [0, 1], prompt_len=3)
    m.free(0)
    with pytest.raises(ValueError, match="unknown sequence 0"):
        m.append(0)
    m.free(1)
    with pytest.raises(ValueError, match="unknown request 'r'"):
        m.can_swap_out("r")


# Random operation sequences against an independent model.


@dataclass
class ModelSeq:
    request_id: str
    tokens: int
    blocks: list[int]  # the model's own block names, not the manager's ids


@dataclass
class ModelRequest:
    seq_ids: set[int]
    encoder_len: int
    cross: list[int] | None
    on_host: bool = False


@dataclass
class Model:
    """What the seed says the manager holds: tables of abstract blocks with reference counts, and free
    counts updated by the seed's formulas."""

    free: dict[bool, int]  # on_host -> free blocks
    requests: dict[str, ModelRequest] = field(default_factory=dict)
    seqs: dict[int, ModelSeq] = field(default_factory=dict)
    refs: dict[int, int] = field(default_factory=dict)

    def tables(self, request: ModelRequest) -> list[list[int]]:
        """Self tables by sequence id, then the cross table."""
        tables = [self.seqs[s].blocks for s in sorted(request.seq_ids)]
        return tables + [request.cross] if request.cross is not None else tables

    def group_blocks(self, request: ModelRequest) -> set[int]:
        return {b for table in self.tables(request) for b in table}


class KVBlockMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.names = count()

    @initialize(block_size=st.sampled_from([1, 2, 4]), num_blocks=st.integers(1, 16),
                num_host_blocks=st.integers(0, 16))
    def init(self, block_size: int, num_blocks: int, num_host_blocks: int) -> None:
        self.bs, self.total = block_size, {False: num_blocks, True: num_host_blocks}
        self.m = KVBlockManager(num_blocks, block_size, num_host_blocks=num_host_blocks)
        self.model = Model(free=dict(self.total))

    def new_blocks(self, k: int, refs: int = 1) -> list[int]:
        blocks = [next(self.names) for _ in range(k)]
        self.model.refs.update(dict.fromkeys(blocks, refs))
        return blocks

    def seq_ids(self, on_host: bool | None = None) -> list[int]:
        model = self.model
        return sorted(s for s, seq in model.seqs.items()
                      if on_host is None or model.requests[seq.request_id].on_host == on_host)

    def request_ids(self, on_host: bool) -> list[str]:
        return sorted(r for r, req in self.model.requests.items() if req.on_host == on_host)

    @rule(n=st.integers(1, 3), prompt_len=st.integers(0, 12),
          encoder_len=st.one_of(st.none(), st.integers(0, 12)))
    def allocate(self, n: int, prompt_len: int, encoder_len: int | None) -> None:
        request_id, seq_ids = f"r{next(self.names)}", [next(self.names) for _ in range(n)]
        need = ceil_div(encoder_len or 0, self.bs) + ceil_div(prompt_len, self.bs)  # |cross| + shared self
        fits = need <= self.model.free[False]
        assert self.m.can_allocate(prompt_len, encoder_len) == fits
        if not fits:
            with pytest.raises(RuntimeError):
                self.m.allocate(request_id, seq_ids, prompt_len, encoder_len)
            return
        self.m.allocate(request_id, seq_ids, prompt_len, encoder_len)
        self.model.free[False] -= need
        table = self.new_blocks(ceil_div(prompt_len, self.bs), refs=n)
        cross = self.new_blocks(ceil_div(encoder_len, self.bs)) if encoder_len else None
        self.model.requests[request_id] = ModelRequest(set(seq_ids), encoder_len or 0, cross)
        for s in seq_ids:
            self.model.seqs[s] = ModelSeq(request_id, prompt_len, list(table))

    @precondition(lambda self: self.seq_ids(on_host=False))
    @rule(data=st.data(), k=st.integers(1, 6))
    def append(self, data: st.DataObject, k: int) -> None:
        s = data.draw(st.sampled_from(self.seq_ids(on_host=False)))
        seq = self.model.seqs[s]
        copy_last = seq.tokens % self.bs != 0 and self.model.refs[seq.blocks[-1]] > 1
        need = ceil_div(seq.tokens + k, self.bs) - ceil_div(seq.tokens, self.bs) + copy_last
        fits = need <= self.model.free[False]
        assert self.m.can_append(s, k) == fits
        if not fits:
            with pytest.raises(RuntimeError):
                self.m.append(s, k)
            return
        last = self.m.self_table(s)[-1:]
        copy = self.m.append(s, k)
        assert (copy is not None) == copy_last
        if copy_last:
            assert copy[0] == last[0] and copy[1] == self.m.self_table(s)[len(seq.blocks) - 1]
            self.model.refs[seq.blocks[-1]] -= 1
            seq.blocks[-1:] = self.new_blocks(1)
        seq.blocks += self.new_blocks(ceil_div(seq.tokens + k, self.bs) - len(seq.blocks))
        seq.tokens += k
        self.model.free[False] -= need

    @precondition(lambda self: self.seq_ids(on_host=False))
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        parent = data.draw(st.sampled_from(self.seq_ids(on_host=False)))
        child = next(self.names)
        self.m.fork(parent, child)
        seq = self.model.seqs[parent]
        for b in seq.blocks:
            self.model.refs[b] += 1
        self.model.seqs[child] = ModelSeq(seq.request_id, seq.tokens, list(seq.blocks))
        self.model.requests[seq.request_id].seq_ids.add(child)

    @precondition(lambda self: self.model.seqs)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        s = data.draw(st.sampled_from(self.seq_ids()))
        self.m.free(s)
        seq = self.model.seqs.pop(s)
        request = self.model.requests[seq.request_id]
        request.seq_ids.remove(s)
        for b in seq.blocks:
            self.model.refs[b] -= 1
        # + |self table|, counting only the blocks this sequence held last (no sibling shares them)
        self.model.free[request.on_host] += sum(self.model.refs[b] == 0 for b in seq.blocks)
        self.forget_if_empty(seq.request_id)

    @precondition(lambda self: any(r.cross is not None for r in self.model.requests.values()))
    @rule(data=st.data())
    def free_cross(self, data: st.DataObject) -> None:
        r = data.draw(st.sampled_from(sorted(r for r, req in self.model.requests.items() if req.cross)))
        self.m.free_cross(r)
        request = self.model.requests[r]
        self.model.free[request.on_host] += len(request.cross)
        request.cross = None
        self.forget_if_empty(r)

    def forget_if_empty(self, r: str) -> None:
        if not self.model.requests[r].seq_ids and self.model.requests[r].cross is None:
            del self.model.requests[r]

    @precondition(lambda self: self.model.requests)
    @rule(data=st.data(), to_host=st.booleans())
    def swap(self, data: st.DataObject, to_host: bool) -> None:
        candidates = self.request_ids(on_host=not to_host)
        if not candidates:
            return
        r = data.draw(st.sampled_from(candidates))
        request = self.model.requests[r]
        group = len(self.model.group_blocks(request))  # the seed's "seq group blocks"
        fits = group <= self.model.free[to_host]
        can, move = (self.m.can_swap_out, self.m.swap_out) if to_host else (self.m.can_swap_in, self.m.swap_in)
        assert can(r) == fits
        if not fits:
            with pytest.raises(RuntimeError):
                move(r)
            return
        before = self.real_tables(r)
        mapping = move(r)
        assert len(mapping) == group and sorted(mapping) == sorted({b for t in before for b in t})
        assert self.real_tables(r) == [[mapping[b] for b in t] for t in before]
        self.model.free[not to_host] += group
        self.model.free[to_host] -= group
        request.on_host = to_host

    @rule(now=st.integers(0, 3))
    def reset(self, now: int) -> None:
        """One time in four: state has to build up between resets to fill the pools."""
        if now:
            return
        self.m.reset()
        self.model = Model(free=dict(self.total))

    @precondition(lambda self: self.model.requests)
    @rule(data=st.data())
    def misuse(self, data: st.DataObject) -> None:
        r = data.draw(st.sampled_from(sorted(self.model.requests)))
        request = self.model.requests[r]
        with pytest.raises(ValueError):
            (self.m.swap_out if request.on_host else self.m.swap_in)(r)
        with pytest.raises(ValueError):
            self.m.append(next(self.names))  # never allocated, or freed
        with pytest.raises(ValueError):
            self.m.allocate(r, [next(self.names)], 1)
        if request.seq_ids:
            with pytest.raises(ValueError):
                self.m.fork(min(request.seq_ids), min(request.seq_ids))

    def real_tables(self, r: str) -> list[list[int]]:
        request = self.model.requests[r]
        tables = [self.m.self_table(s) for s in sorted(request.seq_ids)]
        return tables + [self.m.cross_table(r)] if request.cross is not None else tables

    @invariant()
    def counts_match_the_seed(self) -> None:
        assert self.m.num_free_blocks == self.model.free[False]
        assert self.m.num_free_host_blocks == self.model.free[True]

    @invariant()
    def tables_match_the_model(self) -> None:
        """Table lengths follow the token counts, and the manager's blocks are the model's blocks renamed:
        one bijection per pool, so a block is held by one request, shared exactly where the model shares."""
        model, holders = self.model, Counter()
        rename: dict[bool, dict[int, int]] = {False: {}, True: {}}
        for r, request in model.requests.items():
            assert self.m.is_swapped_out(r) == request.on_host
            if request.cross is not None:
                assert len(request.cross) == ceil_div(request.encoder_len, self.bs)
            for s in request.seq_ids:
                assert len(model.seqs[s].blocks) == ceil_div(model.seqs[s].tokens, self.bs)
            for model_table, real_table in zip(model.tables(request), self.real_tables(r), strict=True):
                assert len(real_table) == len(model_table)
                holders.update(model_table)
                for b, real_b in zip(model_table, real_table):
                    assert 0 <= real_b < self.total[request.on_host]
                    assert rename[request.on_host].setdefault(b, real_b) == real_b
        assert all(model.refs[b] == n for b, n in holders.items())
        for on_host, names in rename.items():
            assert len(set(names.values())) == len(names)  # no block held under two model names
            free = self.m.num_free_host_blocks if on_host else self.m.num_free_blocks
            assert free + len(names) == self.total[on_host]


TestKVBlockMachine = KVBlockMachine.TestCase
TestKVBlockMachine.settings = settings(max_examples=300, stateful_step_count=50, deadline=None)
