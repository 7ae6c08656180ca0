//! The FPDUs already placed out of order, so the in-order pass does not place them again.
//! Fixed capacity: when it is full, further out-of-order FPDUs are simply not placed early
//! (TCP delivers them again in order), so memory stays bounded whatever the peer sends.

/// Capacity of the record.
pub const CAPACITY: usize = 64;

/// Stream ranges `[start, start + len)` of FPDUs placed ahead of the in-order point, and each
/// one's CRC field (what TCP held there when it was placed).
pub struct Placed {
    starts: [u64; CAPACITY],
    lens: [u32; CAPACITY],
    crcs: [u32; CAPACITY],
    n: usize,
}

impl Default for Placed {
    fn default() -> Self {
        Self::new()
    }
}

impl Placed {
    /// An empty record.
    pub const fn new() -> Placed {
        Placed { starts: [0; CAPACITY], lens: [0; CAPACITY], crcs: [0; CAPACITY], n: 0 }
    }

    /// Whether another FPDU can be recorded.
    pub fn has_room(&self) -> bool {
        self.n < CAPACITY
    }

    /// Whether `[start, start + len)` overlaps anything recorded.
    pub fn overlaps(&self, start: u64, len: u32) -> bool {
        (0..self.n).any(|i| start < self.starts[i] + u64::from(self.lens[i]) && self.starts[i] < start + u64::from(len))
    }

    /// Records an FPDU and its CRC field; the caller checked `has_room` and `!overlaps`.
    pub fn insert(&mut self, start: u64, len: u32, crc: u32) {
        self.starts[self.n] = start;
        self.lens[self.n] = len;
        self.crcs[self.n] = crc;
        self.n += 1;
    }

    /// Whether a recorded FPDU ends exactly at `pos` (so an FPDU starts there).
    pub fn ends_at(&self, pos: u64) -> bool {
        (0..self.n).any(|i| self.starts[i] + u64::from(self.lens[i]) == pos)
    }

    /// Removes and returns the length and CRC field of the FPDU recorded at exactly `start`.
    pub fn take(&mut self, start: u64) -> Option<(u32, u32)> {
        let i = (0..self.n).find(|&i| self.starts[i] == start)?;
        let taken = (self.lens[i], self.crcs[i]);
        self.n -= 1;
        self.starts[i] = self.starts[self.n];
        self.lens[i] = self.lens[self.n];
        self.crcs[i] = self.crcs[self.n];
        Some(taken)
    }

    /// Forgets every record that starts before `pos` (the in-order pass went past it).
    pub fn prune_below(&mut self, pos: u64) {
        let mut i = 0;
        while i < self.n {
            if self.starts[i] < pos {
                self.n -= 1;
                self.starts[i] = self.starts[self.n];
                self.lens[i] = self.lens[self.n];
                self.crcs[i] = self.crcs[self.n];
            } else {
                i += 1;
            }
        }
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_bounded_and_taken_once() {
        let mut p = Placed::new();
        for i in 0..CAPACITY as u64 {
            assert!(p.has_room());
            p.insert(i * 100, 100, i as u32);
        }
        assert!(!p.has_room());
        assert!(p.overlaps(150, 10));
        assert!(!p.overlaps(CAPACITY as u64 * 100, 10));
        assert_eq!(p.take(300), Some((100, 3)));
        assert_eq!(p.take(300), None);
        p.prune_below(1000);
        assert_eq!(p.len(), CAPACITY - 10);
    }
}
