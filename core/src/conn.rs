//! Per-connection state.
