//! A run of TCP stream bytes handed to the receive engine as a scatter list: the pieces are
//! contiguous in the stream but may live in separate buffers (skb fragments, segments).

/// Contiguous stream bytes made of several slices, starting at stream offset `start`.
#[derive(Clone, Copy)]
pub struct Pieces<'a> {
    start: u64,
    parts: &'a [&'a [u8]],
    len: u64,
}

impl<'a> Pieces<'a> {
    /// Bytes `parts` (in order, back to back) beginning at stream offset `start`.
    pub fn new(start: u64, parts: &'a [&'a [u8]]) -> Self {
        let len = parts.iter().map(|p| p.len() as u64).sum();
        Pieces { start, parts, len }
    }

    /// Stream offset of the first byte.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Stream offset one past the last byte.
    pub fn end(&self) -> u64 {
        self.start + self.len
    }

    /// Calls `f` with the slices covering stream range `[pos, pos + len)`, in order.
    /// The range must lie inside these pieces.
    #[inline]
    pub fn for_each(&self, pos: u64, len: u64, mut f: impl FnMut(&'a [u8])) {
        debug_assert!(pos >= self.start && pos + len <= self.end());
        let mut skip = pos - self.start;
        let mut left = len;
        for part in self.parts {
            if left == 0 {
                break;
            }
            let plen = part.len() as u64;
            if skip >= plen {
                skip -= plen;
                continue;
            }
            let take = core::cmp::min(plen - skip, left);
            f(&part[skip as usize..(skip + take) as usize]);
            skip = 0;
            left -= take;
        }
    }

    /// The `N` octets at stream offset `pos`, which must lie inside these pieces.
    #[inline]
    pub fn read<const N: usize>(&self, pos: u64) -> [u8; N] {
        // Headers rarely straddle pieces: read them in place, a fixed-size load.
        if let Some(Ok(whole)) = self.slice(pos, N).map(<[u8; N]>::try_from) {
            return whole;
        }
        let mut out = [0u8; N];
        self.copy_to(pos, &mut out);
        out
    }

    /// Stream range `[pos, pos + len)` in place, when it lies inside one piece.
    #[inline]
    pub fn slice(&self, pos: u64, len: usize) -> Option<&'a [u8]> {
        let mut skip = pos.checked_sub(self.start)?;
        for part in self.parts {
            if skip < part.len() as u64 {
                return part.get(skip as usize..skip as usize + len);
            }
            skip -= part.len() as u64;
        }
        None
    }

    /// Copies stream range `[pos, pos + out.len())` into `out`.
    #[inline]
    pub fn copy_to(&self, pos: u64, out: &mut [u8]) {
        let mut at = 0;
        self.for_each(pos, out.len() as u64, |s| {
            out[at..at + s.len()].copy_from_slice(s);
            at += s.len();
        });
    }
}
