"""The whole-request screen of ack ids answers as the per-id one does."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eoclient.server_stub.services.request_checks import (
    MAX_ACK_ID_LENGTH,
    all_plausible_ack_ids,
    plausible_ack_id,
)

# Mostly ids the service could have issued, with the ways one can fail: empty, too long,
# a control character, a character beyond ASCII.
_ids = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=30
) | st.sampled_from(
    ["", "x" * MAX_ACK_ID_LENGTH, "x" * (MAX_ACK_ID_LENGTH + 1), "a\nb", "\x00", "é", " "]
)


@given(st.lists(_ids, max_size=6))
def test_screen_of_a_request_is_the_screen_of_each_id(ack_ids: list[str]) -> None:
    assert all_plausible_ack_ids(ack_ids) == all(plausible_ack_id(a) for a in ack_ids)
