//! What the log cleaner keeps of one partition: its progress (which
//! recovery checkpoints carry across restarts), and whether and when the
//! cleaner may try it again. The pass itself is the cleaner's
//! (`core_state::cleaner`): one runs at a time, over one partition.

/// What the cleaner has done for one partition, for the operator tools.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CleanerProgress {
    /// The first offset not cleaned yet.
    pub first_dirty_offset: i64,
    pub passes: u64,
    /// Broker time the last pass finished (-1: none yet).
    pub last_cleaned_ms: i64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// How long the last pass took, and how many dirty bytes it began with.
    pub last_pass_ms: i64,
    pub last_pass_dirty_bytes: u64,
}

/// The cleaner's state of one partition.
#[derive(Default)]
pub(crate) struct Cleaning {
    /// `None`: no pass yet, and no first dirty offset from a checkpoint.
    pub progress: Option<CleanerProgress>,
    /// A read failed or a batch did not parse for it: left alone until a
    /// restart (Kafka marks such a partition uncleanable).
    pub uncleanable: bool,
    /// A pass was abandoned on it: not tried again before this time.
    pub backoff_until_ms: Option<i64>,
    /// Its recovery checkpoint holds the cleaner back and one was asked
    /// for: when it is stored the cleaner looks again at once.
    pub awaiting_checkpoint: bool,
}

impl Cleaning {
    /// The first offset not cleaned yet (0: none cleaned).
    pub fn first_dirty_offset(&self) -> i64 {
        self.progress.as_ref().map_or(0, |p| p.first_dirty_offset)
    }

    /// Whether the cleaner may look at it at `now_ms`.
    pub fn may_clean(&self, now_ms: i64) -> bool {
        !self.uncleanable && self.backoff_until_ms.is_none_or(|until| now_ms >= until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backoff_holds_the_cleaner_until_it_ends_and_uncleanable_for_good() {
        let mut c = Cleaning::default();
        assert!(c.may_clean(0));
        assert_eq!(c.first_dirty_offset(), 0);
        c.backoff_until_ms = Some(100);
        assert!(!c.may_clean(99));
        assert!(c.may_clean(100));
        c.uncleanable = true;
        assert!(!c.may_clean(1_000_000));
        c.progress.get_or_insert_default().first_dirty_offset = 42;
        assert_eq!(c.first_dirty_offset(), 42);
    }
}
