"""moto's S3 server (``python -m moto.server``) with S3's conditional writes atomic.

S3 checks a write's condition (``If-Match``, ``If-None-Match: *``) and makes the write in
one step: of two writes racing on the same version, one wins and the other gets 412 (or
409 while the first is in flight). moto 5 checks the condition, then writes, with no lock
between, so on its threaded server two racing writes can both pass the check: the lease
tests' racing takeovers then saw two winners of one generation (once in a CI run under
load). The tests' server runs moto's own code with the writes that check a condition
made one at a time, as S3 makes them; nothing else of moto is changed.
"""

from __future__ import annotations

import functools
import sys
import threading

from moto.s3.responses import S3Response
from moto.server import main

_WRITES = threading.Lock()


def _one_at_a_time(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with _WRITES:
            return method(self, *args, **kwargs)

    return wrapper


# put_object: If-Match and If-None-Match; _key_response_post: completing a multipart
# upload with If-None-Match; delete_object: its If-Match
for _name in ("put_object", "_key_response_post", "delete_object"):
    setattr(S3Response, _name, _one_at_a_time(getattr(S3Response, _name)))

if __name__ == "__main__":
    main(sys.argv[1:])
