"""Imported by the fork server of the reader processes only (a ``forkserver`` preload
module, see :mod:`olr_buffer.sources.runner`): the fork server ignores SIGTERM, as
multiprocessing makes it ignore SIGINT, and so do the children it forks.

Ctrl-C in a terminal, and a supervisor's stop (systemd's default ``KillMode=control-group``),
signal every process of the service at once. The service stops its readers itself (it
closes their stop pipe) and stops the fork server; a fork server or a reader that died of
the signal first would make a clean stop look like a failure ("the reader process of redo
thread N died"). They still die with the service: the fork server when its pipe from the
service closes, a reader with the fork server (``PR_SET_PDEATHSIG``, SIGKILL).
"""

import signal

signal.signal(signal.SIGTERM, signal.SIG_IGN)
