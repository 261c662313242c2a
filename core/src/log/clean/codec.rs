//! A batch's records section decompressed, never past a bound; and
//! compressed again, at a level, when the cleaner or a topic's
//! compression.type writes a batch anew (`compress`).
//!
//! Why not kafka-protocol's `Decompressor`s: they decompress the whole
//! stream into memory whatever it grows to. A produce request of 132 KiB,
//! one zstd batch of zeros, decompressed to 4 GiB: the broker's memory grew
//! by 5 GB and its core task stalled 17 s, every client waiting; a 1 MiB
//! batch would reach 32 GiB. So each codec is read here through its own
//! crate's streaming decoder (the same crates kafka-protocol uses) and
//! stops one byte past `limit`.
//!
//! The formats are Kafka's (clients/src/main/java/org/apache/kafka/common/
//! compress/): gzip is a GZIP stream (members read back to back, as
//! `GZIPInputStream` does); lz4 the LZ4 frame format; zstd zstd frames;
//! snappy the xerial framing (magic, version, compatible version, then
//! blocks each prefixed with its length), or a raw snappy block when the
//! magic is absent, as snappy-java's `SnappyInputStream` falls back.

use std::io::{Read, Write};

use bytes::{Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Snappy};

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
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
/// Magic, version and compatible version.
const XERIAL_HEADER_BYTES: usize = 16;

/// `compressed`, the records section of a batch of `codec` (the batch
/// attributes' low three bits), decompressed; at most `limit` bytes for a
/// compressed codec.
pub fn decompress(codec: u8, compressed: &[u8], limit: usize) -> Result<Bytes, DecompressError> {
    let corrupt = |e: std::io::Error| DecompressError::Corrupt(e.to_string());
    match codec {
        // Nothing to grow: an uncompressed section is as large as it came.
        0 => Ok(Bytes::copy_from_slice(compressed)),
        1 => read_bounded(flate2::read::MultiGzDecoder::new(compressed), limit),
        2 => snappy(compressed, limit),
        3 => read_bounded(lz4::Decoder::new(compressed).map_err(corrupt)?, limit),
        4 => read_bounded(
            zstd::stream::read::Decoder::new(compressed).map_err(corrupt)?,
            limit,
        ),
        other => Err(DecompressError::Corrupt(format!(
            "unknown compression codec {other}"
        ))),
    }
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

/// `plain`, a batch's records section, compressed with `codec` at `level`,
/// framed as Kafka's own compressors frame it (clients/src/main/java/org/
/// apache/kafka/common/compress/): a GZIP stream; snappy in the xerial
/// framing (kafka-protocol's compressor, which has no level); an LZ4 frame
/// of independent blocks; a zstd frame. Codec 0 is `plain` as it is.
pub fn compress(codec: u8, level: i32, plain: &[u8]) -> Result<Bytes, String> {
    let io = |e: std::io::Error| format!("compressing: {e}");
    let out = match codec {
        0 => return Ok(Bytes::copy_from_slice(plain)),
        1 => {
            // -1 and 1..=9, as topic_config checks compression.gzip.level.
            let level = u32::try_from(level).map_or(flate2::Compression::default(), |l| {
                flate2::Compression::new(l.min(9))
            });
            let mut e = flate2::write::GzEncoder::new(Vec::new(), level);
            e.write_all(plain).map_err(io)?;
            e.finish().map_err(io)?
        }
        2 => {
            let mut out = BytesMut::new();
            Snappy::compress(&mut out, |b: &mut BytesMut| {
                b.extend_from_slice(plain);
                Ok(())
            })
            .map_err(|e| format!("compressing: {e}"))?;
            return Ok(out.freeze());
        }
        3 => {
            // Kafka's Lz4BlockOutputStream: lz4-java's fast compressor at
            // the default level (9), its high compressor at any other.
            let level = match level {
                LZ4_DEFAULT_LEVEL => 0, // liblz4's fast compressor
                other => u32::try_from(other).unwrap_or(0),
            };
            let mut e = lz4::EncoderBuilder::new()
                .level(level)
                .block_mode(lz4::BlockMode::Independent)
                .build(Vec::new())
                .map_err(io)?;
            e.write_all(plain).map_err(io)?;
            let (out, done) = e.finish();
            done.map_err(io)?;
            out
        }
        4 => zstd::bulk::compress(plain, level).map_err(io)?,
        other => return Err(format!("unknown compression codec {other}")),
    };
    Ok(Bytes::from(out))
}

/// Everything `reader` gives, unless that is more than `limit` bytes.
fn read_bounded(reader: impl Read, limit: usize) -> Result<Bytes, DecompressError> {
    let mut out = Vec::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|e| DecompressError::Corrupt(e.to_string()))?;
    if out.len() > limit {
        return Err(DecompressError::TooLarge(limit));
    }
    Ok(Bytes::from(out))
}

/// Snappy blocks state their decompressed length up front: the bound is
/// checked before a block's buffer is allocated.
fn snappy(compressed: &[u8], limit: usize) -> Result<Bytes, DecompressError> {
    let corrupt = |e: snap::Error| DecompressError::Corrupt(e.to_string());
    let mut out = Vec::new();
    let append_block = |block: &[u8], out: &mut Vec<u8>| {
        let len = snap::raw::decompress_len(block).map_err(corrupt)?;
        let start = out.len();
        if len > limit - start {
            return Err(DecompressError::TooLarge(limit));
        }
        out.resize(start + len, 0);
        let written = snap::raw::Decoder::new()
            .decompress(block, &mut out[start..])
            .map_err(corrupt)?;
        out.truncate(start + written);
        Ok(())
    };
    if !compressed.starts_with(XERIAL_MAGIC) {
        append_block(compressed, &mut out)?;
        return Ok(Bytes::from(out));
    }
    let mut rest = compressed
        .get(XERIAL_HEADER_BYTES..)
        .ok_or_else(|| DecompressError::Corrupt("a snappy stream's header is cut off".into()))?;
    while !rest.is_empty() {
        let cut = || DecompressError::Corrupt("a snappy block is cut off".into());
        let (len, tail) = rest.split_first_chunk::<4>().ok_or_else(cut)?;
        let len = u32::from_be_bytes(*len) as usize;
        let block = tail.get(..len).ok_or_else(cut)?;
        append_block(block, &mut out)?;
        rest = &tail[len..];
    }
    Ok(Bytes::from(out))
}

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
