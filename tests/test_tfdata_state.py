"""InputState: a worker's position, saved as JSON or taken from a position tensor."""

import pytest

from transforms.tfdata.core.state import InputState, fingerprint


def test_state_round_trips_through_json_and_the_position_tensor():
    state = InputState(epoch=2, shard=5, row=11, fingerprint=fingerprint("files", [1, 2]))
    assert InputState.from_json(state.to_json()) == state
    assert InputState.from_tensor([2, 5, 11, state.fingerprint]) == state


def test_fingerprint_is_stable_and_tells_plans_apart():
    assert fingerprint(["a"], [[3]], 2, 0) == fingerprint(["a"], [[3]], 2, 0)
    assert fingerprint(["a"], [[3]], 2, 0) != fingerprint(["a"], [[3]], 2, 1)
    # A fixed value: the digest must not depend on the process (no Python hash()).
    assert fingerprint("x") == 1485863702244255181


def test_bad_states_are_refused():
    with pytest.raises(ValueError, match="row must be a non-negative integer"):
        InputState(0, 0, -1, 0)
    with pytest.raises(ValueError, match="keys epoch, shard, row, fingerprint"):
        InputState.from_json('{"epoch": 1}')
    with pytest.raises(ValueError, match="4 values"):
        InputState.from_tensor([1, 2, 3])
