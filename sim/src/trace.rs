//! The trace: one line per thing that happened (every input to the broker,
//! every output, every fault, what each client concluded), folded into a
//! running 64-bit FNV-1a hash. Two runs of one seed must give the same hash;
//! `--trace` prints the lines.
//!
//! FNV-1a with its fixed offset basis and prime: no keys, no per-process
//! randomness (std's `DefaultHasher` is seeded per process), so the hash of a
//! seed is the same in every run, test and machine.

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

pub struct Trace {
    /// Lines are kept only when asked for (a failing test).
    keep_lines: bool,
    /// Lines are printed as they come (`--trace`).
    echo: bool,
    lines: Vec<String>,
    hash: u64,
    count: u64,
}

impl Trace {
    pub fn new(keep_lines: bool, echo: bool) -> Self {
        Self {
            keep_lines,
            echo,
            lines: Vec::new(),
            hash: FNV_OFFSET_BASIS,
            count: 0,
        }
    }

    /// Records one event at simulated time `now_ms` (ms since the run began).
    pub fn record(&mut self, elapsed_ms: i64, what: &str) {
        let line = format!("{elapsed_ms:>9} {what}");
        for byte in line.bytes().chain(std::iter::once(b'\n')) {
            self.hash ^= u64::from(byte);
            self.hash = self.hash.wrapping_mul(FNV_PRIME);
        }
        self.count += 1;
        if self.echo {
            println!("{line}");
        }
        if self.keep_lines {
            self.lines.push(line);
        }
    }

    pub fn hash(&self) -> u64 {
        self.hash
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn lines(&self) -> &[String] {
        &self.lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_lines_same_hash_and_order_matters() {
        let mut a = Trace::new(false, false);
        let mut b = Trace::new(true, false);
        for t in [&mut a, &mut b] {
            t.record(1, "x");
            t.record(2, "y");
        }
        assert_eq!(a.hash(), b.hash());
        assert_eq!(b.lines().len(), 2);
        let mut c = Trace::new(false, false);
        c.record(2, "y");
        c.record(1, "x");
        assert_ne!(a.hash(), c.hash());
    }
}
