"""A statement run through libpq itself: the single enqueue's fast path.

A single ``rivet.enqueue`` outside a transaction is one INSERT that commits by itself. Sent
through libpq's own ``PQexecPrepared``, it costs the producer less CPU than through a psycopg
cursor, whose Python (the cursor's state, adapting each parameter, the wait loop) is around
every call; web processes enqueuing at once are bound by the CPU of the producers and of their
server backends together. The measurement: docs/decisions/0007-single-enqueue-path.md.

``DirectStatement`` prepares its statement once per connection under rivet's own name (never
one of psycopg's ``_pg3_*``; the name ends in the text's hash), sends the parameters as text
and reads the rows back as bytes. It runs only where psycopg would send the same thing: the
connection idle in autocommit, not in a pipeline, its client encoding UTF-8, and every
parameter a str without NUL, an int, a finite float, an aware datetime or None; otherwise
``run`` returns None and the caller goes through psycopg as before. libpq's call is blocking,
as psycopg 2's were: it releases the GIL while it waits, and Ctrl-C waits for the statement's
end.

Errors are psycopg's own exceptions, built from the server's result (``error_from_result``),
so Django's error wrapper and rivet's translation see what they would have seen. A statement the
session no longer has (a ``DISCARD ALL`` the connection's pool ran) is prepared again once, and
a session that has it already (42P05) is taken as it is: the name is the text's. A second loss
is raised as it came: a transaction pooler sits between (the store then stops preparing).
"""

from __future__ import annotations

import hashlib
import math
import re
import weakref
from datetime import datetime
from itertools import repeat
from typing import Any, cast

import psycopg
from psycopg.pq import ExecStatus, PipelineStatus, TransactionStatus

#: The states ``run`` asks about on every call, as plain ints (an enum's member is looked up
#: through its class each time).
_IDLE = int(TransactionStatus.IDLE)
_PIPELINE_OFF = int(PipelineStatus.OFF)
_TUPLES_OK = int(ExecStatus.TUPLES_OK)
_FATAL_ERROR = int(ExecStatus.FATAL_ERROR)

#: A named parameter of rivet's queries: ``%(name)s``.
NAMED_PARAM = re.compile(r"%\((\w+)\)s")


class DirectStatement:
    """One of rivet's queries, run through libpq under ``name`` (see the module's text)."""

    def __init__(self, name: str, sql: str) -> None:
        order: list[str] = []

        def positional(match: re.Match[str]) -> str:
            param = match.group(1)
            if param not in order:
                order.append(param)
            return f"${order.index(param) + 1}"

        self.text = NAMED_PARAM.sub(positional, sql).encode()
        #: ``name`` and the text's hash: a session holding a statement of this name holds
        #: this text, whichever client prepared it.
        self.name = f"{name}_{hashlib.sha1(self.text).hexdigest()[:12]}".encode()
        #: The parameters' names in the order of $1, $2, ...
        self.params = tuple(order)
        #: The connections the statement is prepared on, and whether each may take it (its
        #: client encoding is UTF-8).
        self._prepared: weakref.WeakKeyDictionary[psycopg.Connection, bool] = (
            weakref.WeakKeyDictionary()
        )

    def encode(self, values: dict[str, Any]) -> list[bytes | None] | None:
        """The parameters as libpq's text values, or None when one is not of a kind sent here
        (psycopg adapts it, or refuses it with its own error)."""
        encoded: list[bytes | None] = []
        append = encoded.append
        for param in self.params:
            value = values[param]
            kind = type(value)
            if kind is str:  # the usual kinds first: an enqueue sends 13 values each call
                if "\x00" in value:  # libpq would cut the text there; psycopg refuses it
                    return None
                append(value.encode())
            elif value is None:
                append(None)
            elif kind is int:
                append(str(value).encode())
            elif kind is float and math.isfinite(value):
                append(repr(value).encode())
            elif isinstance(value, datetime) and value.utcoffset() is not None:
                append(value.isoformat().encode())
            else:
                return None
        return encoded

    def run(self, pg: psycopg.Connection, values: dict[str, Any]) -> list[tuple[Any, ...]] | None:
        """The statement's rows (each column as bytes, or None for NULL), or None when it cannot
        run here and the caller should send it through psycopg. Raises psycopg's error."""
        params = self.encode(values)
        if params is None or not pg.autocommit:
            return None
        pgconn = pg.pgconn
        with pg.lock:
            if pgconn.transaction_status != _IDLE or pgconn.pipeline_status != _PIPELINE_OFF:
                return None
            usable = self._prepared.get(pg)
            if usable is None:
                usable = self._prepare(pg)
            if not usable:
                return None
            # None is SQL NULL to libpq; psycopg's type hints leave it out.
            result = pgconn.exec_prepared(self.name, params)  # type: ignore[arg-type]
            if (
                result.status == _FATAL_ERROR
                and _sqlstate(result) == b"26000"
                and pgconn.transaction_status == _IDLE
            ):
                # The server lost the statement (a session reset): it did not run. Prepare it
                # again and send it once more; a second loss is raised (a pooler sits between).
                del self._prepared[pg]
                self._prepare(pg)
                result = pgconn.exec_prepared(self.name, cast("list[bytes]", params))
            return self._rows(pg, result)

    def forget(self, pg: psycopg.Connection) -> None:
        """Prepare again on ``pg`` next time (after an error that may have lost it)."""
        self._prepared.pop(pg, None)

    def _prepare(self, pg: psycopg.Connection) -> bool:
        usable = pg.info.encoding == "utf-8"
        if usable:
            result = pg.pgconn.prepare(self.name, self.text)
            if _sqlstate(result) != b"42P05":
                self._rows(pg, result)
            # 42P05: the session has it already (a pool handed the session on without a
            # reset). The name holds the text's hash, so it is this very statement.
        self._prepared[pg] = usable
        return usable

    def _rows(self, pg: psycopg.Connection, result: psycopg.pq.abc.PGresult) -> list[tuple]:
        status = result.status
        if status == _TUPLES_OK:
            value, columns = result.get_value, range(result.nfields)
            width = len(columns)  # each row read by map, not a comprehension of its own
            return [tuple(map(value, repeat(row, width), columns)) for row in range(result.ntuples)]
        if status == ExecStatus.COMMAND_OK:
            return []
        if pg.pgconn.status != psycopg.pq.ConnStatus.OK:
            self.forget(pg)
            message = result.error_message.decode(errors="replace").strip()
            raise psycopg.OperationalError(message or "the connection to the server was lost")
        if status == ExecStatus.FATAL_ERROR:
            raise psycopg.errors.error_from_result(result, encoding="utf-8")
        raise psycopg.InterfaceError(
            f"unexpected result from the server: {ExecStatus(status).name}"
        )


def _sqlstate(result: psycopg.pq.abc.PGresult) -> bytes | None:
    """The SQLSTATE of a failed result (None when it did not fail)."""
    if result.status != ExecStatus.FATAL_ERROR:
        return None
    return result.error_field(psycopg.pq.DiagnosticField.SQLSTATE)
