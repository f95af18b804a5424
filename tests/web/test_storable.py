"""registry.core.storable (pure): what PostgreSQL cannot store is found wherever it is, and escaping
always yields storable text that still says what was sent."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from db.audit_events import AuditEvent
from db.unstorable import escaped, unstorable
from registry.core.storable import unstorable_pointer

texts = st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0xFFFF), max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=20,
)


@given(texts)
def test_escaped_text_is_storable_and_unchanged_when_it_already_was(text):
    out = escaped(text)
    assert not unstorable(out)
    out.encode("utf-8")  # PostgreSQL's encoding: no lone surrogates left
    if not unstorable(text):
        assert out == text
    else:
        assert "\\u" in out


@given(json_values)
def test_the_pointer_names_an_unstorable_string_exactly_when_there_is_one(value):
    def has(v) -> bool:
        if isinstance(v, str):
            return unstorable(v)
        if isinstance(v, dict):
            return any(unstorable(k) or has(c) for k, c in v.items())
        if isinstance(v, list):
            return any(has(c) for c in v)
        return False

    pointer = unstorable_pointer(value)
    assert (pointer is not None) == has(value)
    if pointer is not None and pointer.count("/") == 1 and isinstance(value, list):
        assert unstorable(value[int(pointer[1:])])


def test_a_very_deep_document_is_walked_without_recursion():
    deep: object = "x\x00"
    for _ in range(100_000):
        deep = [deep]
    assert unstorable_pointer(deep) == "/0" * 100_000


@given(texts, texts)
def test_audit_events_never_carry_unstorable_text(ref, scope):
    event = AuditEvent(type="request.refused", outcome="denied", ref=ref, scopes=[scope], reason=ref)
    assert not unstorable(event.ref) and not unstorable(event.reason) and not any(unstorable(s) for s in event.scopes)
