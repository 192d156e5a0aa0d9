"""Which SQL functions may run before a person has approved anything.

``auto`` queries (``sql_query``) and the preview of ``sql_modify`` (the COUNT of the rows a
WHERE selects) run with nobody asked. A read-only transaction stops writes, but not
functions whose effect is elsewhere: ``pg_terminate_backend`` kills a session,
``pg_advisory_lock`` / ``GET_LOCK`` hold a lock, ``set_config`` changes the session,
``pg_read_file`` / ``LOAD_FILE`` read the server's files, ``dblink`` reaches another
server, ``pg_sleep`` / ``SLEEP`` hold a connection (issue 22). So those statements may call
only the functions listed here for their database, plus what the operator adds with
``[tools.sql] allowed_functions``; any other function (a user-defined one included) means
the query is held for a person and the preview is not run (docs/sql-safety.md).

The check is by the name as written in the statement, the name the database resolves: a
function sqlglot knows (``COUNT``, ``TO_CHAR``) counts no more than one it does not, so a
user-defined function that shares a name with something in sqlglot's catalogue is not let
through. Only SQL's own syntax that names no function call (``CAST(x AS t)``, ``x::t``,
``EXTRACT(y FROM d)``, ``CURRENT_TIMESTAMP``, ``TRIM(... FROM ...)``, ``AND``/``OR``) is
not a name to check.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlglot import exp


def _names(words: str) -> frozenset[str]:
    return frozenset(words.split())


# Aggregates, window functions, and pure string / number / date / JSON functions: they
# compute a value from their arguments (or read the clock) and change nothing. Volatile
# ones (now(), random()) are here too: they have no effect, and whether a *write* that
# depends on them is risky is for the risk rules, not for this list. Last in each list:
# functions that read the catalog (sizes, definitions, the server version), which an
# agent asks about a database with. SQLite's pragma_* table functions exist only for
# pragmas without side effects; the ones listed read the schema.
_COMMON = _names(
    """
    abs avg ceil ceiling coalesce concat count cume_dist dense_rank exp first_value floor
    greatest lag last_value lead least left length ln log lower ltrim max min mod
    nth_value ntile nullif percent_rank power rank replace reverse right round row_number
    rtrim sign sqrt substr substring sum trim upper exists
    """
)

_POSTGRES = _COMMON | _names(
    """
    acos age array_agg array_length array_lower array_position array_positions
    array_remove array_replace array_to_string array_upper ascii asin atan atan2 bit_length
    bool_and bool_or btrim cardinality cbrt char_length character_length chr clock_timestamp
    concat_ws corr cos cot covar_pop covar_samp current_date current_time
    current_timestamp date_bin date_part date_trunc degrees div encode every extract
    format gen_random_uuid generate_series initcap isfinite
    json_agg json_array_elements json_array_elements_text json_array_length json_build_array
    json_build_object json_each json_each_text json_extract_path json_extract_path_text
    json_object_agg json_object_keys json_typeof jsonb_agg jsonb_array_elements
    jsonb_array_elements_text jsonb_array_length jsonb_build_array jsonb_build_object
    jsonb_each jsonb_each_text jsonb_extract_path jsonb_extract_path_text
    jsonb_object_agg jsonb_object_keys jsonb_pretty jsonb_typeof justify_days
    justify_hours justify_interval localtime localtimestamp lpad make_date make_interval
    make_time make_timestamp make_timestamptz md5 mode now octet_length overlay pi
    percentile_cont percentile_disc position quote_ident quote_literal quote_nullable
    radians random regexp_match regexp_matches regexp_replace regexp_split_to_array
    regexp_split_to_table repeat rpad sin split_part starts_with statement_timestamp
    stddev stddev_pop stddev_samp string_agg string_to_array strpos tan timeofday
    to_char to_date to_hex to_json to_jsonb to_number to_timestamp transaction_timestamp
    translate trunc unnest var_pop var_samp variance width_bucket
    col_description current_database current_schema current_user format_type
    has_column_privilege has_schema_privilege has_table_privilege obj_description
    pg_backend_pid pg_database_size pg_get_constraintdef pg_get_expr pg_get_indexdef
    pg_get_viewdef pg_indexes_size pg_relation_size pg_size_pretty pg_table_size
    pg_total_relation_size pg_typeof session_user to_regclass version
    """
)

_MYSQL = _COMMON | _names(
    """
    acos adddate addtime any_value ascii asin atan atan2 bin bit_and bit_length bit_or
    bit_xor char_length character_length concat_ws conv convert_tz cos cot crc32 curdate
    current_date current_time current_timestamp curtime date date_add date_format
    date_sub datediff day dayname dayofmonth dayofweek dayofyear degrees elt extract
    field find_in_set format from_days from_unixtime group_concat hex hour if ifnull
    insert instr isnull json_array json_arrayagg json_contains json_extract json_keys
    json_length json_object json_objectagg json_quote json_type json_unquote
    json_valid last_day lcase localtime localtimestamp locate log10 log2 lpad makedate
    maketime md5 microsecond minute month monthname now oct pi position pow quarter
    radians rand regexp_instr regexp_like regexp_replace regexp_substr repeat rpad
    sec_to_time second sha1 sha2 sin space std stddev stddev_pop stddev_samp
    str_to_date strcmp subdate substring_index subtime sysdate tan time time_format
    time_to_sec timediff timestamp timestampadd timestampdiff to_days truncate ucase
    unhex unix_timestamp utc_date utc_time utc_timestamp uuid var_pop var_samp
    variance week weekday weekofyear year yearweek
    charset coercibility collation connection_id current_user database found_rows
    last_insert_id row_count schema session_user system_user user version
    """
)

_SQLITE = _COMMON | _names(
    """
    acos asin atan atan2 char cos date datetime degrees format glob group_concat hex
    ifnull iif instr json json_array json_array_length json_extract json_group_array
    json_group_object json_object json_type json_valid julianday like likelihood
    likely log10 log2 lpad ltrim pi pow printf quote radians random randomblob rpad
    sin strftime tan time timediff total trunc typeof unhex unicode unixepoch unlikely
    zeroblob
    changes last_insert_rowid sqlite_version total_changes json_each json_tree
    pragma_foreign_key_list pragma_index_info pragma_index_list pragma_table_info
    pragma_table_xinfo
    """
)

BUILT_IN: dict[str, frozenset[str]] = {
    "postgres": _POSTGRES,
    "mysql": _MYSQL,
    "sqlite": _SQLITE,
}


class FunctionAllowList:
    """The functions a statement may call before approval, on one database.

    ``extra`` is the operator's ``[tools.sql] allowed_functions``, added to the built-in
    list of the dialect (sqlglot's name: ``postgres``, ``mysql``, ``sqlite``).
    """

    def __init__(self, dialect: str, extra: Iterable[str] = ()) -> None:
        self.dialect = dialect
        self.names = BUILT_IN.get(dialect, frozenset()) | {n.strip().lower() for n in extra}

    def disallowed(self, nodes: Iterable[exp.Expression], source: str) -> tuple[str, ...]:
        """Names of the functions called in ``nodes`` that are not on the list, in order.

        ``source`` is the text the nodes were parsed from: their positions index into it,
        which gives the name as written.
        """
        found: dict[str, None] = {}
        for node in nodes:
            for n in node.walk():
                if isinstance(n, exp.Func):
                    name = _written_name(n, source)
                    if name is not None and name not in self.names:
                        found[name] = None
        return tuple(found)


def _written_name(node: exp.Func, source: str) -> str | None:
    """The function name as the database will resolve it; None for syntax without a name.

    Unquoted names fold to lower case, as all three databases fold function names; a
    quoted one keeps its case (``"Lower"(x)`` is not ``lower``). A schema-qualified call
    keeps its schema, so ``pg_catalog.pg_sleep`` or ``public.lower`` is not ``lower``.
    """
    start, end = node.meta.get("start"), node.meta.get("end")
    if isinstance(start, int) and isinstance(end, int) and 0 <= start <= end < len(source):
        written = source[start : end + 1]
    elif isinstance(node, exp.Anonymous | exp.AnonymousAggFunc):
        written = str(node.name)
    else:
        # No position: the parser built it from SQL syntax (CAST, EXTRACT, ::, AND,
        # CURRENT_DATE, STRING_AGG(... ORDER BY ...)) or as an implicit conversion; no
        # name was written that the database could resolve to another function.
        return None
    if written[:1] in ('"', "`") and written[-1:] == written[:1] and len(written) > 1:
        name = written[1:-1]
    else:
        name = written.lower()
    parent = node.parent
    if isinstance(parent, exp.Dot) and parent.expression is node:
        name = f"{parent.this.sql().lower()}.{name}"
    return name
