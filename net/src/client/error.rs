//! What a client call can fail with: the network (connect, I/O, a timeout,
//! a closed connection), the protocol (a frame or body it cannot read, no
//! version both sides speak), or a Kafka error code in the answer.
//!
//! Kafka errors carry their name as Kafka's tools print it
//! (`UNKNOWN_TOPIC_OR_PARTITION`), made from kafka-protocol's variant name.

use std::fmt;
use std::time::Duration;

use kafka_protocol::ResponseError;

/// A failed client call.
#[derive(Debug)]
pub enum Error {
    /// No connection could be made to `addr` (refused, unresolvable, TLS).
    Connect { addr: String, reason: String },
    /// `what` (connecting, a request) got no answer from `addr` in time.
    Timeout {
        addr: String,
        what: String,
        after: Duration,
    },
    /// Reading or writing the connection to `addr` failed, or the broker
    /// closed it.
    Io { addr: String, reason: String },
    /// `addr` sent something this client cannot read (a frame too large, a
    /// body that does not decode, an answer to another request).
    Protocol { addr: String, reason: String },
    /// `addr` offers no version of `api` that this client speaks.
    Unsupported { addr: String, api: String },
    /// The broker answered with a Kafka error code.
    Kafka(KafkaError),
    /// The caller asked for something impossible (an address without a
    /// port, an empty bootstrap list).
    Usage(String),
}

/// A Kafka error code from an answer, with the broker's message if any and
/// what it was about (`topic foo`, `group g`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaError {
    pub code: i16,
    pub message: Option<String>,
    pub about: String,
}

impl KafkaError {
    /// `code` about `about`, or None when the code is 0 (no error).
    pub fn check(code: i16, message: Option<&str>, about: impl Into<String>) -> Result<(), Error> {
        if code == 0 {
            return Ok(());
        }
        Err(Error::Kafka(KafkaError {
            code,
            message: message.filter(|m| !m.is_empty()).map(str::to_string),
            about: about.into(),
        }))
    }

    /// Kafka's name of the code (`NOT_COORDINATOR`), or `UNKNOWN_ERROR_CODE_n`.
    pub fn name(&self) -> String {
        error_name(self.code)
    }

    /// Whether Kafka marks the code retriable (worth asking again).
    pub fn is_retriable(&self) -> bool {
        ResponseError::try_from_code(self.code).is_some_and(|e| e.is_retriable())
    }
}

/// Kafka's upper-case name of an error code: kafka-protocol names its
/// variants after Errors.java's constants in camel case, so
/// `UnknownTopicOrPartition` becomes `UNKNOWN_TOPIC_OR_PARTITION`.
pub fn error_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        None => "NONE".to_string(),
        Some(ResponseError::Unknown(code)) => format!("UNKNOWN_ERROR_CODE_{code}"),
        Some(e) => {
            let camel = e.to_string();
            let mut name = String::with_capacity(camel.len() + 8);
            for (i, c) in camel.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    name.push('_');
                }
                name.push(c.to_ascii_uppercase());
            }
            name
        }
    }
}

impl Error {
    /// The Kafka error, if the broker answered with one.
    pub fn kafka(&self) -> Option<&KafkaError> {
        match self {
            Error::Kafka(k) => Some(k),
            _ => None,
        }
    }

    /// Whether the connection this came from can no longer be used.
    pub(crate) fn breaks_connection(&self) -> bool {
        matches!(
            self,
            Error::Timeout { .. } | Error::Io { .. } | Error::Protocol { .. }
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Connect { addr, reason } => write!(f, "cannot connect to {addr}: {reason}"),
            Error::Timeout { addr, what, after } => {
                write!(
                    f,
                    "{what} timed out after {} ms ({addr})",
                    after.as_millis()
                )
            }
            Error::Io { addr, reason } => write!(f, "connection to {addr} failed: {reason}"),
            Error::Protocol { addr, reason } => {
                write!(f, "unreadable answer from {addr}: {reason}")
            }
            Error::Unsupported { addr, api } => {
                write!(
                    f,
                    "{addr} offers no version of {api} that this client speaks"
                )
            }
            Error::Kafka(k) => fmt::Display::fmt(k, f),
            Error::Usage(reason) => f.write_str(reason),
        }
    }
}

impl fmt::Display for KafkaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.about, self.name())?;
        if let Some(m) = &self.message {
            write!(f, " ({m})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kafkas() {
        assert_eq!(error_name(3), "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(error_name(16), "NOT_COORDINATOR");
        assert_eq!(error_name(36), "TOPIC_ALREADY_EXISTS");
        assert_eq!(error_name(48), "INVALID_TXN_STATE");
        assert_eq!(error_name(69), "GROUP_ID_NOT_FOUND");
        assert_eq!(error_name(105), "TRANSACTIONAL_ID_NOT_FOUND");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(error_name(0), "NONE");
        assert_eq!(error_name(30_000), "UNKNOWN_ERROR_CODE_30000");
    }

    #[test]
    fn check_and_display() {
        assert!(KafkaError::check(0, None, "x").is_ok());
        let e = KafkaError::check(3, Some("gone"), "topic t").unwrap_err();
        assert_eq!(e.to_string(), "topic t: UNKNOWN_TOPIC_OR_PARTITION (gone)");
        assert!(e.kafka().unwrap().is_retriable());
        let e = KafkaError::check(36, Some(""), "topic t").unwrap_err();
        assert_eq!(e.to_string(), "topic t: TOPIC_ALREADY_EXISTS");
    }
}
