//! Record values that name themselves: `c{client}-n{n}|` then padding, so
//! the oracle can tell which record of which producer sits at each offset,
//! whatever producer id or sequence carried it. The padding length depends
//! only on (client, n), so a resent record is byte-for-byte the same.

use bytes::Bytes;

/// A record's identity: the producing client and its running number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordId {
    pub client: u32,
    pub n: u64,
}

impl std::fmt::Display for RecordId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c{}-n{}", self.client, self.n)
    }
}

const PADDING_BYTES_MAX: u64 = 96;

pub fn encode(id: RecordId) -> Bytes {
    let mut text = format!("{id}|");
    let pad =
        (id.n.wrapping_mul(7919) ^ u64::from(id.client).wrapping_mul(104_729)) % PADDING_BYTES_MAX;
    text.extend(std::iter::repeat_n('.', pad as usize));
    Bytes::from(text)
}

/// Keys a record of a compacted topic may carry: few, so that records
/// overwrite each other's keys often and the cleaner has work.
pub const KEYS: u64 = 12;

/// The key of a record on a compacted topic: a function of its id alone, so
/// a resent record carries the same key and the oracle knows every
/// record's key from its value.
pub fn key(id: RecordId) -> Bytes {
    let k = (id.n.wrapping_mul(7) ^ u64::from(id.client).wrapping_mul(13)) % KEYS;
    Bytes::from(format!("k{k}"))
}

/// The id a value names, if it is one of ours and intact.
pub fn decode(value: &[u8]) -> Option<RecordId> {
    let text = std::str::from_utf8(value).ok()?;
    let (head, _) = text.split_once('|')?;
    let (c, n) = head.strip_prefix('c')?.split_once("-n")?;
    let id = RecordId {
        client: c.parse().ok()?,
        n: n.parse().ok()?,
    };
    (encode(id) == value).then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_reject_damage() {
        let id = RecordId { client: 3, n: 17 };
        let v = encode(id);
        assert_eq!(decode(&v), Some(id));
        assert_eq!(decode(&v[..v.len() - 1]), None, "a cut value is not ours");
        assert_eq!(decode(b"nope"), None);
    }
}
