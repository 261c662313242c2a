//! RecordBatch v2 headers.
