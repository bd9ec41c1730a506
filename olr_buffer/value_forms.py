"""The text forms a typed value may take in a changefeed's JSON images, as regular
expressions that both Java (Spark's ``rlike``, :func:`olr_buffer.spark.typed`) and Python
(:mod:`olr_buffer.mirror`) read the same way: one definition of what fits a type
(docs/spark.md, "Types")."""

INTEGER = r"^[+-]?[0-9]+$"
FLOAT = r"^([+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?|NaN|[+-]?Infinity)$"
BOOLEAN = r"(?i)^(true|false|t|f)$"
DAY = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
TIME = r"[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6}0*)?"  # digits beyond microseconds: zeros only
DATE = f"^{DAY}$"
TIMESTAMP_NTZ = f"^{DAY}([ T]{TIME})?$"
TIMESTAMP = f"^{DAY}[ T]{TIME}(Z|[+-][0-9]{{2}}(:[0-9]{{2}}(:[0-9]{{2}})?)?| [A-Za-z][A-Za-z0-9_+/-]*)$"
NANOS = r"^-?[0-9]{1,19}$"  # a timestamp as nanoseconds since the epoch
HEX = r"^(\\x)?([0-9a-fA-F]{2})*$"
ARRAY = r'^\{[^{}"]*\}$'  # one dimension, no quoted element
