//! Which offset a record's frame was made for: the CRC algebra behind
//! recovery's resync past a hole (see "Holes" in `recovery.rs`).
//!
//! A frame's checksum is the CRC32C of the record's offset followed by its
//! bytes (`file/format.rs`). CRC32C is affine over GF(2): appending `n` bytes maps
//! the CRC of what came before through a fixed linear map (`n` zero bytes'
//! worth of shifts), then adds the CRC of the `n` bytes. So the checksum at
//! any offset is the offset's own CRC, mapped, plus the record's CRC: one
//! pass over the record, then a few instructions per offset tried, however
//! long the record.

/// The CRC32C of `offset` (little-endian) alone: with [`ZerosOperator`]
/// and the record's own CRC32C it gives the record's frame checksum at any
/// offset without reading the record again (see [`FrameSolver`]).
fn offset_crc(offset: u64) -> u32 {
    crc32c::crc32c(&offset.to_le_bytes())
}

/// The linear map "append `n` zero bytes" on CRC32C values (GF(2), 32x32,
/// one column per input bit): `crc(a ++ b) = zeros(len b)(crc(a)) ^ crc(b)`
/// for any byte strings `a` and `b`, the identity CRC combination rests on.
struct ZerosOperator([u32; 32]);

impl ZerosOperator {
    /// The operator for one zero bit, as the CRC's reflected polynomial shifts.
    fn one_bit() -> Self {
        let mut m = [0u32; 32];
        m[0] = 0x82F6_3B78; // CRC-32C polynomial, reflected
        for (i, col) in m.iter_mut().enumerate().skip(1) {
            *col = 1 << (i - 1);
        }
        ZerosOperator(m)
    }

    fn apply(&self, mut v: u32) -> u32 {
        let mut out = 0;
        let mut i = 0;
        while v != 0 {
            if v & 1 != 0 {
                out ^= self.0[i];
            }
            v >>= 1;
            i += 1;
        }
        out
    }

    /// `other` then `self`.
    fn after(&self, other: &ZerosOperator) -> Self {
        let mut m = [0u32; 32];
        for (col, &o) in m.iter_mut().zip(other.0.iter()) {
            *col = self.apply(o);
        }
        ZerosOperator(m)
    }

    /// The operator for `n` zero bytes, by squaring.
    fn for_bytes(n: usize) -> Self {
        let mut bits = n as u64 * 8;
        let mut power = Self::one_bit();
        let mut result: Option<ZerosOperator> = None;
        while bits != 0 {
            if bits & 1 != 0 {
                result = Some(match result {
                    None => ZerosOperator(power.0),
                    Some(r) => r.after(&power),
                });
            }
            bits >>= 1;
            if bits != 0 {
                power = power.after(&power);
            }
        }
        result.unwrap_or_else(|| {
            let mut id = [0u32; 32];
            for (i, col) in id.iter_mut().enumerate() {
                *col = 1 << i;
            }
            ZerosOperator(id)
        })
    }
}

/// Finds which offset of a range a record's frame checks for, at the cost
/// of one CRC of the record and a few instructions an offset: recovery's
/// resync (`recovery.rs`) asks it of every framed record it meets past a
/// hole, for every offset the hole may have spanned.
pub(crate) struct FrameSolver {
    /// The CRC32C of each offset of the range, in order.
    offset_crcs: Vec<u32>,
    first: u64,
    /// `ZerosOperator` by record length: records often share one.
    operators: std::collections::HashMap<usize, ZerosOperator>,
}

impl FrameSolver {
    /// A solver for offsets `first..first + count`.
    pub(crate) fn new(first: u64, count: u64) -> Self {
        FrameSolver {
            offset_crcs: (first..first + count).map(offset_crc).collect(),
            first,
            operators: Default::default(),
        }
    }

    /// The first offset among the first `within` of the range for which
    /// `frame` is `record`'s frame, if any.
    pub(crate) fn solve(&mut self, frame: u64, record: &[u8], within: u64) -> Option<u64> {
        if !super::file::has_frame_mark(frame) {
            return None;
        }
        let want = frame as u32 ^ crc32c::crc32c(record);
        let op = self.operators.entry(record.len()).or_insert_with(|| ZerosOperator::for_bytes(record.len()));
        let n = (within as usize).min(self.offset_crcs.len());
        self.offset_crcs[..n].iter().position(|&c| op.apply(c) == want).map(|k| self.first + k as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::file::frame_for;

    /// The solver finds exactly the offset a frame was made for, among many.
    #[test]
    fn frame_solver_finds_the_offset_a_frame_checks_for() {
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 31 + 7) as u8).collect();
        for len in [0usize, 1, 24, 100, 767, 768, 4096] {
            let record = &bytes[..len];
            let mut solver = FrameSolver::new(1000, 64);
            for offset in [1000u64, 1001, 1037, 1063] {
                let frame = frame_for(offset, record);
                assert_eq!(solver.solve(frame, record, 64), Some(offset), "len {len}");
                assert_eq!(solver.solve(frame, record, offset - 1000), None, "outside the first `within`");
            }
            assert_eq!(solver.solve(frame_for(999, record), record, 64), None);
            assert_eq!(solver.solve(frame_for(1064, record), record, 64), None);
            assert_eq!(solver.solve(0, record, 64), None);
        }
    }
}
