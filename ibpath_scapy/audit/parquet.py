"""Write the audit's tables (audit/tables.py) as Parquet files with pyarrow: `ibpath audit
--format parquet -o FINDINGS.parquet` and `--resolutions-out RESOLUTIONS.parquet`.

pyarrow is imported here only, from the `fleet` extra (ibpath_scapy.audit.extras). Each file
carries the tables' version and which table it is in its key-value metadata
("ibpath.schema_version", "ibpath.table"), which DuckDB's parquet_kv_metadata() reads.
"""

from __future__ import annotations

import os
from typing import Iterable

from .extras import need
from .engine import FileAudit
from .tables import (FINDING_COLUMNS, RESOLUTION_COLUMNS, SCHEMA_VERSION, Column, finding_rows,
                     resolution_rows)

# rows written at a time: a row group of this many keeps memory flat for millions of findings
ROW_GROUP = 65536


def _type(pa, name: str):
    return {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32(),
            "list<int64>": pa.list_(pa.int64()),
            "timestamp[us, UTC]": pa.timestamp("us", tz="UTC")}[name]


def schema(columns: tuple[Column, ...], table: str, what: str = "--format parquet"):
    """The pyarrow schema of a table, with its metadata."""
    pa = need("pyarrow", what)
    return pa.schema([pa.field(c.name, _type(pa, c.type), nullable=c.nullable) for c in columns],
                     metadata={"ibpath.schema_version": str(SCHEMA_VERSION),
                               "ibpath.table": table})


def _micros(t: float | None) -> int | None:
    # a capture's float seconds as whole microseconds (the column's unit)
    return None if t is None else int(round(t * 1_000_000))


def _write(path: str, columns: tuple[Column, ...], table: str, rows: Iterable[dict],
           what: str) -> int:
    """Write rows to path (whole or not at all: a temporary file renamed); the row count."""
    pa = need("pyarrow", what)
    pq = need("pyarrow.parquet", what)
    sch = schema(columns, table, what)
    tmp = f"{path}.part{os.getpid()}"
    n = 0
    try:
        with pq.ParquetWriter(tmp, sch, compression="zstd") as w:
            batch: list[dict] = []

            def flush():
                if batch:
                    w.write_table(pa.Table.from_pylist(batch, schema=sch))
                    batch.clear()

            for row in rows:
                if "first_frame_time" in row:
                    row = dict(row, first_frame_time=_micros(row["first_frame_time"]))
                batch.append(row)
                n += 1
                if len(batch) >= ROW_GROUP:
                    flush()
            flush()
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return n


def write_findings(path: str, audits: list[FileAudit], profile: str,
                   label: str | None = None) -> int:
    """The findings table (FINDING_COLUMNS) of the audits; the number of rows."""
    return _write(path, FINDING_COLUMNS, "findings", finding_rows(audits, profile, label),
                  "--format parquet")


def write_resolutions(path: str, audits: list[FileAudit], profile: str,
                      label: str | None = None) -> int:
    """The resolutions table (RESOLUTION_COLUMNS) of the audits; the number of rows."""
    return _write(path, RESOLUTION_COLUMNS, "resolutions",
                  resolution_rows(audits, profile, label), "--resolutions-out")
