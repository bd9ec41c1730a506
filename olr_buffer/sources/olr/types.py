"""OpenLogReplicator's column types for this source: the module both OpenLogReplicator
sources share (:mod:`olr_buffer.sources.olr_types`; the file-writer source reads the same
``schema.columns``)."""

from ..olr_types import MAX_PRECISION, UNCONSTRAINED_NUMBER, ColumnsError, column_type, schema_columns

__all__ = ["MAX_PRECISION", "UNCONSTRAINED_NUMBER", "ColumnsError", "column_type", "schema_columns"]
