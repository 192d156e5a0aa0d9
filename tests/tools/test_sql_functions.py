"""The function allow-list for what runs before approval (gateway/tools/sql_functions.py)."""

from __future__ import annotations

import pytest

from gateway.tools.sql_analysis import analyze_sql
from gateway.tools.sql_functions import FunctionAllowList


def disallowed(sql: str, dialect: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    analysis = analyze_sql(sql, dialect)
    assert analysis.error is None, analysis.error
    return FunctionAllowList(dialect, extra).disallowed(
        (s.expression for s in analysis.statements), analysis.source
    )


WITH_EFFECTS = {
    "postgres": [
        "pg_terminate_backend(1)",
        "pg_cancel_backend(1)",
        "pg_advisory_lock(42)",
        "pg_advisory_xact_lock(42)",
        "pg_try_advisory_lock(42)",
        "set_config('work_mem', '1GB', false)",
        "lo_import('/etc/passwd')",
        "lo_export(1, '/tmp/x')",
        "pg_read_file('/etc/passwd')",
        "pg_ls_dir('.')",
        "nextval('s')",
        "setval('s', 1)",
        "pg_sleep(10)",
        "pg_notify('c', 'x')",
        "dblink_exec('host=x', 'DROP TABLE t')",
        "pg_reload_conf()",
        "wipe_orders()",  # user-defined: unknown means not allowed
    ],
    "mysql": [
        "SLEEP(10)",
        "GET_LOCK('a', 0)",
        "RELEASE_LOCK('a')",
        "BENCHMARK(1000000, MD5('a'))",
        "LOAD_FILE('/etc/passwd')",
        "NEXTVAL(s)",
        "MASTER_POS_WAIT('f', 4)",
        "wipe_orders()",
    ],
    "sqlite": [
        "load_extension('/tmp/evil.so')",
        "readfile('/etc/passwd')",
        "writefile('/tmp/x', 'y')",
        "fts3_tokenizer('x')",
        "wipe_orders()",
    ],
}


@pytest.mark.parametrize(
    ("dialect", "call"), [(d, c) for d, calls in WITH_EFFECTS.items() for c in calls]
)
def test_functions_with_effects_and_unknown_ones_are_not_allowed(dialect: str, call: str) -> None:
    name = call.split("(")[0].lower()
    assert disallowed(f"SELECT {call}", dialect) == (name,)
    # Anywhere in the statement: FROM, WHERE, a subquery, a CTE.
    assert disallowed(f"SELECT 1 FROM t WHERE id IN (SELECT {call})", dialect) == (name,)
    assert disallowed(f"WITH x AS (SELECT {call} AS v) SELECT v FROM x", dialect) == (name,)


ORDINARY = {
    "postgres": (
        "SELECT count(*), sum(amount), avg(amount), lower(customer), upper(customer),"
        " substr(customer, 1, 2), coalesce(status, 0), round(amount, 1), now(), random(),"
        " to_char(now(), 'YYYY-MM'), date_trunc('day', now()), extract(year FROM now()),"
        " amount::text, CAST(amount AS INTEGER), string_agg(customer, ',' ORDER BY id),"
        " row_number() OVER (ORDER BY id), json_build_object('a', 1), length(customer),"
        " CASE WHEN status = 1 THEN 'a' ELSE 'b' END, current_date"
        " FROM orders WHERE customer LIKE 'A%' AND EXISTS (SELECT 1)"
        " GROUP BY customer, status, amount, id"
    ),
    "mysql": (
        "SELECT COUNT(*), IFNULL(status, 0), IF(status = 1, 'a', 'b'), DATE_FORMAT(NOW(), '%Y'),"
        " GROUP_CONCAT(customer), DATE_ADD(NOW(), INTERVAL 1 DAY), CONCAT_WS(',', id, status),"
        " CHAR_LENGTH(customer), UNIX_TIMESTAMP() FROM orders GROUP BY status"
    ),
    "sqlite": (
        "SELECT count(*), ifnull(status, 0), iif(status = 1, 'a', 'b'), strftime('%Y', 'now'),"
        " datetime('now'), unixepoch(), group_concat(customer), total(amount), printf('%d', id),"
        " instr(customer, 'a'), typeof(amount) FROM orders GROUP BY status"
    ),
}


# What an agent asks to learn about a database: sizes, definitions, the version.
ORDINARY["postgres catalog"] = (
    "SELECT version(), current_database(), pg_size_pretty(pg_total_relation_size('orders')),"
    " pg_get_viewdef('v'::regclass), has_table_privilege('orders', 'SELECT')"
)
ORDINARY["mysql catalog"] = "SELECT DATABASE(), VERSION(), CURRENT_USER(), LAST_INSERT_ID()"
ORDINARY["sqlite catalog"] = (
    "SELECT sqlite_version(), name FROM pragma_table_info('orders')"
    " UNION ALL SELECT changes(), key FROM json_each('[1]')"
)


@pytest.mark.parametrize("dialect", sorted(ORDINARY))
def test_ordinary_reads_call_only_allowed_functions(dialect: str) -> None:
    assert disallowed(ORDINARY[dialect], dialect.split()[0]) == ()


def test_a_name_is_checked_as_the_database_resolves_it() -> None:
    # Quoted keeps its case; a schema makes it another function than the built-in.
    assert disallowed('SELECT "Lower"(customer) FROM orders', "postgres") == ("Lower",)
    assert disallowed('SELECT "lower"(customer) FROM orders', "postgres") == ()
    assert disallowed("SELECT public.lower(customer) FROM orders", "postgres") == ("public.lower",)
    assert disallowed("SELECT pg_catalog.pg_sleep(1)", "postgres") == ("pg_catalog.pg_sleep",)
    # A name sqlglot knows from another dialect is not a built-in here.
    assert disallowed("SELECT read_csv('x')", "postgres") == ("read_csv",)


def test_the_operator_extends_the_list() -> None:
    sql = "SELECT report_total(id), pg_advisory_lock(1) FROM orders"
    assert disallowed(sql, "postgres") == ("report_total", "pg_advisory_lock")
    assert disallowed(sql, "postgres", ("Report_Total",)) == ("pg_advisory_lock",)
