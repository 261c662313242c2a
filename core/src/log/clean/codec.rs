//! A batch's records section decompressed, never past a bound; and
//! compressed again, at a level, when the cleaner or a topic's
//! compression.type writes a batch anew (`compress`).
//!
//! Why not kafka-protocol's `Decompressor`s: they decompress the whole
//! stream into memory whatever it grows to. A produce request of 132 KiB,
//! one zstd batch of zeros, decompressed to 4 GiB: the broker's memory grew
//! by 5 GB and its core task stalled 17 s, every client waiting; a 1 MiB
//! batch would reach 32 GiB. So each codec is read through its own crate's
//! streaming decoder (the same crates kafka-protocol uses), built in one
//! place (`codec_stream::decompressing`, which `decompress` reads whole),
//! and stops one byte past `limit`.
//!
//! The formats are Kafka's (clients/src/main/java/org/apache/kafka/common/
//! compress/): gzip is a GZIP stream (members read back to back, as
//! `GZIPInputStream` does); lz4 the LZ4 frame format; zstd zstd frames;
//! snappy the xerial framing (magic, version, compatible version, then
//! blocks each prefixed with its length), or a raw snappy block when the
//! magic is absent, as snappy-java's `SnappyInputStream` falls back.

use std::io::{Read, Write};

use bytes::Bytes;

use super::codec_stream;

/// Why a records section could not be decompressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecompressError {
    /// It decompresses to more than the limit (the limit is in the error).
    TooLarge(usize),
    /// Not a valid stream of its codec, or an unknown codec.
    Corrupt(String),
}

impl std::fmt::Display for DecompressError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge(limit) => write!(f, "the records decompress to more than {limit} bytes"),
            Self::Corrupt(why) => write!(f, "decompressing: {why}"),
        }
    }
}

/// The xerial snappy framing's magic (snappy-java's `SnappyCodec`).
pub(super) const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";

/// `compressed`, the records section of a batch of `codec` (the batch
/// attributes' low three bits), decompressed; at most `limit` bytes for a
/// compressed codec. Read whole through the one set of decoders
/// (`codec_stream::decompressing`), which keeps the bound as it reads.
pub fn decompress(codec: u8, compressed: &[u8], limit: usize) -> Result<Bytes, DecompressError> {
    if codec == 0 {
        // Nothing to grow: an uncompressed section is as large as it came.
        return Ok(Bytes::copy_from_slice(compressed));
    }
    read_bounded(
        codec_stream::decompressing(codec, compressed, limit)?,
        limit,
    )
}

/// A zstd decoder of `compressed` that refuses a frame declaring a window
/// past `limits::ZSTD_WINDOW_LOG_MAX` (said here rather than left to the
/// library's default, which is the same today): the decoder reserves the
/// window a frame declares before it gives a byte.
pub fn zstd_decoder(compressed: &[u8]) -> std::io::Result<zstd::stream::read::Decoder<'_, &[u8]>> {
    let mut decoder = zstd::stream::read::Decoder::with_buffer(compressed)?;
    decoder.window_log_max(crate::limits::ZSTD_WINDOW_LOG_MAX)?;
    Ok(decoder)
}

/// compression.lz4.level's default, which Kafka compresses with lz4-java's
/// fast compressor rather than the high (HC) one its other levels use.
const LZ4_DEFAULT_LEVEL: i32 = 9;

/// The level a codec compresses with when the topic names none: Kafka's
/// defaults (compression.gzip.level -1, that is zlib's 6;
/// compression.lz4.level 9; compression.zstd.level 3), which its log
/// cleaner uses too (`Compression.of(type).build()`).
pub fn default_level(codec: u8) -> i32 {
    match codec {
        3 => LZ4_DEFAULT_LEVEL,
        4 => 3,
        _ => -1,
    }
}

/// `plain`, a batch's records section, compressed with `codec` at `level`
/// (`Packer`). Codec 0 is `plain` as it is.
pub fn compress(codec: u8, level: i32, plain: &[u8]) -> Result<Bytes, String> {
    if codec == 0 {
        return Ok(Bytes::copy_from_slice(plain));
    }
    let mut packer = Packer::new(codec, level)?;
    packer.write(plain)?;
    packer.finish()
}

/// snappy-java's SnappyOutputStream block (its default), which the xerial
/// framing prefixes with its compressed length.
const SNAPPY_BLOCK_BYTES: usize = 32 * 1024;

/// A records section compressed as it is written, framed as Kafka's own
/// compressors frame it (clients/src/main/java/org/apache/kafka/common/
/// compress/): a GZIP stream; snappy in the xerial framing (magic, version
/// 1, compatible version 1, then blocks of 32 KiB each prefixed with its
/// compressed length; no level); an LZ4 frame of independent blocks; a zstd
/// frame. Codec 0 writes the bytes as they are.
///
/// Streaming, so that whoever writes a batch anew can stop as soon as what
/// it has written passes a bound (`plain_bytes`, `packed_bytes`), instead of
/// first holding every record in memory.
pub struct Packer {
    sink: Sink,
    plain_bytes: usize,
}

enum Sink {
    Plain(Vec<u8>),
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Snappy { out: Vec<u8>, block: Vec<u8> },
    Lz4(lz4::Encoder<Vec<u8>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Packer {
    pub fn new(codec: u8, level: i32) -> Result<Self, String> {
        let io = |e: std::io::Error| format!("compressing: {e}");
        let sink = match codec {
            0 => Sink::Plain(Vec::new()),
            1 => {
                // -1 and 1..=9, as topic_config checks compression.gzip.level.
                let level = u32::try_from(level).map_or(flate2::Compression::default(), |l| {
                    flate2::Compression::new(l.min(9))
                });
                Sink::Gzip(flate2::write::GzEncoder::new(Vec::new(), level))
            }
            2 => {
                let mut out = Vec::new();
                out.extend_from_slice(XERIAL_MAGIC);
                out.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
                Sink::Snappy {
                    out,
                    block: Vec::with_capacity(SNAPPY_BLOCK_BYTES),
                }
            }
            3 => {
                // Kafka's Lz4BlockOutputStream: lz4-java's fast compressor at
                // the default level (9), its high compressor at any other.
                let level = match level {
                    LZ4_DEFAULT_LEVEL => 0, // liblz4's fast compressor
                    other => u32::try_from(other).unwrap_or(0),
                };
                let e = lz4::EncoderBuilder::new()
                    .level(level)
                    .block_mode(lz4::BlockMode::Independent)
                    .build(Vec::new())
                    .map_err(io)?;
                Sink::Lz4(e)
            }
            4 => {
                // Level 22's window, the largest, is 2^27: within what
                // doze's decoders take (`limits::ZSTD_WINDOW_LOG_MAX`).
                let encoder = zstd::stream::write::Encoder::new(Vec::new(), level).map_err(io)?;
                Sink::Zstd(encoder)
            }
            other => return Err(format!("unknown compression codec {other}")),
        };
        Ok(Self {
            sink,
            plain_bytes: 0,
        })
    }

    /// Appends `plain` to the records section.
    pub fn write(&mut self, plain: &[u8]) -> Result<(), String> {
        let io = |e: std::io::Error| format!("compressing: {e}");
        self.plain_bytes += plain.len();
        match &mut self.sink {
            Sink::Plain(out) => out.extend_from_slice(plain),
            Sink::Gzip(e) => e.write_all(plain).map_err(io)?,
            Sink::Snappy { out, block } => {
                let mut rest = plain;
                while !rest.is_empty() {
                    let take = rest.len().min(SNAPPY_BLOCK_BYTES - block.len());
                    block.extend_from_slice(&rest[..take]);
                    rest = &rest[take..];
                    if block.len() == SNAPPY_BLOCK_BYTES {
                        snappy_block(out, block)?;
                    }
                }
            }
            Sink::Lz4(e) => e.write_all(plain).map_err(io)?,
            Sink::Zstd(e) => e.write_all(plain).map_err(io)?,
        }
        Ok(())
    }

    /// Bytes written so far, before compression.
    pub fn plain_bytes(&self) -> usize {
        self.plain_bytes
    }

    /// Compressed bytes out so far. A codec holds up to a block or a window
    /// of input before it writes any, so this trails `plain_bytes`; what
    /// `finish` returns is at least this long.
    pub fn packed_bytes(&self) -> usize {
        match &self.sink {
            Sink::Plain(out) | Sink::Snappy { out, .. } => out.len(),
            Sink::Gzip(e) => e.get_ref().len(),
            Sink::Lz4(e) => e.writer().len(),
            Sink::Zstd(e) => e.get_ref().len(),
        }
    }

    /// The whole compressed records section.
    pub fn finish(self) -> Result<Bytes, String> {
        let io = |e: std::io::Error| format!("compressing: {e}");
        let out = match self.sink {
            Sink::Plain(out) => out,
            Sink::Gzip(e) => e.finish().map_err(io)?,
            Sink::Snappy { mut out, mut block } => {
                if !block.is_empty() {
                    snappy_block(&mut out, &mut block)?;
                }
                out
            }
            Sink::Lz4(e) => {
                let (out, done) = e.finish();
                done.map_err(io)?;
                out
            }
            Sink::Zstd(e) => e.finish().map_err(io)?,
        };
        Ok(Bytes::from(out))
    }
}

/// One xerial snappy block: its compressed length, then it; `block` emptied.
fn snappy_block(out: &mut Vec<u8>, block: &mut Vec<u8>) -> Result<(), String> {
    let packed = snap::raw::Encoder::new()
        .compress_vec(block)
        .map_err(|e| format!("compressing: {e}"))?;
    let len = u32::try_from(packed.len()).map_err(|_| "a snappy block too large".to_owned())?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&packed);
    block.clear();
    Ok(())
}

/// Everything `reader` gives, unless that is more than `limit` bytes.
/// The buffer grows by doubling but never past `limit`: `read_to_end`
/// would double it past (64 MiB of records held 128 MiB).
fn read_bounded(mut reader: impl Read, limit: usize) -> Result<Bytes, DecompressError> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => return Ok(Bytes::from(out)),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(codec_stream::stream_error(&e)),
        };
        let len = out.len() + n;
        if len > limit {
            return Err(DecompressError::TooLarge(limit));
        }
        if len > out.capacity() {
            let capacity = out.capacity().saturating_mul(2).clamp(len, limit);
            out.reserve_exact(capacity - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// What `read_bounded` reads at a time.
const READ_CHUNK_BYTES: usize = 64 * 1024;

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};

    fn compressed(codec: u8, plain: &[u8]) -> Bytes {
        let mut out = BytesMut::new();
        let fill = |b: &mut BytesMut| {
            b.extend_from_slice(plain);
            Ok(())
        };
        match codec {
            1 => Gzip::compress(&mut out, fill),
            2 => Snappy::compress(&mut out, fill),
            3 => Lz4::compress(&mut out, fill),
            4 => Zstd::compress(&mut out, fill),
            _ => unreachable!(),
        }
        .unwrap();
        out.freeze()
    }

    /// A zstd frame, streamed without its size (as zstd-jni's output
    /// stream writes one), that declares a window of 2^`window_log`.
    fn zstd_with_window(window_log: u32, plain: &[u8]) -> Vec<u8> {
        let mut e = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        e.set_parameter(zstd::zstd_safe::CParameter::WindowLog(window_log))
            .unwrap();
        e.write_all(plain).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn a_zstd_window_past_the_cap_is_refused_before_it_is_allocated() {
        let plain = b"a record or two".repeat(100);
        let cap = crate::limits::ZSTD_WINDOW_LOG_MAX;
        // Level 22's window, as a Java producer at compression.zstd.level
        // 22 streams it: read, as Kafka reads it.
        let within = zstd_with_window(cap, &plain);
        assert_eq!(decompress(4, &within, 1 << 20).unwrap(), plain[..]);
        for frame in [
            &zstd_with_window(cap + 1, &plain),
            &zstd_with_window(30, &plain),
        ] {
            match decompress(4, frame, 1 << 20) {
                Err(DecompressError::Corrupt(why)) => assert!(why.contains("memory"), "{why}"),
                other => panic!("a window past the cap was read: {other:?}"),
            }
            let mut stream = super::super::codec_stream::decompressing(4, frame, 1 << 20).unwrap();
            let mut out = Vec::new();
            assert!(stream.read_to_end(&mut out).is_err());
        }
    }

    #[test]
    fn every_codec_round_trips_up_to_its_limit_and_refuses_a_byte_more() {
        let plain: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        for codec in 0..=4u8 {
            let bytes = if codec == 0 {
                Bytes::from(plain.clone())
            } else {
                compressed(codec, &plain)
            };
            assert_eq!(
                decompress(codec, &bytes, plain.len()).unwrap(),
                plain,
                "codec {codec}"
            );
            if codec != 0 {
                assert_eq!(
                    decompress(codec, &bytes, plain.len() - 1),
                    Err(DecompressError::TooLarge(plain.len() - 1)),
                    "codec {codec}"
                );
            }
        }
    }

    #[test]
    fn what_compress_writes_decompresses_at_every_level_kafka_takes() {
        let plain: Vec<u8> = (0..100_000u32).map(|i| (i % 97) as u8).collect();
        let levels: [(u8, &[i32]); 5] = [
            (0, &[-1]),
            (1, &[-1, 1, 9]),
            (2, &[-1]),
            (3, &[1, 9, 17]),
            (4, &[-131_072, -1, 1, 3, 22]),
        ];
        for (codec, levels) in levels {
            for &level in levels {
                let packed = compress(codec, level, &plain).unwrap();
                // zstd's negative levels trade size for speed; the lowest
                // stores the bytes nearly as they are.
                if codec != 0 && level >= -1 {
                    assert!(
                        packed.len() < plain.len() / 4,
                        "codec {codec} level {level}"
                    );
                }
                assert_eq!(
                    decompress(codec, &packed, plain.len()).unwrap(),
                    plain,
                    "codec {codec} level {level}"
                );
            }
        }
        // Kafka's readers look for these frames.
        assert!(compress(1, -1, &plain).unwrap().starts_with(&[0x1f, 0x8b]));
        assert!(compress(2, -1, &plain).unwrap().starts_with(XERIAL_MAGIC));
        assert!(compress(3, 9, &plain)
            .unwrap()
            .starts_with(&[0x04, 0x22, 0x4d, 0x18]));
        assert!(compress(4, 3, &plain)
            .unwrap()
            .starts_with(&[0x28, 0xb5, 0x2f, 0xfd]));
        assert!(compress(5, 3, &plain).is_err());
    }

    /// Written in pieces, the packer's output reads back whole; its snappy
    /// is byte for byte kafka-protocol's (the xerial framing, 32 KiB
    /// blocks); and what it has written out grows as it goes, which is
    /// what a rebuild checks against its bound.
    #[test]
    fn the_packer_streams_what_compress_writes_at_once() {
        let plain: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 253) as u8).collect();
        for codec in 0..=4u8 {
            let mut p = Packer::new(codec, default_level(codec)).unwrap();
            let mut packed_along = 0;
            for piece in plain.chunks(1000) {
                p.write(piece).unwrap();
                assert!(p.packed_bytes() >= packed_along, "codec {codec}");
                packed_along = p.packed_bytes();
            }
            assert_eq!(p.plain_bytes(), plain.len());
            assert!(packed_along > 0, "codec {codec}: nothing out while writing");
            let packed = p.finish().unwrap();
            assert!(packed.len() >= packed_along, "codec {codec}");
            assert_eq!(
                decompress(codec, &packed, plain.len()).unwrap(),
                plain,
                "codec {codec}"
            );
        }
        assert_eq!(compress(2, -1, &plain).unwrap(), compressed(2, &plain));
    }

    #[test]
    fn a_bomb_stops_at_the_limit() {
        // 32 MiB of zeros compress to a few KiB with each codec (snappy,
        // the weakest, about 1.5 MiB); read whole, each would take 32 MiB.
        let zeros = vec![0u8; 32 << 20];
        for codec in 1..=4u8 {
            let bomb = compressed(codec, &zeros);
            assert!(
                bomb.len() * 16 < zeros.len(),
                "codec {codec}: {}",
                bomb.len()
            );
            assert_eq!(
                decompress(codec, &bomb, 1 << 20),
                Err(DecompressError::TooLarge(1 << 20)),
                "codec {codec}"
            );
        }
    }

    #[test]
    fn raw_snappy_without_the_xerial_header_is_read_too() {
        let plain = b"a raw snappy block, as snappy-java falls back to".repeat(10);
        let raw = snap::raw::Encoder::new().compress_vec(&plain).unwrap();
        assert_eq!(decompress(2, &raw, 1 << 20).unwrap(), plain.as_slice());
        assert_eq!(decompress(2, &raw, 10), Err(DecompressError::TooLarge(10)));
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
                match decompress(codec, garbage, 1 << 20) {
                    Ok(_) | Err(DecompressError::Corrupt(_)) => {}
                    Err(e) => panic!("codec {codec}: {e:?}"),
                }
            }
        }
    }
}
