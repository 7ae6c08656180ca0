//! DDP (RFC 5041) and RDMAP (RFC 5040, RFC 7306) headers of each ULPDU in one direction: the
//! fields a sender must set, and the untagged queues' sequencing (each message's MSN one past
//! the last on its queue, its segments' offsets contiguous).

use std::collections::HashMap;

const TAGGED_LEN: usize = 14;
const UNTAGGED_LEN: usize = 18;
const READ_REQUEST_LEN: usize = 28;

/// The untagged queue each RDMAP opcode uses (RFC 5040 5.1, RFC 7306 9); None: tagged.
fn queue(opcode: u8) -> Option<u32> {
    match opcode {
        0 | 2 => None,            // Write, Read Response
        3..=6 | 8 | 9 => Some(0), // Sends, Immediate Data
        1 | 10 => Some(1),        // Read Request, Atomic Request
        7 => Some(2),             // Terminate
        _ => Some(3),             // Atomic Response (11)
    }
}

/// Where each untagged queue stands.
#[derive(Default)]
pub struct Queues {
    /// Per queue number: the MSN of the message under way or last ended, its next offset, and
    /// whether it is still under way (no segment with L yet).
    queues: HashMap<u32, (u32, u32, bool)>,
    /// Messages seen, by RDMAP opcode.
    pub messages: [u64; 12],
}

impl Queues {
    /// Checks one ULPDU (the DDP segment: its header and payload).
    pub fn check(&mut self, u: &[u8]) -> Result<(), String> {
        if u.len() < 2 {
            return Err(format!("a {}-octet ULPDU", u.len()));
        }
        let (ddp, rdmap) = (u[0], u[1]);
        let (tagged, last) = (ddp & 0x80 != 0, ddp & 0x40 != 0);
        let opcode = rdmap & 0x0f;
        if ddp & 0x03 != 1 || ddp & 0x3c != 0 {
            return Err(format!("DDP control {ddp:#04x}: version 1 and zero reserved bits expected"));
        }
        if rdmap >> 6 != 1 || rdmap & 0x30 != 0 {
            return Err(format!("RDMAP control {rdmap:#04x}: version 1 and zero reserved bits expected"));
        }
        if opcode > 11 {
            return Err(format!("RDMAP opcode {opcode}"));
        }
        let want = queue(opcode);
        if tagged != want.is_none() {
            return Err(format!("opcode {opcode} with T={}", tagged as u8));
        }
        let header = if tagged { TAGGED_LEN } else { UNTAGGED_LEN };
        if u.len() < header {
            return Err(format!("a {}-octet ULPDU for a {header}-octet header", u.len()));
        }
        if last {
            self.messages[opcode as usize] += 1;
        }
        let Some(want) = want else { return Ok(()) };
        let word = |at: usize| u32::from_be_bytes(u[at..at + 4].try_into().unwrap());
        let (qn, msn, mo) = (word(6), word(10), word(14));
        let payload = (u.len() - header) as u32;
        if qn != want {
            return Err(format!("opcode {opcode} on queue {qn}, queue {want} expected"));
        }
        if opcode == 1 && (payload as usize != READ_REQUEST_LEN || !last) {
            return Err(format!("a Read Request of {payload} octets (L={}), {READ_REQUEST_LEN} in one segment expected", last as u8));
        }
        let (prev_msn, next_mo, open) = self.queues.get(&qn).copied().unwrap_or((0, 0, false));
        let (want_msn, want_mo) = if open { (prev_msn, next_mo) } else { (prev_msn.wrapping_add(1), 0) };
        if msn != want_msn || mo != want_mo {
            return Err(format!("queue {qn}: MSN {msn}, MO {mo}; MSN {want_msn}, MO {want_mo} expected"));
        }
        self.queues.insert(qn, (msn, mo.wrapping_add(payload), !last));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn untagged(last: bool, opcode: u8, qn: u32, msn: u32, mo: u32, payload: usize) -> Vec<u8> {
        let mut u = vec![if last { 0x41 } else { 0x01 }, 0x40 | opcode, 0, 0, 0, 0];
        for w in [qn, msn, mo] {
            u.extend_from_slice(&w.to_be_bytes());
        }
        u.resize(u.len() + payload, 7);
        u
    }

    #[test]
    fn queues_count_messages_and_offsets() {
        let mut q = Queues::default();
        assert_eq!(q.check(&untagged(false, 3, 0, 1, 0, 100)), Ok(()));
        assert_eq!(q.check(&untagged(true, 3, 0, 1, 100, 5)), Ok(()));
        assert_eq!(q.check(&untagged(true, 1, 1, 1, 0, 28)), Ok(()));
        assert_eq!(q.check(&untagged(true, 5, 0, 2, 0, 0)), Ok(()));
        assert_eq!((q.messages[3], q.messages[1], q.messages[5]), (1, 1, 1));
        // A gap in the offsets, a repeated MSN, the wrong queue, a short Read Request.
        let mut q2 = Queues::default();
        q2.check(&untagged(false, 3, 0, 1, 0, 100)).unwrap();
        assert!(q2.check(&untagged(true, 3, 0, 1, 104, 5)).is_err());
        assert!(q.check(&untagged(true, 3, 0, 2, 0, 5)).is_err());
        assert!(q.check(&untagged(true, 3, 1, 3, 0, 5)).is_err());
        assert!(q.check(&untagged(true, 1, 1, 2, 0, 20)).is_err());
    }

    #[test]
    fn header_fields_a_sender_must_set() {
        let mut q = Queues::default();
        let good = untagged(true, 3, 0, 1, 0, 0);
        assert_eq!(q.check(&good), Ok(()));
        for (at, v) in [(0, 0x42), (0, 0x45), (1, 0x83), (1, 0x53), (1, 0x4c), (0, 0xc1)] {
            let mut bad = untagged(true, 3, 0, 2, 0, 0);
            bad[at] = v;
            assert!(Queues::default().check(&bad).is_err(), "{at} {v:#x}");
        }
        // A Write: tagged, 14 octets of header.
        let write = [0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 9];
        assert_eq!(q.check(&write), Ok(()));
        assert!(q.check(&write[..13]).is_err());
    }
}
