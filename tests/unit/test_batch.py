"""plan_step: continuous-batching step planning (sans-IO)."""

from skippy.engine.runtime.base import BatchEntry
from skippy.engine.scheduling.batch import BatchPlan, SeqState, plan_step


def gen(rid, slot, prompt_len=3, pending=100, n_generated=1):
    """A sequence whose prompt is fully in the KV cache and has a pending sampled token."""
    return SeqState(rid=rid, slot=slot, prompt=list(range(prompt_len)), max_tokens=16,
                    n_past=prompt_len + n_generated - 1, pending=pending, n_generated=n_generated)


def fresh(rid, slot, prompt, n_past=0):
    return SeqState(rid=rid, slot=slot, prompt=list(prompt), max_tokens=16, n_past=n_past)


def apply(plan: BatchPlan):
    for s, n in plan.advance:
        s.n_past += n


def check_outputs(plan: BatchPlan):
    """Each output index has logits; every logits entry is some sequence's output."""
    idx = [i for _, i in plan.outputs]
    assert len(set(idx)) == len(idx)
    for s, i in plan.outputs:
        assert plan.entries[i].logits is True
        assert plan.entries[i].seq_id == s.slot
    assert sorted(idx) == [i for i, e in enumerate(plan.entries) if e.logits]


def test_nothing_to_do_returns_none():
    assert plan_step([], 64) is None
    # generating sequence without a pending token (e.g. parked) has nothing to decode
    s = gen(0, 0, pending=None)
    assert plan_step([s], 64) is None


def test_generating_sequences_get_one_token_each_with_logits_in_slot_order():
    # llama.cpp (non-unified KV) micro-batches consecutive sequence ids in batch order: sort by slot
    a, b, c = gen(0, 0, pending=11), gen(1, 3, prompt_len=5, pending=22, n_generated=4), gen(2, 1, pending=33)
    plan = plan_step([a, b, c], 64)
    assert plan.entries == (
        BatchEntry(11, a.n_past, 0, True),
        BatchEntry(33, c.n_past, 1, True),
        BatchEntry(22, b.n_past, 3, True),
    )
    assert [(s.rid, i) for s, i in plan.outputs] == [(0, 0), (2, 1), (1, 2)]
    assert sorted((s.rid, n) for s, n in plan.advance) == [(0, 1), (1, 1), (2, 1)]
    check_outputs(plan)


def test_small_prompt_prefilled_whole_logits_only_at_last_token():
    s = fresh(0, 2, [5, 6, 7, 8])
    plan = plan_step([s], 64)
    assert [e.token for e in plan.entries] == [5, 6, 7, 8]
    assert [e.pos for e in plan.entries] == [0, 1, 2, 3]
    assert all(e.seq_id == 2 for e in plan.entries)
    assert [e.logits for e in plan.entries] == [False, False, False, True]
    assert [(x.rid, i) for x, i in plan.outputs] == [(0, 3)]
    assert [(x.rid, n) for x, n in plan.advance] == [(0, 4)]
    check_outputs(plan)


def test_long_prompt_chunked_by_budget_continuing_at_n_past():
    prompt = list(range(100, 110))  # 10 tokens
    s = fresh(0, 0, prompt)
    seen = []
    steps = 0
    while s.prefilling:
        plan = plan_step([s], 4)
        assert len(plan.entries) <= 4
        assert plan.entries[0].pos == s.n_past
        seen += [(e.token, e.pos) for e in plan.entries]
        last_chunk = s.n_past + len(plan.entries) == len(prompt)
        if last_chunk:
            assert [e.logits for e in plan.entries] == [False] * (len(plan.entries) - 1) + [True]
            assert [(x.rid, i) for x, i in plan.outputs] == [(0, len(plan.entries) - 1)]
        else:
            assert not any(e.logits for e in plan.entries)
            assert plan.outputs == ()
        check_outputs(plan)
        apply(plan)
        steps += 1
    assert steps == 3  # 4 + 4 + 2
    assert seen == [(t, i) for i, t in enumerate(prompt)]
    assert s.n_past == 10


def test_prefill_resumes_after_cached_prefix():
    s = fresh(0, 1, list(range(50, 58)), n_past=5)  # 5 tokens reused from the prefix cache
    plan = plan_step([s], 64)
    assert [(e.token, e.pos) for e in plan.entries] == [(55, 5), (56, 6), (57, 7)]
    assert [e.logits for e in plan.entries] == [False, False, True]


def test_generating_first_then_prefill_shares_remaining_budget():
    a = gen(0, 0, pending=1)
    b = gen(1, 1, pending=2)
    c = fresh(2, 2, list(range(10)))
    plan = plan_step([c, a, b], 6)  # c was admitted first, but decoders go first
    assert [e.seq_id for e in plan.entries] == [0, 1, 2, 2, 2, 2]
    assert [e.logits for e in plan.entries] == [True, True, False, False, False, False]
    assert [(s.rid, i) for s, i in plan.outputs] == [(0, 0), (1, 1)]
    assert [(s.rid, n) for s, n in plan.advance] == [(0, 1), (1, 1), (2, 4)]
    assert [e.pos for e in plan.entries[2:]] == [0, 1, 2, 3]
    check_outputs(plan)


def test_shortest_prefill_first_and_budget_spills_to_next():
    old = fresh(0, 0, list(range(3)))
    mid = fresh(1, 1, list(range(5)))
    new = fresh(2, 2, list(range(4)))
    plan = plan_step([old, mid, new], 6)
    # shortest remaining first: old (3), then new: 2 of 4 (3 would leave a lone token); mid waits
    assert [(e.seq_id, e.pos) for e in plan.entries] == [(0, 0), (0, 1), (0, 2), (2, 0), (2, 1)]
    # old finished its prompt: logits at its last token; new is mid-prompt: none
    assert [e.logits for e in plan.entries] == [False, False, True, False, False]
    assert [(s.rid, i) for s, i in plan.outputs] == [(0, 2)]
    assert [(s.rid, n) for s, n in plan.advance] == [(0, 3), (2, 2)]
    check_outputs(plan)
    apply(plan)
    # next step: new finishes (2 left); mid, now the oldest prefill, takes 3 of 5
    plan = plan_step([old, mid, new], 6)
    assert [(e.seq_id, e.pos) for e in plan.entries] == [(1, 0), (1, 1), (1, 2), (2, 2), (2, 3)]
    assert [e.logits for e in plan.entries] == [False, False, False, False, True]
    assert [(s.rid, i) for s, i in plan.outputs] == [(2, 4)]
    check_outputs(plan)


def test_short_prompt_is_not_held_back_by_an_older_long_one_which_still_progresses():
    long = fresh(0, 0, list(range(1000)))
    short = fresh(1, 1, list(range(20)))
    plan = plan_step([long, short], 256)
    assert dict((s.rid, n) for s, n in plan.advance) == {0: 236, 1: 20}
    assert [(s.rid, i) for s, i in plan.outputs] == [(1, 255)]  # short's first token this step
    # many short prompts: the oldest long one still gets a quarter of the budget
    shorts = [fresh(i, i, list(range(30))) for i in range(1, 20)]
    plan = plan_step([long, *shorts], 256)
    got = dict((s.rid, n) for s, n in plan.advance)
    assert got[0] == 64 and sum(got.values()) == 256
    assert [rid for rid, n in got.items() if n == 30] == list(range(1, 7))  # then shorts in admission order


def test_prefill_never_leaves_a_lone_last_token():
    s = fresh(0, 0, list(range(257)))
    plan = plan_step([s], 256)
    assert [(q.rid, n) for q, n in plan.advance] == [(0, 255)]  # not 256: two go in the next step
    apply(plan)
    plan = plan_step([s], 256)
    assert [(q.rid, n) for q, n in plan.advance] == [(0, 2)]
    assert [(q.rid, i) for q, i in plan.outputs] == [(0, 1)]


def test_a_lone_prefill_token_waits_for_room_for_two_but_the_oldest_always_progresses():
    decoders = [gen(i, i) for i in range(7)]
    old = fresh(7, 7, list(range(10)))
    new = fresh(8, 8, list(range(3)))
    plan = plan_step([*decoders, old, new], 9)  # two tokens left: the oldest prefill takes both
    assert dict((s.rid, n) for s, n in plan.advance) == {**{i: 1 for i in range(7)}, 7: 2}
    plan = plan_step([*decoders, old, new], 10)  # the oldest's share leaves one token for new: it waits
    assert dict((s.rid, n) for s, n in plan.advance) == {**{i: 1 for i in range(7)}, 7: 3}
    plan = plan_step([*decoders, gen(9, 9), old], 9)  # the oldest takes a lone token rather than none
    assert dict((s.rid, n) for s, n in plan.advance)[7] == 1
    plan = plan_step([*decoders[:3], old, fresh(10, 10, list(range(4)))], 8)  # a quarter of 5 is 1: two
    assert dict((s.rid, n) for s, n in plan.advance) == {0: 1, 1: 1, 2: 1, 7: 3, 10: 2}


def test_budget_spent_by_decoders_leaves_prefill_waiting():
    a, b = gen(0, 0), gen(1, 1)
    c = fresh(2, 2, [1, 2, 3])
    plan = plan_step([a, b, c], 2)
    assert len(plan.entries) == 2
    assert all(e.logits for e in plan.entries)
    assert all(s is not c for s, _ in plan.advance)
    assert c.n_past == 0


def test_mixed_step_outputs_pair_each_sequence_with_its_logits_index():
    a = gen(0, 4, pending=7)
    p1 = fresh(1, 0, [9, 9])
    b = gen(2, 5, pending=8)
    p2 = fresh(3, 1, [1, 2, 3, 4, 5, 6])
    plan = plan_step([a, p1, b, p2], 8)
    check_outputs(plan)
    by_rid = {s.rid: i for s, i in plan.outputs}
    assert set(by_rid) == {0, 1, 2}  # p2 gets 4 of 6 tokens: no output yet
    assert plan.entries[by_rid[0]] == BatchEntry(7, a.n_past, 4, True)
    assert plan.entries[by_rid[2]] == BatchEntry(8, b.n_past, 5, True)
    assert plan.entries[by_rid[1]] == BatchEntry(9, 1, 0, True)
    assert sum(n for _, n in plan.advance) == len(plan.entries) == 8


def test_plan_does_not_mutate_sequences():
    s = fresh(0, 0, [1, 2, 3])
    g = gen(1, 1)
    before = (s.n_past, g.n_past, g.pending)
    plan_step([s, g], 8)
    assert (s.n_past, g.n_past, g.pending) == before


def test_a_cached_prompt_tail_beside_a_decoding_neighbour_takes_one_token_per_step():
    """llama.cpp's micro-batch takes as many tokens from each sequence of a run: a 2-token tail beside
    sequences decoding one token would cost a second pass, so it advances one token per step instead."""
    a, b = gen(0, 0, pending=11), gen(1, 1, pending=12)
    tail = fresh(2, 2, list(range(40)), n_past=38)  # all but the last two tokens cached
    plan = plan_step([a, b, tail], 64)
    assert [(s.rid, n) for s, n in plan.advance] == [(0, 1), (1, 1), (2, 1)]
    assert [(s.rid, i) for s, i in plan.outputs] == [(0, 0), (1, 1)]  # no logits for the tail yet
    apply(plan)
    plan = plan_step([a, b, tail], 64)
    assert [(s.rid, n) for s, n in plan.advance] == [(0, 1), (1, 1), (2, 1)]
    assert [(s.rid, i) for s, i in plan.outputs] == [(0, 0), (1, 1), (2, 2)]  # its last token, with logits
    check_outputs(plan)


def test_a_tail_without_a_decoding_neighbour_is_prefilled_whole():
    """Alone, or with no generating sequence in the next slot, the tail goes in one chunk: a token decoded
    alone would be computed with other kernels than a prefill's."""
    alone = fresh(0, 0, list(range(40)), n_past=38)
    assert [(s.rid, n) for s, n in plan_step([alone], 64).advance] == [(0, 2)]
    far = gen(1, 5, pending=11)  # decoding, but not next to slot 0
    assert sorted((s.rid, n) for s, n in plan_step([alone, far], 64).advance) == [(0, 2), (1, 1)]
    longer = fresh(2, 1, list(range(40)), n_past=30)  # 10 tokens left: a chunk, not one token per step
    assert sorted((s.rid, n) for s, n in plan_step([far, longer, gen(3, 2)], 64).advance) == \
        [(1, 1), (2, 10), (3, 1)]


# -- images (issue 38): a span of placeholder ids is decoded whole, alone in its sequence's chunk --------------

def _image(start, n, key="a" * 64):
    from skippy.engine.runtime.media import MediaChunk, MediaSpan, placeholder_ids

    return MediaSpan(start, n, key, MediaChunk(0, n, n)), placeholder_ids(key, n)


def test_a_chunk_stops_at_an_image_and_the_image_goes_whole_then_the_rest():
    span, ids = _image(5, 40)
    s = SeqState(rid=0, slot=0, prompt=[1] * 5 + ids + [2] * 7, max_tokens=16, media=(span,))
    plan = plan_step([s], 16)
    assert [e.token for e in plan.entries] == [1] * 5 and plan.media == () and plan.outputs == ()
    apply(plan)
    plan = plan_step([s], 16)  # 40 placeholder positions over a 16-token budget: the image goes whole
    assert plan.entries == () and plan.media == ((span, 0),) and plan.advance == ((s, 40),)
    apply(plan)
    plan = plan_step([s], 16)
    assert [e.token for e in plan.entries] == [2] * 7 and [e.pos for e in plan.entries] == list(range(45, 52))
    assert plan.outputs == ((s, 6),)
    assert all(t >= 0 for e in plan.entries for t in [e.token])


def test_an_image_waits_for_room_beside_others_but_the_oldest_always_progresses():
    span, ids = _image(0, 30)
    old = fresh(0, 0, [3] * 20)
    img = SeqState(rid=1, slot=1, prompt=ids + [2, 2], max_tokens=16, media=(span,))
    plan = plan_step([old, img], 24)
    assert plan.media == () and {s.rid for s, _ in plan.advance} == {0}  # 30 > what is left: it waits
    plan = plan_step([img, old], 24)  # the oldest: taken whole even past the budget
    assert plan.media == ((span, 1),) and dict((s.rid, n) for s, n in plan.advance)[1] == 30


def test_placeholder_ids_are_negative_distinct_and_the_same_for_the_same_image():
    from skippy.engine.runtime.media import MediaChunk, MediaSpan, image_key, placeholder_ids, span_start

    a, b = image_key(b"one"), image_key(b"two")
    ids = placeholder_ids(a, 64)
    assert all(t < 0 for t in ids) and len(set(ids)) == 64 and ids == placeholder_ids(a, 64)
    assert ids != placeholder_ids(b, 64)
    spans = (MediaSpan(4, 10, a, MediaChunk(0, 10, 10)),)
    assert [span_start(spans, n) for n in (0, 4, 5, 13, 14, 20)] == [0, 4, 4, 4, 14, 20]


def _mrope_image(start, n, n_pos, pos=None, key="b" * 64):
    """An M-RoPE image (Qwen2-VL): ``n`` cells all at its first position ``pos``, ``n_pos`` positions taken."""
    from skippy.engine.runtime.media import MediaChunk, MediaSpan, placeholder_ids

    chunk = MediaChunk(0, n, n_pos, shared=True)
    return MediaSpan(start, n, key, chunk, start if pos is None else pos), placeholder_ids(key, n)


def test_positions_after_an_m_rope_image_are_fewer_than_its_cells():
    from skippy.engine.runtime.media import MediaChunk, MediaSpan, position

    a, _ = _mrope_image(3, 12, 4)  # cells 3..14 at position 3; the next token at 7
    b, _ = _mrope_image(20, 6, 3, pos=12, key="c" * 64)  # 5 text tokens later: cells 20..25 at 12, next 15
    spans = (a, b)
    assert [position(spans, n) for n in (0, 3, 4, 14, 15, 16, 20, 21, 25, 26, 30)] == \
        [0, 3, 3, 3, 7, 8, 12, 12, 12, 15, 19]
    flat = (MediaSpan(3, 12, "d" * 64, MediaChunk(0, 12, 12)),)  # one position per cell: the identity
    assert [position(flat, n) for n in range(20)] == list(range(20))
    assert position((), 17) == 17


def test_an_m_rope_image_is_decoded_whole_and_the_text_after_it_takes_the_positions_it_left():
    span, ids = _mrope_image(5, 40, 8)
    s = SeqState(rid=0, slot=0, prompt=[1] * 5 + ids + [2] * 7, max_tokens=16, media=(span,))
    apply(plan_step([s], 16))
    plan = plan_step([s], 16)
    assert plan.media == ((span, 0),) and plan.advance == ((s, 40),)
    apply(plan)
    plan = plan_step([s], 16)  # cells 45..51 at positions 13..19
    assert [e.pos for e in plan.entries] == list(range(13, 20)) and plan.outputs == ((s, 6),)
    apply(plan)
    s.pending = 9
    plan = plan_step([s], 16)  # a generated token: cell 52, position 20
    assert [(e.token, e.pos) for e in plan.entries] == [(9, 20)]
