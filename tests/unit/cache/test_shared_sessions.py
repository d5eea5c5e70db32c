"""Two relays' caches on one PostgreSQL store, driven as the chat handler drives them
(tests/support/replay_driver.py): what one records, marks or leaves in flight, the other
plans with — the replay rules hold across instances, not just within one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.clock import ManualClock
from relay.core.receipts import Reason
from relay.storage.postgres.store import PostgresStore
from tests.support.pg_cluster import PgDatabase
from tests.support.pg_store import lapse
from tests.support.replay_driver import Relay, answer, replayed, said, user


@pytest.fixture
def pair(tmp_path: Path, pg_database: PgDatabase) -> Iterator[tuple[Relay, Relay]]:
    clock = ManualClock()
    a = Relay(tmp_path / "a", clock, database_url=pg_database.url)
    b = Relay(tmp_path / "b", clock, database_url=pg_database.url, first_id=1_000_000)
    yield a, b
    a.close()
    b.close()


def test_one_relays_record_replays_through_the_other(pair: tuple[Relay, Relay]) -> None:
    a, b = pair
    assert a.scope.digest == b.scope.digest  # one secret: one conversation identity
    u0 = user("hi")
    answer(a, (u0,), "one", 1)
    follow = (u0, said("one"), user("more"))
    assert replayed(b, follow) == (["rs_1"], [])
    answer(b, follow, "two", 2)
    assert replayed(a, (*follow, said("two"), user("next"))) == (["rs_1", "rs_2"], [])


def test_a_generation_in_flight_on_one_relay_competes_on_the_other(
    pair: tuple[Relay, Relay],
) -> None:
    """Both relays dispatch at one position: while the other relay's generation is in
    flight, an answer there is refused as a competing intent; once both are delivered,
    each answer replays in its own history (siblings, as on one relay)."""
    a, b = pair
    u0 = user("hi")
    first, second = a.session((u0,)), b.session((u0,))
    first.dispatch()
    second.dispatch()
    answer(a, (u0,), "one", 1, session=first)
    one = (u0, said("one"), user("next"))
    assert replayed(b, one) == ([], [Reason.COMPETING_INTENT])
    answer(b, (u0,), "two", 2, session=second)
    two = (u0, said("two"), user("next"))
    assert replayed(a, one) == (["rs_1"], [])
    assert replayed(a, two) == (["rs_2"], [])


def test_a_relay_that_died_leaves_a_position_its_survivor_poisons(
    pair: tuple[Relay, Relay], pg_database: PgDatabase
) -> None:
    a, b = pair
    u0 = user("hi")
    answer(a, (u0,), "one", 1)
    follow = (u0, said("one"), user("more"))
    b.session(follow).dispatch()  # b dies with this generation in flight (no abort)
    dead, survivor = b.cache.store, a.cache.store
    assert isinstance(dead, PostgresStore) and isinstance(survivor, PostgresStore)
    lapse(pg_database, dead.instance_id)
    assert survivor.recover_lapsed(a.clock.wall()) == 1
    scope_id, start = a.scope_id(), a.digests(follow).boundaries[-1]
    assert scope_id is not None and survivor.poisoned_starts(scope_id, [start]) == {start}
    answer(a, follow, "two", 2)  # whatever is answered there later never replays
    assert replayed(a, (*follow, said("two"), user("next"))) == (
        ["rs_1"],
        [Reason.START_POISONED],
    )


def test_a_relay_serving_with_caching_off_retires_every_record_before_each_forward(
    pair: tuple[Relay, Relay],
) -> None:
    """The other relays serve on: a relay with caching off on the shared store advances
    every generation before each reasoning request it forwards unobserved, not once."""
    a, b = pair
    u0 = user("hi")
    answer(a, (u0,), "one", 1)
    follow = (u0, said("one"), user("more"))
    b.cache.close()
    b.cache = b._open(enabled=False)  # b restarts with caching off
    for expected in (2, 3):
        assert b.begin(follow) is None  # forwarded unobserved
        assert a.generation() == expected
        assert replayed(a, follow)[0] == []
    answer(a, follow, "two", 2)  # recorded in the newest generation: replays again
    assert replayed(a, (*follow, said("two"), user("next"))) == (["rs_2"], [])
