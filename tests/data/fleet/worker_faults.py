"""A `dask worker --preload` for tests/test_fleet_dask.py: makes the worker process die in
the ways a cluster's do, on purpose and deterministically.

IBPATH_TEST_DIE_ONCE=PATH   the first audit of a file whose name starts with "die-once" kills
                            its worker process (the file at PATH, created atomically, says it
                            happened): a worker lost mid-task
IBPATH_TEST_POISON=NAME     every audit of a file named NAME kills its worker process: a file
                            that fails everywhere
"""

import os

from ibpath_scapy.audit import run

# the worker imports a preload file, then reloads it: wrap the real audit_one once
_audit_one = getattr(run, "_unfaulted_audit_one", run.audit_one)
run._unfaulted_audit_one = _audit_one


def audit_one(path, *args, **kwargs):
    marker = os.environ.get("IBPATH_TEST_DIE_ONCE")
    if marker and os.path.basename(path).startswith("die-once"):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            os._exit(17)
    if os.path.basename(path) == os.environ.get("IBPATH_TEST_POISON"):
        os._exit(18)
    return _audit_one(path, *args, **kwargs)


run.audit_one = audit_one
