"""The hold under faults, a short seeded chaos run (issue 23): about a minute.

Two real ``gateway serve`` replicas on a private ``redis-server`` and a PostgreSQL table of
the run's own; four chats ask for calls and decide them at random through every entrance
while a nemesis kill -9s and SIGTERMs replicas, pauses Redis and kills its connections
(tests/process/chaos.py). The run happens once for this module; each property is a test of
its own, so a failure names the property, the seed and the confirmation ids that break it.
The long form is ``bench/chaos.py`` (docs/performance.md, "Chaos (issue 23)").
"""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import create_async_engine

from tests.process.chaos import KNOWN_BUGS, PROPERTIES, ChaosConfig, ChaosResult, run_chaos
from tests.services import POSTGRES_URL, mask_url, require_service

pytestmark = [pytest.mark.services, pytest.mark.timeout(300)]

SHORT = ChaosConfig(seed=23, duration=45.0, replicas=2, chats=4, timeout_seconds=10.0)


async def _postgres_answers() -> None:
    engine = create_async_engine(POSTGRES_URL)
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql("SELECT 1")
    finally:
        await engine.dispose()


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory) -> ChaosResult:
    try:
        asyncio.run(_postgres_answers())
    except (OSError, SQLAlchemyError) as exc:
        require_service(f"PostgreSQL at {mask_url(POSTGRES_URL)}", exc)
    result = run_chaos(SHORT, root=tmp_path_factory.mktemp("chaos"), postgres_url=POSTGRES_URL)
    print(result.report())
    return result


@pytest.mark.parametrize(
    "prop",
    [
        pytest.param(
            p,
            marks=pytest.mark.xfail(strict=False, reason=f"product bug: {KNOWN_BUGS[p]}"),
        )
        if p in KNOWN_BUGS
        else p
        for p in PROPERTIES
    ],
)
def test_the_hold_under_faults(chaos: ChaosResult, prop: str) -> None:
    failure = chaos.violated(prop)
    assert failure is None, f"{failure}\n{chaos.report()}"
