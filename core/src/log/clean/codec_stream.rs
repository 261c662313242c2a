//! A batch's records section as a stream (`Read`): decompressed as it is
//! read, never past a bound, so that a reader taking records one by one
//! (`crate::record::Reader`) holds a codec's buffers, not the whole
//! section. The console's partition page and `dump-log` read stored
//! batches this way: a page of 500 records no longer costs the 64 MiB a
//! batch may decompress to, nor dump-log a segment's worth of records.
//!
//! The codecs and framings are described in `codec`; the decoders of all
//! five are built here alone (`codec::decompress` reads this stream whole),
//! each its crate's streaming decoder; snappy's xerial framing is read a
//! block at a time (a block states its decompressed length, checked
//! against what is left of the bound before its buffer is allocated).

use std::io::{self, Read};

use super::codec::{DecompressError, XERIAL_MAGIC};

/// Magic, version and compatible version.
const XERIAL_HEADER_BYTES: usize = 16;

/// `compressed`, the records section of a batch of `codec` (the batch
/// attributes' low three bits), as a stream of its decompressed bytes
/// that fails once it would give more than `limit` (codec 0 gives the
/// bytes as they are). A failed read's error is `stream_error`'s to name.
pub fn decompressing<'a>(
    codec: u8,
    compressed: &'a [u8],
    limit: usize,
) -> Result<Box<dyn Read + 'a>, DecompressError> {
    let corrupt = |e: io::Error| DecompressError::Corrupt(e.to_string());
    let stream: Box<dyn Read + 'a> = match codec {
        // Nothing to grow: an uncompressed section is as large as it came.
        0 => return Ok(Box::new(compressed)),
        // A GZIP stream's members back to back, as `GZIPInputStream`.
        1 => Box::new(flate2::bufread::MultiGzDecoder::new(compressed)),
        2 => Box::new(Snappy::new(compressed, limit)?),
        3 => Box::new(lz4::Decoder::new(compressed).map_err(corrupt)?),
        4 => Box::new(super::codec::zstd_decoder(compressed).map_err(corrupt)?),
        other => {
            return Err(DecompressError::Corrupt(format!(
                "unknown compression codec {other}"
            )))
        }
    };
    Ok(Box::new(Bounded {
        inner: stream,
        limit,
        left: limit,
    }))
}

/// What a failed read of a `decompressing` stream means: past the bound,
/// or not a valid stream of its codec.
pub fn stream_error(e: &io::Error) -> DecompressError {
    match e.get_ref().and_then(|inner| inner.downcast_ref()) {
        Some(DecompressError::TooLarge(limit)) => DecompressError::TooLarge(*limit),
        Some(DecompressError::Corrupt(why)) => DecompressError::Corrupt(why.clone()),
        None => DecompressError::Corrupt(e.to_string()),
    }
}

impl std::error::Error for DecompressError {}

fn io_error(e: DecompressError) -> io::Error {
    io::Error::other(e)
}

/// A stream that fails once it has given `limit` bytes and has more.
struct Bounded<R> {
    inner: R,
    limit: usize,
    /// Of `limit`, the bytes not given yet.
    left: usize,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            // A byte more than the bound is what tells it is passed.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io_error(DecompressError::TooLarge(self.limit))),
            };
        }
        let want = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n;
        Ok(n)
    }
}

/// Snappy, a block at a time: xerial-framed (magic, version, compatible
/// version, then blocks each after its length), or one raw block when the
/// magic is absent, as snappy-java's `SnappyInputStream` falls back.
struct Snappy<'a> {
    /// The framed blocks not read yet (none for a raw block: it is
    /// decompressed at once).
    rest: &'a [u8],
    /// The current block, decompressed, and how much of it was given.
    block: Vec<u8>,
    at: usize,
    /// Of the bound, the bytes no block has taken yet.
    left: usize,
    limit: usize,
}

impl<'a> Snappy<'a> {
    fn new(compressed: &'a [u8], limit: usize) -> Result<Self, DecompressError> {
        let mut s = Self {
            rest: &[],
            block: Vec::new(),
            at: 0,
            left: limit,
            limit,
        };
        if compressed.starts_with(XERIAL_MAGIC) {
            s.rest = compressed.get(XERIAL_HEADER_BYTES..).ok_or_else(|| {
                DecompressError::Corrupt("a snappy stream's header is cut off".into())
            })?;
        } else {
            s.decompress(compressed)?;
        }
        Ok(s)
    }

    /// `block` decompressed as the current one, if the bound has room.
    fn decompress(&mut self, block: &[u8]) -> Result<(), DecompressError> {
        let corrupt = |e: snap::Error| DecompressError::Corrupt(e.to_string());
        let len = snap::raw::decompress_len(block).map_err(corrupt)?;
        if len > self.left {
            return Err(DecompressError::TooLarge(self.limit));
        }
        self.left -= len;
        self.block.clear();
        self.block.resize(len, 0);
        let written = snap::raw::Decoder::new()
            .decompress(block, &mut self.block)
            .map_err(corrupt)?;
        self.block.truncate(written);
        self.at = 0;
        Ok(())
    }

    /// The next framed block, decompressed; false at the end.
    fn next_block(&mut self) -> Result<bool, DecompressError> {
        if self.rest.is_empty() {
            return Ok(false);
        }
        let cut = || DecompressError::Corrupt("a snappy block is cut off".into());
        let (len, tail) = self.rest.split_first_chunk::<4>().ok_or_else(cut)?;
        let len = u32::from_be_bytes(*len) as usize;
        let block = tail.get(..len).ok_or_else(cut)?;
        self.rest = &tail[len..];
        self.decompress(block)?;
        Ok(true)
    }
}

impl Read for Snappy<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.block.len() {
            if !self.next_block().map_err(io_error)? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.block.len() - self.at);
        buf[..n].copy_from_slice(&self.block[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::super::codec::{compress, decompress, default_level};
    use super::*;

    fn read_all(codec: u8, bytes: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
        let mut out = Vec::new();
        decompressing(codec, bytes, limit)?
            .read_to_end(&mut out)
            .map_err(|e| stream_error(&e))?;
        Ok(out)
    }

    #[test]
    fn every_codec_streams_what_decompress_gives_and_stops_at_the_bound() {
        let plain: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        for codec in 0..=4u8 {
            let packed = compress(codec, default_level(codec), &plain).unwrap();
            let whole = decompress(codec, &packed, plain.len()).unwrap();
            assert_eq!(read_all(codec, &packed, plain.len()).unwrap(), whole);
            assert_eq!(whole, plain, "codec {codec}");
            if codec != 0 {
                assert_eq!(
                    read_all(codec, &packed, plain.len() - 1),
                    Err(DecompressError::TooLarge(plain.len() - 1)),
                    "codec {codec}"
                );
            }
        }
        // A raw snappy block (no xerial header) reads too.
        let raw = snap::raw::Encoder::new().compress_vec(&plain).unwrap();
        assert_eq!(read_all(2, &raw, plain.len()).unwrap(), plain);
        assert_eq!(
            read_all(2, &raw, 10).err(),
            Some(DecompressError::TooLarge(10))
        );
    }

    #[test]
    fn a_bomb_is_stopped_a_buffer_at_a_time() {
        let zeros = vec![0u8; 32 << 20];
        for codec in 1..=4u8 {
            let bomb = compress(codec, default_level(codec), &zeros).unwrap();
            let mut stream = decompressing(codec, &bomb, 1 << 20).unwrap();
            let mut buf = [0u8; 4096];
            let mut given = 0;
            let error = loop {
                match stream.read(&mut buf) {
                    Ok(0) => panic!("codec {codec}: ended after {given} bytes"),
                    Ok(n) => given += n,
                    Err(e) => break stream_error(&e),
                }
            };
            // Snappy refuses a block that would pass the bound whole.
            assert!(given <= 1 << 20, "codec {codec}: {given}");
            if codec != 2 {
                assert_eq!(given, 1 << 20, "codec {codec}");
            }
            assert_eq!(error, DecompressError::TooLarge(1 << 20), "codec {codec}");
        }
    }

    #[test]
    fn garbage_is_corrupt_and_never_a_panic() {
        for codec in 0..=7u8 {
            for garbage in [
                &b""[..],
                b"\x82SNAPPY\x00",
                b"\x82SNAPPY\x00\0\0\0\x01\0\0\0\x01\xff\xff\xff\xff",
                &[0xffu8; 64],
            ] {
                match read_all(codec, garbage, 1 << 20) {
                    Ok(_) | Err(DecompressError::Corrupt(_)) => {}
                    Err(e) => panic!("codec {codec}: {e:?}"),
                }
            }
        }
    }
}
