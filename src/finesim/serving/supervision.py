"""A worker process of ``finesim serve --workers N`` ends with its supervisor.

uvicorn's multi-process supervisor stops its workers when it is stopped (SIGTERM, Ctrl-C), but a supervisor killed
outright (SIGKILL, the OOM killer) could not: its workers were re-parented and went on serving the port, and a new
``finesim serve`` on it failed with "address already in use". On Linux each worker asks the kernel to send it SIGTERM
when its parent dies (``prctl(PR_SET_PDEATHSIG)``), and so stops gracefully as on a normal stop; a worker whose
supervisor died before it asked stops at once. Elsewhere nothing changes.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys

SUPERVISOR_ENV = "FINESIM_SERVE_SUPERVISOR"  # the supervisor's pid, for its workers
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

logger = logging.getLogger("finesim.serving")


def stop_with_supervisor() -> bool:
    """In a worker process: arrange SIGTERM on the supervisor's death (Linux); True when it was arranged."""
    supervisor = os.environ.get(SUPERVISOR_ENV)
    if not sys.platform.startswith("linux") or not supervisor:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    except (OSError, AttributeError, ValueError) as err:
        logger.debug("a worker cannot follow its supervisor's death: %s", err)
        return False
    if str(os.getppid()) != supervisor:  # the supervisor died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)
    return True
