"""Hypothesis strategies for JSON values as ``json.loads`` gives them."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

# Any code point but lone surrogates, which json.loads never produces from a valid body.
text = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(text, inner, max_size=5),
    max_leaves=30,
)
