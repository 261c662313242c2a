//! Record v2, the layout inside a batch's (decompressed) records section,
//! and the one reader of it. Produce's checks (`api::produce::records`),
//! the cleaner and the rebuilding of batches (`log::clean::records`) and
//! dump-log (`net/src/batches.rs`) all read records here, each naming what
//! it finds wrong in its own words (Produce in Kafka's).
//!
//! The layout, as Kafka's DefaultRecord reads it
//! (clients/src/main/java/org/apache/kafka/common/record/DefaultRecord.java):
//!
//! ```text
//! length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
//! key length varint (negative: null) | key | value length varint (negative: null) | value |
//! header count varint | headers: key length varint | key | value length varint | value
//! ```

use crate::batch::{read_bytes, read_varint, read_varlong};

/// One record, borrowed from the records bytes it was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub attributes: u8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub header_count: usize,
    /// The record's bytes, and where in them its key and its headers
    /// start: offsets, not slices, so that Produce's check, which never
    /// looks at them, does not pay for them.
    body: &'a [u8],
    key_at: usize,
    headers_at: usize,
}

/// The part of a record its bytes end inside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Attributes,
    Timestamp,
    OffsetDelta,
    Key,
    Value,
    HeaderCount,
    Headers,
}

impl Field {
    pub fn name(self) -> &'static str {
        match self {
            Field::Attributes => "attributes",
            Field::Timestamp => "timestamp",
            Field::OffsetDelta => "offset delta",
            Field::Key => "key",
            Field::Value => "value",
            Field::HeaderCount => "header count",
            Field::Headers => "headers",
        }
    }
}

/// Why a record's bytes (those its length covers) are not a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// They end inside this field.
    EndsIn(Field),
    NegativeHeaderCount(i32),
    /// A header key's length is negative (a null key: Kafka refuses it).
    NegativeHeaderKey(i32),
    /// Bytes are left after the last header: `read` of `length`.
    Leftover {
        length: usize,
        read: usize,
    },
}

/// Why the next record's length does not frame it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// The bytes end inside the length varint (or it does not fit an i32).
    CutOff,
    /// The length is negative, or runs past the `remaining` bytes.
    Invalid { length: i32, remaining: usize },
}

/// The next record's bytes (those its length covers) in `buf` from `at`,
/// moving `at` past them.
#[inline]
pub fn next<'a>(buf: &'a [u8], at: &mut usize) -> Result<&'a [u8], Framing> {
    let length = read_varint(buf, at).ok_or(Framing::CutOff)?;
    let start = *at;
    let body = usize::try_from(length)
        .ok()
        .and_then(|len| buf.get(start..start.checked_add(len)?))
        .ok_or(Framing::Invalid {
            length,
            remaining: buf.len() - start,
        })?;
    *at = start + body.len();
    Ok(body)
}

/// Reads one record from its bytes, which it must fill exactly. Inlined:
/// Produce reads every record of every batch through it.
#[inline]
pub fn read(body: &[u8]) -> Result<Record<'_>, Malformed> {
    let ends_in = Malformed::EndsIn;
    let attributes = *body.first().ok_or(ends_in(Field::Attributes))?;
    let mut at = 1;
    let timestamp_delta = read_varlong(body, &mut at).ok_or(ends_in(Field::Timestamp))?;
    let offset_delta = read_varint(body, &mut at).ok_or(ends_in(Field::OffsetDelta))?;
    let key_at = at;
    let key = read_bytes(body, &mut at).ok_or(ends_in(Field::Key))?;
    let value = read_bytes(body, &mut at).ok_or(ends_in(Field::Value))?;
    let count = read_varint(body, &mut at).ok_or(ends_in(Field::HeaderCount))?;
    let header_count = usize::try_from(count).map_err(|_| Malformed::NegativeHeaderCount(count))?;
    let headers_at = at;
    for _ in 0..header_count {
        let key_length = read_varint(body, &mut at).ok_or(ends_in(Field::Headers))?;
        let key_length =
            usize::try_from(key_length).map_err(|_| Malformed::NegativeHeaderKey(key_length))?;
        at = at
            .checked_add(key_length)
            .filter(|end| *end <= body.len())
            .ok_or(ends_in(Field::Headers))?;
        read_bytes(body, &mut at).ok_or(ends_in(Field::Headers))?;
    }
    if at != body.len() {
        return Err(Malformed::Leftover {
            length: body.len(),
            read: at,
        });
    }
    Ok(Record {
        attributes,
        timestamp_delta,
        offset_delta,
        key,
        value,
        header_count,
        body,
        key_at,
        headers_at,
    })
}

impl<'a> Record<'a> {
    /// The bytes after the offset delta (key, value, headers): what a
    /// rebuilt batch copies as they are.
    pub fn after_offset_delta(&self) -> &'a [u8] {
        &self.body[self.key_at..]
    }

    /// The headers' keys, in order.
    pub fn header_keys(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let headers = &self.body[self.headers_at..];
        let mut at = 0;
        // Read and checked by `read`: every header is there, whole.
        (0..self.header_count).filter_map(move |_| {
            let key = read_bytes(headers, &mut at).flatten();
            read_bytes(headers, &mut at);
            key
        })
    }
}

/// Hand-built records for unit tests (of this module and of Produce's).
#[cfg(test)]
pub(crate) mod testing {
    use crate::batch::testing::put_varlong as varint;

    /// A record's bytes (without its length): attributes 0, timestamp
    /// delta 7, `offset_delta`, key, value, headers (key, value).
    pub(crate) fn body(
        offset_delta: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], &[u8])],
    ) -> Vec<u8> {
        let mut b = vec![0u8];
        varint(&mut b, 7);
        varint(&mut b, offset_delta);
        for field in [key, value] {
            match field {
                Some(bytes) => {
                    varint(&mut b, bytes.len() as i64);
                    b.extend_from_slice(bytes);
                }
                None => varint(&mut b, -1),
            }
        }
        varint(&mut b, headers.len() as i64);
        for (k, v) in headers {
            varint(&mut b, k.len() as i64);
            b.extend_from_slice(k);
            varint(&mut b, v.len() as i64);
            b.extend_from_slice(v);
        }
        b
    }

    /// `body` after its length, as it lies in a batch.
    pub(crate) fn framed(body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        varint(&mut out, body.len() as i64);
        out.extend_from_slice(body);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::testing::body as with_offset;
    use super::*;
    use crate::batch::testing::put_varlong as varint;

    fn body(key: Option<&[u8]>, value: Option<&[u8]>, headers: &[(&[u8], &[u8])]) -> Vec<u8> {
        with_offset(3, key, value, headers)
    }

    #[test]
    fn a_record_reads_back_every_field() {
        let b = body(Some(b"k"), None, &[(b"h1", b"x"), (b"h2", b"")]);
        let r = read(&b).unwrap();
        assert_eq!((r.timestamp_delta, r.offset_delta), (7, 3));
        assert_eq!((r.key, r.value), (Some(&b"k"[..]), None));
        assert_eq!(r.header_keys().collect::<Vec<_>>(), [&b"h1"[..], b"h2"]);
        assert_eq!(r.after_offset_delta(), &b[3..]);
    }

    #[test]
    fn every_cut_is_named_and_leftovers_are_refused() {
        let b = body(Some(b"key"), Some(b"value"), &[(b"h", b"v")]);
        for len in 0..b.len() {
            assert!(
                matches!(read(&b[..len]), Err(Malformed::EndsIn(_))),
                "cut at {len}"
            );
        }
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(
            read(&longer),
            Err(Malformed::Leftover {
                length: b.len() + 1,
                read: b.len()
            })
        );
    }

    #[test]
    fn negative_header_counts_and_keys_are_refused() {
        let mut b = body(None, None, &[]);
        b.pop();
        varint(&mut b, -2);
        assert_eq!(read(&b), Err(Malformed::NegativeHeaderCount(-2)));
        let mut b = body(None, None, &[]);
        b.pop();
        varint(&mut b, 1);
        varint(&mut b, -1);
        assert_eq!(read(&b), Err(Malformed::NegativeHeaderKey(-1)));
    }

    #[test]
    fn framing_takes_exactly_the_length() {
        let mut buf = Vec::new();
        varint(&mut buf, 2);
        buf.extend_from_slice(&[9, 9]);
        varint(&mut buf, 5);
        buf.push(1);
        let mut at = 0;
        assert_eq!(next(&buf, &mut at), Ok(&[9u8, 9][..]));
        assert_eq!(
            next(&buf, &mut at),
            Err(Framing::Invalid {
                length: 5,
                remaining: 1
            })
        );
        let mut at = buf.len();
        assert_eq!(next(&buf, &mut at), Err(Framing::CutOff));
    }
}
