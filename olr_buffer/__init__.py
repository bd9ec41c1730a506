"""olr-buffer: a disk-backed transaction buffer for Oracle change data capture.

Parsed redo (one stream per RAC thread) goes into a segmented, append-only LMDB queue;
a dispatcher turns it into whole committed transactions in commit order; a sink
publishes them as a Parquet changefeed that Spark reads.
"""

__version__ = "0.1.0"
