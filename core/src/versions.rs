//! Supported API versions.
