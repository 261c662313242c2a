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

use std::io::{BufRead, Read};

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

/// Why the next record of a stream (`Reader`) could not be read.
#[derive(Debug)]
pub enum Unread {
    /// Its length does not frame it. `remaining` is what the stream still
    /// had, up to the length (0 for a negative one).
    Framing(Framing),
    Malformed(Malformed),
    /// The stream failed: a decompressing one's error (its codec's, or its
    /// bound's: `log::clean::codec_stream::stream_error` names it).
    Stream(std::io::Error),
}

/// Records read one at a time from a stream of records bytes (a batch's
/// records section, decompressed as it is read): only the record being
/// read is held, so a batch of millions of records costs its largest one,
/// not a `Vec` of them all. Framed and read as `next` and `read` do.
pub struct Reader<R> {
    source: R,
    /// The current record's bytes.
    body: Vec<u8>,
}

impl<R: BufRead> Reader<R> {
    pub fn new(source: R) -> Self {
        Self {
            source,
            body: Vec::new(),
        }
    }

    /// The next record. After an error the stream's place is unknown: read
    /// no further.
    pub fn next_record(&mut self) -> Result<Record<'_>, Unread> {
        let length = self.length()?;
        let len = usize::try_from(length).map_err(|_| {
            Unread::Framing(Framing::Invalid {
                length,
                remaining: 0,
            })
        })?;
        self.body.clear();
        // Grown as bytes come, never to a length the stream does not have.
        let got = (&mut self.source)
            .take(len as u64)
            .read_to_end(&mut self.body)
            .map_err(Unread::Stream)?;
        if got < len {
            return Err(Unread::Framing(Framing::Invalid {
                length,
                remaining: got,
            }));
        }
        read(&self.body).map_err(Unread::Malformed)
    }

    /// A record's length varint, read a byte at a time and decoded as
    /// `next` decodes it: the stream ending inside it is `CutOff`.
    fn length(&mut self) -> Result<i32, Unread> {
        // A varlong is at most 10 bytes; `read_varint` refuses longer.
        let mut bytes = [0u8; 10];
        let mut len = 0;
        loop {
            let available = loop {
                match self.source.fill_buf() {
                    Ok(available) => break available,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(Unread::Stream(e)),
                }
            };
            let Some(&byte) = available.first() else {
                return Err(Unread::Framing(Framing::CutOff));
            };
            self.source.consume(1);
            bytes[len] = byte;
            len += 1;
            if byte & 0x80 == 0 || len == bytes.len() {
                break;
            }
        }
        read_varint(&bytes[..len], &mut 0).ok_or(Unread::Framing(Framing::CutOff))
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

    /// What `Reader` reads from `bytes`: each record's bytes (it read
    /// whole), or how it failed.
    fn streamed(bytes: &[u8], count: usize) -> Vec<Result<Vec<u8>, String>> {
        let mut reader = Reader::new(bytes);
        let mut out = Vec::new();
        for _ in 0..count {
            match reader.next_record() {
                Ok(r) => out.push(Ok(r.body.to_vec())),
                Err(e) => {
                    out.push(Err(format!("{e:?}")));
                    break;
                }
            }
        }
        out
    }

    #[test]
    fn a_stream_reads_what_the_slice_reads() {
        let records = [
            body(Some(b"k"), Some(b"v"), &[(b"h", b"x")]),
            body(None, None, &[]),
            body(Some(&[7u8; 300]), Some(&[8u8; 70_000]), &[]),
        ];
        let mut bytes = Vec::new();
        for r in &records {
            bytes.extend_from_slice(&testing::framed(r));
        }
        let got = streamed(&bytes, records.len());
        let mut at = 0;
        for (i, g) in got.iter().enumerate() {
            let want = next(&bytes, &mut at).unwrap();
            assert_eq!(g.as_ref().unwrap(), want, "record {i}");
            assert_eq!(read(want).unwrap().body, records[i].as_slice());
        }
        assert_eq!(got.len(), records.len());
        // One more than there are: the length is cut off, as `next` says.
        let more = streamed(&bytes, records.len() + 1);
        assert_eq!(
            more.last().unwrap().as_ref().unwrap_err(),
            "Framing(CutOff)"
        );
    }

    #[test]
    fn a_stream_names_each_fault_as_the_slice_does() {
        // Runs past the end: what the stream still had is the remaining.
        let mut past = Vec::new();
        varint(&mut past, 5);
        past.push(1);
        assert_eq!(
            streamed(&past, 1)[0].as_ref().unwrap_err(),
            "Framing(Invalid { length: 5, remaining: 1 })"
        );
        let mut negative = Vec::new();
        varint(&mut negative, -3);
        assert_eq!(
            streamed(&negative, 1)[0].as_ref().unwrap_err(),
            "Framing(Invalid { length: -3, remaining: 0 })"
        );
        // A length varint longer than ten bytes, or cut inside.
        assert_eq!(
            streamed(&[0xff; 12], 1)[0].as_ref().unwrap_err(),
            "Framing(CutOff)"
        );
        assert_eq!(
            streamed(&[0x80], 1)[0].as_ref().unwrap_err(),
            "Framing(CutOff)"
        );
        let mut leftover = body(None, None, &[]);
        leftover.push(0);
        let framed = testing::framed(&leftover);
        assert!(streamed(&framed, 1)[0]
            .as_ref()
            .unwrap_err()
            .starts_with("Malformed(Leftover"));
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
