//! The framing of the log's and the snapshot's records.

use super::{Failure, HEADER, MAGIC};

/// A record's bytes (little endian): magic, payload length, CRC-32 of the payload, CRC-32
/// of those twelve bytes, payload. The header's own checksum is what tells a damaged
/// length (which would make every later record look like a torn tail) from a torn write.
pub(super) fn frame(payload: &[u8]) -> std::result::Result<Vec<u8>, Failure> {
    let len =
        u32::try_from(payload.len()).map_err(|_| Failure::message("a store record over 4 GiB"))?;
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    let header_crc = crc32fast::hash(&out);
    out.extend_from_slice(&header_crc.to_le_bytes());
    out.extend_from_slice(payload);
    Ok(out)
}

/// What reading a file of records found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Scan<'a> {
    /// Whole records, and where the last one ends (a torn record after it, if any, is
    /// not included: `end` may be less than the file's length).
    Records(Vec<&'a [u8]>, usize),
    /// A damaged record with more after it, at this offset.
    Corrupt(usize),
}

pub(super) fn scan(buf: &[u8]) -> Scan<'_> {
    let mut records = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let Some(header) = buf.get(at..at + HEADER) else {
            break; // a torn header at the end
        };
        let word = |i: usize| u32::from_le_bytes(header[i..i + 4].try_into().expect("4 bytes"));
        let (magic, len, crc) = (word(0), word(4) as usize, word(8));
        let end = at + HEADER + len;
        if magic != MAGIC || crc32fast::hash(&header[..12]) != word(12) {
            // A write that extended the file but did not reach the disk reads as zeros.
            // (A header is far smaller than a sector: it is written whole or not at all.)
            if buf[at..].iter().all(|&b| b == 0) {
                break;
            }
            return Scan::Corrupt(at);
        }
        let Some(payload) = buf.get(at + HEADER..end) else {
            break; // a whole header, its payload cut short: torn at the end
        };
        if crc32fast::hash(payload) != crc {
            if end == buf.len() {
                break; // the last record, torn
            }
            return Scan::Corrupt(at);
        }
        records.push(payload);
        at = end;
    }
    Scan::Records(records, at)
}
