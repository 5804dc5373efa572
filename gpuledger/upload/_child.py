"""The worker process of gpuledger/upload/worker.py: read a pickled call on stdin, answer on stdout.

Run as ``python -m gpuledger.upload._child``. Anything the call prints goes to stderr: stdout carries only
the answer, ``("ok", result)`` or ``("raised", "Type: message")``.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
from typing import Any

NICENESS = 10  # the worker yields the CPU to the server's page runs


def main() -> None:
    answer_to = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints (a library's progress) to stderr
    with contextlib.suppress(OSError):  # a platform without nice
        os.nice(NICENESS)
    fn, args = pickle.load(sys.stdin.buffer)
    try:
        answer: tuple[str, Any] = ("ok", fn(*args))
    except BaseException as exc:  # reported to the parent, which raises WorkerFailed
        answer = ("raised", f"{type(exc).__name__}: {str(exc)[:500]}")
    pickle.dump(answer, answer_to, protocol=pickle.HIGHEST_PROTOCOL)
    answer_to.close()


if __name__ == "__main__":
    main()
